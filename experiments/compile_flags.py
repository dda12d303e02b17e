"""How ``python -m experiments`` asks XLA to compile: ``run --quick`` skips LLVM's expensive passes.

A quick study is small, so compiling its programs is a large share of its wall time
(``compile_s`` in its ``result.json``). ``--xla_llvm_disable_expensive_passes=true`` drops
the costly LLVM optimisation passes of XLA's CPU backend: on the UAT training cell at the
CPU size it compiles about a quarter faster and runs about 5% slower, and the programs
compute the same bits (``tests/experiments/test_compile_flags.py`` runs one program both
ways). Full runs, benchmarks and every other verb keep XLA's defaults. A user who sets
the flag in ``XLA_FLAGS`` (to either value) keeps theirs.

XLA reads ``XLA_FLAGS`` when JAX first creates a backend, and some modules make arrays at
import time, so :func:`configure` runs in ``experiments/__main__.py`` before anything
imports JAX; ``run all --jobs N`` passes ``--quick`` on to each study's process.
"""
from __future__ import annotations

import os
from typing import MutableMapping, Sequence

FLAG = "--xla_llvm_disable_expensive_passes"


def wants_fast_compile(argv: Sequence[str]) -> bool:
    """Whether this command line is a quick run: the verb ``run`` with ``--quick``."""
    return len(argv) > 0 and argv[0] == "run" and "--quick" in argv[1:]


def with_fast_compile(xla_flags: str) -> str:
    """``xla_flags`` plus ``FLAG=true``, unless it already sets ``FLAG`` (to either value)."""
    if any(part.split("=")[0] == FLAG for part in xla_flags.split()):
        return xla_flags
    return f"{xla_flags} {FLAG}=true".strip()


def configure(argv: Sequence[str], environ: MutableMapping[str, str] = os.environ) -> None:
    """Set ``environ["XLA_FLAGS"]`` for a quick run (see the module docstring); otherwise leave it."""
    if wants_fast_compile(argv):
        environ["XLA_FLAGS"] = with_fast_compile(environ.get("XLA_FLAGS", ""))

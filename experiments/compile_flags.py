"""How ``python -m experiments`` asks XLA to compile: ``run --quick`` compiles with cheaper
optimisation, and every ``run`` keeps its compiled programs in a persistent cache.

A quick study is small, so compiling its programs is a large share of its wall time
(``compile_s`` in its ``result.json``). Quick runs add two XLA flags (``FAST_COMPILE``):
``--xla_llvm_disable_expensive_passes=true`` drops the costly LLVM optimisation passes of
XLA's CPU backend (on the UAT training cell at the CPU size it compiles about a quarter
faster and runs about 5% slower), and ``--xla_backend_optimization_level=1`` has LLVM
optimise at its O1 level instead of O2 (measured alone on 2 idle cores, with the first flag
set and the compilation cache off: ``uat.darkroom --quick`` 109 -> 83 s, compiling 58 ->
39 s; ``uat.sepsis`` 110 -> 83 s; ``rate.tmaze``, whose run time dominates, 124 -> 104 s; every
metric of the three the same to the bit). The first flag alone computes the same bits as XLA's
defaults; at O1 a float may differ in its last bits (a sum rounded in another order: on the
test's training step gradients differ by up to 4 units in the last place of the largest one, and on
an AVX2-only CPU a bias gradient that is zero but for rounding changes by 4e-10), which the studies'
metrics above did not show (``tests/experiments/test_compile_flags.py`` runs one training step
all three ways).
Full runs, benchmarks and every other verb keep XLA's defaults. A user who sets either flag
in ``XLA_FLAGS`` (to any value) keeps theirs.

Tried and not kept for runs (2026-12-05): ``--xla_cpu_use_fusion_emitters=false`` (XLA's older
loop emitters for fused elementwise code). Alone on 2 idle cores it took ``uat.darkroom --quick``
from 82 to 77 s (compiling 37 -> 30 s), but ``rate.minigrid_memory``'s run from 166 to 183 s
(its compile time unchanged), and ``make run`` with it took 15 min 25 s against 15 min 17 s
without. The test suite, where compiling is nearly all the time, does use it
(``tests/conftest.py``). Nor LLVM's O0 for runs (2026-12-06, the test suite's level): it compiles no
faster than O1 and runs far slower (``uat.markets --quick`` alone: 125 -> 316 s, compiling 29 -> 30 s).

Compilation cache: ``run`` sets JAX's persistent compilation cache to ``OUT/.jax_cache``
(``JAX_COMPILATION_CACHE_DIR``; ``OUT`` the ``--out`` folder), so a program compiled once
(for more than a second) is loaded, not compiled again, by a later study of the same run that
builds the identical program, by ``--resume`` after an interruption, and by a second run. The
cache holds at most ``CACHE_MAX_BYTES``, least recently used entries evicted; with a size
limit JAX guards the folder with a file lock, so the processes of ``run all --jobs N`` share it
safely. A loaded program is the same executable, so results are the same bits; its
``compile_s`` is then the load time. ``bench`` keeps compiling (it measures compile time). A
user who sets either variable keeps theirs; ``JAX_COMPILATION_CACHE_DIR=""`` turns the cache off.

XLA reads ``XLA_FLAGS`` when JAX first creates a backend, and some modules make arrays at
import time, so :func:`configure` runs in ``experiments/__main__.py`` before anything
imports JAX; ``run all --jobs N`` passes ``--quick`` and ``--out`` on to each study's process.
"""
from __future__ import annotations

import os
from typing import MutableMapping, Sequence

FAST_COMPILE = (("--xla_llvm_disable_expensive_passes", "true"), ("--xla_backend_optimization_level", "1"))
CACHE_DIR = ".jax_cache"
CACHE_MAX_BYTES = 4 * 2**30


def wants_fast_compile(argv: Sequence[str]) -> bool:
    """Whether this command line is a quick run: the verb ``run`` with ``--quick``."""
    return len(argv) > 0 and argv[0] == "run" and "--quick" in argv[1:]


def with_fast_compile(xla_flags: str) -> str:
    """``xla_flags`` plus each flag of ``FAST_COMPILE`` that it does not already set (to any value)."""
    own = {part.split("=")[0] for part in xla_flags.split()}
    added = [f"{flag}={value}" for flag, value in FAST_COMPILE if flag not in own]
    return " ".join([xla_flags.strip(), *added]).strip()


def out_folder(argv: Sequence[str], default: str = "results") -> str:
    """The ``--out`` folder of a command line (``--out X`` or ``--out=X``), else ``default``."""
    for i, arg in enumerate(argv):
        if arg == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--out="):
            return arg.split("=", 1)[1]
    return default


def configure(argv: Sequence[str], environ: MutableMapping[str, str] = os.environ) -> None:
    """Set ``environ["XLA_FLAGS"]`` for a quick run and the compilation cache for every run (see
    the module docstring); any other verb is left alone."""
    if wants_fast_compile(argv):
        environ["XLA_FLAGS"] = with_fast_compile(environ.get("XLA_FLAGS", ""))
    if len(argv) > 0 and argv[0] == "run":
        environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(out_folder(argv), CACHE_DIR))
        environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(CACHE_MAX_BYTES))

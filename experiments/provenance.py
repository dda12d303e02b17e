"""Where a result came from: code version (the commit and the state of the working tree), JAX
version, backend, device count, the machine's CPU and the environment variables that set how XLA
compiles and how memory is allocated.

The CPU is on record because a trained number depends on it to the bit: XLA compiles for the
instruction sets the CPU has (AVX2 or AVX-512 vectors, FMA), so a float sum is rounded in another
order on another CPU, and training amplifies the difference (``rate.minigrid_memory``'s judged
per-seed gaps were +0.41, +0.38 on one CPU and 0.406, 0.406 on an AVX2-only one, same commit and
seeds)."""
from __future__ import annotations

import hashlib
import os
import pathlib
import platform
import subprocess

import jax

__all__ = ["cpu", "git_sha", "provenance", "worktree"]

_REPO = pathlib.Path(__file__).resolve().parents[1]


def _git(repo: str | pathlib.Path, *args: str) -> bytes | None:
    """Stdout of ``git ARGS`` in ``repo``; None when git fails (not a repo, no commits, no git)."""
    try:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_sha(repo: str | pathlib.Path = _REPO) -> str:
    """``git rev-parse HEAD`` of ``repo``; ``"unknown"`` when it is not a git repo or has no commits."""
    sha = (_git(repo, "rev-parse", "HEAD") or b"").decode().strip()
    return sha or "unknown"


def worktree(repo: str | pathlib.Path = _REPO) -> dict[str, object]:
    """The working tree against HEAD: ``describe`` (``git describe --always --dirty``), ``dirty``
    (tracked changes or untracked files) and ``diff_sha256`` (of ``git diff HEAD`` and every
    untracked file's name and bytes; None when clean), so an uncommitted edit is on record.
    ``{"describe": "unknown", ...}`` outside a git repo."""
    describe = _git(repo, "describe", "--always", "--abbrev=40", "--dirty")
    diff = _git(repo, "diff", "HEAD", "--binary")
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard", "-z")
    if describe is None or diff is None or untracked is None:
        return {"describe": "unknown", "dirty": None, "diff_sha256": None}
    digest = hashlib.sha256(diff)
    for name in sorted(n for n in untracked.split(b"\0") if n):
        path = pathlib.Path(repo) / os.fsdecode(name)
        digest.update(name + b"\0" + (path.read_bytes() if path.is_file() else b""))
    dirty = bool(diff or untracked)
    return {"describe": describe.decode().strip(), "dirty": dirty, "diff_sha256": digest.hexdigest() if dirty else None}


VECTOR_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                   "avx512_bf16", "amx_tile", "amx_bf16")
"""The CPU flags that change the code XLA generates for a matrix or vector loop (``cpu``)."""


def cpu(cpuinfo: str | None = None) -> dict[str, object]:
    """``{"model", "vector_features"}`` of this machine's CPU from ``/proc/cpuinfo`` (or the text
    ``cpuinfo``): its first ``model name`` and which of :data:`VECTOR_FEATURES` its ``flags`` list.
    ``{"model": platform.processor() or "unknown", "vector_features": None}`` where there is no such file."""
    if cpuinfo is None:
        try:
            cpuinfo = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError:
            return {"model": platform.processor() or "unknown", "vector_features": None}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", "unknown"), "vector_features": [f for f in VECTOR_FEATURES if f in flags]}


ENVIRONMENT = ("XLA_FLAGS", "GLIBC_TUNABLES")
"""Variables recorded when set: XLA's flags (``experiments.compile_flags``) and glibc's tunables
(``experiments.huge_pages``)."""


def provenance() -> dict[str, object]:
    """``{"git", "worktree", "jax", "backend", "devices", "cpu", "environment"}`` of this process (result.json
    adds the run's flags and timings); ``environment`` holds those of :data:`ENVIRONMENT` that are set."""
    return {
        "git": git_sha(),
        "worktree": worktree(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "cpu": cpu(),
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
    }

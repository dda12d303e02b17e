"""Where a result came from: code version (the commit and the state of the working tree), JAX
version, backend, device count and the environment variables that set how XLA compiles and how
memory is allocated."""
from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess

import jax

__all__ = ["git_sha", "provenance", "worktree"]

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


ENVIRONMENT = ("XLA_FLAGS", "GLIBC_TUNABLES")
"""Variables recorded when set: XLA's flags (``experiments.compile_flags``) and glibc's tunables
(``experiments.huge_pages``)."""


def provenance() -> dict[str, object]:
    """``{"git", "worktree", "jax", "backend", "devices", "environment"}`` of this process (result.json
    adds the run's flags and timings); ``environment`` holds those of :data:`ENVIRONMENT` that are set."""
    return {
        "git": git_sha(),
        "worktree": worktree(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
    }

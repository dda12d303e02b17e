"""Where a result came from: code version, JAX version, backend, device count and the environment
variables that set how XLA compiles and how memory is allocated."""
from __future__ import annotations

import os
import pathlib
import subprocess

import jax

__all__ = ["git_sha", "provenance"]

_REPO = pathlib.Path(__file__).resolve().parents[1]


def git_sha(repo: str | pathlib.Path = _REPO) -> str:
    """``git rev-parse HEAD`` of ``repo``; ``"unknown"`` when it is not a git repo or has no commits."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = proc.stdout.strip()
    return sha if proc.returncode == 0 and sha else "unknown"


ENVIRONMENT = ("XLA_FLAGS", "GLIBC_TUNABLES")
"""Variables recorded when set: XLA's flags (``experiments.compile_flags``) and glibc's tunables
(``experiments.huge_pages``)."""


def provenance() -> dict[str, object]:
    """``{"git", "jax", "backend", "devices", "environment"}`` of this process (result.json adds the
    timings); ``environment`` holds those of :data:`ENVIRONMENT` that are set."""
    return {
        "git": git_sha(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "environment": {name: os.environ[name] for name in ENVIRONMENT if name in os.environ},
    }

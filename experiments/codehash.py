"""Hashes of the source a study depends on, for code-aware checkpoint fingerprints.

A study's code is its own module, every module of the suite's libraries and of the
harness it imports (found by reading its ``import`` statements with ``ast``; a library
counts whole, since its modules import each other), and the sweep engine. Resuming a
checkpoint after any of these files changed is an error naming them
(``experiments.checkpoint``).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import pathlib

__all__ = ["LIBRARIES", "code_hashes"]

LIBRARIES = ("pmd_jax", "regret_jax", "rate_jax", "uat_jax")
_ROOT = pathlib.Path(__file__).resolve().parents[1]
_ENGINE = ("experiments.sweep", "experiments.checkpoint", "experiments.distributed")


def _file(module: str) -> pathlib.Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):  # a name inside a module, not a module
        return None
    return pathlib.Path(spec.origin) if spec is not None and spec.origin else None


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute module names imported by the file at ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def code_hashes(module: str) -> dict[str, str]:
    """``{repo-relative path: sha256 prefix}`` of every source file study ``module`` depends on."""
    own = _file(module)
    if own is None:
        raise ValueError(f"cannot find the source of study module {module!r}")
    files = {own}
    imported = _imports(own)
    for lib in LIBRARIES:
        if any(name == lib or name.startswith(f"{lib}.") for name in imported):
            files.update((_ROOT / lib).rglob("*.py"))
    for name in sorted(imported | set(_ENGINE)):
        if name.startswith("experiments."):
            path = _file(name)
            if path is not None and path.suffix == ".py":
                files.add(path)
    return {str(p.relative_to(_ROOT)): _digest(p) for p in sorted(files)}

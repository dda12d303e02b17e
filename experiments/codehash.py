"""Hashes of the source a study depends on, for code-aware checkpoint fingerprints.

A study's code is the transitive closure of the project modules it imports: starting
from the study's own module, every ``import`` statement (read with ``ast``, at any depth,
so imports inside functions count; relative imports resolved against the importing
package) that names a module of a project package (:data:`PACKAGES`) adds that module's
file, and the packages above it (their ``__init__.py`` runs on import), and is followed in
turn. The sweep engine (:data:`_ENGINE`) is always part of it. Nothing is listed by hand:
a library module reached only through the harness (``pmd_jax.train`` through
``experiments.seeds``) is found like a direct import. Modules imported by name at run
time (``importlib.import_module``) are not seen. Resuming a checkpoint after any of these
files changed is an error naming them (``experiments.checkpoint``).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import pathlib

__all__ = ["PACKAGES", "code_hashes", "module_files"]

PACKAGES = ("experiments", "pmd_jax", "regret_jax", "rate_jax", "uat_jax")
_ROOT = pathlib.Path(__file__).resolve().parents[1]
_ENGINE = ("experiments.sweep", "experiments.checkpoint", "experiments.distributed")


def _source(module: str, root: pathlib.Path) -> pathlib.Path | None:
    """The file of project module ``module`` under ``root``, or None (not a project module)."""
    if module.split(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _study_source(module: str, root: pathlib.Path) -> pathlib.Path:
    """The file of the study module: a project module, or one found on ``sys.path`` (a test's toy study)."""
    path = _source(module, root)
    if path is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise ValueError(f"cannot find the source of study module {module!r}")
        path = pathlib.Path(spec.origin)
    return path


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    """The dotted name of the project file ``path`` ("" for a file outside ``root``)."""
    if not path.is_relative_to(root):
        return ""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path, root: pathlib.Path) -> set[str]:
    """Absolute names of what the file at ``path`` imports: modules, and ``module.name`` for
    ``from module import name`` (``name`` may be a submodule)."""
    package = _module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _loaded(name: str, root: pathlib.Path) -> list[pathlib.Path]:
    """The project files that importing ``name`` runs: its module and the packages above it."""
    parts = name.split(".")
    found = (_source(".".join(parts[:depth]), root) for depth in range(1, len(parts) + 1))
    return [path for path in found if path is not None]


def module_files(module: str, root: pathlib.Path = _ROOT) -> list[pathlib.Path]:
    """Every project file in the import closure of ``module`` plus the sweep engine (sorted)."""
    seen: set[pathlib.Path] = set()
    todo = [_study_source(module, root)] + [path for name in (module, *_ENGINE) for path in _loaded(name, root)]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += [found for name in _imports(path, root) for found in _loaded(name, root)]
    return sorted(seen)


def _digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def code_hashes(module: str, root: pathlib.Path = _ROOT) -> dict[str, str]:
    """``{path: sha256 prefix}`` of every file of :func:`module_files` (relative to ``root`` where it lies below it)."""
    return {(path.relative_to(root) if path.is_relative_to(root) else path).as_posix(): _digest(path)
            for path in module_files(module, root)}

"""Study registry: the contract between the CLI and each study module.

A study is a function ``run(ctx: RunContext) -> StudyOutput`` registered under a
name ``<package>.<study>`` with the :func:`study` decorator; an optional benchmark is
registered with :func:`bench`. Study modules live in ``experiments/studies/`` and are
discovered by :func:`load_all`, so adding a study never edits a shared file.
"""
from __future__ import annotations

import dataclasses
import importlib
import pathlib
import pkgutil
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Check:
    """One claim of a study: ``passed`` must be computable as False."""

    name: str
    value: float
    target: str
    passed: bool


@dataclasses.dataclass
class StudyOutput:
    """What a study returns; the CLI adds ``study``, ``quick`` and ``provenance``."""

    config: dict[str, Any]
    metrics: dict[str, float]
    checks: list[Check]
    paper: dict[str, float]
    compile_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class RunContext:
    """Where and how a study runs.

    ``out_dir`` is the study's own folder (``DIR/<study>``), created by the CLI.
    ``seeds`` is ``None`` unless the user passed ``--seeds``.
    """

    study: str
    quick: bool
    seeds: int | None
    out_dir: pathlib.Path
    resume: bool

    def checkpoint_dir(self, name: str = "ckpt") -> pathlib.Path:
        return self.out_dir / name


@dataclasses.dataclass(frozen=True)
class Study:
    name: str
    summary: str
    run: Callable[[RunContext], StudyOutput]
    bench: Callable[[RunContext], dict[str, Any]] | None = None


_STUDIES: dict[str, Study] = {}


def study(name: str, summary: str) -> Callable:
    """Register ``fn(ctx) -> StudyOutput`` as study ``name``."""
    if name.count(".") != 1:
        raise ValueError(f"study name must be '<package>.<study>', got {name!r}")

    def deco(fn: Callable[[RunContext], StudyOutput]) -> Callable:
        if name in _STUDIES:
            raise ValueError(f"study {name!r} registered twice")
        _STUDIES[name] = Study(name=name, summary=summary, run=fn)
        return fn

    return deco


def bench(name: str) -> Callable:
    """Register ``fn(ctx) -> dict`` as the benchmark of an already registered study."""

    def deco(fn: Callable[[RunContext], dict[str, Any]]) -> Callable:
        if name not in _STUDIES:
            raise ValueError(f"bench for unknown study {name!r}: register the study first")
        _STUDIES[name] = dataclasses.replace(_STUDIES[name], bench=fn)
        return fn

    return deco


def load_all() -> dict[str, Study]:
    """Import every module of ``experiments.studies`` and return the registry."""
    from experiments import studies

    for info in pkgutil.iter_modules(studies.__path__):
        importlib.import_module(f"experiments.studies.{info.name}")
    return dict(sorted(_STUDIES.items()))


def get(name: str) -> Study:
    registry = load_all()
    if name not in registry:
        known = ", ".join(registry) or "none"
        raise KeyError(f"unknown study {name!r}; known studies: {known}")
    return registry[name]

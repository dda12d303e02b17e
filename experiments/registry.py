"""Study registry: the one shape every study has, and the context it runs in.

A study module (``experiments/studies/<paper>/<study>.py``) holds

* its config dataclass (frozen; ``__post_init__`` validates) with ``QUICK`` and ``FULL``
  presets;
* ``compute(config, ctx) -> arrays``: the only part that trains or sweeps; it returns
  a dict of numpy arrays (nested dicts allowed). Training studies put per-seed
  training curves under ``arrays["curves"][model][metric]`` with shape
  ``[seeds, steps]`` (``loss`` among them); the harness writes them to ``curves.csv``;
* ``summarize(config, arrays) -> Summary`` in numpy only: metrics, checks, tables;
  unit-testable without training;
* ``write(config, arrays, summary, out_dir)``: its CSV/NPZ files and figures (only the
  writing process calls it);
* a registration of a few lines: ``register(Study(...))``.

Studies never import each other; numeric helpers belong to the library, harness helpers
to ``experiments``. Benchmarks live in ``experiments/benchmarks/`` and register with
:func:`bench`. :func:`load_all` imports every module below both packages.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pathlib
import pkgutil
from typing import Any, Callable, Mapping

from experiments.checks import Check, Claim

__all__ = ["Check", "Claim", "RunContext", "Study", "Summary", "bench", "get", "load_all", "register"]

Arrays = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Summary:
    """What ``summarize`` returns: flat metrics, checks, and tables (name -> columns).

    ``tables["table"]``, if present, is the study's headline table: the harness writes
    every table as ``NAME.csv`` and the report shows ``table.csv``.
    """

    metrics: dict[str, float]
    checks: list[Check]
    tables: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunContext:
    """Where and how a study's ``compute`` runs.

    ``out_dir``: the study's own result folder; ``resume``: continue from checkpoints;
    ``fingerprint``: the config and code hashes, added to every checkpoint this run
    writes (:meth:`checkpoint`); ``allow_code_change``: resume even if the code hash
    differs. ``compile_s`` collects the compile seconds the sweep engine reports.
    ``results_root``: the folder holding every study's result folder (``--out``), where
    :meth:`kept_model` finds the models other studies keep.
    """

    study: str
    quick: bool
    out_dir: pathlib.Path
    resume: bool = False
    fingerprint: dict[str, Any] = dataclasses.field(default_factory=dict)
    allow_code_change: bool = False
    compile_s: list[float] = dataclasses.field(default_factory=list)
    results_root: pathlib.Path | None = None

    def kept_model(self, study: str, name: str) -> pathlib.Path:
        """Where study ``study`` of this run's results folder keeps its model ``name``."""
        root = self.results_root if self.results_root is not None else self.out_dir.parent
        return pathlib.Path(root) / study / "models" / name

    def checkpoint(self, name: str = "ckpt", **extra: Any):
        """The checkpoint of one sweep of this run: folder ``out_dir/name``, run fingerprint + ``extra``."""
        from experiments.checkpoint import CheckpointSpec

        return CheckpointSpec(
            directory=self.out_dir / name,
            fingerprint={**self.fingerprint, "sweep": {"name": name, **extra}},
            resume=self.resume,
            allow_code_change=self.allow_code_change,
        )

    def record_compile(self, seconds: float) -> None:
        self.compile_s.append(float(seconds))


@dataclasses.dataclass(frozen=True)
class Study:
    """A registered study (see the module docstring for the shape).

    ``seeds_field``: dotted config path that ``--seeds N`` sets (``None``: the study has
    no seeds and rejects ``--seeds``). ``traced``: config fields that are array leaves of
    the computation; ``compute_sweep(config, field, values, ctx) -> list[arrays]`` runs
    a sweep over one of them as a single vmapped program (other fields are swept as one
    program per value). ``after``: studies whose kept models this one loads when they
    match its config (``RunContext.kept_model``); ``run all`` runs them first.
    ``quick_s``: about how many seconds ``run STUDY --quick`` takes on 2 cores beside one
    other study (measured; a scheduling hint only): ``run all --jobs N`` starts the
    longest ready study first, so the long ones do not end the run.
    ``claims``: the claims ``summarize`` judges (:class:`experiments.checks.Claim`); every
    check a run writes must judge one of them, and the generated study page lists them.
    ``cost_fields``: dotted config fields the study's work grows in proportion to (training
    steps, evaluation episodes, sampled sequences); ``show --estimate`` scales them down to
    probe a config's cost (:mod:`experiments.estimate`).
    """

    name: str
    summary: str
    config_type: type
    quick: Any
    full: Any
    compute: Callable[[Any, RunContext], Arrays]
    summarize: Callable[[Any, Arrays], Summary]
    write: Callable[[Any, Arrays, Summary, pathlib.Path], None] | None = None
    paper: Mapping[str, float] = dataclasses.field(default_factory=dict)
    seeds_field: str | None = None
    traced: tuple[str, ...] = ()
    compute_sweep: Callable[[Any, str, list, RunContext], list[Arrays]] | None = None
    module: str = ""
    bench: Callable[[pathlib.Path], dict[str, Any]] | None = None
    after: tuple[str, ...] = ()
    quick_s: float = 0.0
    claims: tuple[Claim, ...] = ()
    cost_fields: tuple[str, ...] = ()

    def __post_init__(self):
        if self.name.count(".") != 1:
            raise ValueError(f"study name must be '<package>.<study>', got {self.name!r}")
        if not self.quick_s >= 0:
            raise ValueError(f"study {self.name!r}: quick_s must be >= 0, got {self.quick_s!r}")
        if self.name in self.after:
            raise ValueError(f"study {self.name!r} cannot run after itself")
        for preset in (self.quick, self.full):
            if not isinstance(preset, self.config_type):
                raise ValueError(f"study {self.name!r}: presets must be {self.config_type.__name__}, got {type(preset).__name__}")
        names = [c.name for c in self.claims]
        if len(set(names)) != len(names):
            raise ValueError(f"study {self.name!r}: claims declared twice in {names}")
        if not all(isinstance(path, str) for path in self.cost_fields) or isinstance(self.cost_fields, str):
            raise ValueError(f"study {self.name!r}: cost_fields must be a tuple of dotted field names")
        if self.traced and self.compute_sweep is None:
            raise ValueError(f"study {self.name!r}: traced fields need compute_sweep")

    def preset(self, quick: bool) -> Any:
        return self.quick if quick else self.full


_STUDIES: dict[str, Study] = {}


def register(study: Study) -> Study:
    """Add ``study`` to the registry (its module is recorded for the code fingerprint)."""
    if study.name in _STUDIES:
        raise ValueError(f"study {study.name!r} registered twice")
    module = study.module or getattr(study.compute, "__module__", "")
    _STUDIES[study.name] = dataclasses.replace(study, module=module)
    return _STUDIES[study.name]


def bench(name: str) -> Callable:
    """Register ``fn(out_dir) -> dict`` as the benchmark of study ``name``."""

    def deco(fn: Callable[[pathlib.Path], dict[str, Any]]) -> Callable:
        if name not in _STUDIES:
            raise ValueError(f"bench for unknown study {name!r}: register the study first")
        _STUDIES[name] = dataclasses.replace(_STUDIES[name], bench=fn)
        return fn

    return deco


def _import_tree(package: Any) -> None:
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        importlib.import_module(info.name)


def load_all() -> dict[str, Study]:
    """Import every study and benchmark module and return the registry, sorted by name."""
    from experiments import benchmarks, studies

    _import_tree(studies)
    _import_tree(benchmarks)
    return dict(sorted(_STUDIES.items()))


def load(name: str) -> dict[str, Study]:
    """The registry with study ``name`` in it, importing as little as that takes: its own module
    (``experiments.studies.PAPER.STUDY``) when that registers it, else every module (:func:`load_all`,
    so an unknown name is answered with the full list). A process that runs one study then skips
    the imports of the others (pandas and TA-Lib for the market data, among others: seconds per process)."""
    module = f"{__package__}.studies.{name}"
    try:
        found = name.count(".") == 1 and importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a name that is no module path
        found = False
    if found:
        importlib.import_module(module)
        if name in _STUDIES:
            return dict(sorted(_STUDIES.items()))
    return load_all()


def run_order(chosen: list[Study]) -> list[Study]:
    """``chosen`` in name order, except that a study runs after the chosen studies in its ``after``.

    A ``ValueError`` names a cycle or an ``after`` entry that is not a registered study.
    """
    names = {s.name: s for s in chosen}
    for s in chosen:
        unknown = [a for a in s.after if a not in _STUDIES and a not in names]
        if unknown:
            raise ValueError(f"study {s.name!r}: 'after' names unknown studies {unknown}")
    done: list[Study] = []
    placed: set[str] = set()
    pending = sorted(names)
    while pending:
        ready = [n for n in pending if all(a in placed or a not in names for a in names[n].after)]
        if not ready:
            raise ValueError(f"studies {pending} wait on each other ('after' has a cycle)")
        done.append(names[ready[0]])
        placed.add(ready[0])
        pending.remove(ready[0])
    return done


def get(name: str) -> Study:
    registry = load_all()
    if name not in registry:
        known = ", ".join(registry) or "none"
        raise KeyError(f"unknown study {name!r}; known studies: {known}")
    return registry[name]

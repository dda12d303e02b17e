"""Running a study: config -> ``compute`` -> ``summarize`` -> files, for one run or a sweep.

The pipeline of one run (:func:`run_one`):

1. the config is the preset (``--quick`` or full) with the user's overrides applied
   (:func:`resolve`; ``--config`` file, then ``--set``, then ``--seeds``);
2. ``compute(config, ctx)`` trains or sweeps; its checkpoints carry the config and
   the hashes of the code it depends on (``experiments.codehash``);
3. ``summarize(config, arrays)`` gives metrics, checks and tables;
4. the writing process writes the tables, ``curves.csv`` (and TensorBoard events),
   the study's own files, and ``result.json`` last.

A sweep (:func:`run_sweep`) runs the study once per value of one field into
``DIR/STUDY/sweep/FIELD=VALUE/``, each a normal result folder. A traced field (an array
leaf of the computation) runs as one vmapped program through the study's
``compute_sweep``; any other field as one program per value. With ``--resume`` a value
whose folder already holds a result of the same config is not run again.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from typing import Any

from experiments import configs, curves, distributed, io, results
from experiments.codehash import code_hashes
from experiments.provenance import provenance
from experiments.registry import RunContext, Study, Summary

__all__ = ["Request", "resolve", "run_one", "run_sweep", "sweep_folder", "sweep_points"]


@dataclasses.dataclass(frozen=True)
class Request:
    """What the user asked for, beside the study: mode, overrides and run options."""

    quick: bool = False
    overrides: tuple[tuple[str, Any], ...] = ()
    seeds: int | None = None
    resume: bool = False
    allow_code_change: bool = False
    tensorboard: bool = False


def overrides_of(study: Study, request: Request) -> list[tuple[str, Any]]:
    """The request's overrides, ``--seeds`` last (ConfigError if the study has no seeds)."""
    out = list(request.overrides)
    if request.seeds is not None:
        if study.seeds_field is None:
            raise configs.ConfigError(f"study {study.name!r} has no seeds; --seeds does not apply to it")
        out.append((study.seeds_field, request.seeds))
    return out


def resolve(study: Study, request: Request) -> tuple[Any, list[tuple[str, Any]]]:
    """``(effective config, overrides applied)``; ConfigError before any computation."""
    overrides = overrides_of(study, request)
    return configs.apply(study.preset(request.quick), overrides), overrides


def _context(study: Study, config: Any, out_dir: pathlib.Path, request: Request,
             results_root: pathlib.Path) -> RunContext:
    fingerprint = {"study": study.name, "config": configs.to_json(config), "code": code_hashes(study.module)}
    return RunContext(
        study=study.name, quick=request.quick, out_dir=out_dir, resume=request.resume,
        fingerprint=fingerprint, allow_code_change=request.allow_code_change, results_root=results_root,
    )


def _write_outputs(study: Study, config: Any, arrays: dict, summary: Summary, out_dir: pathlib.Path,
                   request: Request) -> None:
    for name, columns in summary.tables.items():
        io.write_csv(out_dir / f"{name}.csv", columns)
    if arrays.get("curves"):
        curves.write_csv(out_dir / "curves.csv", arrays["curves"])
        if request.tensorboard:
            curves.write_tensorboard(out_dir / "tensorboard", arrays["curves"])
    if study.write is not None:
        study.write(config, arrays, summary, out_dir)


def finish(study: Study, config: Any, overrides: list, arrays: dict, out_dir: pathlib.Path, request: Request,
           wall_s: float, compile_s: float, sweep: dict | None = None) -> dict[str, Any]:
    """Summarize ``arrays``, write every file (writer process only) and return result.json's content."""
    if arrays.get("curves"):
        curves.check_finite(study.name, arrays["curves"])
    summary = study.summarize(config, arrays)
    if not isinstance(summary, Summary):
        raise results.InvalidResult(f"study {study.name!r}: summarize must return a Summary, got {type(summary).__name__}")
    prov = {**provenance(), "resume": request.resume, "allow_code_change": request.allow_code_change,
            "processes": _process_count(), "wall_s": wall_s, "compile_s": compile_s}
    result = results.build(study.name, request.quick, config, overrides, summary.metrics, summary.checks,
                           study.paper, prov, sweep, study.claims)
    if distributed.is_writer():
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_outputs(study, config, arrays, summary, out_dir, request)
        io.atomic_write_json(out_dir / results.RESULT, result)
        (out_dir / "error.txt").unlink(missing_ok=True)
    return result


def _process_count() -> int:
    import jax

    return jax.process_count()


def run_one(study: Study, config: Any, overrides: list, out_dir: pathlib.Path, request: Request) -> dict[str, Any]:
    """One run of ``study`` at ``config`` into ``out_dir`` (``DIR/STUDY``); returns result.json's content."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = _context(study, config, out_dir, request, out_dir.parent)
    t0 = time.perf_counter()
    arrays = study.compute(config, ctx)
    return finish(study, config, overrides, arrays, out_dir, request, time.perf_counter() - t0, sum(ctx.compile_s))


def sweep_folder(field: str, value: Any) -> str:
    """``FIELD=VALUE`` with VALUE as compact JSON (bare for strings), safe as a folder name."""
    text = value if isinstance(value, str) else json.dumps(configs.to_json(value), separators=(",", ":"))
    return f"{field}={text}".replace("/", "_").replace(" ", "")


def _done(folder: pathlib.Path, config: Any) -> bool:
    try:
        return results.load(folder / results.RESULT)["config"] == json.loads(json.dumps(configs.to_json(config)))
    except results.InvalidResult:
        return False


def sweep_points(study: Study, request: Request, field: str, values: list) -> tuple[Any, list, list[tuple[Any, Any]]]:
    """``(base config, overrides, [(value, config)])`` of a sweep; ConfigError before any computation
    (an unknown field, a bad value, or ``field`` also set by ``--set``/``--config``/``--seeds``)."""
    base, overrides = resolve(study, request)
    if any(path == field for path, _ in overrides):
        raise configs.ConfigError(f"--sweep {field} conflicts with an override of the same field; drop one of them")
    configs.field_type(base, field)
    return base, overrides, [(v, configs.apply(base, [(field, v)])) for v in values]


def run_sweep(study: Study, request: Request, field: str, values: list, out: pathlib.Path) -> list[dict[str, Any]]:
    """Run ``study`` once per value of ``field`` (see the module docstring); returns the results.

    Every value's config is built (and validated) before anything runs.
    """
    base, overrides, points = sweep_points(study, request, field, values)
    root = out / study.name / "sweep"
    folders = [root / sweep_folder(field, v) for v, _ in points]
    todo = [i for i, (f, (_, cfg)) in enumerate(zip(folders, points)) if not (request.resume and _done(f, cfg))]
    for i in set(range(len(points))) - set(todo):
        print(f"  {folders[i].name}: already done, kept", file=sys.stderr)
    found: dict[int, dict] = {i: results.load(folders[i] / results.RESULT) for i in range(len(points)) if i not in todo}
    if field in study.traced and todo:
        root.mkdir(parents=True, exist_ok=True)
        ctx = _context(study, base, root, request, out)
        t0 = time.perf_counter()
        batch = study.compute_sweep(base, field, [points[i][0] for i in todo], ctx)
        wall = time.perf_counter() - t0  # the one program's, shared by every value (sweep.vmapped)
        for i, arrays in zip(todo, batch):
            value, cfg = points[i]
            found[i] = finish(study, cfg, overrides + [(field, value)], arrays, folders[i], request, wall,
                              sum(ctx.compile_s), {"field": field, "value": value, "vmapped": True})
    else:
        for i in todo:
            value, cfg = points[i]
            print(f"== {study.name} {folders[i].name}", flush=True)
            folders[i].mkdir(parents=True, exist_ok=True)
            ctx = _context(study, cfg, folders[i], request, out)
            t0 = time.perf_counter()
            arrays = study.compute(cfg, ctx)
            found[i] = finish(study, cfg, overrides + [(field, value)], arrays, folders[i], request,
                              time.perf_counter() - t0, sum(ctx.compile_s), {"field": field, "value": value})
    return [found[i] for i in range(len(points))]


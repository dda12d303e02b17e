"""``show STUDY --estimate``: the expected wall time and memory of a study's config (the FULL
preset unless ``--quick``), on this machine from two measured probe runs, and on a named GPU
from its matrix-multiply rate.

The probes. A study declares its ``cost_fields`` (:class:`experiments.registry.Study`): the
config fields its work grows in proportion to (training steps, evaluation episodes, sampled
sequences). A probe is the config with every cost field multiplied by a fraction ``f``, rounded
up to at least 1 (a tuple elementwise; a warm-up field rounded down, so it stays below its step
count), and every ``chunks`` field set to 1 (how often a run checkpoints does not
change its work). Every other field keeps its value, so the probe compiles and runs the
programs of the config itself, with its model sizes, batch sizes, seeds and grids. ``f`` is 2%,
or where a study requires more steps or sequences than that leaves, the least ``2^k`` times 2%
that it accepts (:func:`probe_fraction`). Each probe
runs as ``python -m experiments run STUDY --config PROBE.json`` (with ``--quick`` for a quick config, which
compiles faster: ``experiments.compile_flags``) in its own process and its own
results folder (no compilation cache shared between the two), timed from start to exit, its
peak resident memory read from the operating system (``os.wait4``).

The fit. Wall time ``t(f) = a + b f``: ``a`` the work that does not scale (start-up, imports,
compiling, the fixed part of evaluation), ``b`` the work of the cost fields at ``f = 1``. Two
probes at ``f`` and ``2 f`` give ``b = (t2 - t1) / f`` and ``a = 2 t1 - t2``; the estimate is
``t(1) = a + b``. Peak memory is fitted the same way (it grows with the cost fields that size
arrays, such as evaluation episodes or sequences, and not with step counts); where a study
processes such a field in chunks of a fixed size, its memory stops growing at the chunk size and
the line overstates it: read it as an upper bound. A study without cost fields is
run once: its config is the probe and the time is measured, not extrapolated. Rounding up makes
a small field's probe value more than ``f`` times its value, so the line places a little of that
field's cost wrongly; the printed estimate names every scaled field with its first probe's value.

The GPU figure. The scaling part ``b`` is carried to a GPU at the ratio of the two machines'
float32 matrix-multiply rates: this machine's measured now (:func:`experiments.benchmark.matmul_peak_gflops`),
the GPU's from ``GPUS``. It assumes the program reaches the same fraction of the GPU's rate as
of this CPU's: ``bench rate.tmaze`` measured 51% on an H200 against 19-30% on 2 CPU cores, while
a small model (a few thousand parameters, a batch of 16) reaches a far smaller fraction of a GPU
and is launch-bound, so for the small studies the figure is optimistic. The fixed part ``a``
(mostly compiling, which runs on the host CPU) is carried over unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

from experiments import benchmark, configs, perf_log

__all__ = ["GPUS", "PROBE_FRACTION", "Estimate", "Probe", "estimate", "fit", "probe_config", "probe_fraction",
           "run_probe", "scaled_fields", "text"]

# float32 matrix-multiply rate, TFLOP/s. H200: 1024 x 1024 float32 products measured by this suite's
# `matmul_peak_gflops` on 2026-12-04 (docs/performance.md). H100: the same GH100 compute units (its
# datasheet peaks equal the H200's), so the same rate is assumed; not measured.
GPUS = {"H200": 18.7, "H100": 18.7}

PROBE_FRACTION = 0.02


@dataclasses.dataclass(frozen=True)
class Probe:
    """One measured run: the fraction ``f`` of every cost field, its wall seconds and peak RSS bytes."""

    fraction: float
    wall_s: float
    rss_bytes: int


@dataclasses.dataclass(frozen=True)
class Estimate:
    """``fixed_s + scaling_s`` seconds and ``rss_bytes`` at ``f = 1``, from ``probes``."""

    probes: tuple[Probe, ...]
    fixed_s: float
    scaling_s: float
    rss_bytes: float
    scaled: dict[str, tuple[Any, Any]]  # cost field -> (config value, first probe's value)

    @property
    def wall_s(self) -> float:
        return self.fixed_s + self.scaling_s


def _is_chunks(path: str) -> bool:
    return path.rsplit(".", 1)[-1].endswith("chunks")


def _is_warmup(path: str) -> bool:
    return "warmup" in path.rsplit(".", 1)[-1]


def _scale(value: Any, fraction: float, down: bool) -> Any:
    if isinstance(value, (tuple, list)):
        return type(value)(_scale(v, fraction, down) for v in value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise configs.ConfigError(f"a cost field must hold integers, got {value!r}")
    return math.floor(value * fraction) if down else max(1, math.ceil(value * fraction))


def _chunk_fields(config: Any, prefix: str = "") -> list[str]:
    found = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            found += _chunk_fields(value, f"{prefix}{f.name}.")
        elif _is_chunks(f.name) and isinstance(value, int) and not isinstance(value, bool):
            found.append(f"{prefix}{f.name}")
    return found


def scaled_fields(config: Any, cost_fields: Sequence[str], fraction: float) -> list[tuple[str, Any]]:
    """The overrides that make the probe of ``config`` at ``fraction`` (module docstring)."""
    if not 0 < fraction <= 1:
        raise configs.ConfigError(f"a probe fraction must lie in (0, 1], got {fraction}")
    changes = [(path, _scale(configs.getattr_path(config, path), fraction, _is_warmup(path))) for path in cost_fields]
    return changes + [(path, 1) for path in _chunk_fields(config) if path not in cost_fields]


def probe_config(config: Any, cost_fields: Sequence[str], fraction: float) -> Any:
    """``config`` with its cost fields scaled by ``fraction`` and its chunks fields at 1 (validated)."""
    return configs.apply(config, scaled_fields(config, cost_fields, fraction))


def probe_fraction(config: Any, cost_fields: Sequence[str], start: float = PROBE_FRACTION) -> float:
    """The first of ``start``, ``2 start``, ``4 start``, ... below 1/2, then 1/2, whose probes at ``f``
    and ``2 f`` are valid configs: a study may require a least number of steps or sequences."""
    if not 0 < start <= 0.5:
        raise configs.ConfigError(f"a probe fraction must lie in (0, 0.5], got {start}")
    candidates = [start * 2**k for k in range(64) if start * 2**k < 0.5] + [0.5]
    for f in candidates:
        try:
            probe_config(config, cost_fields, f)
            probe_config(config, cost_fields, 2 * f)
            return f
        except configs.ConfigError as err:
            last = err
    raise configs.ConfigError(f"no probe of this config at half its cost or less is valid: {last}")


def fit(probes: Sequence[Probe]) -> tuple[float, float, float]:
    """``(fixed_s, scaling_s, rss_bytes)`` at ``f = 1`` from probes at ``f`` and ``2 f`` (module
    docstring), or the one probe's own numbers when it ran the config itself (``f = 1``)."""
    if len(probes) == 1 and probes[0].fraction == 1:
        return probes[0].wall_s, 0.0, float(probes[0].rss_bytes)
    if len(probes) != 2 or probes[0].fraction >= probes[1].fraction:
        raise ValueError(f"fit needs two probes at increasing fractions, got {probes}")
    (f1, t1, m1), (f2, t2, m2) = ((p.fraction, p.wall_s, p.rss_bytes) for p in probes)
    b = (t2 - t1) / (f2 - f1)
    a = t1 - b * f1
    rss = m1 + (m2 - m1) / (f2 - f1) * (1 - f1)
    return a, b, max(rss, float(max(m1, m2)))


def run_probe(study: str, config: Any, fraction: float, folder: pathlib.Path, quick: bool = False) -> Probe:
    """Run ``study`` at ``config`` in a child process (results in ``folder``, its output on stderr): its wall
    time and peak RSS.
    ``quick``: compile as ``run --quick`` does (``experiments.compile_flags``), for a quick config's probes."""
    folder.mkdir(parents=True, exist_ok=True)
    config_file = folder / "probe.json"
    config_file.write_text(json.dumps(configs.to_json(config)))
    argv = [sys.executable, "-m", "experiments", "run", study, *(["--quick"] if quick else []),
            "--config", str(config_file), "--out", str(folder)]
    t0 = time.perf_counter()
    child = subprocess.Popen(argv, stdout=2, stderr=subprocess.STDOUT)  # its progress, on our stderr
    try:
        _, status, usage = os.wait4(child.pid, 0)
    except BaseException:  # interrupted (Ctrl-C; SIGTERM, which `show` raises as SystemExit): the probe must not outlive us
        child.kill()
        child.wait()
        raise
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 1):  # 1: a check failed, which a probe's few steps may well do
        raise RuntimeError(f"probe of {study} at f = {fraction:g} exited {child.returncode} (its output is above)")
    return Probe(fraction, wall, benchmark.maxrss_bytes(usage.ru_maxrss))


def estimate(study: str, config: Any, cost_fields: Sequence[str], fraction: float = PROBE_FRACTION,
             quick: bool = False, runner: Callable[[str, Any, float, pathlib.Path, bool], Probe] | None = None,
             progress: Callable[[str], None] = lambda line: None) -> Estimate:
    """Measure the probes of ``config`` (two, or one run of ``config`` itself without cost fields) and fit
    them. ``runner`` (default :func:`run_probe`) runs one probe; ``quick``: ``config`` is a quick one."""
    runner = runner or run_probe
    if cost_fields:
        fraction = probe_fraction(config, cost_fields, fraction)
    fractions = (fraction, 2 * fraction) if cost_fields else (1.0,)
    probes = []
    with tempfile.TemporaryDirectory(prefix="estimate-") as tmp:
        for i, f in enumerate(fractions):
            probe = probe_config(config, cost_fields, f) if cost_fields else config
            progress(f"probe {i + 1}/{len(fractions)}: {study} with its cost fields at f = {f:g}")
            probes.append(runner(study, probe, f, pathlib.Path(tmp) / f"probe{i}", quick))
            progress(f"  {probes[-1].wall_s:.1f} s, peak RSS {probes[-1].rss_bytes / 2**30:.2f} GiB")
    first = probe_config(config, cost_fields, fraction) if cost_fields else config
    shown = {p: (configs.getattr_path(config, p), configs.getattr_path(first, p)) for p in cost_fields}
    return Estimate(tuple(probes), *fit(probes), scaled=shown)


def text(study: str, preset: str, est: Estimate, cpu_gflops: float, machine: str) -> str:
    """The printed estimate: the scaled fields, the probes, this machine's figure and each GPU's."""
    lines = [f"{study} ({preset}): estimated wall time and peak memory"]
    if est.scaled:
        lines.append("  cost fields (config -> first probe): " + "; ".join(
            f"{p} {v} -> {pv}" for p, (v, pv) in est.scaled.items()))
    for p in est.probes:
        lines.append(f"  probe at f = {p.fraction:g}: {p.wall_s:.1f} s, peak RSS {p.rss_bytes / 2**30:.2f} GiB")
    how = ("measured: the config itself ran" if not est.scaled
           else f"fixed {perf_log.duration(est.fixed_s)} + scaling {perf_log.duration(est.scaling_s)}")
    lines.append(f"  this machine ({machine}, {cpu_gflops:.0f} GFLOP/s float32 products): "
                 f"{perf_log.duration(est.wall_s)} ({how}), peak RSS {est.rss_bytes / 2**30:.2f} GiB")
    for gpu, tflops in GPUS.items():
        gpu_s = est.fixed_s + est.scaling_s * cpu_gflops / (tflops * 1e3)
        lines.append(f"  1 x {gpu} ({tflops:g} TFLOP/s float32 products): about {perf_log.duration(gpu_s)} "
                     f"if it reached this CPU's fraction of that rate (optimistic for small models); "
                     f"memory as above")
    return "\n".join(lines)

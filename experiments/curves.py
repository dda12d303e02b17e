"""Training curves: ``curves.csv``, optional TensorBoard events, and the non-finite-loss backstop.

A training study returns ``arrays["curves"] = {model: {metric: [seeds, steps]}}``,
collected at fixed shapes inside its compiled loop (``loss`` is one of the metrics;
an optional ``step`` entry of shape ``[steps]`` gives the step numbers, else 1..steps).
``curves.csv`` holds them in long form: ``model, seed, step, <metric>...``; a metric a
model does not record is left empty.
"""
from __future__ import annotations

import pathlib
from typing import Any, Mapping

import numpy as np

from experiments import io
from experiments.sweep import NonFiniteLoss

__all__ = ["check_finite", "rows", "write_csv", "write_tensorboard"]

Curves = Mapping[str, Mapping[str, Any]]


def _model(name: str, metrics: Mapping[str, Any]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    values = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items() if k != "step"}
    if "loss" not in values:
        raise ValueError(f"curves of {name!r} must include 'loss', got {sorted(values)}")
    shapes = {v.shape for v in values.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"curves of {name!r} must all be [seeds, steps], got { {k: v.shape for k, v in values.items()} }")
    steps = values["loss"].shape[1]
    step = np.asarray(metrics["step"]) if "step" in metrics else np.arange(1, steps + 1)
    if step.shape != (steps,):
        raise ValueError(f"curves of {name!r}: step must have shape [{steps}], got {step.shape}")
    return step, values


def rows(curves: Curves) -> dict[str, list]:
    """The long-form columns of ``curves.csv``."""
    metric_names = sorted({k for m in curves.values() for k in m if k != "step"}, key=lambda k: (k != "loss", k))
    cols: dict[str, list] = {"model": [], "seed": [], "step": [], **{k: [] for k in metric_names}}
    for name, metrics in curves.items():
        step, values = _model(name, metrics)
        seeds, steps = values["loss"].shape
        cols["model"] += [name] * (seeds * steps)
        cols["seed"] += np.repeat(np.arange(seeds), steps).tolist()
        cols["step"] += np.tile(step, seeds).tolist()
        for k in metric_names:
            cols[k] += values[k].ravel().tolist() if k in values else [""] * (seeds * steps)
    return cols


def write_csv(path: str | pathlib.Path, curves: Curves) -> pathlib.Path:
    return io.write_csv(path, rows(curves))


def check_finite(study: str, curves: Curves) -> None:
    """NonFiniteLoss naming study, model, seed and step at the first non-finite loss."""
    for name, metrics in curves.items():
        step, values = _model(name, metrics)
        bad = ~np.isfinite(values["loss"])
        if bad.any():
            seed, i = (int(v[0]) for v in np.nonzero(bad))
            raise NonFiniteLoss(f"{study}: {name} loss is {values['loss'][seed, i]} at seed {seed}, step {int(step[i])}")


def write_tensorboard(folder: str | pathlib.Path, curves: Curves) -> pathlib.Path:
    """One TensorBoard run per model and seed (``folder/MODEL/seed_K``), one scalar per metric.

    Needs the optional dependency ``tensorboardX`` (``pip install -e ".[tensorboard]"``).
    """
    try:
        from tensorboardX import SummaryWriter
    except ImportError as err:
        raise RuntimeError('--tensorboard needs tensorboardX: pip install -c constraints.txt -e ".[tensorboard]"') from err
    folder = pathlib.Path(folder)
    for name, metrics in curves.items():
        step, values = _model(name, metrics)
        for seed in range(values["loss"].shape[0]):
            with SummaryWriter(logdir=str(folder / name / f"seed_{seed}")) as writer:
                for k, v in values.items():
                    for s, x in zip(step, v[seed]):
                        writer.add_scalar(k, float(x), int(s))
    return folder

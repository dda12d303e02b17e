"""Benchmarks of the UAT studies: the efficiency table (Table 6) and seeds vmapped against a loop.

Table 6 (Appendix D.3) of "Breaking Feedback-Blindness: Utility-Augmented Transformer for
Sequential Decision Making" (arXiv 2607.18910): parameters, training ms per epoch and peak
memory, inference ms per step and peak memory, for Vanilla-TF, GTrXL, TENT, CoTTA, DT-style,
A-DT and UAT on Domain A (B = 256, T = 60, d_m = 16, H = 4; the paper on one RTX A6000).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

import jax

from experiments import benchmark, io
from experiments.benchmark import peak_mb
from experiments.registry import bench
from experiments.studies.uat import darkroom as _darkroom  # noqa: F401 - registers uat.darkroom before its bench
from uat_jax import cells, theory, tta
from uat_jax.model import DecisionTransformer, init_params
from uat_jax.train import CellKeys, Task, TrainConfig, make_evaluate, make_train
from uat_jax.tta import make_tta_stream

ROWS = ("vt", "gtrxl", "tent", "cotta", "dt", "adt", "uat")
"""Table 6's rows, in its order."""

TTA = tta.METHODS
"""The test-time adaptation rows: a Vanilla-TF adapted online (``uat_jax.tta``)."""


def _task() -> Task:
    """The task every program of the bench trains and runs on: the gradual schedule, clean feedback."""
    return Task.make("gradual")


COLUMNS = ("params", "train_ms_per_epoch", "train_peak_mb", "infer_ms_per_step", "infer_peak_mb")

PAPER_TABLE6 = {
    "vt": (109828, 17.1, 181.4, 2.1, 74.9),
    "gtrxl": (146884, 30.2, 316.2, 5.3, 180.4),
    "tent": (109828, 14.1, 197.6, 11.3, 218.7),
    "cotta": (109828, 14.1, 199.8, 11.3, 221.1),
    "dt": (102660, 17.4, 515.4, 6.2, 178.7),
    "adt": (102532, 14.6, 202.8, 2.1, 94.0),
    "uat": (155972, 32.4, 253.9, 3.1, 112.0),
}
"""Table 6 in ``COLUMNS`` order (one RTX A6000)."""


def model_kind(row: str) -> str:
    """The ``ModelConfig.kind`` a Table 6 row runs: TENT and CoTTA adapt a Vanilla-TF."""
    if row not in ROWS:
        raise ValueError(f"row must be one of {ROWS}, got {row!r}")
    return "vt" if row in TTA else row


def _compiled(fn: Callable, *args: Any) -> tuple[Any, float]:
    """``jax.jit(fn)`` compiled for ``args``, and the seconds compiling took."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


MIN_TIMED_S = 1.0
"""Timed calls of a program go on until they have taken this long together (at least ``repeats``
of them): on a CPU a training program takes seconds and is called ``repeats`` times; on a GPU an
epoch takes milliseconds, and one call each of the 1- and 2-epoch programs differed by less than
their noise (VT's ms per epoch came out negative on an H200)."""


def _run_s(compiled, *args: Any, repeats: int) -> float:
    """Best of at least ``repeats`` timed calls of a compiled program, lasting ``MIN_TIMED_S`` in all.
    No warm-up call: an XLA:CPU program's first call is no slower than the next (VT's 2-epoch
    training program at the Table 3 size: 8.8 s then 9.0 s), and where a program is fast enough
    for its first call's costs to matter, it is called many times and the best call counts."""
    return benchmark.time_python(compiled, *args, repeats=repeats, min_total_s=MIN_TIMED_S)["min_s"]


@functools.cache
def _train_program(cfg: TrainConfig, seeds: int | None = None) -> tuple[Any, float]:
    """``train.make_train(cfg)`` compiled for one seed (``seeds=None``) or vmapped over ``seeds``
    keys, on the gradual schedule, and its compile seconds; cached, so that the seeds measurement
    reuses the table's UAT program."""
    train, task = make_train(cfg), _task()
    if seeds is None:
        return _compiled(train, jax.random.key(0), task)
    return _compiled(jax.vmap(train, in_axes=(0, None)), jax.random.split(jax.random.key(0), seeds), task)


def _training(cfg: TrainConfig, epochs_k: int, repeats: int) -> dict[str, float]:
    """ms per epoch = (time of ``epochs_k`` epochs - time of 1 epoch) / (epochs_k - 1), so the
    set-up and the final evaluation cancel; peak MiB of the ``epochs_k``-epoch program."""
    key, task = jax.random.key(0), _task()
    one, compile_1 = _train_program(dataclasses.replace(cfg, epochs=1))
    k, compile_k = _train_program(dataclasses.replace(cfg, epochs=epochs_k))
    t1, tk = _run_s(one, key, task, repeats=repeats), _run_s(k, key, task, repeats=repeats)
    return {"train_ms_per_epoch": 1000 * (tk - t1) / (epochs_k - 1), "train_peak_mb": peak_mb(k),
            "compile_s": compile_1 + compile_k}


def _inference(cfg: TrainConfig, row: str, repeats: int) -> dict[str, float]:
    """ms per step and peak MiB of one batch of B = ``cfg.batch_size`` greedy causal episodes
    (``train.make_evaluate`` with ``eval_episodes = B``), its time divided by T. TENT / CoTTA:
    one batch of their online stream, the rollout and the adaptation step on it
    (``tta.make_tta_stream``, which returns the adapted state, so the step is not dead code as
    it would be in ``make_tta_evaluate``'s metrics of a one-batch stream)."""
    cfg = dataclasses.replace(cfg, eval_episodes=cfg.batch_size)
    if row in TTA:
        program = make_tta_stream(cfg, TTA[row](batch_size=cfg.batch_size))
    else:
        program = make_evaluate(cfg)
    keys = CellKeys.of(jax.random.key(0))
    args = (init_params(DecisionTransformer(cfg.model), keys.init), keys.eval, _task(), keys.run)
    compiled, compile_s = _compiled(program, *args)
    jax.block_until_ready(compiled(*args))  # warm-up: the inference programs are short
    run_s = _run_s(compiled, *args, repeats=repeats)
    return {"infer_ms_per_step": 1000 * run_s / cfg.model.horizon, "infer_peak_mb": peak_mb(compiled),
            "compile_s": compile_s}


def with_ratios(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each row of ``table`` (row -> ``COLUMNS`` and more) plus ``<column>_ratio_to_vt`` for every
    column of ``COLUMNS`` it has, the paper's value ``paper_<column>`` and its ratio to the paper's
    Vanilla-TF ``paper_<column>_ratio_to_vt``."""
    if "vt" not in table:
        raise ValueError(f"table needs the row 'vt' (the ratios' denominator), got rows {list(table)}")
    out = {}
    for row, values in table.items():
        full = dict(values)
        for i, col in enumerate(COLUMNS):
            if col in values:
                full[f"{col}_ratio_to_vt"] = values[col] / table["vt"][col]
            if row in PAPER_TABLE6:
                full[f"paper_{col}"] = float(PAPER_TABLE6[row][i])
                full[f"paper_{col}_ratio_to_vt"] = PAPER_TABLE6[row][i] / PAPER_TABLE6["vt"][i]
        out[row] = full
    return out


def efficiency_table(size: cells.Size, epochs_k: int, repeats: int = 1, infer_repeats: int = 3,
                     rows: tuple[str, ...] = ROWS) -> dict[str, dict[str, float]]:
    """Table 6 at ``size`` (one seed, the gradual schedule): row -> ``COLUMNS`` (see
    :func:`with_ratios` for the ratio and paper columns), plus ``compile_s`` and ``train_as``
    (the model whose training numbers the row reports: TENT and CoTTA train as Vanilla-TF, so
    their training columns are VT's).

    ``params``: ``uat_jax.theory.param_count`` of the row's model (TENT / CoTTA: VT's). Training: the whole
    ``train.make_train`` program (each epoch a sampled rollout of B episodes, the parallel pass,
    its gradient and the AdamW step), ms per epoch from ``epochs_k`` epochs against 1, best of
    ``repeats``; inference: see ``_inference``, best of ``infer_repeats`` (its programs are short).
    On shared cores one call is noisy: a rerun of VT and TENT inference alone, best of 3, gave
    16.2 and 28.2 ms per step where single calls beside other jobs gave 51.2 and 30.6. Peak MiB: :func:`experiments.benchmark.peak_mb` of the compiled program.
    """
    if not (isinstance(epochs_k, int) and epochs_k >= 2):
        raise ValueError(f"epochs_k must be an integer >= 2, got {epochs_k!r}")
    if not rows or "vt" not in rows or not set(rows) <= set(ROWS) or len(set(rows)) != len(rows):
        raise ValueError(f"rows must be distinct names from {ROWS} including 'vt', got {rows}")
    trained: dict[str, dict[str, float]] = {}
    table = {}
    for row in rows:
        kind = model_kind(row)
        cfg = size.train_config(kind)
        if kind not in trained:
            trained[kind] = _training(cfg, epochs_k, repeats)
        infer = _inference(cfg, row, infer_repeats)
        train = trained[kind]
        table[row] = {"params": float(theory.param_count(cfg.model)), "train_ms_per_epoch": train["train_ms_per_epoch"],
                      "train_peak_mb": train["train_peak_mb"], "infer_ms_per_step": infer["infer_ms_per_step"],
                      "infer_peak_mb": infer["infer_peak_mb"], "train_as": kind,
                      "compile_s": infer["compile_s"] + (train["compile_s"] if kind == row else 0.0)}
    return with_ratios(table)


def table_columns(table: dict[str, dict[str, Any]]) -> dict[str, list]:
    """``table`` (row -> column -> value) as CSV columns, one row per model (``io.write_csv``)."""
    names = list(next(iter(table.values())))
    return {"model": list(table), **{n: [table[row][n] for row in table] for n in names}}


def seeds_vmapped_vs_loop(size: cells.Size, epochs: int, seeds: int) -> dict[str, float]:
    """Seconds of training UAT on ``seeds`` seeds as one vmapped program and as a Python loop
    of the single-seed program (both compiled beforehand, one call each), and the speed-up."""
    cfg = dataclasses.replace(size.train_config("uat"), epochs=epochs)
    keys, task = jax.random.split(jax.random.key(0), seeds), _task()
    vmapped, single = _train_program(cfg, seeds)[0], _train_program(cfg)[0]
    vm_s = _run_s(vmapped, keys, task, repeats=1)
    loop_s = benchmark.time_python(lambda: [single(k, task) for k in keys], repeats=1)["min_s"]
    return {"vmapped_seeds_s": vm_s, "loop_seeds_s": loop_s, "vmap_speedup": loop_s / vm_s}


BENCH_EPOCHS_K = 2
"""Epochs of the long training program (against 1): 2 keeps the bench near 10 minutes on 2 CPU
cores, where DT-style's epoch at the Table 3 size takes about 20 s."""


@bench("uat.darkroom")
def darkroom(out_dir) -> dict:
    """Table 6 at the Table 3 size (``cells.TABLE3``: Domain A, B = 256, T = 60, d_model 64,
    H = 4, d_m = 16, L = 3), written as ``efficiency.csv``; and UAT trained on 3 seeds vmapped
    in one program against a loop over seeds (``BENCH_EPOCHS_K`` epochs each). Training times
    are one call each, inference times the best of 3 (see :func:`efficiency_table`). The
    paper's times are on one GPU and ours on the CPU the bench runs on, so the
    ``*_ratio_to_vt`` columns are the comparable ones."""
    size = cells.TABLE3
    table = efficiency_table(size, BENCH_EPOCHS_K)
    io.write_csv(out_dir / "efficiency.csv", table_columns(table))
    return {"size": dataclasses.asdict(size), "epochs_k": BENCH_EPOCHS_K, "table": table,
            **seeds_vmapped_vs_loop(size, BENCH_EPOCHS_K, seeds=3)}

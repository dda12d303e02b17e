"""Benchmark of ``pmd.reversal_surface`` (PolicyAttention, arXiv 2609.30500, EvoRobust companion, section 11).

``bench pmd.reversal_surface``: cells per second of the vectorised surface program (after
compilation) on a twelfth of the FULL grid (every 12th of the 6,912 rows, all 601 etas,
bisection included) and the projected seconds of the whole FULL grid at that rate, against
two Python loops: over rows calling the jitted one-row program (itself vectorised over the
601 etas, so on a CPU this ratio is about 1), and over single cells calling the jitted cell.
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import benchmark
from experiments.registry import bench
from experiments.studies.pmd import reversal_surface as surface_study
from pmd_jax.reversal import surface_cell


@bench("pmd.reversal_surface")
def reversal_surface(out_dir) -> dict:
    """One vmapped program over 576 rows of the FULL grid (after compile) against per-row and per-cell jitted loops."""
    cfg = surface_study.FULL
    full = surface_study.program_inputs(cfg)  # the 6,912 grid rows, then the 4 leak-reading rows
    n_full = len(cfg.rows()["kappa"])
    stride = 12  # every 12th grid row: 576 rows, 346,176 cells, spread over every factor
    pick = np.arange(0, n_full, stride)
    rows = {k: jnp.asarray(v[pick]) for k, v in full.items()}
    n_eta = len(cfg.etas)
    one_row = surface_study.row_fn(cfg)
    with jax.enable_x64(True):
        t_vec = benchmark.time_call(jax.vmap(one_row), rows, repeats=2)
        single = jax.jit(one_row)
        loop_rows = 8
        cells = [{k: v[i] for k, v in rows.items()} for i in range(loop_rows)]
        jax.block_until_ready(single(cells[0]))
        t0 = time.perf_counter()
        for cell in cells:
            jax.block_until_ready(single(cell))
        loop_per_row = (time.perf_counter() - t0) / loop_rows
        cell = jax.jit(lambda eta, r: surface_cell(eta, r["kappa"], r["c"], r["gamma"], r["tilt"], r["epsilon"],
                                                   r["nu"]).gain_implemented)
        loop_cells = 300  # single cells (no bisection) of the first row, one jitted call each
        jax.block_until_ready(cell(jnp.float64(0.0), cells[0]))
        t0 = time.perf_counter()
        for eta in cfg.etas[:loop_cells]:
            jax.block_until_ready(cell(jnp.float64(eta), cells[0]))
        loop_per_cell = (time.perf_counter() - t0) / loop_cells
    timed_cells = len(pick) * n_eta
    rate = timed_cells / t_vec["min_s"]
    return {
        "full_rows": n_full,
        "full_cells": n_full * n_eta,
        "rows_timed": len(pick),
        "cells_timed": timed_cells,
        "bisection_iters_per_row": cfg.bisect_iters,
        "compile_s": t_vec["compile_s"],
        "program_s": t_vec["min_s"],
        "cells_per_s": rate,
        "full_grid_projected_s": n_full * n_eta / rate,
        "loop_rows_timed": loop_rows,
        "loop_per_row_s": loop_per_row,
        "loop_cells_per_s": n_eta / loop_per_row,
        "ratio_vs_row_loop": rate / (n_eta / loop_per_row),
        "cell_loop_cells_timed": loop_cells,
        "cell_loop_cells_per_s": 1.0 / loop_per_cell,
        "ratio_vs_cell_loop": rate * loop_per_cell,
    }

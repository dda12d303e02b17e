"""Study ``pmd.reversal``: the 1,803-cell reversal grid of seed 001 (sections 3, 7, 14; Figure 4).

Every cell (eta, kappa, masked) runs the two-state family through the frozen decoder's
own forward map in float64, as one vectorised program swept by the harness (chunked,
sharded, checkpointed). The section-14 closed form is computed independently beside it.
The grid is the paper's in both modes (it takes seconds), so ``--quick`` changes nothing.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import benchmark, io, sweep
from experiments.registry import Check, RunContext, StudyOutput, bench, study
from pmd_jax import decoder, numpy_reference
from pmd_jax.mdp import two_state_family, uniform_policy
from pmd_jax.reversal import closed_form_cell, decoder_cell, reversal_threshold

PAPER = {
    "negative_cells_unmasked": 840,
    "negative_cells_masked": 0,
    "gain_implemented_kappa8_eta0.8": 0.916,
    "gain_ideal_kappa8_eta0.8": 0.950,
    "row_error_kappa8_eta0.8": 0.014,
    "gain_implemented_kappa8_eta1.6": 0.000,
    "gain_ideal_kappa8_eta1.6": 1.660,
    "row_error_kappa8_eta1.6": 0.664,
    "gain_implemented_kappa8_eta2.4": -2.009,
    "gain_ideal_kappa8_eta2.4": 2.084,
    "row_error_kappa8_eta2.4": 1.637,
    "max_identity_deviation": 1e-14,
    "threshold_eta_kappa4": 0.8,
    "threshold_eta_kappa8": 1.6,
    "threshold_eta_kappa12": 2.4,
}
PUBLISHED_POINTS = (0.8, 1.6, 2.4)  # at kappa = 8; printed to 3 decimals in the paper


@dataclasses.dataclass(frozen=True)
class ReversalConfig:
    """The grid of section 7: eta = 0, step, ..., eta_max, for each kappa, unmasked and masked."""

    c: float = 1.0
    gamma: float = 0.8
    nu: float = 20.0
    kappas: tuple[float, ...] = (4.0, 8.0, 12.0)
    eta_steps: int = 600  # eta_max / eta_step
    eta_max: float = 3.0
    chunk_size: int = 1  # grid rows (kappa, masked) per device per step
    threshold_tol: float = 1e-9  # |eta c - (1 - gamma) kappa| below this: a threshold cell

    def __post_init__(self):
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {self.gamma}")
        if self.c <= 0:
            raise ValueError(f"c must be > 0, got {self.c}")
        if self.nu <= 0:
            raise ValueError(f"nu must be > 0, got {self.nu}")
        if not self.kappas or min(self.kappas) <= 0:
            raise ValueError(f"kappas must be non-empty and > 0, got {self.kappas}")
        if self.eta_steps < 1 or self.eta_max < 0:
            raise ValueError(f"eta grid needs eta_steps >= 1 and eta_max >= 0, got {self.eta_steps}, {self.eta_max}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")

    @property
    def etas(self) -> np.ndarray:
        # Exact grid values i * eta_max / eta_steps (no accumulated rounding).
        return np.arange(self.eta_steps + 1) * self.eta_max / self.eta_steps

    def rows(self) -> dict[str, np.ndarray]:
        """The sweep axis: one row per (masked, kappa), masked False first."""
        masked, kappa = np.meshgrid([False, True], np.asarray(self.kappas), indexing="ij")
        return {"kappa": kappa.ravel(), "masked": masked.ravel()}

    def grid(self) -> dict[str, np.ndarray]:
        """Cells in ``cells.csv`` order: masked (False first), then kappa, then eta."""
        rows = self.rows()
        n_eta = len(self.etas)
        return {"eta": np.tile(self.etas, len(rows["kappa"])), **{k: np.repeat(v, n_eta) for k, v in rows.items()}}


def _cell_fn(cfg: ReversalConfig):
    return lambda cell: decoder_cell(cell["eta"], cell["kappa"], cell["masked"], cfg.c, cfg.gamma, cfg.nu)


def _row_fn(cfg: ReversalConfig):
    """A grid row: every eta at one (kappa, masked), so the weights are built once per row."""
    etas = jnp.asarray(cfg.etas)
    return lambda row: jax.vmap(lambda eta: _cell_fn(cfg)({"eta": eta, **row}))(etas)


def summarize(cfg: ReversalConfig, grid: dict, impl: dict, closed: dict) -> tuple[dict, list[Check]]:
    """Metrics and checks from the decoder's cells and the closed form's."""
    eta, kappa, masked = grid["eta"], grid["kappa"], grid["masked"]
    on_threshold = np.abs(eta * cfg.c - (1 - cfg.gamma) * kappa) <= cfg.threshold_tol
    negative = (impl["gain_implemented"] < 0) & ~on_threshold
    identity = impl["gain_implemented"] - (impl["gain_ideal"] - cfg.c * impl["row_error"] / (2 * (1 - cfg.gamma)))
    closed_dev = max(float(np.max(np.abs(impl[k] - closed[k]))) for k in impl)
    sign_law = np.sign((1 - cfg.gamma) * kappa - eta * cfg.c)
    unmasked_off = ~masked & ~on_threshold & (eta > 0)  # at eta = 0 the gain is 0 analytically
    sign_violations = int(np.sum(np.sign(impl["gain_implemented"][unmasked_off]) != sign_law[unmasked_off]))
    masked_pos = masked & (eta > 0)
    metrics = {
        "cells": float(len(eta)),
        "negative_cells_unmasked": float(np.sum(negative & ~masked)),
        "negative_cells_masked": float(np.sum(negative & masked)),
        "threshold_cells": float(np.sum(on_threshold)),
        "max_identity_deviation": float(np.max(np.abs(identity))),
        "max_closed_form_deviation": closed_dev,
        "sign_law_violations_unmasked": float(sign_violations),
        "min_masked_gain_eta_positive": float(np.min(impl["gain_implemented"][masked_pos])),
    }
    for k in cfg.kappas:
        metrics[f"threshold_eta_kappa{k:g}"] = float(reversal_threshold(k, cfg.c, cfg.gamma))
        neg_k = negative & ~masked & (kappa == k)
        metrics[f"first_negative_eta_kappa{k:g}"] = float(eta[neg_k].min()) if neg_k.any() else float("nan")
    for e in PUBLISHED_POINTS:
        i = int(np.flatnonzero(~masked & (kappa == 8.0) & np.isclose(eta, e, rtol=0, atol=1e-12))[0])
        for name in ("gain_implemented", "gain_ideal", "row_error"):
            metrics[f"{name}_kappa8_eta{e:g}"] = float(impl[name][i])
    published_dev = max(abs(metrics[k] - PAPER[k]) for k in PAPER if "_kappa8_eta" in k)
    checks = [
        Check("negative_cells_unmasked == 840", metrics["negative_cells_unmasked"], "== 840", metrics["negative_cells_unmasked"] == 840),
        Check("negative_cells_masked == 0", metrics["negative_cells_masked"], "== 0", metrics["negative_cells_masked"] == 0),
        Check("decoder equals section-14 closed form", closed_dev, "<= 1e-9", closed_dev <= 1e-9),
        Check(
            "identity dV_impl = dV_PMD - c zeta / (2(1 - gamma))",
            metrics["max_identity_deviation"], "<= 1e-13 (machine precision; paper: below 1e-14)",
            metrics["max_identity_deviation"] <= 1e-13,
        ),
        Check("sign law sgn dV = sgn[(1 - gamma) kappa - eta c], unmasked, eta > 0", float(sign_violations), "== 0 violations", sign_violations == 0),
        Check("masked gain > 0 for every eta > 0", metrics["min_masked_gain_eta_positive"], "> 0", metrics["min_masked_gain_eta_positive"] > 0),
        Check("kappa = 8 published points (3 decimals)", published_dev, "<= 5e-4", published_dev <= 5e-4),
    ]
    return metrics, checks


def _figure(cfg: ReversalConfig, grid: dict, impl: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cfg.kappas), figsize=(4.2 * len(cfg.kappas), 3.4), sharey=True)
    for ax, k in zip(np.atleast_1d(axes), cfg.kappas):
        sel = lambda m: (grid["kappa"] == k) & (grid["masked"] == m)
        eta = grid["eta"][sel(False)]
        ax.plot(eta, impl["gain_ideal"][sel(False)], color="0.3", lw=2, label="ideal PMD")
        ax.plot(eta, impl["gain_implemented"][sel(False)], color="tab:red", label="decoder, no mask")
        ax.plot(eta, impl["gain_implemented"][sel(True)], color="tab:blue", ls="--", label="decoder, state-local mask")
        ax.plot([reversal_threshold(k, cfg.c, cfg.gamma)], [0.0], "ko", ms=5)
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_title(f"margin kappa = {k:g}")
        ax.set_xlabel("step size eta")
    np.atleast_1d(axes)[0].set_ylabel("value gain at s-")
    np.atleast_1d(axes)[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("Reversal at three margins (c = 1, gamma = 0.8, nu = 20): decoder forward map, float64")
    fig.tight_layout()
    io.save_figure(fig, path)


@study("pmd.reversal", "PolicyAttention reversal grid: 1,803 cells x (unmasked, masked) through the exact decoder")
def run(ctx: RunContext) -> StudyOutput:
    cfg = ReversalConfig()
    grid = cfg.grid()
    with jax.enable_x64(True):
        result = sweep.sweep_map(
            _row_fn(cfg), cfg.rows(), chunk_size=cfg.chunk_size, ckpt_dir=ctx.checkpoint_dir(),
            fingerprint=dataclasses.asdict(cfg), resume=ctx.resume, desc="pmd.reversal cells",
        )
        impl = {k: np.asarray(v).reshape(-1) for k, v in dataclasses.asdict(result.outputs).items()}
        closed_cells = jax.jit(jax.vmap(lambda e, k, m: closed_form_cell(e, k, m, cfg.c, cfg.gamma, cfg.nu)))(
            grid["eta"], grid["kappa"], grid["masked"]
        )
        closed = {k: np.asarray(v) for k, v in dataclasses.asdict(closed_cells).items()}
    io.write_csv(ctx.out_dir / "cells.csv", {**grid, **impl})
    _figure(cfg, grid, impl, ctx.out_dir / "reversal.png")
    metrics, checks = summarize(cfg, grid, impl, closed)
    config = {**dataclasses.asdict(cfg), "dtype": "float64", "eta_grid": f"0:{cfg.eta_max / cfg.eta_steps:g}:{cfg.eta_max:g}"}
    return StudyOutput(config=config, metrics=metrics, checks=checks, paper=dict(PAPER), compile_s=result.compile_s)


def _numpy_cell(base_tokens, masks, params_np, layout, eta, kappa_index, masked, cfg: ReversalConfig):
    """One cell with the plain numpy forward map and numpy policy evaluation."""
    tokens = base_tokens.copy()
    tokens[: layout.S * layout.A, layout.index("eta")] = eta
    out = numpy_reference.decoder_forward(params_np[kappa_index], tokens, masks[masked])
    pi_hat = out[layout.S * layout.A :, layout.slice("pi_out")]
    mdp = two_state_family(cfg.c, cfg.gamma)
    P, R = np.asarray(mdp.P), np.asarray(mdp.R)
    pi0 = np.full((2, 2), 0.5)
    Q = numpy_reference.policy_evaluation(P, R, cfg.gamma, pi0)
    p = numpy_reference.pmd_step(pi0, Q, eta)
    v = lambda pi: (pi * numpy_reference.policy_evaluation(P, R, cfg.gamma, pi)).sum(1)[0] - (pi0 * Q).sum(1)[0]
    return v(p), v(pi_hat), np.abs(pi_hat[0] - p[0]).sum()


@bench("pmd.reversal")
def run_bench(ctx: RunContext) -> dict:
    """Vectorised grid (after compilation) against per-cell Python loops: jitted cell and numpy."""
    cfg = ReversalConfig()
    grid = cfg.grid()
    n = len(grid["eta"])
    loop_cells = 300  # the loops are timed on the first cells of a fixed random order, per cell
    order = np.random.default_rng(0).permutation(n)[:loop_cells]
    with jax.enable_x64(True):
        vectorised = jax.vmap(_row_fn(cfg))
        t_vec = benchmark.time_call(vectorised, {k: jnp.asarray(v) for k, v in cfg.rows().items()}, repeats=5)
        one = jax.jit(_cell_fn(cfg))
        cells = [{k: jnp.asarray(grid[k][i]) for k in grid} for i in order]
        jax.block_until_ready(one(cells[0]))
        t0 = time.perf_counter()
        for cell in cells:
            jax.block_until_ready(one(cell))
        jit_loop_per_cell = (time.perf_counter() - t0) / loop_cells

        layout = decoder.Layout(2, 2)
        mdp = two_state_family(cfg.c, cfg.gamma)
        pi0 = uniform_policy(2, 2, jnp.float64)
        Q = numpy_reference.policy_evaluation(np.asarray(mdp.P), np.asarray(mdp.R), cfg.gamma, np.asarray(pi0))
        base = decoder.actor_tokens(layout, pi0, jnp.asarray(Q), 0.0)
        masks = {m: np.asarray(decoder.attention_mask(layout, base, state_local=m)) for m in (False, True)}
        params_np = [jax.tree.map(np.asarray, decoder.construct_params(2, 2, cfg.gamma, k, cfg.nu)) for k in cfg.kappas]
    base = np.asarray(base)
    kappa_index = {k: j for j, k in enumerate(cfg.kappas)}
    t0 = time.perf_counter()
    for i in order:
        _numpy_cell(base, masks, params_np, layout, grid["eta"][i], kappa_index[grid["kappa"][i]], bool(grid["masked"][i]), cfg)
    numpy_loop_per_cell = (time.perf_counter() - t0) / loop_cells
    vec_per_cell = t_vec["min_s"] / n
    out = {
        "cells": n,
        "loop_cells_timed": loop_cells,
        "vectorised_compile_s": t_vec["compile_s"],
        "vectorised_grid_s": t_vec["min_s"],
        "vectorised_per_cell_s": vec_per_cell,
        "jit_loop_per_cell_s": jit_loop_per_cell,
        "numpy_loop_per_cell_s": numpy_loop_per_cell,
        "ratio_vs_jit_loop": jit_loop_per_cell / vec_per_cell,
        "ratio_vs_numpy_loop": numpy_loop_per_cell / vec_per_cell,
    }
    return out

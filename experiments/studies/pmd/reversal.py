"""Study ``pmd.reversal``: the 1,803-cell reversal grid.

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), sections 3, 7 and 14, Figure 4, and the exact
checks of section 16.

Every cell (eta, kappa, masked) runs the two-state family through the frozen decoder's
own forward map in float64, as one vectorised program swept by the harness (chunked,
sharded, checkpointed). The section-14 closed form is computed independently beside it.
The grid is the paper's in both modes (it takes seconds), so ``--quick`` changes nothing.

``c``, ``gamma`` and ``nu`` are array leaves of the program (:data:`TRACED`): ``--sweep
gamma=0.7,0.8,0.9`` runs every value's grid in one vmapped program whose sweep axis is
(value, masked, kappa).

Metrics ``threshold_eta_kappa{k}`` (beside the paper's thresholds) are measured: the first
unmasked eta on the grid whose gain is negative (0.805 at kappa = 4 on the 0.005 grid,
since the cell at 0.8 itself has zero gain); the formula (1 - gamma) kappa / c is the
separate metric ``threshold_formula_kappa{k}``.

Checks (all ``exact``: the grid is a deterministic float64 computation, no seed, so no
interval and no control arm), and how each could fail:

* ``negative_cells_unmasked`` == 840 and ``negative_cells_masked`` == 0 (the paper's
  counts): a decoder whose unmasked rows leak more or less mass to the other state, or
  whose mask leaks at all, changes the counts; other c, gamma or kappas move them.
* ``decoder_equals_closed_form`` (<= 1e-9): the decoder's forward map and the
  hand-derived softmax of section 14 are separate code; a wrong token, weight or mask
  in either breaks it.
* ``identity_row_error_value`` (<= 1e-13): dV_impl = dV_PMD - c zeta / (2(1 - gamma))
  holds only if the decoder's policy error enters the value as section 14 derives; a
  wrong Q, gamma or policy evaluation breaks it.
* ``sign_law`` (== 0 violations): the reversal happens exactly past
  eta = (1 - gamma) kappa / c; a decoder reversing elsewhere violates it.
* ``masked_gain_positive`` (smallest masked gain at eta > 0 above 0): the state-local mask
  must remove the reversal altogether.
* ``published_points_kappa8`` (<= 5e-4, half the printed 3rd decimal): the paper's printed
  gains, ideal gains and row errors at eta = 0.8, 1.6, 2.4; a grid without kappa = 8 or
  those etas cannot be compared and fails (non-finite value).

Section 16's further checks (``further_identity_row_error_value``, ``further_decoder_equals_closed_form``,
``further_sign_law``): the paper reports "2,928 further checks over reward scale, discount and margin, all to
machine precision (errors below 1e-14)" without their grid. Ours (``FURTHER_GRID``): c in {0.5, 1, 2, 4}, gamma in
{0.5, 0.7, 0.9, 0.95}, kappa in {4, 8, 12}, unmasked, eta = 0, 0.05, ..., 3: 2,928 cells, one more program. There
the values reach c / (1 - gamma) = 80, so the identity's deviation is read relative to that scale (absolute: up to
2.8e-13 at c = 4, gamma = 0.95, reported as ``further_max_identity_deviation``).

The checks against the paper's counts are statements about the paper's configuration
(c = 1, gamma = 0.8, nu = 20, the 601-eta grid, kappas 4, 8, 12): a run or sweep at any
other configuration is expected to fail them, while the identity, sign law, closed form
and masked-gain checks must hold everywhere. Derivations the code relies on that the
paper does not spell out: ``docs/pmd.md``.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io, sweep
from experiments.registry import RunContext, Study, Summary, register
from pmd_jax.reversal import closed_form_cell, decoder_cell, eta_grid, reversal_threshold

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
TRACED = ("c", "gamma", "nu")  # array leaves of the grid program: a sweep over one is one vmapped program

# Every claim is exact: the grid is a deterministic float64 computation (no seed, nothing to screen).
NEGATIVE_UNMASKED = checks.Claim(
    "negative_cells_unmasked", "without a mask, 840 of the 1,803 grid cells have a negative value gain", "==", 840.0,
    exact=True, paper=PAPER["negative_cells_unmasked"],
    fails_if="the unmasked rows leak more or less mass to the other state (or another c, gamma, grid or kappas)")
NEGATIVE_MASKED = checks.Claim(
    "negative_cells_masked", "with the state-local mask, no cell has a negative value gain", "==", 0.0, exact=True,
    paper=PAPER["negative_cells_masked"], fails_if="the mask leaks any mass to the other state")
CLOSED_FORM = checks.Claim(
    "decoder_equals_closed_form", "the decoder's forward map equals the section-14 closed form on every cell "
    "(max |difference| of gains and row errors)", "<=", 1e-9, exact=True,
    fails_if="a wrong token, weight or mask in the decoder or in the hand-derived softmax")
IDENTITY = checks.Claim(
    "identity_row_error_value", "the actor's row error predicts the value lost exactly: "
    "dV_impl = dV_PMD - c zeta / (2(1 - gamma)) to machine precision (max |deviation|)", "<=", 1e-13, exact=True,
    paper=PAPER["max_identity_deviation"], fails_if="a wrong Q, gamma or policy evaluation")
SIGN_LAW = checks.Claim(
    "sign_law", "sgn dV = sgn[(1 - gamma) kappa - eta c] on every unmasked cell with eta > 0 (violations)", "==", 0.0,
    exact=True, fails_if="the decoder reverses at another step than (1 - gamma) kappa / c")
MASKED_GAIN = checks.Claim(
    "masked_gain_positive", "with the mask the gain is positive for every eta > 0 (smallest gain)", ">", 0.0,
    exact=True, fails_if="the mask does not remove the reversal altogether")
PUBLISHED = checks.Claim(
    "published_points_kappa8", "at kappa = 8 and eta = 0.8, 1.6, 2.4 the implemented gains are +0.916, 0.000, -2.009 "
    "(ideal 0.950, 1.660, 2.084), row errors as printed (max |ours - printed|, half the 3rd decimal)", "<=", 5e-4,
    exact=True, fails_if="another decoder or family; a grid without kappa = 8 or those etas (non-finite value)")

FURTHER = "on the 2,928 further cells of section 16 (reward scale c, discount gamma, margin kappa; ``FURTHER_GRID``)"
FURTHER_IDENTITY = dataclasses.replace(  # its values reach c / (1 - gamma) = 80, so the deviation is relative to that
    IDENTITY, name="further_identity_row_error_value", margin=1e-14,
    statement=f"the row-error identity of identity_row_error_value {FURTHER}, max |deviation| relative to the "
              "value scale c / (1 - gamma) below the paper's 1e-14")
FURTHER_CLOSED_FORM = dataclasses.replace(CLOSED_FORM, name="further_decoder_equals_closed_form",
                                          statement=f"{CLOSED_FORM.statement}, {FURTHER}")
FURTHER_SIGN_LAW = dataclasses.replace(SIGN_LAW, name="further_sign_law", statement=f"{SIGN_LAW.statement}, {FURTHER}")
CLAIMS = (NEGATIVE_UNMASKED, NEGATIVE_MASKED, CLOSED_FORM, IDENTITY, SIGN_LAW, MASKED_GAIN, PUBLISHED,
          FURTHER_IDENTITY, FURTHER_CLOSED_FORM, FURTHER_SIGN_LAW)


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
        if not self.kappas or min(self.kappas) <= 0 or len(set(self.kappas)) != len(self.kappas):
            raise ValueError(f"kappas must be non-empty, distinct and > 0, got {self.kappas}")
        if self.eta_steps < 1:
            raise ValueError(f"eta_steps must be >= 1, got {self.eta_steps}")
        if self.eta_max <= 0:
            raise ValueError(f"eta_max must be > 0, got {self.eta_max}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.threshold_tol < 0:
            raise ValueError(f"threshold_tol must be >= 0, got {self.threshold_tol}")

    @property
    def etas(self) -> np.ndarray:
        return eta_grid(self.eta_max, self.eta_steps)

    def rows(self) -> dict[str, np.ndarray]:
        """The sweep axis: one row per (masked, kappa), masked False first, with c, gamma, nu."""
        masked, kappa = np.meshgrid([False, True], np.asarray(self.kappas), indexing="ij")
        return {"kappa": kappa.ravel(), "masked": masked.ravel(),
                **{k: np.full(masked.size, float(getattr(self, k))) for k in TRACED}}

    def grid(self) -> dict[str, np.ndarray]:
        """Cells in ``cells.csv`` order: masked (False first), then kappa, then eta."""
        rows = self.rows()
        n_eta = len(self.etas)
        return {"eta": np.tile(self.etas, len(rows["kappa"])),
                **{k: np.repeat(rows[k], n_eta) for k in ("kappa", "masked")}}


QUICK = FULL = ReversalConfig()

# Section 16's further cells (module docstring): unmasked (the masked decoder is exact PMD, where the identities are
# trivial), 4 x 4 x 3 (c, gamma, kappa) x 61 etas = 2,928, at the config's nu.
FURTHER_GRID = {"c": (0.5, 1.0, 2.0, 4.0), "gamma": (0.5, 0.7, 0.9, 0.95), "kappa": (4.0, 8.0, 12.0)}
FURTHER_ETAS = eta_grid(3.0, 60)


def further_rows(nu: float) -> dict[str, np.ndarray]:
    """The further grid's rows (one per (c, gamma, kappa), unmasked), in the layout of ``ReversalConfig.rows``."""
    c, gamma, kappa = (x.ravel() for x in np.meshgrid(*FURTHER_GRID.values(), indexing="ij"))
    return {"kappa": kappa, "masked": np.zeros(c.size, bool), "c": c, "gamma": gamma, "nu": np.full(c.size, nu)}


def cell_fn(cell: dict):
    """One grid cell through the decoder; ``cell`` holds eta, kappa, masked, c, gamma, nu."""
    return decoder_cell(cell["eta"], cell["kappa"], cell["masked"], cell["c"], cell["gamma"], cell["nu"])


def row_fn(etas: np.ndarray):
    """A grid row: every eta at one (kappa, masked, c, gamma, nu), so the weights are built once per row."""
    etas = jnp.asarray(etas)
    return lambda row: jax.vmap(lambda eta: cell_fn({"eta": eta, **row}))(etas)


def _grid_program(cfg: ReversalConfig, rows: dict[str, np.ndarray], ctx: RunContext, name: str, etas=None,
                  **fp) -> dict:
    """Decoder and closed-form cells of ``rows`` (any number of grid rows) at ``etas`` (default the config's),
    flat [rows * etas], and the cells themselves (``"cells"``: eta and every row field per cell)."""
    etas = cfg.etas if etas is None else etas
    eta = np.tile(etas, len(rows["kappa"]))
    cells = {k: np.repeat(v, len(etas)) for k, v in rows.items()}
    with jax.enable_x64(True):
        result = sweep.sweep_map(row_fn(etas), rows, chunk_size=cfg.chunk_size,
                                 checkpoint=ctx.checkpoint(name, **fp), desc=f"{ctx.study} cells")
        ctx.record_compile(result.compile_s)
        closed = jax.jit(jax.vmap(lambda e, x: closed_form_cell(e, x["kappa"], x["masked"], x["c"], x["gamma"], x["nu"])))(
            eta, cells)
        closed = {k: np.asarray(v) for k, v in dataclasses.asdict(closed).items()}
    impl = {k: np.asarray(v).reshape(-1) for k, v in dataclasses.asdict(result.outputs).items()}
    return {"impl": impl, "closed": closed, "cells": {"eta": eta, **cells}}


def compute(cfg: ReversalConfig, ctx: RunContext) -> dict:
    """``{"grid", "impl", "closed"}``: the cells, the decoder's gains and the closed form's, each [cells]; and
    ``"further"``, the same for the section-16 grid (``FURTHER_GRID``), with its per-cell c and gamma in its grid."""
    main = _grid_program(cfg, cfg.rows(), ctx, "ckpt")
    further = _grid_program(cfg, further_rows(cfg.nu), ctx, "ckpt_further", etas=FURTHER_ETAS)
    return {"grid": cfg.grid(), "impl": main["impl"], "closed": main["closed"],
            "further": {"grid": further["cells"], "impl": further["impl"], "closed": further["closed"]}}


def compute_sweep(cfg: ReversalConfig, field: str, values: list, ctx: RunContext) -> list[dict]:
    """:func:`compute` at ``field`` (one of TRACED) = each value, as one vmapped program."""
    per_value = [{**cfg.rows(), field: np.full(2 * len(cfg.kappas), float(v))} for v in values]
    rows = {k: np.concatenate([r[k] for r in per_value]) for k in per_value[0]}
    out = _grid_program(cfg, rows, ctx, f"ckpt_{field}", field=field, values=[float(v) for v in values])
    n = len(cfg.grid()["eta"])
    part = lambda d, i: {k: v[i * n:(i + 1) * n] for k, v in d.items()}  # noqa: E731
    return [{"grid": cfg.grid(), "impl": part(out["impl"], i), "closed": part(out["closed"], i)}
            for i in range(len(values))]


def exactness(grid: dict, impl: dict, closed: dict, c, gamma, threshold_tol: float) -> dict:
    """The exact identities on cells ``grid`` (eta, kappa, masked; c and gamma per cell or scalars): the largest
    deviation from dV_impl = dV_PMD - c zeta / (2(1 - gamma)), absolute and relative to the cell's value scale
    c / (1 - gamma), the largest decoder - closed-form difference, the unmasked cells (eta > 0, off the threshold)
    whose gain has not the sign of (1 - gamma) kappa - eta c, and the threshold mask."""
    eta, kappa, masked = grid["eta"], grid["kappa"], grid["masked"]
    on_threshold = np.abs(eta * c - (1 - gamma) * kappa) <= threshold_tol
    identity = impl["gain_implemented"] - (impl["gain_ideal"] - c * impl["row_error"] / (2 * (1 - gamma)))
    sign_law = np.sign((1 - gamma) * kappa - eta * c)
    unmasked_off = ~masked & ~on_threshold & (eta > 0)  # at eta = 0 the gain is 0 analytically
    return {"identity": float(np.max(np.abs(identity))),
            "identity_relative": float(np.max(np.abs(identity) * (1 - gamma) / c)),
            "closed_form": max(float(np.max(np.abs(impl[k] - closed[k]))) for k in impl),
            "sign_violations": int(np.sum(np.sign(impl["gain_implemented"][unmasked_off]) != sign_law[unmasked_off])),
            "on_threshold": on_threshold}


def summarize(cfg: ReversalConfig, arrays: dict) -> Summary:
    """Metrics, checks and the threshold table from the decoder's cells and the closed form's (numpy)."""
    grid, impl, closed = arrays["grid"], arrays["impl"], arrays["closed"]
    eta, kappa, masked = grid["eta"], grid["kappa"], grid["masked"]
    exact = exactness(grid, impl, closed, cfg.c, cfg.gamma, cfg.threshold_tol)
    on_threshold, closed_dev, sign_violations = exact["on_threshold"], exact["closed_form"], exact["sign_violations"]
    negative = (impl["gain_implemented"] < 0) & ~on_threshold
    metrics = {
        "cells": float(len(eta)),
        "negative_cells_unmasked": float(np.sum(negative & ~masked)),
        "negative_cells_masked": float(np.sum(negative & masked)),
        "threshold_cells": float(np.sum(on_threshold)),
        "max_identity_deviation": exact["identity"],
        "max_closed_form_deviation": closed_dev,
        "sign_law_violations_unmasked": float(sign_violations),
        "min_masked_gain_eta_positive": float(np.min(impl["gain_implemented"][masked & (eta > 0)])),
    }
    for k in cfg.kappas:  # measured: the first unmasked eta whose gain is negative; beside it the formula
        neg_k = negative & ~masked & (kappa == k)
        metrics[f"threshold_eta_kappa{k:g}"] = float(eta[neg_k].min()) if neg_k.any() else float("nan")
        metrics[f"threshold_formula_kappa{k:g}"] = float(reversal_threshold(k, cfg.c, cfg.gamma))
    published = [e for e in PUBLISHED_POINTS if 8.0 in cfg.kappas and np.isclose(eta, e, rtol=0, atol=1e-12).any()]
    for e in published:
        i = int(np.flatnonzero(~masked & (kappa == 8.0) & np.isclose(eta, e, rtol=0, atol=1e-12))[0])
        for name in ("gain_implemented", "gain_ideal", "row_error"):
            metrics[f"{name}_kappa8_eta{e:g}"] = float(impl[name][i])
    printed = [k for k in PAPER if "_kappa8_eta" in k]  # all nine printed numbers, or no comparison
    published_dev = (max(abs(metrics[k] - PAPER[k]) for k in printed) if all(k in metrics for k in printed)
                     else float("nan"))
    found = [
        NEGATIVE_UNMASKED.judge(metrics["negative_cells_unmasked"]),
        NEGATIVE_MASKED.judge(metrics["negative_cells_masked"]),
        CLOSED_FORM.judge(closed_dev),
        IDENTITY.judge(metrics["max_identity_deviation"]),
        SIGN_LAW.judge(float(sign_violations)),
        MASKED_GAIN.judge(metrics["min_masked_gain_eta_positive"]),
        PUBLISHED.judge(published_dev),
    ]
    if "further" in arrays:  # a --sweep runs the main grid only
        f = arrays["further"]
        further = exactness(f["grid"], f["impl"], f["closed"], f["grid"]["c"], f["grid"]["gamma"], cfg.threshold_tol)
        metrics.update(further_cells=float(len(f["grid"]["eta"])), further_max_identity_deviation=further["identity"],
                       further_max_identity_deviation_relative=further["identity_relative"],
                       further_max_closed_form_deviation=further["closed_form"],
                       further_sign_law_violations=float(further["sign_violations"]))
        found += [FURTHER_IDENTITY.judge(further["identity_relative"]), FURTHER_CLOSED_FORM.judge(further["closed_form"]),
                  FURTHER_SIGN_LAW.judge(float(further["sign_violations"]))]
    paper_family = (cfg.c, cfg.gamma) == (1.0, 0.8)  # the paper's thresholds are (1 - 0.8) kappa / 1
    table = {
        "kappa": list(cfg.kappas),
        "first_negative_eta": [metrics[f"threshold_eta_kappa{k:g}"] for k in cfg.kappas],
        "threshold_formula": [metrics[f"threshold_formula_kappa{k:g}"] for k in cfg.kappas],
        "threshold_paper": [PAPER.get(f"threshold_eta_kappa{k:g}", float("nan")) if paper_family else float("nan")
                            for k in cfg.kappas],
        "negative_cells": [float(np.sum(negative & ~masked & (kappa == k))) for k in cfg.kappas],
    }
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: ReversalConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``cells.csv`` (every cell), ``further_cells.csv`` (section 16's further cells, with their c and gamma;
    not for a sweep) and ``reversal.png`` (Figure 4's three-margin panel)."""
    grid, impl = arrays["grid"], arrays["impl"]
    io.write_csv(out_dir / "cells.csv", {**grid, **impl})
    if "further" in arrays:
        io.write_csv(out_dir / "further_cells.csv", {**arrays["further"]["grid"], **arrays["further"]["impl"]})
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cfg.kappas), figsize=(4.2 * len(cfg.kappas), 3.4), sharey=True, squeeze=False)
    for ax, k in zip(axes[0], cfg.kappas):
        sel = lambda m, k=k: (grid["kappa"] == k) & (grid["masked"] == m)
        ax.plot(grid["eta"][sel(False)], impl["gain_ideal"][sel(False)], color="0.3", lw=2, label="ideal PMD")
        ax.plot(grid["eta"][sel(False)], impl["gain_implemented"][sel(False)], color="tab:red", label="decoder, no mask")
        ax.plot(grid["eta"][sel(True)], impl["gain_implemented"][sel(True)], color="tab:blue", ls="--",
                label="decoder, state-local mask")
        ax.plot([reversal_threshold(k, cfg.c, cfg.gamma)], [0.0], "ko", ms=5, label="threshold (1 - gamma) kappa / c")
        if k == 8.0 and (cfg.c, cfg.gamma, cfg.nu) == (1.0, 0.8, 20.0):
            ax.plot(PUBLISHED_POINTS, [PAPER[f"gain_implemented_kappa8_eta{e:g}"] for e in PUBLISHED_POINTS],
                    "x", color="k", ms=8, label="paper")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_title(f"margin kappa = {k:g}")
        ax.set_xlabel("step size eta")
    axes[0, 0].set_ylabel("value gain at s-")
    axes[0, 0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Reversal (c = {cfg.c:g}, gamma = {cfg.gamma:g}, nu = {cfg.nu:g}): decoder forward map, float64")
    fig.tight_layout()
    io.save_figure(fig, out_dir / "reversal.png")


STUDY = register(Study(
    name="pmd.reversal",
    summary="PolicyAttention reversal grid: 1,803 cells x (unmasked, masked) through the exact decoder",
    config_type=ReversalConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None, traced=TRACED, compute_sweep=compute_sweep,
    claims=CLAIMS,
    quick_s=2,
))

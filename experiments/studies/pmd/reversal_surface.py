"""Study ``pmd.reversal_surface``: the reversal boundary as a surface over (eta, kappa, c, gamma, tilt, epsilon).

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), sections 3, 7 and 14, and its failure-mode
companion "PolicyAttention: Robustness and Failure Modes of Softmax Policy Improvement"
(PolicyAttention, arXiv 2609.30500, EvoRobust companion, section 11): "At kappa = 8 a
tilted prior moves the first negative step from about 1.6 to between 1.22 and 2.36, and
a 5% cross-state transition moves it to 2.34. These are numerical sensitivities, not a law."

The two-state family of ``pmd.reversal`` is generalised by a prior tilt ``t`` (both states'
prior rows ``(1/2 + t, 1/2 - t)``, :func:`pmd_jax.reversal.tilted_prior`) and a cross-state
leak ``epsilon`` (every action at either state moves to the other state with probability
``epsilon``, :func:`pmd_jax.reversal.leaky_family`). Every cell runs one actor call of the
frozen decoder's own forward map, unmasked, from the exact ``Q^pi`` (linear solve), and
evaluates the returned policy exactly; ``gain = V^{pi_hat}(s-) - V^pi(s-)``. A grid row is
every eta at one (kappa, c, gamma, tilt, epsilon); rows are swept by the harness (chunked,
sharded, checkpointed, resumable) in float64, each row vmapping its etas. Per row:
``eta_neg`` (the first grid eta > 0 whose gain is below ``-zero_tol``) and its refinement
by bisection on the decoder's gain inside the bracketing grid interval (``bisect_iters``
halvings). FULL: 601 etas x 8 kappas x 4 c x 4 gamma x 9 tilts x 6 epsilons = 4,154,112
cells; every threshold ``(1 - gamma) kappa / c`` of the (kappa, c, gamma) grid lies in
(0, 3). QUICK: 601 etas x 3 x 2 x 2 x 3 x 2 = 43,272 cells (the same eta grid and every
check point). No randomness: nothing to screen on a seed stream.

Three extra rows at the reference (kappa = 8, c = 1, gamma = 0.8, t = 0) run other readings
of "a 5% cross-state transition" in the same program: leak out of ``s-`` only, out of ``s+``
only, and "the successor is drawn uniformly with probability 0.05" (cross probability 0.025).

Checks (all ``exact``: a deterministic float64 computation, no seed, so no interval and no control arm), and how
each could fail:

* ``exact_law`` (refined, <= 1e-9): with t = 0 and epsilon = 0 the refined ``eta_neg``
  equals ``(1 - gamma) kappa / c`` on every (kappa, c, gamma) cell. A decoder whose
  wrong-state mass, query mass or value gap differs from section 14's moves the zero; a
  wrong Q (an extra leak, a different prior) or a bisection that brackets the wrong interval
  breaks it.
* ``exact_law_grid`` (0 mismatches): there the grid ``eta_neg`` is the first grid eta
  strictly above the threshold (grid etas within law_tol of it count as the threshold). Fails
  if rounding makes a threshold cell count as negative, or an off-by-one in the extraction.
* ``tilt_law`` (<= 1e-7): at epsilon = 0 the refined ``eta_neg`` equals
  ``(1 - gamma) kappa / (c (1 + 2 gamma t))`` on every (kappa, c, gamma, t) cell, NaN
  exactly where that exceeds the grid (``docs/pmd.md`` section 9.2). Fails if the tilt acts
  through anything but the value gap (e.g. a prior not tilted alike at both states).
* ``leak_law`` (<= 1e-7): at t = 0 the refined ``eta_neg`` equals the root of
  section 9.3's quadratic (:func:`pmd_jax.reversal.leak_threshold`) on every
  (kappa, c, gamma, epsilon) cell. Fails if the gain at ``s-`` under the leak did not depend
  on the ``s+`` row exactly as derived, or the decoder's Q under the leak were other.
* ``single_crossing`` (0 rows): no row's gain turns positive again after ``eta_neg``, so
  ``eta_neg`` is a boundary, not the first of several crossings. Could fail at strong tilts
  or leaks.
* ``leak_point_kappa8`` (the paper's 2.34 +- 0.005): the refined zero of the decoder's gain at
  kappa = 8, c = 1, gamma = 0.8, t = 0, epsilon = 0.05, unrounded (bisection to ~5e-15),
  against 2.34 with a tolerance of one step of the paper's stated grid (0.005, section 7; also
  half the last printed digit). A first negative step read on a 0.005 grid lies at most one step
  above the zero. **It FAILS, as measured**: the zero is 2.33421 (the leak law's root to 1e-7),
  0.0058 below 2.34, so 0.0008 outside the band; the first negative step on our 0.005 grid is
  2.335 (``eta_neg_leak_kappa8``). The paper's 2.34 is what a 0.01 grid gives
  (``eta_neg_leak_kappa8_grid0.01``), or 2.335 printed rounding half up (``docs/pmd.md`` section
  9.5); the same two readings give its 1.22 and 2.36 for the tilt ends. Other readings of the leak
  miss by far more (``readings.csv``: out of one state only 2.020 / 1.925, a uniform successor 1.965).

Metrics beside the paper's (PAPER): ``eta_neg_kappa8`` (reference), ``eta_neg_leak_kappa8``,
``eta_neg_tilted_low_kappa8`` / ``eta_neg_tilted_high_kappa8`` (our grid ``eta_neg`` at
t = +paper_tilt / -paper_tilt: the tilt of our family whose closed form gives the paper's
ends; the paper does not state its tilt), and the range over the whole tilt grid
(``eta_neg_tilt_min_kappa8``, ``eta_neg_tilt_max_kappa8``). The tilt range is a metric,
not a check: the paper's tilt magnitude is our identification, so matching it would be
circular. Tables: ``table`` (eta_neg as a function of each factor with the others at the
reference, beside its closed form and the paper), ``readings`` (the leak point under each
reading of the leak and of "first negative step").
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io, sweep
from experiments.registry import RunContext, Study, Summary, register
from pmd_jax.reversal import (
    eta_grid,
    leak_threshold,
    negative_step,
    reversal_threshold,
    row_reversal_threshold,
    surface_cell,
    tilt_threshold,
)

PAPER = {
    "eta_neg_kappa8": 1.6,  # "about 1.6"
    "eta_neg_leak_kappa8": 2.34,
    "eta_neg_tilted_low_kappa8": 1.22,
    "eta_neg_tilted_high_kappa8": 2.36,
}
FACTORS = ("kappa", "c", "gamma", "tilt", "epsilon")  # row order: kappa slowest, epsilon fastest
# The readings of "a 5% cross-state transition" run beside the grid: leak out of (s-, s+), in units of leak_point.
OUTPUT_NAMES = {"eta_grid": "eta_neg", "eta_refined": "eta_neg_refined", "negative_cells": "negative_cells",
                "returns_positive": "returns_positive"}  # NegativeStep field -> column of rows.csv
LEAK_READINGS = {"both states (ours)": (1.0, 1.0), "out of s- only": (1.0, 0.0), "out of s+ only": (0.0, 1.0),
                 "uniform successor (cross = eps / 2)": (0.5, 0.5)}

# Every claim is exact: the surface is a deterministic float64 computation (no seed, nothing to screen). The law
# tolerances are FULL's law_tol and closed_form_tol.
EXACT_LAW = checks.Claim(
    "exact_law", "with the uniform prior and self-loops the first negative step is (1 - gamma) kappa / c on every "
    "(kappa, c, gamma) cell (max |refined eta_neg - law| at tilt = epsilon = 0)", "<=", 1e-9, exact=True,
    fails_if="the decoder's wrong-state mass, query mass or value gap differs from section 14's; a wrong Q; "
             "a bisection that brackets the wrong interval")
EXACT_LAW_GRID = checks.Claim(
    "exact_law_grid", "on the grid, eta_neg is the first grid eta above the threshold (mismatching rows)", "==", 0.0,
    exact=True, fails_if="rounding makes a threshold cell count as negative, or an off-by-one in the extraction")
TILT_LAW = checks.Claim(
    "tilt_law", "a prior tilted alike at both states moves the first negative step by a law, "
    "(1 - gamma) kappa / (c (1 + 2 gamma t)) (max |refined - law| at epsilon = 0)", "<=", 1e-7, exact=True,
    fails_if="the tilt acts through anything but the value gap (e.g. a prior not tilted alike at both states)")
LEAK_LAW = checks.Claim(
    "leak_law", "a cross-state leak moves the first negative step by a law: the root of section 9.3's quadratic "
    "(max |refined - law| at tilt = 0)", "<=", 1e-7, exact=True,
    fails_if="the gain at s- under the leak does not depend on the s+ row as derived, or the decoder's Q differs")
SINGLE_CROSSING = checks.Claim(
    "single_crossing", "no row's gain turns positive again after eta_neg (rows)", "==", 0.0, exact=True,
    fails_if="a strong tilt or leak makes the gain cross zero more than once")
LEAK_POINT = checks.Claim(
    "leak_point_kappa8", "at kappa = 8, c = 1, gamma = 0.8 a 5% cross-state transition moves the first negative step "
    "to 2.34 (our refined zero, unrounded, against 2.34 +- one step of the paper's 0.005 grid)", "within",
    PAPER["eta_neg_leak_kappa8"], tol=0.005, exact=True, paper=PAPER["eta_neg_leak_kappa8"],
    fails_if="the zero lies more than one 0.005 grid step from 2.34; another reading of the leak (out of one state "
             "only 2.020 / 1.925, a uniform successor 1.965)")


@dataclasses.dataclass(frozen=True)
class SurfaceConfig:
    """The surface grid: eta = 0, step, ..., eta_max for every (kappa, c, gamma, tilt, epsilon) row."""

    kappas: tuple[float, ...] = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0)
    cs: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0)
    gammas: tuple[float, ...] = (0.8, 0.85, 0.9, 0.95)
    tilts: tuple[float, ...] = (-0.4, -0.3, -0.2, -0.1, 0.0, 0.1, 0.2, 0.3, 0.4)
    epsilons: tuple[float, ...] = (0.0, 0.01, 0.02, 0.03, 0.05, 0.1)
    nu: float = 20.0
    eta_steps: int = 600  # eta_max / eta_step: the paper's 0.005 grid
    eta_max: float = 3.0
    ref_kappa: float = 8.0  # the reference cell of the marginal tables (with tilt = epsilon = 0)
    ref_c: float = 1.0
    ref_gamma: float = 0.8
    leak_point: float = 0.05  # the paper's "5% cross-state transition"
    paper_tilt: float = 0.2  # our tilt whose closed form gives the paper's 1.22 / 2.36 ends at kappa = 8
    zero_tol: float = 1e-12  # |gain| below this is zero, not negative (rounding ~1e-15)
    bisect_iters: int = 40  # 0.005 / 2^40 ~ 5e-15
    law_tol: float = 1e-9
    closed_form_tol: float = 1e-7  # the closed forms neglect the query tokens' e^{-nu} mass
    chunk_size: int = 64  # rows per device per step

    def __post_init__(self):
        for name in ("kappas", "cs", "gammas", "tilts", "epsilons"):
            values = getattr(self, name)
            if not values or len(set(values)) != len(values):
                raise ValueError(f"{name} must be non-empty and distinct, got {values}")
        if min(self.kappas) <= 0:
            raise ValueError(f"kappas must be > 0, got {self.kappas}")
        if min(self.cs) <= 0:
            raise ValueError(f"cs must be > 0, got {self.cs}")
        if not all(0.0 < g < 1.0 for g in self.gammas):
            raise ValueError(f"gammas must lie in (0, 1), got {self.gammas}")
        if not all(-0.5 < t < 0.5 for t in self.tilts):
            raise ValueError(f"tilts must lie in (-0.5, 0.5) (prior rows (1/2 + t, 1/2 - t)), got {self.tilts}")
        if not all(0.0 <= e <= 0.5 for e in self.epsilons):
            raise ValueError(f"epsilons must lie in [0, 0.5], got {self.epsilons}")
        if 0.0 not in self.tilts or 0.0 not in self.epsilons:
            raise ValueError(f"tilts and epsilons must contain 0 (the exact law), got {self.tilts}, {self.epsilons}")
        for name, grid in (("ref_kappa", "kappas"), ("ref_c", "cs"), ("ref_gamma", "gammas")):
            if getattr(self, name) not in getattr(self, grid):
                raise ValueError(f"{name} must be one of {grid} = {getattr(self, grid)}, got {getattr(self, name)}")
        if self.nu <= 0:
            raise ValueError(f"nu must be > 0, got {self.nu}")
        if self.eta_steps < 2:
            raise ValueError(f"eta_steps must be >= 2, got {self.eta_steps}")
        if self.eta_max <= 0:
            raise ValueError(f"eta_max must be > 0, got {self.eta_max}")
        worst = max(reversal_threshold(k, c, g) for k, c, g in itertools.product(self.kappas, self.cs, self.gammas))
        if worst >= self.eta_max:
            raise ValueError(f"kappas, cs, gammas: every threshold (1 - gamma) kappa / c must lie below eta_max = "
                             f"{self.eta_max}, the largest is {worst:g}")
        if not 0.0 <= self.leak_point <= 0.5:
            raise ValueError(f"leak_point must lie in [0, 0.5], got {self.leak_point}")
        if not 0.0 <= self.paper_tilt < 0.5:
            raise ValueError(f"paper_tilt must lie in [0, 0.5), got {self.paper_tilt}")
        if self.zero_tol < 0:
            raise ValueError(f"zero_tol must be >= 0, got {self.zero_tol}")
        if self.bisect_iters < 1:
            raise ValueError(f"bisect_iters must be >= 1, got {self.bisect_iters}")
        if self.law_tol < 0 or self.closed_form_tol < 0:
            raise ValueError(f"law_tol and closed_form_tol must be >= 0, got {self.law_tol}, {self.closed_form_tol}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")

    @property
    def etas(self) -> np.ndarray:
        return eta_grid(self.eta_max, self.eta_steps)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(getattr(self, f + "s")) for f in FACTORS)

    def rows(self) -> dict[str, np.ndarray]:
        """The grid rows (kappa slowest, epsilon fastest); ``epsilon`` is ``[rows, 2]`` (out of s-, s+)."""
        grids = np.meshgrid(self.kappas, self.cs, self.gammas, self.tilts, self.epsilons, indexing="ij")
        rows = {f: g.ravel().astype(float) for f, g in zip(FACTORS, grids)}
        rows["epsilon"] = np.repeat(rows["epsilon"][:, None], 2, axis=1)
        return rows

    def reading_rows(self) -> dict[str, np.ndarray]:
        """One row per :data:`LEAK_READINGS` at the reference (tilt 0), leak_point scaled per state."""
        n = len(LEAK_READINGS)
        ref = {"kappa": self.ref_kappa, "c": self.ref_c, "gamma": self.ref_gamma, "tilt": 0.0}
        return {**{k: np.full(n, v) for k, v in ref.items()},
                "epsilon": self.leak_point * np.asarray(list(LEAK_READINGS.values()))}


QUICK = SurfaceConfig(kappas=(4.0, 8.0, 12.0), cs=(1.0, 2.0), gammas=(0.8, 0.9), tilts=(-0.2, 0.0, 0.2),
                      epsilons=(0.0, 0.05), chunk_size=76)  # 72 grid rows + 4 reading rows: one chunk
FULL = SurfaceConfig()


def row_fn(cfg: SurfaceConfig):
    """One grid row -> :class:`pmd_jax.reversal.NegativeStep` (vmaps the cell over the etas, then bisects)."""
    etas = jnp.asarray(cfg.etas)

    def one_row(row):
        gain = lambda eta: surface_cell(eta, row["kappa"], row["c"], row["gamma"], row["tilt"], row["epsilon"],
                                        row["nu"]).gain_implemented
        return negative_step(gain, etas, cfg.zero_tol, cfg.bisect_iters)

    return one_row


def program_inputs(cfg: SurfaceConfig) -> dict[str, np.ndarray]:
    """The grid rows then the reading rows, with ``nu``: the one program's input."""
    rows, extra = cfg.rows(), cfg.reading_rows()
    both = {k: np.concatenate([rows[k], extra[k]]) for k in rows}
    return {**both, "nu": np.full(len(both["kappa"]), float(cfg.nu))}


def compute(cfg: SurfaceConfig, ctx: RunContext) -> dict:
    """``{"rows", "readings", "etas"}``: each row's factors and its NegativeStep fields (float64)."""
    inputs = program_inputs(cfg)
    with jax.enable_x64(True):
        result = sweep.sweep_map(row_fn(cfg), inputs, chunk_size=cfg.chunk_size, checkpoint=ctx.checkpoint("ckpt"),
                                 desc=f"{ctx.study} rows")
    ctx.record_compile(result.compile_s)
    out = {OUTPUT_NAMES[k]: np.asarray(v) for k, v in dataclasses.asdict(result.outputs).items()}
    n = len(cfg.rows()["kappa"])
    factors = {**{f: inputs[f][:n] for f in FACTORS[:-1]}, "epsilon": inputs["epsilon"][:n, 0]}
    readings = {"epsilon_minus": inputs["epsilon"][n:, 0], "epsilon_plus": inputs["epsilon"][n:, 1],
                **{k: v[n:] for k, v in out.items()}}
    return {"rows": {**factors, **{k: v[:n] for k, v in out.items()}}, "readings": readings, "etas": cfg.etas}


def _cube(cfg: SurfaceConfig, rows: dict, name: str) -> np.ndarray:
    """Column ``name`` of the rows as ``[kappa, c, gamma, tilt, epsilon]`` (checks the row order)."""
    expected = cfg.rows()
    for f in FACTORS:
        want = expected[f][:, 0] if f == "epsilon" else expected[f]
        if np.shape(rows[f]) != want.shape or not np.array_equal(np.asarray(rows[f]), want):
            raise ValueError(f"rows[{f!r}] is not in the config's row order (kappa slowest, epsilon fastest)")
    return np.asarray(rows[name], float).reshape(cfg.shape)


def _law_deviation(measured: np.ndarray, formula: np.ndarray, eta_max: float, tol: float) -> np.ndarray:
    """|measured - formula| where the formula's zero lies on the grid; inf where finiteness disagrees."""
    expect = formula < eta_max - tol
    found = np.isfinite(measured)
    dev = np.where(expect & found, np.abs(np.where(found, measured, 0.0) - formula), 0.0)
    return np.where(expect != found, np.inf, dev)


def _first_above(etas: np.ndarray, value: float, tol: float) -> float:
    above = etas[(etas > value + tol) & (etas > 0)]
    return float(above[0]) if above.size else math.nan


def _coarse(eta_grid: float, returns_positive: float, etas: np.ndarray) -> float:
    """The first negative step on every other grid eta (the 0.01 grid from the 0.005 grid), single-crossing rows."""
    if not np.isfinite(eta_grid) or returns_positive:
        return math.nan
    i = int(np.argmin(np.abs(etas - eta_grid)))
    i += i % 2
    return float(etas[i]) if i < len(etas) else math.nan


def summarize(cfg: SurfaceConfig, arrays: dict) -> Summary:
    """Metrics, checks and the marginal and readings tables from the per-row NegativeSteps (numpy)."""
    rows, readings, etas = arrays["rows"], arrays["readings"], np.asarray(arrays["etas"], float)
    grid, refined = _cube(cfg, rows, "eta_neg"), _cube(cfg, rows, "eta_neg_refined")
    back = _cube(cfg, rows, "returns_positive")
    K, C, G, T, E = (np.asarray(getattr(cfg, f + "s"), float).reshape([-1 if j == i else 1 for j in range(5)])
                     for i, f in enumerate(FACTORS))  # broadcastable factor axes
    t0, e0 = cfg.tilts.index(0.0), cfg.epsilons.index(0.0)
    ik, ic, ig = cfg.kappas.index(cfg.ref_kappa), cfg.cs.index(cfg.ref_c), cfg.gammas.index(cfg.ref_gamma)

    exact = reversal_threshold(K, C, G)[..., 0, 0]  # [K, C, G]
    exact_dev = _law_deviation(refined[..., t0, e0], exact, cfg.eta_max, cfg.law_tol)
    expected_grid = np.vectorize(lambda v: _first_above(etas, v, cfg.law_tol))(exact)
    grid_mismatch = int(np.sum(~np.isclose(grid[..., t0, e0], expected_grid, rtol=0, atol=1e-12)))
    tilt_dev = _law_deviation(refined[..., e0], tilt_threshold(K, C, G, T)[..., 0], cfg.eta_max, cfg.closed_form_tol)
    leak_law = leak_threshold(K, C, G, E)[..., 0, :]  # [K, C, G, E]
    leak_dev = _law_deviation(refined[..., t0, :], leak_law, cfg.eta_max, cfg.closed_form_tol)

    def at(arr, t=0.0, e=0.0):  # the reference kappa, c, gamma; NaN when the grid lacks t or e
        if t not in cfg.tilts or e not in cfg.epsilons:
            return math.nan
        return float(arr[ik, ic, ig, cfg.tilts.index(t), cfg.epsilons.index(e)])

    tilt_row = grid[ik, ic, ig, :, e0]
    finite_tilt = tilt_row[np.isfinite(tilt_row)]
    lp, pt = cfg.leak_point, cfg.paper_tilt
    metrics = {
        "cells": float(grid.size * len(etas)),
        "rows": float(grid.size),
        "rows_with_reversal": float(np.sum(np.isfinite(grid))),
        "rows_returning_positive": float(np.sum(back)),
        "negative_cells": float(np.sum(rows["negative_cells"])),
        "exact_law_max_deviation": float(np.max(exact_dev)),
        "exact_law_grid_mismatches": float(grid_mismatch),
        "tilt_law_max_deviation": float(np.max(tilt_dev)),
        "leak_law_max_deviation": float(np.max(leak_dev)),
        "eta_neg_kappa8": at(grid),
        "eta_neg_kappa8_refined": at(refined),
        "eta_neg_leak_kappa8": at(grid, e=lp),
        "eta_neg_leak_kappa8_refined": at(refined, e=lp),
        "eta_neg_leak_kappa8_grid0.01": _coarse(at(grid, e=lp), at(back, e=lp), etas),
        "eta_neg_leak_kappa8_law": float(leak_threshold(cfg.ref_kappa, cfg.ref_c, cfg.ref_gamma, lp)),
        "row_turn_leak_kappa8": float(row_reversal_threshold(cfg.ref_kappa, cfg.ref_c, cfg.ref_gamma, lp)),
        "eta_neg_tilted_low_kappa8": at(grid, t=pt),
        "eta_neg_tilted_high_kappa8": at(grid, t=-pt),
        "eta_neg_tilted_low_kappa8_refined": at(refined, t=pt),
        "eta_neg_tilted_high_kappa8_refined": at(refined, t=-pt),
        "eta_neg_tilted_low_kappa8_grid0.01": _coarse(at(grid, t=pt), at(back, t=pt), etas),
        "eta_neg_tilted_high_kappa8_grid0.01": _coarse(at(grid, t=-pt), at(back, t=-pt), etas),
        "eta_neg_tilt_min_kappa8": float(finite_tilt.min()) if finite_tilt.size else math.nan,
        "eta_neg_tilt_max_kappa8": float(finite_tilt.max()) if finite_tilt.size else math.nan,
        "tilts_without_reversal_kappa8": float(np.sum(~np.isfinite(tilt_row))),
    }
    for name, key in zip(LEAK_READINGS, ("both", "minus_only", "plus_only", "uniform_successor")):
        i = list(LEAK_READINGS).index(name)
        metrics[f"leak_reading_{key}_kappa8"] = float(readings["eta_neg"][i])
    found = [EXACT_LAW.judge(metrics["exact_law_max_deviation"]), EXACT_LAW_GRID.judge(metrics["exact_law_grid_mismatches"]),
             TILT_LAW.judge(metrics["tilt_law_max_deviation"]), LEAK_LAW.judge(metrics["leak_law_max_deviation"]),
             SINGLE_CROSSING.judge(metrics["rows_returning_positive"]),
             LEAK_POINT.judge(metrics["eta_neg_leak_kappa8_refined"])]
    return Summary(metrics=metrics, checks=found, tables={"table": _marginals(cfg, grid, refined),
                                                          "readings": _readings(cfg, metrics)})


def _marginals(cfg: SurfaceConfig, grid: np.ndarray, refined: np.ndarray) -> dict:
    """eta_neg against each factor with the others at the reference, beside its closed form and the paper."""
    ref = {"kappa": cfg.ref_kappa, "c": cfg.ref_c, "gamma": cfg.ref_gamma, "tilt": 0.0, "epsilon": 0.0}
    index = {"kappa": cfg.kappas.index(cfg.ref_kappa), "c": cfg.cs.index(cfg.ref_c),
             "gamma": cfg.gammas.index(cfg.ref_gamma), "tilt": cfg.tilts.index(0.0), "epsilon": cfg.epsilons.index(0.0)}
    paper = {("epsilon", cfg.leak_point): PAPER["eta_neg_leak_kappa8"], ("tilt", cfg.paper_tilt):
             PAPER["eta_neg_tilted_low_kappa8"], ("tilt", -cfg.paper_tilt): PAPER["eta_neg_tilted_high_kappa8"]}
    table = {k: [] for k in ("factor", "value", "eta_neg", "eta_neg_refined", "closed_form", "paper")}
    for axis, f in enumerate(FACTORS):
        for j, v in enumerate(getattr(cfg, f + "s")):
            at = {**ref, f: v}
            sel = tuple(j if a == axis else index[g] for a, g in enumerate(FACTORS))
            if f == "epsilon":
                law = float(leak_threshold(at["kappa"], at["c"], at["gamma"], v))
            else:
                law = float(tilt_threshold(at["kappa"], at["c"], at["gamma"], at["tilt"]))
            table["factor"].append(f)
            table["value"].append(float(v))
            table["eta_neg"].append(float(grid[sel]))
            table["eta_neg_refined"].append(float(refined[sel]))
            table["closed_form"].append(law if law < cfg.eta_max else math.nan)
            table["paper"].append(math.nan if not at_is_paper_family(cfg) else
                                  PAPER["eta_neg_kappa8"] if at == ref else paper.get((f, v), math.nan))
    return table


def at_is_paper_family(cfg: SurfaceConfig) -> bool:
    """The paper's sensitivities are at kappa = 8, c = 1, gamma = 0.8 (the reference must be that cell)."""
    return (cfg.ref_kappa, cfg.ref_c, cfg.ref_gamma) == (8.0, 1.0, 0.8)


def _readings(cfg: SurfaceConfig, m: dict) -> dict:
    """The leak point (and the tilt ends) under each reading of the leak and of "first negative step"."""
    pt = cfg.paper_tilt
    rows = [
        (f"leak {cfg.leak_point:g}, both states: first negative on the grid", m["eta_neg_leak_kappa8"], "eta_neg_leak_kappa8"),
        ("leak, both states: refined zero (bisection)", m["eta_neg_leak_kappa8_refined"], "eta_neg_leak_kappa8"),
        ("leak, both states: first negative on every other grid eta (0.01)", m["eta_neg_leak_kappa8_grid0.01"],
         "eta_neg_leak_kappa8"),
        ("leak, both states: closed form (leak law)", m["eta_neg_leak_kappa8_law"], "eta_neg_leak_kappa8"),
        ("leak, both states: s- row turns towards a_1 (rho = 1)", m["row_turn_leak_kappa8"], "eta_neg_leak_kappa8"),
        ("leak out of s- only: first negative on the grid", m["leak_reading_minus_only_kappa8"], "eta_neg_leak_kappa8"),
        ("leak out of s+ only: first negative on the grid", m["leak_reading_plus_only_kappa8"], "eta_neg_leak_kappa8"),
        ("uniform successor (cross = eps / 2): first negative on the grid", m["leak_reading_uniform_successor_kappa8"],
         "eta_neg_leak_kappa8"),
        (f"tilt +{pt:g} (prior a_1 {0.5 + pt:g}): first negative on the grid", m["eta_neg_tilted_low_kappa8"],
         "eta_neg_tilted_low_kappa8"),
        (f"tilt +{pt:g}: refined zero", m["eta_neg_tilted_low_kappa8_refined"], "eta_neg_tilted_low_kappa8"),
        (f"tilt +{pt:g}: first negative on the 0.01 grid", m["eta_neg_tilted_low_kappa8_grid0.01"],
         "eta_neg_tilted_low_kappa8"),
        (f"tilt -{pt:g} (prior a_1 {0.5 - pt:g}): first negative on the grid", m["eta_neg_tilted_high_kappa8"],
         "eta_neg_tilted_high_kappa8"),
        (f"tilt -{pt:g}: refined zero", m["eta_neg_tilted_high_kappa8_refined"], "eta_neg_tilted_high_kappa8"),
        (f"tilt -{pt:g}: first negative on the 0.01 grid", m["eta_neg_tilted_high_kappa8_grid0.01"],
         "eta_neg_tilted_high_kappa8"),
    ]
    paper_ok = at_is_paper_family(cfg) and math.isclose(cfg.leak_point, 0.05)
    return {"reading": [r[0] for r in rows], "eta_neg": [r[1] for r in rows],
            "paper": [PAPER[r[2]] if paper_ok else math.nan for r in rows]}


def write(cfg: SurfaceConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``rows.csv`` (every row's eta_neg) and ``surface.png`` (eta_neg heatmaps over factor pairs, marginals)."""
    rows = arrays["rows"]
    io.write_csv(out_dir / "rows.csv", {k: np.asarray(v) for k, v in rows.items()})
    import matplotlib.pyplot as plt

    grid = _cube(cfg, rows, "eta_neg")
    ref = [cfg.kappas.index(cfg.ref_kappa), cfg.cs.index(cfg.ref_c), cfg.gammas.index(cfg.ref_gamma),
           cfg.tilts.index(0.0), cfg.epsilons.index(0.0)]
    pairs = (("kappa", "c"), ("gamma", "epsilon"), ("tilt", "epsilon"), ("kappa", "tilt"))
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.6))
    for ax, (fy, fx) in zip(axes.ravel(), pairs):
        ay, ax_ = FACTORS.index(fy), FACTORS.index(fx)
        sel = tuple(slice(None) if a in (ay, ax_) else ref[a] for a in range(5))
        plane = grid[sel]  # [fy values, fx values] since ay < ax_
        im = ax.imshow(np.ma.masked_invalid(plane), origin="lower", aspect="auto", cmap="viridis",
                       vmin=0.0, vmax=cfg.eta_max)
        ys, xs = getattr(cfg, fy + "s"), getattr(cfg, fx + "s")
        ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
        ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
        for (i, j), v in np.ndenumerate(plane):
            ax.text(j, i, "none" if not np.isfinite(v) else f"{v:.4g}", ha="center", va="center", fontsize=6,
                    color="w" if np.isfinite(v) and v < 0.6 * cfg.eta_max else "k")
        others = [f"{f} = {getattr(cfg, f + 's')[ref[a]]:g}" for a, f in enumerate(FACTORS) if a not in (ay, ax_)]
        ax.set_title(f"eta_neg over {fy} x {fx}\n({', '.join(others)})", fontsize=9)
        ax.set_xlabel(fx)
        ax.set_ylabel(fy)
        fig.colorbar(im, ax=ax, shrink=0.8)
    paper_family = at_is_paper_family(cfg)
    for ax, f in ((axes[1, 1], "tilt"), (axes[1, 2], "epsilon")):
        a = FACTORS.index(f)
        values = np.asarray(getattr(cfg, f + "s"))
        sel = tuple(slice(None) if b == a else ref[b] for b in range(5))
        fine = np.linspace(values.min(), values.max(), 200)
        if f == "tilt":
            law = tilt_threshold(cfg.ref_kappa, cfg.ref_c, cfg.ref_gamma, fine)
        else:
            law = leak_threshold(cfg.ref_kappa, cfg.ref_c, cfg.ref_gamma, fine)
        ax.plot(fine, np.where(law < cfg.eta_max, law, np.nan), color="0.5", lw=1.5, label="closed form (section 9)")
        ax.plot(values, grid[sel], "o", color="tab:red", label="decoder: first negative grid eta")
        if paper_family and f == "tilt":
            ax.plot([cfg.paper_tilt, -cfg.paper_tilt], [PAPER["eta_neg_tilted_low_kappa8"],
                    PAPER["eta_neg_tilted_high_kappa8"]], "kx", ms=9, label="paper 1.22 / 2.36 (its tilt: ours at +-0.2)")
        if paper_family and f == "epsilon":
            ax.plot([cfg.leak_point], [PAPER["eta_neg_leak_kappa8"]], "kx", ms=9, label="paper 2.34")
        ax.axhline(cfg.eta_max, color="0.8", lw=0.8)
        ax.set_xlabel(f)
        ax.set_ylabel("eta_neg")
        ax.set_title(f"eta_neg against {f} (kappa = {cfg.ref_kappa:g}, c = {cfg.ref_c:g}, gamma = {cfg.ref_gamma:g})",
                     fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Reversal surface: first negative step of the unmasked decoder (float64, "
                 f"{int(summary.metrics['cells']):,} cells; 'none': no negative gain up to eta = {cfg.eta_max:g})")
    fig.tight_layout()
    io.save_figure(fig, out_dir / "surface.png")


STUDY = register(Study(
    name="pmd.reversal_surface",
    summary="PolicyAttention reversal boundary as a surface over (eta, kappa, c, gamma, prior tilt, leak): >= 4M cells",
    config_type=SurfaceConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None,
    claims=(EXACT_LAW, EXACT_LAW_GRID, TILT_LAW, LEAK_LAW, SINGLE_CROSSING, LEAK_POINT),
    quick_s=3,
))

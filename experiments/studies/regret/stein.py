"""Study ``regret.stein``: the Stein form (12) of F'(eta), its two terms, and Proposition 1 (docs/regret.md §5.4, §5.6)
of "Training with (Swap) Regret Loss in a Single-Layer Self-Attention Model: A Case Study on the Probability Simplex".

For every (d, T) cell, N Gaussian sequences are drawn once and run on one grid eta = 0,
kappa / sqrt(T) (common random numbers) through :func:`regret_jax.stein.stein_sample`: the pathwise
F' sample 2 R R' of Eq. (24), the Stein sample 2 (t1 - t2) of Eq. (12) with its learner-response
term t1 and comparator term t2, and the pathwise F'' sample 2 (R'^2 + R R''). Both F' estimators
see the same sequences, so their difference is judged by its own (paired) standard error, and
their variances are compared at equal sample counts (reported, per cell, at the pathwise root
eta*: ``var_ratio_root`` = var(Stein) / var(pathwise)). Quantities at eta* are read by linear
interpolation of each sequence's samples between the two grid points around eta*. The
sequences of stream s are :func:`regret_jax.scan_keys` with ``seed = s``, so the judged stream
(0) uses the same sequences as ``regret.stationarity``; they are not seeds (no ``--seeds``).

The pathwise F' sample is centred, 2 (R - sqrt(T) mu_d) R' (same mean since E[R'] = 0, docs/regret.md §4.4): at
N = 4000 the uncentred 2 R R' left the pathwise roots 5-16% off at d = 2 (1.778 and 2.199 against 1.86-1.89 from
400,000 sequences) while the old z check passed them; centring cuts the sample's sd 4.5x (d = 2) to 10x (d = 10).

No number of the paper survived (docs/regret.md §12), so ``PAPER`` is empty. Checks, per (d, T) cell, judged over
``num_blocks`` disjoint blocks of the cell's sequences (95% t intervals; the blocks are the independent units):

* ``stein_root_matches_pathwise_root_<cell>`` (relative difference of the roots within 0 +- 0.05): the roots of the
  Stein F' (12) and of the pathwise F' (24) coincide. Per block, the linearised difference
  -(F'_Stein - F'_path)(eta*) / (eta* F''(eta*)) on the block's sequences (paired, common random numbers), eta* and
  F''(eta*) from the whole cell. Control: the Stein F' read at 1.1 eta (a wrong root, 1/1.1 of the right one); a
  dropped term of the Stein derivation (the eta sum_{s>t} J_s l_s terms not vanishing, a wrong a*, a sign) moves the
  Stein root off the pathwise one by more than the band.
* ``curvature_positive_at_root_<cell>`` (F''(eta*) > 0, per block, scaled by 1 / T^2): Proposition 1, eta* is a strict
  local minimiser of F along the ray. Control: F'' at the grid's largest eta, kappa_max / sqrt(T), where F levels off
  towards follow-the-leader's value and is concave; a flat or concave F at its root fails it.

Reported, not checked, and why (tests in ``tests/regret_jax/test_regret_stein.py`` hold the identities):
``max_abs_diff_z`` (Stein against pathwise F' at every eta, in paired standard errors) is the identity
E[2 (t1 - t2)] = E[2 R R'], tested (``test_stein_and_pathwise_F_prime_agree_in_expectation_not_pointwise``); and
``min_z_comparator_below`` / ``min_z_learner_above`` (T2 > T1 below eta*/2, T1 > T2 above 2 eta*), the former checks
``comparator_term_dominates_below_half_root`` and ``learner_term_dominates_above_twice_root``: since F' = 2 (T1 - T2),
they restate that F' has one sign change (``regret.stationarity``'s ``one_sign_change_every_cell``), with T2(0) > 0 =
T1(0) and the small-eta slope of T1 tested. Also reported: the variance ratio var(Stein) / var(pathwise) at eta*
(an estimator property, no claim of the paper; ``var_ratio_root`` against the uncentred pathwise sample,
``var_ratio_centred_root`` against the centred one) and where T1 peaks (``kappa_T1_peak``; at the quick grid T1
peaks below kappa*, so the sign change happens where both terms fall and T2 falls faster, not where T1 still grows).
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from regret_jax.stein import stein_sample
from experiments import checks, io, seeds
from experiments.blocks import block_means, interpolate_at
from experiments.registry import RunContext, Study, Summary, register

PAPER: dict[str, float] = {}  # no numeric result of the paper survived (docs/regret.md §12)

SAMPLES = ("R", "dR", "d2R", "t1", "t2")
PER_ETA = ("etas", "dF_path", "dF_path_se", "dF_stein", "dF_stein_se", "diff_z", "T1", "T1_se", "T2", "T2_se",
           "d2F", "d2F_se")
PER_CELL = ("eta_star", "eta_star_se", "eta_star_stein", "root_diff_z", "d2F_root", "d2F_root_z", "var_ratio_root",
            "var_ratio_centred_root", "T1_root", "T2_root")
PER_BLOCK = ("root_diff", "root_diff_wrong", "d2F_root", "d2F_kappa_max")  # [C, num_blocks]
TABLE_COLUMNS = ("d", "T", "kappa_star", "kappa_star_stein", "root_diff_z", "var_ratio_root", "var_ratio_centred_root",
                 "d2F_root_z", "T1_root", "T2_root", "kappa_T1_peak")
WRONG_ROOT = 1.1  # the control reads the Stein F' at 1.1 eta: a root 1/1.1 of the right one
ROOT_MATCH = checks.Claim(
    "stein_root_matches_pathwise_root_<cell>", "the Stein form (12) and the pathwise form (24) of F' have the same "
    "root: (eta*_Stein - eta*_path) / eta*", "within", 0.0, tol=0.05, unit="block of sequences",
    control="the Stein F' read at 1.1 eta (a root 9% low)",
    fails_if="a dropped or wrong term of the Stein derivation moves its root off the pathwise one")
CURVATURE = checks.Claim(
    "curvature_positive_at_root_<cell>", "Proposition 1: F''(eta*) > 0, eta* is a strict local minimiser of F along "
    "the ray (F'' / T^2)", ">", 0.0, unit="block of sequences",
    control="F'' at the grid's largest eta, kappa_max / sqrt(T), where F levels off",
    fails_if="F is flat or concave at its root (a maximiser or an inflection)")
CLAIMS = (ROOT_MATCH, CURVATURE)


@dataclasses.dataclass(frozen=True)
class SteinConfig:
    """Cells (d, T), sequences per cell, the kappa = eta sqrt(T) grid, and the sequence stream."""

    ds: tuple[int, ...] = (2, 5, 10)
    Ts: tuple[int, ...] = (25, 100)
    num_sequences: int = 6000  # at the largest d; cell d draws sequences(d) = num_sequences * max(ds) / d
    kappa_min: float = 0.25
    kappa_max: float = 8.0
    num_kappas: int = 24
    num_blocks: int = 10  # disjoint blocks of sequences, the units of the checks' intervals
    chunk_size: int = rj.SCAN_CHUNK
    stream: int = 0  # JUDGED = 0 (the checks), SCREENING = 1 (sizing): scan_keys(..., seed=stream)

    def __post_init__(self):
        if not self.ds or min(self.ds) < 2 or list(self.ds) != sorted(set(self.ds)):
            raise ValueError(f"ds must be non-empty, increasing, with every d >= 2, got {self.ds}")
        if not self.Ts or min(self.Ts) < 2 or list(self.Ts) != sorted(set(self.Ts)):
            raise ValueError(f"Ts must be non-empty, increasing, with every T >= 2, got {self.Ts}")
        if self.num_sequences < 100:
            raise ValueError(f"num_sequences must be >= 100, got {self.num_sequences}")
        if not 0 < self.kappa_min < self.kappa_max:
            raise ValueError(f"need 0 < kappa_min < kappa_max, got {self.kappa_min}, {self.kappa_max}")
        if self.num_kappas < 8:
            raise ValueError(f"num_kappas must be >= 8, got {self.num_kappas}")
        if not 2 <= self.num_blocks <= self.num_sequences // 50:  # the fewest sequences of a cell
            raise ValueError(f"num_blocks must be in [2, num_sequences / 50], got {self.num_blocks}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        seeds.check_stream(self.stream)

    @property
    def kappas(self) -> np.ndarray:
        return rj.scan_kappas(self.kappa_min, self.kappa_max, self.num_kappas)

    def sequences(self, d: int) -> int:
        """Sequences of the cells of dimension d: equal work per cell (a round costs ~d), so the noisy small-d cells,
        where the Stein sample's variance is largest relative to F'', get the most."""
        return int(round(self.num_sequences * self.ds[-1] / d))


# Sized on the SCREENING stream (``--set stream=1``). At 4000 sequences per cell the root claim was INCONCLUSIVE at
# d = 2 (95% half-widths 0.08 and 0.053 in relative root, need ~82 blocks) and d = 5, T = 100 (0.037): after centring
# the pathwise sample, the Stein sample is the noisy one (variance 3-14x the centred pathwise one). With equal work
# per cell (6000 sequences at d = 10, 12,000 at d = 5, 30,000 at d = 2): half-widths 0.011-0.030, every root check
# PASS (means -0.002 to +0.008), every wrong-root control FAIL (-0.075 to -0.087); F'' / T^2 > 0 by 5-13 half-widths
# at every root, every kappa_max control FAIL. 36 CPU seconds on 2 shared cores (20 s at 4000 per cell).
QUICK = SteinConfig()
FULL = SteinConfig(ds=(2, 5, 10, 20), Ts=(25, 100, 400), num_sequences=40_000, num_kappas=40)


def _mean_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the leading (sequence) axis."""
    return np.mean(x, axis=0), np.std(x, axis=0, ddof=1) / np.sqrt(x.shape[0])


def cell_moments(samples: dict, etas, centre: float, num_blocks: int) -> dict[str, np.ndarray]:
    """Per-eta moments (:data:`PER_ETA`), root quantities (:data:`PER_CELL`) and per-block claim values
    (``block_<name>``, :data:`PER_BLOCK`) of one cell's samples [N, E].

    The pathwise F' sample is centred, 2 (R - ``centre``) R' with centre = sqrt(T) mu_d = E[R] (same mean). The root
    eta* is :func:`regret_jax.find_root` of the pathwise F' on the grid without eta = 0 (``eta_star_stein``: of the
    Stein F'); F'', the variance ratios and T1, T2 at eta* are read from the per-sequence interpolation :func:`experiments.blocks.interpolate_at`.
    ``root_diff_z``: (Stein root - pathwise root) over se(paired difference of the F' samples at eta*) / F''(eta*).
    Per block: the linearised relative root difference -(F'_Stein - F'_path)(eta*) / (eta* F''(eta*)) (eta* and
    F''(eta*) of the whole cell), the same with the Stein F' read at :data:`WRONG_ROOT` eta*, and F'' / T^2 at eta*
    and at the largest grid eta.
    """
    s = {k: np.asarray(samples[k], np.float64) for k in SAMPLES}
    etas = np.asarray(etas, np.float64)
    path, stein = 2 * (s["R"] - centre) * s["dR"], 2 * (s["t1"] - s["t2"])
    curv = 2 * (s["dR"] ** 2 + s["R"] * s["d2R"])
    out = {"etas": etas}
    for name, x in (("dF_path", path), ("dF_stein", stein), ("T1", s["t1"]), ("T2", s["t2"]), ("d2F", curv)):
        out[name], out[f"{name}_se"] = _mean_se(x)
    diff_mean, diff_se = _mean_se(stein - path)
    out["diff_z"] = diff_mean / diff_se

    def root(dF, se):
        r = rj.find_root(jnp.asarray(etas[1:]), jnp.asarray(dF[1:]), jnp.asarray(se[1:]))
        return float(r.eta), float(r.se)

    eta_star, out["eta_star_se"] = root(out["dF_path"], out["dF_path_se"])
    out["eta_star"], out["eta_star_stein"] = eta_star, root(out["dF_stein"], out["dF_stein_se"])[0]
    curv_root = interpolate_at(curv, etas, eta_star)
    d2F_root, d2F_root_se = _mean_se(curv_root)
    path_root, stein_root = interpolate_at(path, etas, eta_star), interpolate_at(stein, etas, eta_star)
    pair_se = _mean_se(stein_root - path_root)[1]
    out.update(
        d2F_root=d2F_root, d2F_root_z=d2F_root / d2F_root_se,
        root_diff_z=(out["eta_star_stein"] - eta_star) / (pair_se / d2F_root),
        var_ratio_root=np.var(stein_root, ddof=1) / np.var(interpolate_at(2 * s["R"] * s["dR"], etas, eta_star), ddof=1),
        var_ratio_centred_root=np.var(stein_root, ddof=1) / np.var(path_root, ddof=1),
        T1_root=np.mean(interpolate_at(s["t1"], etas, eta_star)), T2_root=np.mean(interpolate_at(s["t2"], etas, eta_star)),
    )

    def shift(x):  # per-block linearised relative root shift of an F' sample against the pathwise one at eta*
        return -block_means(x - path_root, num_blocks) / (eta_star * d2F_root)

    out.update(block_root_diff=shift(stein_root), block_root_diff_wrong=shift(interpolate_at(stein, etas, WRONG_ROOT * eta_star)),
               block_d2F_root=block_means(curv_root, num_blocks), block_d2F_kappa_max=block_means(curv[:, -1], num_blocks))
    return {k: np.asarray(v) for k, v in out.items()}


def compute(config: SteinConfig, ctx: RunContext) -> dict:
    """``{"cells": {d, T}, "terms": {PER_ETA [C, E]}, "root": {PER_CELL [C]}, "blocks": {PER_BLOCK [C, B]}}``, cells d
    (outer), T (inner); the blocks' F'' values are F'' / T^2."""
    cells = [(d, T) for d in config.ds for T in config.Ts]
    moments = []
    for d, T in cells:
        etas = rj.scan_etas(T, config.kappas)
        keys = rj.scan_keys(d, T, config.sequences(d), config.stream)
        samples = seeds.mapped(ctx, f"stein_d{d}_T{T}", stein_sample(d, T, etas), keys,
                               min(config.chunk_size, config.sequences(d)), d=d, T=T)
        moments.append(cell_moments(samples, etas, np.sqrt(T) * rj.mu_d(d), config.num_blocks))
    scale = np.asarray([[1.0, 1.0, T**-2.0, T**-2.0] for _, T in cells])  # F'' per block as F'' / T^2
    return {
        "cells": {"d": np.asarray([c[0] for c in cells]), "T": np.asarray([c[1] for c in cells])},
        "terms": {k: np.stack([m[k] for m in moments]) for k in PER_ETA},
        "root": {k: np.asarray([m[k] for m in moments]) for k in PER_CELL},
        "blocks": {k: np.stack([m[f"block_{k}"] for m in moments]) * scale[:, i, None] for i, k in enumerate(PER_BLOCK)},
    }


def cell_rows(arrays: dict) -> dict[str, np.ndarray]:
    """Per cell (:data:`TABLE_COLUMNS`) and the four claim statistics (min/max over the cell's grid points)."""
    d, T = np.asarray(arrays["cells"]["d"]), np.asarray(arrays["cells"]["T"])
    terms, root = arrays["terms"], arrays["root"]
    etas, eta_star = np.asarray(terms["etas"]), np.asarray(root["eta_star"], np.float64)
    gap_z = (np.asarray(terms["T1"]) - np.asarray(terms["T2"])) / (np.asarray(terms["dF_stein_se"]) / 2)
    below, above = etas <= eta_star[:, None] / 2, etas >= 2 * eta_star[:, None]
    sqrtT = np.sqrt(T)
    with np.errstate(invalid="ignore"):  # a cell without grid points in a range gives NaN, which fails its check
        return {
            "d": d, "T": T, "kappa_star": eta_star * sqrtT, "kappa_star_stein": np.asarray(root["eta_star_stein"]) * sqrtT,
            "root_diff_z": np.asarray(root["root_diff_z"]), "var_ratio_root": np.asarray(root["var_ratio_root"]),
            "var_ratio_centred_root": np.asarray(root["var_ratio_centred_root"]),
            "d2F_root_z": np.asarray(root["d2F_root_z"]), "T1_root": np.asarray(root["T1_root"]),
            "T2_root": np.asarray(root["T2_root"]),
            "kappa_T1_peak": etas[np.arange(len(d)), np.argmax(np.asarray(terms["T1"]), axis=1)] * sqrtT,
            "max_abs_diff_z": np.max(np.abs(np.asarray(terms["diff_z"])), axis=1),
            "min_z_comparator_below": np.array([np.min(-g[m]) if m.any() else np.nan for g, m in zip(gap_z, below)]),
            "min_z_learner_above": np.array([np.min(g[m]) if m.any() else np.nan for g, m in zip(gap_z, above)]),
        }


def summarize(config: SteinConfig, arrays: dict) -> Summary:
    """Per-cell metrics, the two claims per cell (over blocks of sequences, with their controls) and the table."""
    rows = cell_rows(arrays)
    blocks = {k: np.asarray(v, np.float64) for k, v in arrays["blocks"].items()}
    metrics, found = {}, []
    for i, (d, T) in enumerate(zip(rows["d"], rows["T"])):
        for k in ("kappa_star", "kappa_star_stein", "var_ratio_root", "var_ratio_centred_root", "d2F_root_z",
                  "kappa_T1_peak", "max_abs_diff_z", "min_z_comparator_below", "min_z_learner_above"):
            metrics[f"{k}_d{d}_T{T}"] = float(rows[k][i])
        cell = f"d{d}_T{T}"
        found.append(ROOT_MATCH.judge(blocks["root_diff"][i], control=blocks["root_diff_wrong"][i], key=cell))
        found.append(CURVATURE.judge(blocks["d2F_root"][i], control=blocks["d2F_kappa_max"][i], key=cell))
    metrics["var_ratio_root_max"] = float(np.max(rows["var_ratio_root"]))
    metrics["max_abs_diff_z"] = float(np.max(rows["max_abs_diff_z"]))
    table = {k: rows[k] for k in TABLE_COLUMNS}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def _figure(config: SteinConfig, arrays: dict, path) -> None:
    import matplotlib.pyplot as plt

    cells, terms, eta_star = arrays["cells"], arrays["terms"], np.asarray(arrays["root"]["eta_star"])
    fig, axes = plt.subplots(1, len(config.ds), figsize=(4.2 * len(config.ds), 3.6), squeeze=False)
    for ax, d in zip(axes[0], config.ds):
        for i in np.flatnonzero(np.asarray(cells["d"]) == d):
            T = int(cells["T"][i])
            kappa, scale = np.asarray(terms["etas"][i]) * np.sqrt(T), T**1.5
            line, = ax.plot(kappa, terms["T1"][i] / scale, label=rf"$\mathcal{{T}}_1$, T={T}")
            ax.plot(kappa, terms["T2"][i] / scale, "--", color=line.get_color(), label=rf"$\mathcal{{T}}_2$, T={T}")
            ax.plot(kappa, terms["dF_stein"][i] / scale, ":", color=line.get_color(), label=f"F', T={T}")
            ax.axvline(eta_star[i] * np.sqrt(T), color=line.get_color(), lw=0.5)
        ax.axhline(0, color="k", lw=0.5)
        ax.set(xlabel=r"$\kappa = \eta\sqrt{T}$", ylabel=r"$/\,T^{3/2}$", title=f"d={d}")
        ax.legend(fontsize=6)
    fig.tight_layout()
    io.save_figure(fig, path)


def write(config: SteinConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``terms.npz`` (per cell ``d{d}_T{T}``: the :data:`PER_ETA` rows) and ``stein_terms.png`` (``table.csv`` is a table)."""
    cells, terms = arrays["cells"], arrays["terms"]
    io.save_npz(out_dir / "terms.npz", **{
        f"d{d}_T{T}": np.stack([terms[k][i] for k in PER_ETA]) for i, (d, T) in enumerate(zip(cells["d"], cells["T"]))
    })
    _figure(config, arrays, out_dir / "stein_terms.png")


STUDY = register(Study(
    name="regret.stein",
    cost_fields=("num_sequences",),
    summary="Eq. (12) / Prop. 1: Stein vs pathwise F'(eta), its terms T1, T2, and F''(eta*) > 0",
    config_type=SteinConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None, claims=CLAIMS,
    quick_s=25,
))

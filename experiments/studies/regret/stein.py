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

No number of the paper survived (docs/regret.md §12), so ``PAPER`` is empty. Checks (Monte-Carlo
statements of the paper's claims), and how each could fail:

* ``stein_matches_pathwise_every_eta`` (max |z| < 4.5 over every eta of every cell): Eq. (12)
  is F'; a dropped term of the Stein derivation (the eta sum_{s>t} J_s l_s terms not vanishing,
  a wrong a*, a sign) makes the paired difference many standard errors wide.
* ``stein_root_matches_pathwise_root`` (max |z| < 4.5): the roots of the two F' curves coincide;
  the z uses the paired standard error of the difference at eta* over F''(eta*) (delta method).
* ``comparator_term_dominates_below_half_root`` (min z of T2 - T1 > 5 over 0 <= eta <= eta*/2):
  the paper's "the comparator contribution dominates for very small eta, giving F' < 0"; a
  learner term that does not vanish as eta -> 0, or a root at the wrong scale, fails it.
* ``learner_term_dominates_above_twice_root`` (min z of T1 - T2 > 5 over 2 eta* <= eta <= 8 / sqrt(T)):
  "at the inverse-sqrt(T) scale the learner-response term dominates, giving F' > 0"; a second
  sign change above the root, or T1 falling below T2 again, fails it.
* ``curvature_positive_at_root`` (min z of F''(eta*) > 5): Proposition 1, eta* is a strict local
  minimiser of F along the ray; a flat or concave F at its root (a maximiser, or an inflection)
  fails it.

Tests, not checks (``tests/regret_jax/test_regret_stein.py``), because they hold by construction
or are exact identities: t1 >= 0 for every sequence (Chebyshev), t1 = 0 at eta = 0, the small-eta
slope E[T1] = eta (d-1) T (T-1) / (2 d^2) + O(eta^3), T2(0) = -F'(0)/2, the estimators against a
numpy loop, F'' against a finite difference of F'. Not checked but reported: the variance ratio
(an estimator property, no claim of the paper) and where T1 peaks (``kappa_T1_peak``; at the
quick grid T1 peaks below kappa*, so the sign change happens where both terms fall and T2
falls faster, not where T1 still grows).
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from regret_jax.stein import stein_sample
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register

PAPER: dict[str, float] = {}  # no numeric result of the paper survived (docs/regret.md §12)

Z_MAX = 4.5  # two-sided z threshold for Monte-Carlo identities (many cells x etas are tested)
Z_MIN = 5.0  # one-sided z a claimed sign must reach
SAMPLES = ("R", "dR", "d2R", "t1", "t2")
PER_ETA = ("etas", "dF_path", "dF_path_se", "dF_stein", "dF_stein_se", "diff_z", "T1", "T1_se", "T2", "T2_se",
           "d2F", "d2F_se")
PER_CELL = ("eta_star", "eta_star_se", "eta_star_stein", "root_diff_z", "d2F_root", "d2F_root_z", "var_ratio_root",
            "T1_root", "T2_root")
TABLE_COLUMNS = ("d", "T", "kappa_star", "kappa_star_stein", "root_diff_z", "var_ratio_root", "d2F_root_z",
                 "T1_root", "T2_root", "kappa_T1_peak")


@dataclasses.dataclass(frozen=True)
class SteinConfig:
    """Cells (d, T), sequences per cell, the kappa = eta sqrt(T) grid, and the sequence stream."""

    ds: tuple[int, ...] = (2, 5, 10)
    Ts: tuple[int, ...] = (25, 100)
    num_sequences: int = 4000
    kappa_min: float = 0.25
    kappa_max: float = 8.0
    num_kappas: int = 24
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
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        seeds.check_stream(self.stream)

    @property
    def kappas(self) -> np.ndarray:
        return rj.scan_kappas(self.kappa_min, self.kappa_max, self.num_kappas)


# Sized on the SCREENING stream (``--set stream=1``): at N = 4000 the smallest z of F''(eta*) was 10.2 (d = 10,
# T = 100; 14.9 at N = 8000) and of the two dominance claims 31, so every claimed z > 5 holds with margin.
QUICK = SteinConfig()
FULL = SteinConfig(ds=(2, 5, 10, 20), Ts=(25, 100, 400), num_sequences=40_000, num_kappas=40)


def _mean_se(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the leading (sequence) axis."""
    return np.mean(x, axis=0), np.std(x, axis=0, ddof=1) / np.sqrt(x.shape[0])


def _at(x: np.ndarray, etas: np.ndarray, eta: float) -> np.ndarray:
    """Each sequence's sample [N, E] linearly interpolated at ``eta`` between its two grid neighbours -> [N]."""
    i = int(np.clip(np.searchsorted(etas, eta) - 1, 0, len(etas) - 2))
    w = (eta - etas[i]) / (etas[i + 1] - etas[i])
    return (1 - w) * x[:, i] + w * x[:, i + 1]


def cell_moments(samples: dict, etas) -> dict[str, np.ndarray]:
    """Per-eta moments (:data:`PER_ETA`) and root quantities (:data:`PER_CELL`) of one cell's samples [N, E].

    The root eta* is :func:`regret_jax.find_root` of the pathwise F' on the grid without eta = 0
    (``eta_star_stein``: of the Stein F'); F'', the variance ratio and T1, T2 at eta* are read from
    the per-sequence interpolation :func:`_at`. ``root_diff_z``: (Stein root - pathwise root) over
    se(paired difference of the F' samples at eta*) / F''(eta*).
    """
    s = {k: np.asarray(samples[k], np.float64) for k in SAMPLES}
    etas = np.asarray(etas, np.float64)
    path, stein = 2 * s["R"] * s["dR"], 2 * (s["t1"] - s["t2"])
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
    d2F_root, d2F_root_se = _mean_se(_at(curv, etas, eta_star))
    pair_se = _mean_se(_at(stein - path, etas, eta_star))[1]
    out.update(
        d2F_root=d2F_root, d2F_root_z=d2F_root / d2F_root_se,
        root_diff_z=(out["eta_star_stein"] - eta_star) / (pair_se / d2F_root),
        var_ratio_root=np.var(_at(stein, etas, eta_star), ddof=1) / np.var(_at(path, etas, eta_star), ddof=1),
        T1_root=np.mean(_at(s["t1"], etas, eta_star)), T2_root=np.mean(_at(s["t2"], etas, eta_star)),
    )
    return {k: np.asarray(v) for k, v in out.items()}


def compute(config: SteinConfig, ctx: RunContext) -> dict:
    """``{"cells": {d, T}, "terms": {PER_ETA [C, E]}, "root": {PER_CELL [C]}}``, cells d (outer), T (inner)."""
    cells = [(d, T) for d in config.ds for T in config.Ts]
    moments = []
    for d, T in cells:
        etas = rj.scan_etas(T, config.kappas)
        keys = rj.scan_keys(d, T, config.num_sequences, config.stream)
        samples = seeds.mapped(ctx, f"stein_d{d}_T{T}", stein_sample(d, T, etas), keys,
                               min(config.chunk_size, config.num_sequences), d=d, T=T)
        moments.append(cell_moments(samples, etas))
    return {
        "cells": {"d": np.asarray([c[0] for c in cells]), "T": np.asarray([c[1] for c in cells])},
        "terms": {k: np.stack([m[k] for m in moments]) for k in PER_ETA},
        "root": {k: np.asarray([m[k] for m in moments]) for k in PER_CELL},
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
            "d2F_root_z": np.asarray(root["d2F_root_z"]), "T1_root": np.asarray(root["T1_root"]),
            "T2_root": np.asarray(root["T2_root"]),
            "kappa_T1_peak": etas[np.arange(len(d)), np.argmax(np.asarray(terms["T1"]), axis=1)] * sqrtT,
            "max_abs_diff_z": np.max(np.abs(np.asarray(terms["diff_z"])), axis=1),
            "min_z_comparator_below": np.array([np.min(-g[m]) if m.any() else np.nan for g, m in zip(gap_z, below)]),
            "min_z_learner_above": np.array([np.min(g[m]) if m.any() else np.nan for g, m in zip(gap_z, above)]),
        }


def summarize(config: SteinConfig, arrays: dict) -> Summary:
    """Per-cell metrics, the five checks (worst cell each) and the per-cell table."""
    rows = cell_rows(arrays)
    metrics = {}
    for i, (d, T) in enumerate(zip(rows["d"], rows["T"])):
        for k in ("kappa_star", "kappa_star_stein", "var_ratio_root", "d2F_root_z", "kappa_T1_peak"):
            metrics[f"{k}_d{d}_T{T}"] = float(rows[k][i])
    metrics["var_ratio_root_max"] = float(np.max(rows["var_ratio_root"]))
    found = [
        checks.below("stein_matches_pathwise_every_eta", float(np.max(rows["max_abs_diff_z"])), Z_MAX,
                     claim="the Stein form (12) and the pathwise form (24) estimate the same F'(eta)"),
        checks.below("stein_root_matches_pathwise_root", float(np.max(np.abs(rows["root_diff_z"]))), Z_MAX),
        checks.above("comparator_term_dominates_below_half_root", float(np.min(rows["min_z_comparator_below"])), Z_MIN,
                     claim="for small eta the comparator term T2 dominates the learner-response term T1 (F' < 0)"),
        checks.above("learner_term_dominates_above_twice_root", float(np.min(rows["min_z_learner_above"])), Z_MIN,
                     claim="at the 1/sqrt(T) scale above the root the learner-response term T1 dominates (F' > 0)"),
        checks.above("curvature_positive_at_root", float(np.min(rows["d2F_root_z"])), Z_MIN,
                     claim="Proposition 1: F''(eta*) > 0, eta* is a strict local minimiser of F along the ray"),
    ]
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
    summary="Eq. (12) / Prop. 1: Stein vs pathwise F'(eta), its terms T1, T2, and F''(eta*) > 0",
    config_type=SteinConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None,
))

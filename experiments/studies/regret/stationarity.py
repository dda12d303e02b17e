"""Study ``regret.stationarity``: the Theorem-1 scan of F(eta) = E[R(eta)^2] (Figure 1; docs/regret.md §5-6) of
"Training with (Swap) Regret Loss in a Single-Layer Self-Attention Model: A Case Study on the Probability Simplex".

For every (d, T) cell, N Gaussian sequences are drawn once and R(eta), R'(eta) of
Eqs. (23)-(24) are evaluated on one grid eta = kappa / sqrt(T) (common random numbers),
plus eta = 0 for the exact values of docs/regret.md §5.4. Each cell is one compiled
program (its own shape): ``sweep_map`` vmaps the estimator over sequences (the eta grid is
vectorised inside) and shards, chunks and checkpoints them. The root eta* of F' and its
standard error come from :func:`regret_jax.scan_moments`. At one designated cell the
block-gradient structure of docs/regret.md §5.3 is checked at eta*, the same for the d-head
swap model of Theorem 2 (docs/regret.md §10.4), and Phi' = d F' (docs/regret.md §10.5), both
with d independent Gaussian blocks. The Monte-Carlo sequences are
not seeds (each cell draws its own from ``seed``), so the study has no ``--seeds``.

No number of the paper survived (docs/regret.md §12), so ``PAPER`` is empty and every
check tests a qualitative claim or an exact identity. Checks, and how each could fail:

* ``one_sign_change_every_cell`` (== 0): F' must change sign exactly once on the grid in
  every cell; a second root (or none inside [0.25, 8] / sqrt(T)) fails it.
* ``kappa_star_constant_in_T`` (max z < 4.5): eta* sqrt(T) must not depend on T for fixed
  d; a root scaling other than T^(-1/2) gives a T trend of many standard errors.
* ``kappa_star_monotone_in_d`` (every step > -2 se) and ``kappa_star_grows_in_d`` (> 3 se):
  kappa* must grow with d, a flat or decreasing kappa*(d) fails them.
* ``F0_exact``, ``dF0_exact``, ``mean_regret_is_sqrtT_mu_d`` (z < 4.5): the Monte-Carlo F(0),
  F'(0) and E[R] against the closed forms of docs/regret.md §5.4 and Proposition 5; a wrong
  estimator, sampler or closed form fails them.
* ``gradient_vanishes_at_eta_star`` (z < 4.5): every block gradient of R^2 at eta* is zero in
  expectation, i.e. eta* is a stationary point of the full model, not only of the ray.
* ``gradient_along_P_at_half_eta_star`` (|z| > 5) and ``gradient_off_P_vanishes_at_half_eta_star``
  (z < 4.5): off the root the gradient is alpha P with alpha != 0 and nothing else.
* ``multihead_phi_prime_is_d_F_prime`` (z < 4.5): the d-head swap objective's derivative is d
  times the single-head one (Eqs. (59)-(60)), so the two roots coincide.
* ``swap_gradient_vanishes_at_eta_star`` (z < 4.5): Theorem 2, the gradient of the swap loss (10)
  at the Blum-Mansour configuration V_j = e_j^T (x) (-eta* P) vanishes in every block: each
  head's alpha_j (its diagonal value block along P), the off-diagonal value blocks V_j[:, block
  k != j], the diagonal blocks off P, k_j, v_j, and the spread of alpha_j over heads (b_j =
  -eta (d - 1) alpha_j pointwise, so it is covered). A head that reads another head's block, a
  swap root other than eta*, or a bug breaking the head symmetry fails it. The alpha z-scores
  also count the Monte-Carlo error of eta* (the centred swap gradient is precise enough that
  the root's own error would otherwise dominate).
* ``swap_gradient_along_P_at_half_eta_star`` (|z| > 5 for every head) and
  ``swap_gradient_off_P_vanishes_at_half_eta_star`` (z < 4.5): off the root every head's
  diagonal block is alpha P with alpha != 0, one alpha for all heads, and every other block is zero.

Reported, not checked: the growth ratio kappa*(d_max) / kappa*(d_min) (``kappa_growth_ratio``) beside the Hedge
scale sqrt(ln d_max / ln d_min) and the sqrt(d) scale sqrt(d_max / d_min). It was the check
``kappa_star_growth_is_slow`` (below the two scales' geometric mean, 2.02 at ds 2..10), demoted because it had no
power: the paper's claim is polylogarithmic growth (eta* = Theta~(1/sqrt(T))), which sqrt(ln d) growth satisfies by
definition, so no arm the claim must exclude grows slower than the Hedge scale, and growth 10% short of sqrt(d)
also passed it. The statement that does discriminate, kappa* growing slower than sqrt(2 ln d) (the ratio
kappa* / sqrt(2 ln d) falling in d, which sqrt(ln d) growth fails), is ``regret.limit``'s
``hedge_ratio_decreases_in_d``, on the continuous-time limit up to d = 100.

The pointwise shift invariance 1^T grad_V = 0 (and 1^T grad_{V_j} = 0 for every head) holds by
construction (J 1 = 0) and is a test (``tests/regret_jax/test_regret_stationarity.py``); its
relative size is reported as the metrics ``struct_colsum_V_rel_star`` and
``struct_swap_colsum_V_rel_star``, not checked.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from regret_jax.stationarity import swap_block_gradients
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register

PAPER: dict[str, float] = {}  # no numeric result of the paper survived (docs/regret.md §12)

Z_MAX = 4.5  # two-sided z threshold for Monte-Carlo identities (many cells x etas are tested)
ROOT_COLUMNS = ("d", "T", "eta_star", "kappa_star", "se", "sign_changes")
SWAP_OFF_P = ("z_max_alpha_spread", "z_max_V_offdiag", "z_max_V_offray", "z_max_k", "z_max_v")  # swap_structure keys
SWAP_STAR = ("z_max_alpha_head", *SWAP_OFF_P)


@dataclasses.dataclass(frozen=True)
class ScanConfig:
    """Sizes of the scan. ``kappas`` is the grid of kappa = eta sqrt(T); ``seed`` draws the sequences."""

    ds: tuple[int, ...] = (2, 3, 5, 10)
    Ts: tuple[int, ...] = (25, 50, 100)
    num_sequences: int = 16_000
    kappa_min: float = 0.25
    kappa_max: float = 8.0
    num_kappas: int = 40
    chunk_size: int = rj.SCAN_CHUNK
    structure_cell: tuple[int, int] = (5, 50)  # (d, T) for the block-gradient and Phi' checks
    structure_sequences: int = 8000
    seed: int = 0

    def __post_init__(self):
        if not self.ds or min(self.ds) < 2:
            raise ValueError(f"ds must be non-empty with every d >= 2, got {self.ds}")
        if len(self.ds) < 2 or list(self.ds) != sorted(set(self.ds)):
            raise ValueError(f"ds must hold at least 2 distinct increasing dimensions (growth in d is checked), got {self.ds}")
        if not self.Ts or min(self.Ts) < 2:
            raise ValueError(f"Ts must be non-empty with every T >= 2, got {self.Ts}")
        if self.num_sequences < 100:
            raise ValueError(f"num_sequences must be >= 100, got {self.num_sequences}")
        if not 0 < self.kappa_min < self.kappa_max:
            raise ValueError(f"need 0 < kappa_min < kappa_max, got {self.kappa_min}, {self.kappa_max}")
        if self.num_kappas < 8:
            raise ValueError(f"num_kappas must be >= 8, got {self.num_kappas}")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")
        if self.structure_cell[0] < 2 or self.structure_cell[1] < 2:
            raise ValueError(f"structure_cell must have d >= 2 and T >= 2, got {self.structure_cell}")
        if self.structure_cell[0] not in self.ds:
            raise ValueError(f"structure_cell d = {self.structure_cell[0]} must be one of ds = {self.ds}")
        if self.structure_sequences < 100:
            raise ValueError(f"structure_sequences must be >= 100, got {self.structure_sequences}")

    @property
    def kappas(self) -> np.ndarray:
        return rj.scan_kappas(self.kappa_min, self.kappa_max, self.num_kappas)


QUICK = ScanConfig(ds=(2, 3, 5, 10), Ts=(25, 50, 100), num_sequences=16_000, structure_sequences=6000)
FULL = ScanConfig(
    ds=(2, 3, 5, 10, 20, 50, 100), Ts=(25, 50, 100, 200, 400, 800), num_sequences=40_000,
    structure_cell=(10, 100), structure_sequences=20_000,
)


def scan_cell(config: ScanConfig, d: int, T: int, ctx: RunContext) -> dict[str, np.ndarray]:
    """:func:`regret_jax.scan` of one (d, T) cell, its sequences run by a checkpointed ``sweep_map``."""
    return rj.scan(d, T, config.num_sequences, seeds.map_fn(ctx, f"scan_d{d}_T{T}", d=d, T=T),
                   kappas=config.kappas, seed=config.seed, chunk_size=config.chunk_size)


def structure_checks(config: ScanConfig, eta_star: float, eta_star_se: float) -> dict[str, float]:
    """docs/regret.md §5.3 block gradients at eta* (and at eta*/2, where they must not vanish), the same for the
    d-head swap model (§10.4, :func:`swap_structure`; ``eta_star_se`` is the standard error of eta*), and Phi' = d F' (§10.5)."""
    d, T = config.structure_cell
    N = config.structure_sequences
    key = jax.random.fold_in(jax.random.key(config.seed), 7)
    losses = rj.flat_normal(key, (N, T, d))
    P = np.eye(d) - 1.0 / d
    out = {}
    grad_fn = jax.jit(jax.vmap(rj.block_gradients, in_axes=(0, None)))
    for tag, eta in (("star", eta_star), ("half", eta_star / 2)):
        g = jax.tree.map(np.asarray, grad_fn(losses, eta))
        z = {k: np.mean(v, 0) / (np.std(v, 0, ddof=1) / np.sqrt(N)) for k, v in g.items()}
        alpha = g["V"].reshape(N, -1) @ P.reshape(-1) / (d - 1)
        out[f"z_alpha_{tag}"] = float(np.mean(alpha) / (np.std(alpha, ddof=1) / np.sqrt(N)))
        out[f"z_max_v_{tag}"] = float(np.max(np.abs(z["v"])))
        out[f"z_max_k_{tag}"] = float(np.max(np.abs(z["k"])))
        resid = g["V"] - alpha[:, None, None] * P
        out[f"z_max_V_offray_{tag}"] = float(np.max(np.abs(np.mean(resid, 0) / (np.std(resid, 0, ddof=1) / np.sqrt(N) + 1e-30))))
        out[f"colsum_V_rel_{tag}"] = float(np.max(np.abs(g["V"].sum(axis=1))) / np.max(np.abs(g["V"])))
    blocks = rj.flat_normal(jax.random.fold_in(key, 1), (N, T, d, d))
    out.update(swap_structure(blocks, eta_star, eta_star_se))
    etas = jnp.asarray(config.kappas / np.sqrt(T), jnp.float32)
    S, dS = jax.jit(jax.vmap(rj.swap_ray_regret, in_axes=(0, None)))(blocks, etas)
    R, dR = jax.jit(jax.vmap(jax.vmap(rj.ray_regret, in_axes=(0, None)), in_axes=(2, None)))(blocks, etas)
    phi = jax.tree.map(np.asarray, rj.ray_estimate(S, dS))
    single = jax.tree.map(np.asarray, rj.ray_estimate(R.reshape(d * N, -1), dR.reshape(d * N, -1)))
    diff = 2 * S * dS - d * 2 * np.mean(np.asarray(R * dR), axis=0)  # per-sequence Phi' sample minus d * pooled F'
    diff_se = np.std(np.asarray(diff), axis=0, ddof=1) / np.sqrt(N)
    out["z_max_phi"] = float(np.max(np.abs((phi.dF - d * single.dF) / diff_se)))
    phi_root = rj.find_root(etas, jnp.asarray(phi.dF), jnp.asarray(phi.dF_se))
    single_root = rj.find_root(etas, jnp.asarray(single.dF), jnp.asarray(single.dF_se))
    out["phi_kappa_star"] = float(phi_root.eta * np.sqrt(T))
    out["phi_kappa_se"] = float(phi_root.se * np.sqrt(T))
    out["single_kappa_star"] = float(single_root.eta * np.sqrt(T))
    out["single_kappa_se"] = float(single_root.se * np.sqrt(T))
    return out


def swap_structure(blocks: jax.Array, eta_star: float, eta_star_se: float) -> dict[str, float]:
    """docs/regret.md §10.4: the d-head swap loss's block gradients at eta* and eta*/2 on block inputs [N, T, d, d].

    :func:`regret_jax.stationarity.swap_block_gradients` centred at E[sum_j R_j] = d sqrt(T) mu_d
    (same mean, lower variance, docs/regret.md §4.4), reduced on the device. Per eta:
    ``z_alpha`` (alpha pooled over heads), ``z_min_alpha_head`` / ``z_max_alpha_head`` (the
    smallest / largest |z| of one head's alpha), ``z_max_alpha_spread`` (each head's alpha minus
    the heads' mean: one alpha for all heads), ``z_max_V_offdiag`` (V_j on input block k != j),
    ``z_max_V_offray`` (V_j on block j minus alpha_j P), ``z_max_k``, ``z_max_v``, and
    ``colsum_V_rel`` (the largest pointwise column sum of a V_j, relative to its largest entry).
    The alpha z-scores also count the Monte-Carlo error of eta* itself: ``alpha_root_se`` =
    |d alpha / d eta| se(eta*), the slope the secant between eta*/2 and eta* of the pooled alpha.
    """
    N, T, d, _ = blocks.shape
    P = jnp.eye(d) - 1.0 / d
    offset = d * np.sqrt(T) * rj.mu_d(d)
    heads, others = np.nonzero(~np.eye(d, dtype=bool))

    def mean_se(x):
        return jnp.mean(x, 0), jnp.std(x, 0, ddof=1) / np.sqrt(N) + 1e-30

    def max_abs_z(x):
        m, se = mean_se(x)
        return jnp.max(jnp.abs(m / se))

    @jax.jit
    def statistics(blocks, eta):  # blocks as an argument, not a compiled-in constant
        g = jax.vmap(swap_block_gradients, in_axes=(0, None, None))(blocks, eta, offset)
        V = g["V"].reshape(N, d, d, d, d)  # [sequence, head j, row, input block k, column]
        diag = jnp.swapaxes(V[:, jnp.arange(d), :, jnp.arange(d), :], 0, 1)  # [N, j, row, column]: block k = j
        alpha = jnp.einsum("njac,ac->nj", diag, P) / (d - 1)  # [N, heads]
        return {
            "alpha": mean_se(alpha), "alpha_pooled": mean_se(alpha.mean(1)),
            "z_max_alpha_spread": max_abs_z(alpha - alpha.mean(1, keepdims=True)),
            "z_max_V_offdiag": max_abs_z(jnp.swapaxes(V[:, heads, :, others, :], 0, 1)),
            "z_max_V_offray": max_abs_z(diag - alpha[..., None, None] * P),
            "z_max_k": max_abs_z(g["k"]), "z_max_v": max_abs_z(g["v"]),
            "colsum_V_rel": jnp.max(jnp.abs(V.sum(axis=2))) / jnp.max(jnp.abs(V)),
        }

    stats = {tag: jax.tree.map(np.asarray, statistics(blocks, jnp.float32(eta)))
             for tag, eta in (("star", eta_star), ("half", eta_star / 2))}
    slope = (stats["star"]["alpha_pooled"][0] - stats["half"]["alpha_pooled"][0]) / (eta_star / 2)
    root_se = float(abs(slope) * eta_star_se)
    out = {"swap_alpha_root_se": root_se}
    for tag, st in stats.items():
        (head, head_se), (pooled, pooled_se) = st.pop("alpha"), st.pop("alpha_pooled")
        z_head = np.abs(head) / np.hypot(head_se, root_se)
        out.update({f"swap_{k}_{tag}": float(v) for k, v in st.items()})
        out[f"swap_z_alpha_{tag}"] = float(pooled / np.hypot(pooled_se, root_se))
        out[f"swap_z_min_alpha_head_{tag}"], out[f"swap_z_max_alpha_head_{tag}"] = float(z_head.min()), float(z_head.max())
    return out


def compute(config: ScanConfig, ctx: RunContext) -> dict:
    """``{"cells": {d, T}, "ray": {moments [C, 1 + K]}, "root": {eta_star, se, sign_changes}, "structure": {...}}``.

    Cells are in the order d (outer), T (inner); the structure checks run at the root of
    ``structure_cell`` if it is a cell of the grid, else at mean kappa*(d) / sqrt(T).
    """
    cells = [(d, T) for d in config.ds for T in config.Ts]
    scans = [scan_cell(config, d, T, ctx) for d, T in cells]
    per_eta = ("etas", "F", "F_se", "dF", "dF_se", "mean_R", "mean_R_se")
    ray = {k: np.stack([s[k] for s in scans]) for k in per_eta}
    root = {k: np.asarray([s[k] for s in scans]) for k in ("eta_star", "se", "sign_changes")}
    d_s, T_s = config.structure_cell
    if config.structure_cell in cells:
        i = cells.index(config.structure_cell)
        eta_s, eta_se = float(root["eta_star"][i]), float(root["se"][i])
    else:
        sel = [i for i, (d, T) in enumerate(cells) if d == d_s]
        kappa, kappa_se = (np.asarray([root[k][i] * np.sqrt(cells[i][1]) for i in sel]) for k in ("eta_star", "se"))
        eta_s, eta_se = float(np.mean(kappa)) / np.sqrt(T_s), float(np.sqrt(np.sum(kappa_se**2)) / len(sel)) / np.sqrt(T_s)
    structure = structure_checks(config, eta_s, eta_se)
    return {
        "cells": {"d": np.asarray([c[0] for c in cells]), "T": np.asarray([c[1] for c in cells])},
        "ray": ray, "root": root, "structure": {k: np.asarray(v) for k, v in structure.items()},
    }


def cell_rows(arrays: dict) -> dict[str, np.ndarray]:
    """Per cell: d, T, the root (eta*, kappa* = eta* sqrt(T), se and kappa se), sign changes, and the exact-value z-scores."""
    d, T = np.asarray(arrays["cells"]["d"]), np.asarray(arrays["cells"]["T"])
    ray, root = arrays["ray"], arrays["root"]
    sqrtT = np.sqrt(T)
    mu = np.asarray([rj.mu_d(int(x)) for x in d])
    F0 = np.asarray([rj.exact_F0(int(a), int(b)) for a, b in zip(d, T)])
    dF0 = np.asarray([rj.exact_dF0(int(a), int(b)) for a, b in zip(d, T)])
    mean_R, mean_R_se = np.asarray(ray["mean_R"], np.float64), np.asarray(ray["mean_R_se"], np.float64)
    return {
        "d": d, "T": T, "eta_star": np.asarray(root["eta_star"], np.float64),
        "kappa_star": np.asarray(root["eta_star"], np.float64) * sqrtT, "se": np.asarray(root["se"], np.float64),
        "kappa_se": np.asarray(root["se"], np.float64) * sqrtT, "sign_changes": np.asarray(root["sign_changes"]),
        "z_F0": (np.asarray(ray["F"])[:, 0] - F0) / np.asarray(ray["F_se"])[:, 0],
        "z_dF0": (np.asarray(ray["dF"])[:, 0] - dF0) / np.asarray(ray["dF_se"])[:, 0],
        "z_mean_R": np.max(np.abs(mean_R - (sqrtT * mu)[:, None]) / mean_R_se, axis=1),
    }


def summarize(config: ScanConfig, arrays: dict) -> Summary:
    """kappa*(d) as the inverse-variance mean over T, its constancy in T and growth in d, and the identities."""
    rows = cell_rows(arrays)
    st = {k: float(v) for k, v in arrays["structure"].items()}
    kbar, kbar_se, z_T = {}, {}, []
    for d in config.ds:
        sel = rows["d"] == d
        w = 1 / rows["kappa_se"][sel] ** 2
        k = rows["kappa_star"][sel]
        kbar[d], kbar_se[d] = float(np.sum(w * k) / np.sum(w)), float(1 / np.sqrt(np.sum(w)))
        z_T += list(np.abs(k - kbar[d]) * np.sqrt(w))  # deviation from the per-d mean, in standard errors
    steps = [(kbar[b] - kbar[a]) / np.hypot(kbar_se[a], kbar_se[b]) for a, b in zip(config.ds[:-1], config.ds[1:])]
    d_lo, d_hi = config.ds[0], config.ds[-1]
    growth = kbar[d_hi] / kbar[d_lo]
    hedge, sqrt_d = np.sqrt(np.log(d_hi) / np.log(d_lo)), np.sqrt(d_hi / d_lo)
    growth_z = (kbar[d_hi] - kbar[d_lo]) / np.hypot(kbar_se[d_hi], kbar_se[d_lo])

    metrics = {f"kappa_star_d{d}": kbar[d] for d in config.ds}
    metrics.update({f"kappa_star_se_d{d}": kbar_se[d] for d in config.ds})
    metrics.update({f"struct_{k}": v for k, v in st.items()})
    metrics["kappa_growth_ratio"] = float(growth)
    metrics.update(kappa_growth_hedge_scale=float(hedge), kappa_growth_sqrt_d_scale=float(sqrt_d))
    grad_star = max(abs(st["z_alpha_star"]), st["z_max_v_star"], st["z_max_k_star"], st["z_max_V_offray_star"])
    found = [
        checks.equals("one_sign_change_every_cell", float(np.max(np.abs(rows["sign_changes"] - 1))), 0,
                      claim="F'(eta) has exactly one sign change, a unique root eta*, in every (d, T) cell"),
        checks.below("kappa_star_constant_in_T", float(np.max(z_T)), Z_MAX,
                     claim="eta* scales as 1/sqrt(T): kappa* = eta* sqrt(T) is constant in T"),
        checks.above("kappa_star_monotone_in_d", float(min(steps)), -2.0),
        checks.above("kappa_star_grows_in_d", float(growth_z), 3.0),
        checks.below("F0_exact", float(np.max(np.abs(rows["z_F0"]))), Z_MAX),
        checks.below("dF0_exact", float(np.max(np.abs(rows["z_dF0"]))), Z_MAX),
        checks.below("mean_regret_is_sqrtT_mu_d", float(np.max(rows["z_mean_R"])), Z_MAX),
        checks.below("gradient_vanishes_at_eta_star", float(grad_star), Z_MAX,
                     claim="k = 0, v = 0, V = -eta* P is a stationary point of the regret loss (every block gradient is 0)"),
        checks.above("gradient_along_P_at_half_eta_star", abs(st["z_alpha_half"]), 5.0),
        checks.below("gradient_off_P_vanishes_at_half_eta_star", max(st["z_max_V_offray_half"], st["z_max_v_half"]), Z_MAX),
        checks.below("multihead_phi_prime_is_d_F_prime", st["z_max_phi"], Z_MAX),
        checks.below("swap_gradient_vanishes_at_eta_star", max(st[f"swap_{k}_star"] for k in SWAP_STAR), Z_MAX,
                     claim="Theorem 2: the Blum-Mansour configuration at eta* is a stationary point of the swap loss (10)"),
        checks.above("swap_gradient_along_P_at_half_eta_star", st["swap_z_min_alpha_head_half"], 5.0),
        checks.below("swap_gradient_off_P_vanishes_at_half_eta_star", max(st[f"swap_{k}_half"] for k in SWAP_OFF_P), Z_MAX),
    ]
    table = {
        "d": list(config.ds), "kappa_star": [kbar[d] for d in config.ds], "kappa_star_se": [kbar_se[d] for d in config.ds],
        "hedge_sqrt_2_ln_d": [float(np.sqrt(2 * np.log(d))) for d in config.ds],
    }
    roots = {k: rows[k] for k in ROOT_COLUMNS}
    return Summary(metrics=metrics, checks=found, tables={"table": table, "roots": roots})


def _figure(rows: dict, path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ds = sorted(set(rows["d"].tolist()))
    for d in ds:
        sel = rows["d"] == d
        ax1.errorbar(rows["T"][sel], rows["eta_star"][sel], yerr=rows["se"][sel], marker="o", label=f"d={d}")
    Ts = np.array(sorted(set(rows["T"].tolist())), float)
    ax1.plot(Ts, 2 / np.sqrt(Ts), "k--", label=r"$\propto T^{-1/2}$")
    ax1.set(xscale="log", yscale="log", xlabel="T", ylabel=r"$\eta^*$", title=r"root of $F'(\eta)$")
    ax1.legend(fontsize=7)
    kbar = [np.mean(rows["kappa_star"][rows["d"] == d]) for d in ds]
    ax2.plot(ds, kbar, "o-", label=r"mean over T of $\eta^*\sqrt{T}$")
    dd = np.geomspace(2, max(ds), 50)
    ax2.plot(dd, np.sqrt(2 * np.log(dd)), "k--", label=r"Hedge $\sqrt{2\ln d}$")
    ax2.set(xscale="log", xlabel="d", ylabel=r"$\kappa^*$")
    ax2.legend(fontsize=7)
    io.save_figure(fig, path)


def write(config: ScanConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``curves.npz`` (per cell ``d{d}_T{T}``: rows etas, F, F', se(F')) and ``eta_star.png`` (``roots.csv`` is a table)."""
    cells, ray = arrays["cells"], arrays["ray"]
    io.save_npz(out_dir / "curves.npz", **{
        f"d{d}_T{T}": np.stack([ray["etas"][i], ray["F"][i], ray["dF"][i], ray["dF_se"][i]])
        for i, (d, T) in enumerate(zip(cells["d"], cells["T"]))
    })
    _figure(cell_rows(arrays), out_dir / "eta_star.png")


STUDY = register(Study(
    name="regret.stationarity",
    summary="Theorem 1 / Fig. 1: root eta* of F'(eta) along V=-eta P, eta* sqrt(T) vs d and T",
    config_type=ScanConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None,
))

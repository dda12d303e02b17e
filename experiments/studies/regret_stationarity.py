"""Study ``regret.stationarity``: the Theorem-1 scan of F(eta) = E[R(eta)^2] (paper Figure 1, spec 5-6).

For every (d, T) cell, N Gaussian sequences are drawn once and R(eta), R'(eta) of
Eqs. (23)-(24) are evaluated on one grid eta = kappa / sqrt(T) (common random numbers),
plus eta = 0 for the exact values of spec 5.4.  Each cell is one compiled program
(its own shape): ``sweep_map`` vmaps the estimator over sequences (the eta grid is
vectorised inside) and shards/chunks/checkpoints them.  The root eta* of F' and its
standard error come from :func:`regret_jax.find_root`.  At one designated cell the
block-gradient structure of spec 5.3 is checked at eta*, and Phi' = d F' (spec 10.5)
with d independent Gaussian blocks.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import regret_jax as rj  # noqa: E402
from experiments import benchmark, io, sweep  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, bench, study  # noqa: E402

Z_MAX = 4.5  # two-sided z threshold for Monte-Carlo identities (many cells x etas are tested)


@dataclasses.dataclass(frozen=True)
class ScanConfig:
    """Sizes of the scan.  ``kappas`` is the grid of kappa = eta sqrt(T)."""

    ds: tuple[int, ...]
    Ts: tuple[int, ...]
    num_sequences: int
    kappa_min: float = 0.25
    kappa_max: float = 8.0
    num_kappas: int = 40
    chunk_size: int = 4000
    structure_cell: tuple[int, int] = (5, 50)  # (d, T) for the block-gradient and Phi' checks
    structure_sequences: int = 8000
    seed: int = 0

    def __post_init__(self):
        if not self.ds or min(self.ds) < 2:
            raise ValueError(f"ds must be non-empty with every d >= 2, got {self.ds}")
        if not self.Ts or min(self.Ts) < 2:
            raise ValueError(f"Ts must be non-empty with every T >= 2, got {self.Ts}")
        if self.num_sequences < 100:
            raise ValueError(f"num_sequences must be >= 100, got {self.num_sequences}")
        if not 0 < self.kappa_min < self.kappa_max:
            raise ValueError(f"need 0 < kappa_min < kappa_max, got {self.kappa_min}, {self.kappa_max}")
        if self.num_kappas < 8:
            raise ValueError(f"num_kappas must be >= 8, got {self.num_kappas}")
        if self.structure_cell[0] < 2 or self.structure_cell[1] < 2:
            raise ValueError(f"structure_cell must have d >= 2 and T >= 2, got {self.structure_cell}")

    @property
    def kappas(self) -> np.ndarray:
        return np.geomspace(self.kappa_min, self.kappa_max, self.num_kappas)


QUICK = ScanConfig(ds=(2, 3, 5, 10), Ts=(25, 50, 100), num_sequences=16_000, structure_sequences=6000)
FULL = ScanConfig(
    ds=(2, 3, 5, 10, 20, 50, 100), Ts=(25, 50, 100, 200, 400, 800), num_sequences=40_000,
    structure_cell=(10, 100), structure_sequences=20_000,
)


def scan_cell(config: ScanConfig, d: int, T: int, ckpt_dir=None, resume: bool = False):
    """R and R' [N, 1 + K] at eta = 0 and eta = kappa/sqrt(T) for one (d, T) cell, via ``sweep_map``."""
    etas = jnp.asarray(np.concatenate([[0.0], config.kappas / np.sqrt(T)]), jnp.float32)

    def one_sequence(key):
        return rj.ray_regret(jax.random.normal(key, (T, d)), etas)

    keys = jax.random.key_data(jax.random.split(jax.random.fold_in(jax.random.key(config.seed), 1000 * d + T),
                                                config.num_sequences))
    res = sweep.sweep_map(
        lambda k: one_sequence(jax.random.wrap_key_data(k)), keys, chunk_size=config.chunk_size,
        ckpt_dir=ckpt_dir, fingerprint={"d": d, "T": T, **dataclasses.asdict(config)}, resume=resume,
        desc=f"scan d={d} T={T}",
    )
    return res.outputs, np.asarray(etas), res.compile_s


def summarise_cell(R: np.ndarray, dR: np.ndarray, etas: np.ndarray, d: int, T: int) -> dict:
    """Root, exact-value and Proposition-5 statistics of one cell."""
    est = rj.ray_estimate(jnp.asarray(R), jnp.asarray(dR))
    est = jax.tree.map(np.asarray, est)
    root = jax.tree.map(np.asarray, rj.find_root(jnp.asarray(etas[1:]), jnp.asarray(est.dF[1:]), jnp.asarray(est.dF_se[1:])))
    F0_se = np.std(R[:, 0] ** 2, ddof=1) / np.sqrt(R.shape[0])
    return {
        "d": d, "T": T, "eta_star": float(root.eta), "kappa_star": float(root.eta * np.sqrt(T)),
        "se": float(root.se), "kappa_se": float(root.se * np.sqrt(T)), "sign_changes": int(root.sign_changes),
        "z_F0": float((est.F[0] - rj.exact_F0(d, T)) / F0_se),
        "z_dF0": float((est.dF[0] - rj.exact_dF0(d, T)) / est.dF_se[0]),
        "z_mean_R": float(np.max(np.abs(est.mean_R - np.sqrt(T) * rj.mu_d(d)) / est.mean_R_se)),
        "F_curve": est.F, "dF_curve": est.dF, "dF_se_curve": est.dF_se,
    }


def root_at(d: int, T: int, num_sequences: int, ckpt_dir=None, resume: bool = False) -> tuple[dict, float]:
    """The Theorem-1 root eta* at one (d, T) cell, for studies that compare with FTRL at eta*.

    Returns (the :func:`summarise_cell` row, compile seconds).  Uses the default grid of
    :class:`ScanConfig`, with the chunk capped at ``num_sequences`` (a size that does
    not depend on the device count).
    """
    config = ScanConfig(ds=(d,), Ts=(T,), num_sequences=num_sequences,
                        chunk_size=min(ScanConfig.chunk_size, num_sequences))
    (R, dR), etas, compile_s = scan_cell(config, d, T, ckpt_dir, resume)
    return summarise_cell(R, dR, etas, d, T), compile_s


def structure_checks(config: ScanConfig, eta_star: float) -> dict:
    """Spec 5.3 block gradients at eta* (and at eta*/2, where they must not vanish) and Phi' = d F' (spec 10.5)."""
    d, T = config.structure_cell
    N = config.structure_sequences
    key = jax.random.fold_in(jax.random.key(config.seed), 7)
    losses = jax.random.normal(key, (N, T, d))
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
    blocks = jax.random.normal(jax.random.fold_in(key, 1), (N, T, d, d))
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


def _figure(rows: list[dict], path) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ds = sorted({r["d"] for r in rows})
    for d in ds:
        rs = [r for r in rows if r["d"] == d]
        ax1.errorbar([r["T"] for r in rs], [r["eta_star"] for r in rs], yerr=[r["se"] for r in rs], marker="o", label=f"d={d}")
    Ts = np.array(sorted({r["T"] for r in rows}), float)
    ax1.plot(Ts, 2 / np.sqrt(Ts), "k--", label=r"$\propto T^{-1/2}$")
    ax1.set(xscale="log", yscale="log", xlabel="T", ylabel=r"$\eta^*$", title=r"root of $F'(\eta)$")
    ax1.legend(fontsize=7)
    kbar = [np.mean([r["kappa_star"] for r in rows if r["d"] == d]) for d in ds]
    ax2.plot(ds, kbar, "o-", label=r"mean over T of $\eta^*\sqrt{T}$")
    dd = np.geomspace(2, max(ds), 50)
    ax2.plot(dd, np.sqrt(2 * np.log(dd)), "k--", label=r"Hedge $\sqrt{2\ln d}$")
    ax2.set(xscale="log", xlabel="d", ylabel=r"$\kappa^*$")
    ax2.legend(fontsize=7)
    io.save_figure(fig, path)
    plt.close(fig)


@study("regret.stationarity", "Theorem 1 / Fig. 1: root eta* of F'(eta) along V=-eta P, eta* sqrt(T) vs d and T")
def run(ctx: RunContext) -> StudyOutput:
    config = QUICK if ctx.quick else FULL
    rows, compile_s = [], 0.0
    curves = {}
    for d in config.ds:
        for T in config.Ts:
            (R, dR), etas, c_s = scan_cell(config, d, T, ctx.checkpoint_dir(f"scan_d{d}_T{T}"), ctx.resume)
            compile_s += c_s
            row = summarise_cell(R, dR, etas, d, T)
            curves[f"d{d}_T{T}"] = np.stack([etas, row.pop("F_curve"), row.pop("dF_curve"), row.pop("dF_se_curve")])
            rows.append(row)
    io.write_csv(ctx.out_dir / "roots.csv", {k: [r[k] for r in rows] for k in ("d", "T", "eta_star", "kappa_star", "se", "sign_changes")})
    io.save_npz(ctx.out_dir / "curves.npz", **curves)
    _figure(rows, ctx.out_dir / "eta_star.png")

    d_s, T_s = config.structure_cell
    cell = [r for r in rows if (r["d"], r["T"]) == (d_s, T_s)]
    eta_s = cell[0]["eta_star"] if cell else float(np.mean([r["kappa_star"] for r in rows if r["d"] == d_s])) / np.sqrt(T_s)
    struct_ = structure_checks(config, eta_s)

    # kappa* constant in T: deviations from the per-d inverse-variance mean, in standard errors
    kbar, kbar_se, z_T = {}, {}, []
    for d in config.ds:
        rs = [r for r in rows if r["d"] == d]
        w = np.array([1 / r["kappa_se"] ** 2 for r in rs])
        k = np.array([r["kappa_star"] for r in rs])
        kbar[d], kbar_se[d] = float(np.sum(w * k) / np.sum(w)), float(1 / np.sqrt(np.sum(w)))
        z_T += list(np.abs(k - kbar[d]) * np.sqrt(w))
    steps = [(kbar[b] - kbar[a]) / np.hypot(kbar_se[a], kbar_se[b]) for a, b in zip(config.ds[:-1], config.ds[1:])]
    d_lo, d_hi = config.ds[0], config.ds[-1]
    growth = kbar[d_hi] / kbar[d_lo]
    growth_cap = float(np.sqrt(np.log(d_hi) / np.log(d_lo)) * 1.5)

    metrics = {f"kappa_star_d{d}": kbar[d] for d in config.ds}
    metrics.update({f"kappa_star_se_d{d}": kbar_se[d] for d in config.ds})
    metrics.update({f"struct_{k}": v for k, v in struct_.items()})
    metrics["kappa_growth_ratio"] = float(growth)
    checks = [
        Check("one_sign_change_every_cell", float(max(abs(r["sign_changes"] - 1) for r in rows)), "== 0 (each cell: exactly one sign change of F')",
              all(r["sign_changes"] == 1 for r in rows)),
        Check("kappa_star_constant_in_T", float(np.max(z_T)), f"max |kappa*(d,T) - mean_T kappa*(d)| / se < {Z_MAX}", bool(np.max(z_T) < Z_MAX)),
        Check("kappa_star_monotone_in_d", float(min(steps)), "every step kappa*(d') - kappa*(d) > -2 se (non-decreasing in d)", bool(min(steps) > -2)),
        Check("kappa_star_grows_in_d", float((kbar[d_hi] - kbar[d_lo]) / np.hypot(kbar_se[d_hi], kbar_se[d_lo])),
              "kappa*(d_max) - kappa*(d_min) > 3 se (growth is real)", bool((kbar[d_hi] - kbar[d_lo]) > 3 * np.hypot(kbar_se[d_hi], kbar_se[d_lo]))),
        Check("kappa_star_growth_is_slow", float(growth), f"kappa*(d_max)/kappa*(d_min) < 1.5 sqrt(ln d_max / ln d_min) = {growth_cap:.3f} (polylog)",
              bool(growth < growth_cap)),
        Check("F0_exact", float(max(abs(r["z_F0"]) for r in rows)), f"max |F_hat(0) - T(E[max Z^2] - 1/d)| / se < {Z_MAX}", bool(max(abs(r["z_F0"]) for r in rows) < Z_MAX)),
        Check("dF0_exact", float(max(abs(r["z_dF0"]) for r in rows)), f"max |F'_hat(0) + (T-1) sqrt(T) mu_d / d| / se < {Z_MAX}", bool(max(abs(r["z_dF0"]) for r in rows) < Z_MAX)),
        Check("mean_regret_is_sqrtT_mu_d", float(max(r["z_mean_R"] for r in rows)), f"max over cells and eta of |mean R - sqrt(T) mu_d| / se < {Z_MAX}",
              bool(max(r["z_mean_R"] for r in rows) < Z_MAX)),
        Check("gradient_vanishes_at_eta_star", float(max(abs(struct_["z_alpha_star"]), struct_["z_max_v_star"], struct_["z_max_k_star"], struct_["z_max_V_offray_star"])),
              f"all block-gradient z-scores at eta* < {Z_MAX} (V ~ alpha P with alpha = 0, v = k = 0)",
              bool(max(abs(struct_["z_alpha_star"]), struct_["z_max_v_star"], struct_["z_max_k_star"], struct_["z_max_V_offray_star"]) < Z_MAX)),
        Check("gradient_along_P_at_half_eta_star", float(abs(struct_["z_alpha_half"])), "|z(alpha)| > 5 at eta*/2 (grad_V = alpha P, alpha != 0 off the root)",
              bool(abs(struct_["z_alpha_half"]) > 5 and struct_["z_max_V_offray_half"] < Z_MAX and struct_["z_max_v_half"] < Z_MAX)),
        Check("grad_V_columns_sum_to_zero", struct_["colsum_V_rel_star"], "pointwise max |1^T grad_V| / max |grad_V| < 1e-5 (float32 rounding)",
              bool(struct_["colsum_V_rel_star"] < 1e-5)),
        Check("multihead_phi_prime_is_d_F_prime", struct_["z_max_phi"], f"max over eta |Phi'_hat - d F'_hat| / se < {Z_MAX}", bool(struct_["z_max_phi"] < Z_MAX)),
    ]
    return StudyOutput(
        config={**dataclasses.asdict(config), "kappas": config.kappas.tolist(), "loss_law": "N(0, I_d)", "estimator": "pathwise Eq. (24)"},
        metrics=metrics, checks=checks, paper={}, compile_s=compile_s,
    )


def _numpy_ray(losses: np.ndarray, etas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same estimator as :func:`regret_jax.ray_regret`, as a plain numpy loop over sequences, etas and rounds."""
    N, T, d = losses.shape
    R, dR = np.zeros((N, len(etas))), np.zeros((N, len(etas)))
    for n in range(N):
        for e, eta in enumerate(etas):
            cum = np.zeros(d)
            for t in range(T):
                pi = np.exp(-eta * (cum - cum.min()))
                pi /= pi.sum()
                R[n, e] += pi @ losses[n, t]
                dR[n, e] -= pi @ (cum * losses[n, t]) - (pi @ cum) * (pi @ losses[n, t])
                cum += losses[n, t]
            R[n, e] -= cum.min()
    return R, dR


@bench("regret.stationarity")
def run_bench(ctx: RunContext) -> dict:
    d, T, N, E = 10, 100, 4096, 32
    etas = np.geomspace(0.25, 8, E) / np.sqrt(T)
    losses = np.random.default_rng(0).normal(size=(N, T, d)).astype(np.float32)
    fn = jax.vmap(rj.ray_regret, in_axes=(0, None))
    vec = benchmark.time_call(fn, jnp.asarray(losses), jnp.asarray(etas, jnp.float32))
    n_loop = 8
    t0 = time.perf_counter()
    _numpy_ray(losses[:n_loop].astype(np.float64), etas)
    loop_s = time.perf_counter() - t0
    vec_rate = N * E / vec["min_s"]
    loop_rate = n_loop * E / loop_s
    return {"d": d, "T": T, "sequences": N, "etas": E, "jax": vec, "numpy_loop_s_for_8_sequences": loop_s,
            "jax_evals_per_s": vec_rate, "numpy_evals_per_s": loop_rate, "speedup": vec_rate / loop_rate}

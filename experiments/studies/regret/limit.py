"""Study ``regret.limit``: the continuous-time limit kappa*_inf(d) of the Theorem-1 root (docs/regret.md §5.7) of
"Training with (Swap) Regret Loss in a Single-Layer Self-Attention Model: A Case Study on the Probability Simplex".

With eta = kappa / sqrt(T) the Gaussian ray model at horizon T is exactly the left-point (Euler / Ito)
discretisation, with step 1/T, of R_inf(kappa) = int_0^1 <softmax(-kappa B_s), dB_s> - min_a B_a(1), and
F(eta)/T = mu_d^2 + G_T(kappa) with G_T -> G_d (docs/regret.md §5.7). Two independent computations:

* the limit: G_d(kappa) and dG_d/dkappa by quadrature in s and in the argmin probabilities q and Monte Carlo
  over Z ~ N(0, I_d) (``regret_jax.limit.limit_scan``), no path simulated; kappa*_inf(d) is the root of dG_d on
  the grid kappa = sqrt(2 ln d) * [0.8, 2.0];
* the discrete model: kappa*(d, T) = sqrt(T) eta* from N Gaussian sequences per (d, T) cell
  (``regret_jax.limit.centred_scan``, the centred estimators of docs/regret.md §4.4) on a narrow grid
  kappa*_inf(d) * [1/1.25, 1.25] whose centre is kappa*_inf(d) itself.

Each (d, T) cell is one ``lax.scan`` over its T rounds (``regret_jax.ray_regret``), vmapped over sequences
by the checkpointed ``sweep_map``, one compiled program per cell. Nested windows of one long sequence
(the regret of its first T rounds) were rejected: a single pass evaluates every (T, kappa) at every round
up to T_max, about 2.7 times the rounds of separate cells for T in {10^2, 10^3, 10^4}, and it makes the
cells of one d correlated, so the combined standard errors of the T comparisons below would be wrong.
Separate cells keep every kappa*(d, T) independent of the others and of kappa*_inf(d).

No number of the paper survived (docs/regret.md §12): ``PAPER`` is empty. Every check is a Monte-Carlo claim judged
over ``num_blocks`` blocks (95% t intervals): block b holds the b-th disjoint block of every limit cell's samples and
of every discrete cell's sequences (all independent draws); per block, the roots are linearised at the root of all
samples (``regret.stationarity``'s ``block_roots``). Checks, their controls, and how each could fail:

* ``kappa_star_matches_limit_at_T_max`` (kappa*(d, T_max) / kappa*_inf(d) - 1, mean over d, within 0 +- 0.05):
  the discrete root converges to the continuous-time one. Control: the Hedge scale sqrt(2 ln d) as the limit. A
  wrong limit (a dropped term of the Clark-Ocone decomposition, a wrong q or s-quadrature) or a root that does not
  scale as T^(-1/2) moves the two apart.
* ``excess_at_root_matches_limit`` (G_T / G_d - 1 at T_max and kappa*_inf, mean over d, within 0 +- 0.1): the
  discrete F(eta)/T - mu_d^2 (the excess over the Jensen bound, mean (R/sqrt(T) - mu_d)^2) at kappa = kappa*_inf(d)
  against G_d(kappa*_inf). F/T >= mu_d^2 holds by Jensen at every T and is not a check; this is the stronger claim
  that the excess converges to the limit's. Control: the discrete excess read at the grid edge 1.25 kappa*_inf(d), a
  wrong root. A wrong G_d (e.g. q or the Ito isometry) fails it.
* ``kappa_inf_grows_in_d`` (smallest step of kappa*_inf along ``ds`` > 0). Control: the Hedge-normalised root
  kappa*_inf / sqrt(2 ln d), which falls. A flat or decreasing step fails it.
* ``hedge_ratio_decreases_in_d`` (smallest decrease of kappa*_inf(d) / sqrt(2 ln d) along ``ds`` > 0): kappa*_inf grows
  slower than the Hedge scale (polylogarithmic growth alone, which sqrt(ln d) satisfies, would not discriminate).
  Control: sqrt(ln d) growth, kappa*_inf(d_min) sqrt(ln d / ln d_min) plus each block's own deviation from the mean
  over blocks (the claim's statistic with the trend removed and the noise kept). That the ratio tends to 1 is
  reported, not checked: the gap kappa*_inf - sqrt(2 ln d) and its fit are a table and metrics (on screening, d up
  to 1000 at 1500 limit samples: the gap falls from 0.73 at d = 2 to 0.021 +- 0.008 at d = 1000, and its fitted
  trend crosses 0 near d = 10^3, so "from above" is not robust).

Reported, not checked: the z statistics of the former checks (``kappa_gap_T_max_z_max_abs``,
``kappa_gap_growth_in_T_z_max``: |gap| at T_max minus at T_min in combined se, demoted because an absolute value of
noisy gaps has no interval over blocks without bias and the T_max claim above holds the convergence).

The gap model (stated, descriptive, weighted least squares): kappa*_inf(d) - sqrt(2 ln d) = a + b ln(ln d),
metrics ``gap_fit_a``, ``gap_fit_b`` with standard errors and ``gap_fit_chi2_dof``. Reported, not checked:
the finite-T excess G_T - G_d at T_min (docs/regret.md §5.7: G_T -> G_d), the largest quadrature error
|1 - sum_a q_a| of the argmin probabilities (``argmin_mass_error``; a test keeps it below 1e-5) and the
largest deviation of any root's sign-change count from 1. E[R'] = 0 is an identity and a test.

At d = 2 (when ``ds`` holds it) the Monte-Carlo root stands beside the deterministic quadrature of
``regret_jax.kappa_star_d2`` (docs/regret.md §5.7, kappa*_inf(2) = 1.89701): ``kappa_inf_d2_quadrature``,
``kappa_inf_d2_minus_quadrature_z`` (the Monte Carlo's deviation in its standard errors) and
``kappa_inf_d2_root_fit_bias``, the bias of the root estimator itself on this study's grid (its straight line
through 4 grid points fed the exact dG_2: +0.0057 on the default grid, about one standard error of the quick
root). Reported, not checked: that the Monte Carlo matches the quadrature is a test
(``tests/regret_jax/test_regret_limit.py``).

Beside the grid-fit root, every d reports the grid-free root (``regret_jax.limit.root_moments``, docs/regret.md §5.7):
the exact root of the sample-mean dG_d, interpolated through 16 Chebyshev nodes within 0.25 of
``regret_jax.limit.root_centre(d)`` from the same pass (q once per sample and node), with its delta-method se:
metrics ``kappa_inf_root_d{d}``, ``kappa_inf_root_se_d{d}``, ``kappa_inf_fit_minus_root_d{d}`` (grid fit minus
grid-free; on the same samples when ``root_samples == limit_samples``, as in the quick preset, so it is the fit's error
alone), ``kappa_inf_root_d2_minus_quadrature_z`` and ``root_unbracketed`` (the number of d whose root left the
bracket, 0 expected); table columns ``kappa_inf_root``, ``kappa_inf_root_se``, ``fit_minus_root``. No check reads it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

import regret_jax as rj
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.blocks import block_means, block_roots, interpolate_at
from regret_jax.limit import (
    LIMIT_CHUNK,
    LIMIT_NODES,
    ROOT_CHEB,
    ROOT_HALFWIDTH,
    centred_moments,
    limit_keys,
    limit_moments,
    limit_sample,
    root_centre,
    root_kappas,
    root_moments,
)

PAPER: dict[str, float] = {}  # no numeric result of the paper survived (docs/regret.md §12)

ROOT_TOL = 0.05  # band of the relative root difference kappa*(d, T_max) / kappa*_inf(d) - 1 around 0
EXCESS_TOL = 0.1  # band of the relative excess difference G_T / G_d - 1 at kappa*_inf around 0
UNIT = "block of sequences and limit samples"
MATCHES_LIMIT = checks.Claim(
    "kappa_star_matches_limit_at_T_max", "sqrt(T) eta*(d, T_max) converges to the continuous-time root kappa*_inf(d) of "
    "docs/regret.md §5.7: kappa*(d, T_max) / kappa*_inf(d) - 1, mean over d", "within", 0.0, tol=ROOT_TOL, unit=UNIT,
    control="the Hedge scale sqrt(2 ln d) as the limit (kappa*(d, T_max) / sqrt(2 ln d) - 1)",
    fails_if="a wrong limit (a dropped Clark-Ocone term, a wrong q or s-quadrature) or a root not scaling as T^(-1/2)")
EXCESS_MATCHES = checks.Claim(
    "excess_at_root_matches_limit", "F(eta)/T - mu_d^2 at T_max and kappa = kappa*_inf(d) converges to G_d(kappa*_inf): "
    "the relative difference, mean over d", "within", 0.0, tol=EXCESS_TOL, unit=UNIT,
    control="the discrete excess read at the grid edge 1.25 kappa*_inf(d) (a wrong root)",
    fails_if="a wrong G_d (q, the Ito isometry) or a discrete excess that does not converge to it")
INF_GROWS = checks.Claim(
    "kappa_inf_grows_in_d", "kappa*_inf(d) increases at every step of ds (smallest step)", ">", 0.0, unit=UNIT,
    control="the Hedge-normalised root kappa*_inf(d) / sqrt(2 ln d), which falls in d",
    fails_if="kappa*_inf flat or decreasing at some step of ds")
HEDGE_RATIO_FALLS = checks.Claim(
    "hedge_ratio_decreases_in_d", "kappa*_inf(d) / sqrt(2 ln d) decreases at every step of ds (smallest decrease): "
    "kappa*_inf grows slower than the Hedge scale and approaches it", ">", 0.0, unit=UNIT,
    control="sqrt(ln d) growth: kappa*_inf(d_min) sqrt(ln d / ln d_min) plus each block's own deviation",
    fails_if="kappa*_inf growing as fast as sqrt(ln d) or faster at some step")
CLAIMS = (MATCHES_LIMIT, EXCESS_MATCHES, INF_GROWS, HEDGE_RATIO_FALLS)


@dataclasses.dataclass(frozen=True)
class LimitConfig:
    """Sizes of the limit and of the discrete cells.

    The limit grid is kappa = sqrt(2 ln d) * geomspace(``limit_ratio_min``, ``limit_ratio_max``,
    ``num_limit_kappas``); the discrete grid of dimension d is kappa*_inf(d) * geomspace(1/w, w,
    ``num_discrete_kappas``) with w = ``discrete_halfwidth`` (an odd count, so kappa*_inf(d) is its centre).
    A discrete batch holds at most ``max_chunk_floats`` loss entries (T d per sequence) and ``chunk_size``
    sequences. ``stream`` 0 is judged, 1 screening (the seed of both the limit keys and the sequences).
    The grid-free root (``regret_jax.limit.root_moments``) reads the first ``root_samples`` limit samples at
    ``root_kappas`` Chebyshev nodes within ``root_halfwidth`` of ``regret_jax.limit.root_centre(d)``; the same
    pass as the grid (q once per sample and node), so with ``root_samples == limit_samples`` both roots read the
    same samples and their difference is the grid fit's error alone.
    """

    ds: tuple[int, ...] = (2, 5, 20, 100)
    Ts: tuple[int, ...] = (100, 1000)
    num_sequences: int = 600
    limit_samples: int = 600
    root_samples: int = 600
    root_halfwidth: float = ROOT_HALFWIDTH
    root_kappas: int = ROOT_CHEB
    limit_nodes: int = LIMIT_NODES
    limit_ratio_min: float = 0.8
    limit_ratio_max: float = 2.0
    num_limit_kappas: int = 24
    discrete_halfwidth: float = 1.25
    num_discrete_kappas: int = 9
    chunk_size: int = 4000
    limit_chunk: int = LIMIT_CHUNK
    max_chunk_floats: int = 2**27
    num_blocks: int = 10  # disjoint blocks of sequences and of limit samples, the units of the interval claims
    stream: int = seeds.JUDGED

    def __post_init__(self):
        if len(self.ds) < 3 or min(self.ds) < 2 or list(self.ds) != sorted(set(self.ds)):
            raise ValueError(f"ds must hold at least 3 distinct increasing dimensions >= 2 (trends in d are checked), got {self.ds}")
        if len(self.Ts) < 2 or min(self.Ts) < 2 or list(self.Ts) != sorted(set(self.Ts)):
            raise ValueError(f"Ts must hold at least 2 distinct increasing horizons >= 2 (trends in T are checked), got {self.Ts}")
        for name in ("num_sequences", "limit_samples", "root_samples"):
            if getattr(self, name) < 100:
                raise ValueError(f"{name} must be >= 100, got {getattr(self, name)}")
        if self.limit_nodes < 2:
            raise ValueError(f"limit_nodes must be >= 2, got {self.limit_nodes}")
        if not 0 < self.limit_ratio_min < self.limit_ratio_max:
            raise ValueError(f"need 0 < limit_ratio_min < limit_ratio_max, got {self.limit_ratio_min}, {self.limit_ratio_max}")
        if self.root_kappas < 8 or not self.root_halfwidth > 0:
            raise ValueError(f"need root_kappas >= 8 and root_halfwidth > 0, got {self.root_kappas}, {self.root_halfwidth}")
        if self.num_limit_kappas < 8:
            raise ValueError(f"num_limit_kappas must be >= 8, got {self.num_limit_kappas}")
        if not self.discrete_halfwidth > 1:
            raise ValueError(f"discrete_halfwidth must be > 1, got {self.discrete_halfwidth}")
        if self.num_discrete_kappas < 5 or self.num_discrete_kappas % 2 == 0:
            raise ValueError(f"num_discrete_kappas must be odd and >= 5, got {self.num_discrete_kappas}")
        for name in ("chunk_size", "limit_chunk", "max_chunk_floats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 2 <= self.num_blocks <= min(self.num_sequences, self.limit_samples) // 20:
            raise ValueError(f"num_blocks must be in [2, samples / 20], got {self.num_blocks}")
        seeds.check_stream(self.stream)

    def limit_kappas(self, d: int) -> np.ndarray:
        return np.sqrt(2 * np.log(d)) * np.geomspace(self.limit_ratio_min, self.limit_ratio_max, self.num_limit_kappas)

    def discrete_kappas(self, centre: float) -> np.ndarray:
        w = self.discrete_halfwidth
        return centre * np.geomspace(1 / w, w, self.num_discrete_kappas)

    def cell_chunk(self, d: int, T: int) -> int:
        return int(max(1, min(self.chunk_size, self.max_chunk_floats // (T * d))))


# Sizes chosen on the screening stream (--set stream=1); 600 is the most the ~30 s budget allows: 12 compiled programs
# (4 limits, 8 cells) take about half of it. The block claims there (10 blocks of 60): 95% half-widths 0.011 (root
# match, mean -0.0066), 0.059 (excess, +0.0087), 0.024 (smallest kappa*_inf step, 0.341), 0.009 (smallest ratio
# decrease, 0.054); every control FAIL (0.247, 0.498, -0.365, -0.016). 22 CPU seconds (user time).
QUICK = LimitConfig()
# FULL is sized for an accelerator: about 3 h on 2 loaded cores from the measured rates (13.5 ns per round x eta x
# action for d >= 20, 0.7 us per round at d = 2; 71 ms per limit sample at d = 1000), 2.8 h of it the discrete cells,
# dominated by d >= 200 at T = 10^4 (2 s per sequence); every round is a [chunk, eta, d] array op, which an
# accelerator runs in parallel. Batches of up to 2^30 loss entries (4 GiB; 107 sequences at d = 1000, T = 10^4).
# root_samples: se < 1e-3 of the grid-free root at every d up to 1000 (se sqrt(N) on screening: 0.16 at d = 2, 0.24
# at d = 100, 0.31 at d = 1000, i.e. 97,000 samples at d = 1000; 120,000 leaves a 10% margin on se). One count for
# every d: d <= 100 costs under 15 min of it. The limit pass then runs 120,000 samples per d, about 2.5 h more on
# these 2 loaded cores (q's cost grows as d; per sample with the pass's 40 kappas: 41 ms at d = 1000, 18 ms at
# d = 500, 7 ms at d = 200, 4 ms at d = 100), so FULL is about 5.5 h here.
FULL = LimitConfig(
    ds=(2, 3, 5, 10, 20, 50, 100, 200, 500, 1000), Ts=(100, 1000, 10_000), num_sequences=4000,
    limit_samples=4000, root_samples=120_000, max_chunk_floats=2**30,
)


def limit_cell(config: LimitConfig, d: int, ctx: RunContext) -> dict[str, np.ndarray]:
    """kappa*_inf(d): :func:`regret_jax.limit.limit_moments` of the samples of ``limit_scan``, run by a checkpointed
    ``sweep_map``, and per disjoint block of the samples (:func:`~experiments.studies.regret.stationarity.block_roots`):
    ``block_kappa`` the root, ``block_G`` G_d at kappa*_inf of all samples. The same pass evaluates every sample at
    the root bracket's nodes too: ``root_*`` are :func:`regret_jax.limit.root_moments` of the first ``root_samples``
    (the grid-free root, docs/regret.md §5.7)."""
    kappas, bracket = config.limit_kappas(d), root_kappas(root_centre(d), config.root_halfwidth, config.root_kappas)
    n, K = max(config.limit_samples, config.root_samples), len(kappas)
    keys = limit_keys(d, n, config.stream)  # a prefix of the keys is the keys of fewer samples
    g, dg, mass = seeds.mapped(ctx, f"limit_d{d}", limit_sample(d, np.concatenate([kappas, bracket]), config.limit_nodes),
                               keys, min(config.limit_chunk, n), d=d, bracket=bracket.tolist())
    g, dg, mass = (np.asarray(x) for x in (g, dg, mass))
    root = root_moments(g[:config.root_samples, K:], dg[:config.root_samples, K:], bracket)
    g, dg, mass = g[:config.limit_samples, :K], dg[:config.limit_samples, :K], mass[:config.limit_samples]
    out = limit_moments(g, dg, mass, kappas)
    out.update({f"root_{k}": v for k, v in root.items() if k != "dG"})
    k, B = float(out["kappa_star"]), config.num_blocks
    out["block_kappa"] = block_roots(dg, kappas, k, B)
    out["block_G"] = block_means(interpolate_at(np.asarray(g, np.float64), kappas, k), B)
    return out


def discrete_cell(config: LimitConfig, d: int, T: int, centre: float, ctx: RunContext) -> dict[str, np.ndarray]:
    """kappa*(d, T) on the grid around ``centre``: :func:`regret_jax.limit.centred_moments` of the sequences of
    ``centred_scan``, checkpointed, and per disjoint block of the sequences: ``block_kappa`` the root
    (:func:`~experiments.studies.regret.stationarity.block_roots`), ``block_excess`` [B, K] the excess per grid point."""
    kappas = config.discrete_kappas(centre)
    etas = rj.scan_etas(T, kappas)[1:]  # without eta = 0
    keys = rj.scan_keys(d, T, config.num_sequences, config.stream)
    R, dR = seeds.mapped(ctx, f"scan_d{d}_T{T}", rj.ray_sample(d, T, etas), keys,
                         min(config.cell_chunk(d, T), config.num_sequences), d=d, T=T, centre=centre)
    out = centred_moments(R, dR, etas, d, T)
    R, dR, B = np.asarray(R, np.float64), np.asarray(dR, np.float64), config.num_blocks
    centred = 2 * (R - np.sqrt(T) * rj.mu_d(d)) * dR
    out["block_kappa"] = block_roots(centred, etas, float(out["eta_star"]), B) * np.sqrt(T)
    excess = (R / np.sqrt(T) - rj.mu_d(d)) ** 2
    out["block_excess"] = np.stack([block_means(excess[:, j], B) for j in range(excess.shape[1])], axis=1)
    return out


def compute(config: LimitConfig, ctx: RunContext) -> dict:
    """``{"ds", "Ts", "limit": {per d}, "discrete": {per (d, T)}}``; the discrete grid of d is centred on kappa*_inf(d)
    (on the grid minimum of G_d if F' of the limit has no root on its grid)."""
    limits = [limit_cell(config, d, ctx) for d in config.ds]
    discrete = []
    for d, lim in zip(config.ds, limits):
        centre = float(lim["kappa_star"]) if np.isfinite(lim["kappa_star"]) else float(lim["kappas"][np.argmin(lim["G"])])
        discrete.append([discrete_cell(config, d, T, centre, ctx) for T in config.Ts])
    return {
        "ds": np.asarray(config.ds), "Ts": np.asarray(config.Ts),
        "limit": {k: np.stack([lim[k] for lim in limits]) for k in limits[0]},
        "discrete": {k: np.stack([np.stack([c[k] for c in row]) for row in discrete]) for k in discrete[0][0]},
    }


def gap_fit(ds, gap, se) -> dict[str, float]:
    """Weighted least squares of gap = a + b ln(ln d) (the stated descriptive model): a, b, their se, chi^2/dof."""
    X = np.stack([np.ones(len(ds)), np.log(np.log(np.asarray(ds, float)))], axis=1)
    w = 1 / np.asarray(se, float) ** 2
    cov = np.linalg.inv(X.T @ (w[:, None] * X))
    coef = cov @ X.T @ (w * np.asarray(gap, float))
    chi2 = float(np.sum(w * (gap - X @ coef) ** 2))
    return {"gap_fit_a": float(coef[0]), "gap_fit_b": float(coef[1]), "gap_fit_a_se": float(np.sqrt(cov[0, 0])),
            "gap_fit_b_se": float(np.sqrt(cov[1, 1])), "gap_fit_chi2_dof": chi2 / max(len(ds) - 2, 1)}


def rows(arrays: dict) -> dict[str, np.ndarray]:
    """Per d: kappa*_inf and se, sqrt(2 ln d), G_d at kappa*_inf (interpolated on the limit grid) and its se;
    per (d, T) [D, nT]: kappa*, se, gap to the limit and its z, the discrete excess at the grid centre and its z."""
    ds, lim, disc = np.asarray(arrays["ds"]), arrays["limit"], arrays["discrete"]
    k_inf, k_inf_se = np.asarray(lim["kappa_star"], float), np.asarray(lim["se"], float)
    G_at = np.asarray([np.interp(k, kk, g) for k, kk, g in zip(k_inf, lim["kappas"], lim["G"])])
    G_at_se = np.asarray([np.interp(k, kk, g) for k, kk, g in zip(k_inf, lim["kappas"], lim["G_se"])])
    k_T, k_T_se = np.asarray(disc["kappa_star"], float), np.asarray(disc["se"], float)
    gap = k_T - k_inf[:, None]
    mid = np.asarray(disc["excess"]).shape[-1] // 2
    excess, excess_se = np.asarray(disc["excess"])[..., mid], np.asarray(disc["excess_se"])[..., mid]
    return {
        "d": ds, "kappa_inf": k_inf, "kappa_inf_se": k_inf_se, "hedge": np.sqrt(2 * np.log(ds)),
        "G_at_root": G_at, "G_at_root_se": G_at_se, "kappa_T": k_T, "kappa_T_se": k_T_se, "gap_T": gap,
        "gap_se_T": np.hypot(k_T_se, k_inf_se[:, None]), "excess_T": excess, "excess_se_T": excess_se,
        "z_excess_T": (excess - G_at[:, None]) / np.hypot(excess_se, G_at_se[:, None]),
        "sign_changes_T": np.asarray(disc["sign_changes"]), "sign_changes_inf": np.asarray(lim["sign_changes"]),
    }


def block_claims(config: LimitConfig, arrays: dict) -> dict[str, np.ndarray]:
    """Per-block values [num_blocks] of the interval claims and of their controls.

    Block b pairs block b of every limit cell with block b of every discrete cell (all independent draws).
    ``match``: kappa*_b(d, T_max) / kappa*_inf,b(d) - 1, mean over d (control ``match_hedge``: against sqrt(2 ln d));
    ``excess``: the discrete excess at T_max and kappa*_inf (the grid centre) over the limit's G_d there, minus 1,
    mean over d (control ``excess_edge``: the excess read at the grid edge); ``grows``: the smallest step in d of
    kappa*_inf,b (control ``grows_hedge``: of kappa*_inf,b / sqrt(2 ln d)); ``ratio_falls``: the smallest decrease
    in d of kappa*_inf,b / sqrt(2 ln d) (control ``ratio_falls_log``: the sqrt(ln d) growth arm of the claim).
    """
    ds = np.asarray(config.ds, np.float64)
    hedge = np.sqrt(2 * np.log(ds))[:, None]
    k_inf = np.asarray(arrays["limit"]["block_kappa"], np.float64)  # [D, B]
    G_inf = np.asarray(arrays["limit"]["block_G"], np.float64)
    k_T = np.asarray(arrays["discrete"]["block_kappa"], np.float64)[:, -1]  # [D, B] at T_max
    excess = np.asarray(arrays["discrete"]["block_excess"], np.float64)[:, -1]  # [D, B, K]
    mid = excess.shape[-1] // 2
    ratio = k_inf / hedge
    log_arm = k_inf[:1] * np.sqrt(np.log(ds) / np.log(ds[0]))[:, None] + k_inf - k_inf.mean(axis=1, keepdims=True)
    return {
        "match": np.mean(k_T / k_inf - 1, axis=0), "match_hedge": np.mean(k_T / hedge - 1, axis=0),
        "excess": np.mean(excess[..., mid] / G_inf - 1, axis=0), "excess_edge": np.mean(excess[..., -1] / G_inf - 1, axis=0),
        "grows": np.min(np.diff(k_inf, axis=0), axis=0), "grows_hedge": np.min(np.diff(ratio, axis=0), axis=0),
        "ratio_falls": np.min(-np.diff(ratio, axis=0), axis=0),
        "ratio_falls_log": np.min(-np.diff(log_arm / hedge, axis=0), axis=0),
    }


def d2_reference(config: LimitConfig, kappa_inf: float, se: float) -> dict[str, float]:
    """The Monte-Carlo root at d = 2 beside the deterministic quadrature (``regret_jax.kappa_star_d2``): the exact
    root, the Monte Carlo's deviation from it in standard errors, and the bias of the root estimator alone (its
    straight line through 4 grid points, ``regret_jax.find_root``, fed the exact dG_2 on this study's grid)."""
    exact = rj.kappa_star_d2()
    grid = config.limit_kappas(2)
    fitted = rj.find_root(grid, np.array([rj.limit_d2(kappa, derivative=True) for kappa in grid]), np.ones(len(grid)))
    return {"kappa_inf_d2_quadrature": exact, "kappa_inf_d2_minus_quadrature_z": (kappa_inf - exact) / se,
            "kappa_inf_d2_root_fit_bias": float(fitted.eta) - exact}


def summarize(config: LimitConfig, arrays: dict) -> Summary:
    """The claims of the module docstring, the Hedge gap and its fit, per-d and per-cell tables."""
    r = rows(arrays)
    ds, Ts = list(config.ds), list(config.Ts)
    z_gap = r["gap_T"] / r["gap_se_T"]
    growth = (np.abs(r["gap_T"][:, -1]) - np.abs(r["gap_T"][:, 0])) / np.hypot(r["kappa_T_se"][:, -1], r["kappa_T_se"][:, 0])
    k, se, hedge = r["kappa_inf"], r["kappa_inf_se"], r["hedge"]
    ratio, ratio_se = k / hedge, se / hedge
    gap_h = k - hedge

    metrics = {f"kappa_inf_d{d}": float(k[i]) for i, d in enumerate(ds)}
    metrics.update({f"kappa_inf_se_d{d}": float(se[i]) for i, d in enumerate(ds)})
    metrics.update({f"hedge_gap_d{d}": float(gap_h[i]) for i, d in enumerate(ds)})
    metrics.update({f"G_at_root_d{d}": float(r["G_at_root"][i]) for i, d in enumerate(ds)})
    metrics.update({f"kappa_star_d{d}_T{T}": float(r["kappa_T"][i, j]) for i, d in enumerate(ds) for j, T in enumerate(Ts)})
    metrics.update(gap_fit(ds, gap_h, se))
    lim = arrays["limit"]
    k_root, se_root = np.asarray(lim["root_kappa_star"], float), np.asarray(lim["root_se"], float)
    metrics.update({f"kappa_inf_root_d{d}": float(k_root[i]) for i, d in enumerate(ds)})
    metrics.update({f"kappa_inf_root_se_d{d}": float(se_root[i]) for i, d in enumerate(ds)})
    metrics.update({f"kappa_inf_fit_minus_root_d{d}": float(k[i] - k_root[i]) for i, d in enumerate(ds)})
    metrics["root_unbracketed"] = int(np.sum(~np.asarray(lim["root_bracketed"], bool)))
    metrics["hedge_ratio_dmax_minus_1"] = float(ratio[-1] - 1)
    metrics["hedge_ratio_dmax_minus_1_se"] = float(ratio_se[-1])
    metrics["kappa_gap_T_max_z_max_abs"] = float(np.max(np.abs(z_gap[:, -1])))
    metrics["kappa_gap_growth_in_T_z_max"] = float(np.max(growth))
    metrics["excess_bias_T_min_max_z"] = float(np.max(np.abs(r["z_excess_T"][:, 0])))
    metrics["argmin_mass_error"] = float(np.max(arrays["limit"]["mass_error"]))
    metrics["sign_changes_max_abs_dev"] = float(max(np.max(np.abs(r["sign_changes_T"] - 1)), np.max(np.abs(r["sign_changes_inf"] - 1))))
    if 2 in ds:
        metrics.update(d2_reference(config, float(k[ds.index(2)]), float(se[ds.index(2)])))
        metrics["kappa_inf_root_d2_minus_quadrature_z"] = float(
            (k_root[ds.index(2)] - metrics["kappa_inf_d2_quadrature"]) / se_root[ds.index(2)])
    b = block_claims(config, arrays)
    found = [
        MATCHES_LIMIT.judge(b["match"], control=b["match_hedge"]),
        EXCESS_MATCHES.judge(b["excess"], control=b["excess_edge"]),
        INF_GROWS.judge(b["grows"], control=b["grows_hedge"]),
        HEDGE_RATIO_FALLS.judge(b["ratio_falls"], control=b["ratio_falls_log"]),
    ]
    table = {"d": ds, "kappa_inf": k.tolist(), "kappa_inf_se": se.tolist(), "kappa_inf_root": k_root.tolist(),
             "kappa_inf_root_se": se_root.tolist(), "fit_minus_root": (k - k_root).tolist(), "hedge_sqrt_2_ln_d": hedge.tolist(),
             "gap": gap_h.tolist(), "ratio": ratio.tolist(), "G_at_root": r["G_at_root"].tolist(),
             **{f"kappa_T{T}": r["kappa_T"][:, j].tolist() for j, T in enumerate(Ts)},
             **{f"kappa_se_T{T}": r["kappa_T_se"][:, j].tolist() for j, T in enumerate(Ts)}}
    cells = {"d": [d for d in ds for _ in Ts], "T": [T for _ in ds for T in Ts]}
    for name in ("kappa_T", "kappa_T_se", "gap_T", "excess_T", "excess_se_T", "z_excess_T", "sign_changes_T"):
        cells[name.removesuffix("_T")] = r[name].reshape(-1).tolist()
    return Summary(metrics=metrics, checks=found, tables={"table": table, "cells": cells})


def _figure(config: LimitConfig, r: dict, metrics: dict, path) -> None:
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ds = np.asarray(config.ds, float)
    for j, T in enumerate(config.Ts):
        ax1.errorbar(ds * (1 + 0.04 * (j + 1)), r["kappa_T"][:, j], yerr=r["kappa_T_se"][:, j], fmt="o", ms=3,
                     label=rf"$\kappa^*(d, T)$, T={T}")
    ax1.errorbar(ds, r["kappa_inf"], yerr=r["kappa_inf_se"], fmt="s-", color="k", ms=4, label=r"$\kappa^*_\infty(d)$")
    dd = np.geomspace(ds[0], ds[-1], 100)
    ax1.plot(dd, np.sqrt(2 * np.log(dd)), "k--", label=r"$\sqrt{2\ln d}$")
    ax1.set(xscale="log", xlabel="d", ylabel=r"$\kappa = \eta\sqrt{T}$", title="root of F'")
    ax1.legend(fontsize=7)
    ax2.errorbar(ds, r["kappa_inf"] - r["hedge"], yerr=r["kappa_inf_se"], fmt="s", color="k", label="gap")
    fit = metrics["gap_fit_a"] + metrics["gap_fit_b"] * np.log(np.log(dd))
    ax2.plot(dd, fit, "C3-", label=rf"fit {metrics['gap_fit_a']:.3f} + ({metrics['gap_fit_b']:.3f}) ln ln d")
    ax2.axhline(0, color="0.5", lw=0.8)
    ax2.set(xscale="log", xlabel="d", ylabel=r"$\kappa^*_\infty - \sqrt{2\ln d}$", title="gap to the Hedge scale")
    ax2.legend(fontsize=7)
    io.save_figure(fig, path)


def write(config: LimitConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``curves.npz`` (``limit_d{d}``: rows kappa, G, G_se, dG, dG_se; ``d{d}_T{T}``: rows kappa, excess, excess_se,
    dF, dF_se) and ``kappa_limit.png`` (``table.csv`` and ``cells.csv`` are tables)."""
    lim, disc = arrays["limit"], arrays["discrete"]
    curves = {f"limit_d{d}": np.stack([lim[k][i] for k in ("kappas", "G", "G_se", "dG", "dG_se")]) for i, d in enumerate(config.ds)}
    curves.update({f"d{d}_T{T}": np.stack([disc[k][i, j] for k in ("kappas", "excess", "excess_se", "dF", "dF_se")])
                   for i, d in enumerate(config.ds) for j, T in enumerate(config.Ts)})
    io.save_npz(out_dir / "curves.npz", **curves)
    _figure(config, rows(arrays), summary.metrics, out_dir / "kappa_limit.png")


STUDY = register(Study(
    name="regret.limit",
    cost_fields=("num_sequences", "limit_samples", "root_samples"),
    summary="Continuous-time limit kappa*_inf(d) of sqrt(T) eta* (docs/regret.md §5.7) against kappa*(d, T) and sqrt(2 ln d)",
    config_type=LimitConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None, claims=CLAIMS,
    quick_s=15,
))

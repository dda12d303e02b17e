"""The continuous-time limit of the Theorem-1 ray and its optimal kappa*_inf(d) (docs/regret.md §5.7).

With eta = kappa / sqrt(T) and B_s := L_{floor(sT)} / sqrt(T), the losses of the ray model are the
increments of a Brownian motion sampled at the grid s = t / T, so

    R(eta) / sqrt(T) = sum_t <softmax(-kappa B_{(t-1)/T}), B_{t/T} - B_{(t-1)/T}> - min_a B_a(1)

is *exactly* the left-point (Euler / Ito) discretisation, with step 1/T, of
R_inf(kappa) = int_0^1 <softmax(-kappa B_s), dB_s> - min_a B_a(1).  Clark-Ocone writes
min_a B_a(1) = -mu_d + int_0^1 <p_s, dB_s> with p_s(a) = P(argmin_b B_b(1) = a | F_s), so with the
piecewise-constant policy pi_s of the discrete model (pi_s = pi_t on [(t-1)/T, t/T)), and by the Ito isometry,

    F(eta) / T = mu_d^2 + G_T(kappa),   G_T(kappa) = int_0^1 E ||pi_s - p_s||^2 ds     (every T, exactly)

and G_T -> G_d(kappa) (pi_s = softmax(-kappa B_s)).  The integrand depends on B_s ~ N(0, s I) only
(B_1 - B_s is independent of F_s), which gives p_s = q(B_s / sqrt(1 - s)) and

    G_d(kappa) = int_0^1 E_Z || softmax(-kappa sqrt(s) Z) - q(sqrt(s / (1 - s)) Z) ||^2 ds,   Z ~ N(0, I_d),
    q(y)_a = P(argmin_b (y_b + W_b) = a) = int phi(w) prod_{b != a} Phibar(y_a - y_b + w) dw,   W ~ N(0, I_d).

kappa*_inf(d) = argmin G_d is the root of dG_d/dkappa.

Numerics (all stated so that they can be checked):

* :func:`argmin_probs`: q by the substitution v = y_a + w, q_a = int phi(v - y_a) S(v) / Phi(y_a - v) dv
  with the survival function S(v) = prod_b Phi(y_b - v) of min_b (y_b + W_b).  S is shared by every a,
  so all d probabilities cost O(d V) for V nodes (the per-a product of the w-form costs O(d^2) per
  node); products are sums of ``log_ndtr``.  Trapezoid rule on v in min(y) + [-9, 8], step
  :data:`ARGMIN_STEP` = 0.2 (86 nodes): the integrand is entire and its narrowest feature is the
  drop of S, width ~ 1/sqrt(2 ln d) >= 0.27 for d <= 1000, so |1 - sum_a q_a| <= 2e-7 at d = 1000
  (float64, checked against step 0.05); the window cuts mass below d Phi(-9) + phi(8) ~ 1e-15.
  Nothing is truncated in a: 1 - sum_a q_a is the quadrature error, reported per sample.
* s = sin^2(theta), theta in (0, pi/2), Gauss-Legendre with :data:`LIMIT_NODES` = 12 nodes: the
  Jacobian sin(2 theta) vanishes at s = 1, where q(tan(theta) Z) becomes one-hot with a transition
  of width ~ the gap between the two smallest Z_a; 12 -> 24 nodes moves G by < 5e-6 (d = 2..100).
* Monte Carlo over Z: each sample draws an independent Z per node (lower variance than one Z
  for all nodes, same mean), and the same Z for every kappa (common random numbers); dG/dkappa is
  the pathwise derivative of each sample by autodiff; the root and its standard error come from
  :func:`regret_jax.find_root`, whose straight line through 4 grid points has a bias of its own (+0.0057 at d = 2
  on ``regret.limit``'s grid, docs/regret.md §5.7).
* The grid-free root (:func:`limit_root`, :func:`root_moments`): on a fixed sample (Z per node, q computed once
  per node: it does not depend on kappa) each sample's dh(kappa) is one smooth function of kappa; its values at
  :data:`ROOT_CHEB` = 16 Chebyshev-Lobatto nodes of a bracket of half-width :data:`ROOT_HALFWIDTH` = 0.25 give its
  interpolant to float32 rounding (|error| < 2e-7 per sample for d = 2..1000, a root shift < 1e-6), and the mean of
  the interpolants is the interpolant of the mean dG_hat.  Its root by bisection then Newton, se by the delta
  method sd(dh_i(kappa*)) / sqrt(N) / |dG_hat'(kappa*)|; the root of a sample mean has an O(1/N) bias, negligible
  against that O(1/sqrt(N)) se.  se = s_1 / sqrt(N) with s_1 = 0.16 (d = 2) to 0.31 (d = 1000): about 26,000
  to 97,000 samples for se = 1e-3 (docs/regret.md §5.7).
* d = 2 by deterministic quadrature (:func:`limit_d2`, :func:`kappa_star_d2`), the Monte Carlo's reference:
  with D = (Z_1 - Z_2) / sqrt(2) ~ N(0, 1), softmax(-kappa sqrt(s) Z)_1 = sigma(-kappa sqrt(2 s) D) and
  q_1(sqrt(s / (1 - s)) Z) = Phi(-sqrt(s / (1 - s)) D); both rows sum to 1, so the squared distance is
  2 (pi_1 - q_1)^2, and it is even in D:

      G_2(kappa) = int_0^1 4 int_0^inf phi(D) (sigma(-kappa sqrt(2 s) D) - Phi(-sqrt(s / (1 - s)) D))^2 dD ds.

  s = sin^2(theta) again (the inner integral moves as sqrt(1 - s) = cos(theta) near s = 1, smooth in theta);
  the inner integral is split at D = sqrt((1 - s) / s), the width of Phi's drop; both levels by adaptive
  Gauss-Kronrod (``scipy.integrate.quad``) in float64 to an absolute 1e-13, and the root of dG_2/dkappa by
  Brent's method to 1e-10: kappa*_inf(2) = 1.89701, G_2(kappa*) = 0.0080214, errors far below 1e-6
  (``tests/regret_jax/test_regret_limit.py`` checks them against a fixed tensor Gauss-Legendre rule, and the
  Monte Carlo of :func:`limit_scan` at d = 2 against them).

The discrete side (:func:`centred_scan`) reads F(eta) with the centred estimators of docs/regret.md §4.4:
E[R] = sqrt(T) mu_d for every eta, so E[R'] = 0, and
F'(eta) = 2 E[(R - sqrt(T) mu_d) R'] and F(eta)/T - mu_d^2 = E[(R / sqrt(T) - mu_d)^2] = G_T(kappa).
Both drop the large constant sqrt(T) mu_d from the estimator (the root's standard error is about
ten times smaller than with 2 R R').
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from regret_jax.regret_loss import flat_normal
from regret_jax.stationarity import find_root, mu_d, ray_sample, scan_etas, scan_keys

ARGMIN_STEP = 0.2  # trapezoid step of argmin_probs in v = y_a + w
ARGMIN_WINDOW = (9.0, 8.0)  # v - min(y) in [-9, 8]
LIMIT_NODES = 12  # Gauss-Legendre nodes in theta, s = sin^2(theta)
LIMIT_CHUNK = 256  # default samples per batch of limit_scan()
_LIMIT_TAG = 0x5117  # folded into the seed's key, so limit keys are not the sequences of scan_keys


def argmin_probs(y: jax.Array, step: float = ARGMIN_STEP) -> jax.Array:
    """q(y)_a = P(argmin_b (y_b + W_b) = a), W ~ N(0, I_d), for one y [d] (docs/regret.md §5.7).

    q_a = int phi(v - y_a) prod_{b != a} Phi(y_b - v) dv by the trapezoid rule on
    v in min(y) + [-9, 8] with ``step``, in log space (module docstring: accuracy).
    """
    lo, hi = ARGMIN_WINDOW
    v = jnp.min(y) + jnp.arange(-lo, hi + step / 2, step, dtype=y.dtype)  # [V]
    log_surv = log_ndtr(y[:, None] - v[None, :])  # [d, V]: log Phi(y_b - v) = log P(y_b + W_b > v)
    log_phi = -0.5 * (v[None, :] - y[:, None]) ** 2 - 0.5 * np.log(2 * np.pi)
    return step * jnp.sum(jnp.exp(log_phi + jnp.sum(log_surv, axis=0) - log_surv), axis=1)


def limit_nodes(num_nodes: int = LIMIT_NODES) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quadrature of int_0^1 ds: s = sin^2(theta), Gauss-Legendre in theta on (0, pi/2).

    Returns (sqrt(s), sqrt(s / (1 - s)), weights) [num_nodes] in float64; the weights
    include the Jacobian ds = sin(2 theta) d theta and sum to 1.
    """
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    x, w = np.polynomial.legendre.leggauss(num_nodes)
    theta = np.pi / 4 * (x + 1)
    return np.sin(theta), np.tan(theta), np.pi / 4 * w * np.sin(2 * theta)


def limit_integrand(z: jax.Array, kappas: jax.Array, sqrt_s, sqrt_odds) -> tuple[jax.Array, jax.Array, jax.Array]:
    """At one node s and one Z [d]: h(kappa) = ||softmax(-kappa sqrt(s) Z) - q(sqrt(s/(1-s)) Z)||^2 [K],
    its pathwise derivative dh/dkappa [K] (autodiff) and the quadrature error 1 - sum_a q_a (docs/regret.md §5.7)."""
    q = argmin_probs(sqrt_odds * z)

    def h(kappa):
        return jnp.sum((jax.nn.softmax(-kappa * sqrt_s * z) - q) ** 2)

    value, grad = jax.vmap(jax.value_and_grad(h))(kappas)
    return value, grad, 1.0 - jnp.sum(q)


def limit_keys(d: int, num_samples: int, seed: int = 0) -> np.ndarray:
    """Raw key data [N, 2] (uint32) of the limit samples of dimension d (disjoint from :func:`regret_jax.scan_keys`)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    cell = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), _LIMIT_TAG), d)
    return np.asarray(jax.random.key_data(jax.random.split(cell, num_samples)))


def limit_sample(d: int, kappas, num_nodes: int = LIMIT_NODES) -> Callable[[jax.Array], tuple]:
    """``fn(key_data [2]) -> (g [K], dg [K], mass_error)``: one unbiased sample of G_d and dG_d/dkappa.

    g = sum_j w_j h(s_j, Z_j) with an independent Z_j ~ N(0, I_d) per node (:func:`limit_nodes`), the same
    Z_j for every kappa; ``mass_error`` = max_j |1 - sum_a q_a| at the sample's nodes.
    """
    kappas = jnp.asarray(kappas, jnp.float32)
    sqrt_s, sqrt_odds, weights = (jnp.asarray(x, jnp.float32) for x in limit_nodes(num_nodes))

    def one_sample(key_data):
        z = flat_normal(jax.random.wrap_key_data(key_data), (num_nodes, d))
        h, dh, mass = jax.vmap(limit_integrand, in_axes=(0, None, 0, 0))(z, kappas, sqrt_s, sqrt_odds)
        return weights @ h, weights @ dh, jnp.max(jnp.abs(mass))

    return one_sample


def limit_moments(g, dg, mass_error, kappas) -> dict[str, np.ndarray]:
    """Monte-Carlo G_d, dG_d/dkappa [K] with standard errors from samples [N, K], and the root kappa*_inf.

    Keys: ``kappas``, ``G``, ``G_se``, ``dG``, ``dG_se``; ``kappa_star``, ``se``, ``sign_changes``
    (:func:`regret_jax.find_root`); ``mass_error`` (the largest |1 - sum_a q_a| of any sample).
    """
    g, dg, kappas = (np.asarray(x, np.float64) for x in (g, dg, kappas))
    n = g.shape[0]
    est = {"kappas": kappas, "G": g.mean(0), "G_se": g.std(0, ddof=1) / np.sqrt(n),
           "dG": dg.mean(0), "dG_se": dg.std(0, ddof=1) / np.sqrt(n)}
    root = find_root(jnp.asarray(kappas), jnp.asarray(est["dG"]), jnp.asarray(est["dG_se"]))
    return {**est, "kappa_star": np.asarray(root.eta), "se": np.asarray(root.se),
            "sign_changes": np.asarray(root.sign_changes), "mass_error": np.asarray(np.max(mass_error))}


def _default_map(fn, xs, chunk):
    """``fn`` over the leading axis of ``xs``, vmapped in batches of ``chunk`` (one compiled program)."""
    return jax.jit(lambda x: jax.lax.map(fn, x, batch_size=chunk))(xs)


def limit_scan(d: int, num_samples: int, map_fn=None, *, kappas, num_nodes: int = LIMIT_NODES, seed: int = 0,
          chunk_size: int = LIMIT_CHUNK) -> dict[str, np.ndarray]:
    """kappa*_inf(d) = argmin G_d: :func:`limit_moments` of :func:`limit_sample` over :func:`limit_keys`.

    ``map_fn(fn, keys, chunk_size)`` runs ``fn`` over the keys (default: one ``jax.vmap``), as in
    :func:`regret_jax.scan`; the harness passes its chunked, checkpointed sweep.
    """
    keys = limit_keys(d, num_samples, seed)
    run = map_fn or _default_map
    return limit_moments(*run(limit_sample(d, kappas, num_nodes), keys, min(chunk_size, num_samples)), kappas)


ROOT_CHEB = 16  # Chebyshev-Lobatto nodes of the root bracket of limit_root()
ROOT_HALFWIDTH = 0.25  # half-width of that bracket in kappa
ROOT_GAP_FIT = (0.598, -0.311)  # kappa*_inf(d) - sqrt(2 ln d) ~ a + b ln ln d (docs/regret.md §5.7), the bracket's centre


def root_centre(d: int) -> float:
    """Centre of the default root bracket: sqrt(2 ln d) + a + b ln ln d, the descriptive gap fit of docs/regret.md §5.7
    (residuals <= 0.03 for d = 2..1000, well inside :data:`ROOT_HALFWIDTH`)."""
    a, b = ROOT_GAP_FIT
    return float(np.sqrt(2 * np.log(d)) + a + b * np.log(np.log(d)))


def root_kappas(centre: float, halfwidth: float = ROOT_HALFWIDTH, num: int = ROOT_CHEB) -> np.ndarray:
    """The bracket's Chebyshev-Lobatto nodes centre + halfwidth * t_j, t_j = -cos(pi j / (num - 1)), ascending [num]."""
    if num < 3 or not halfwidth > 0:
        raise ValueError(f"need num >= 3 and halfwidth > 0, got {num}, {halfwidth}")
    return centre - halfwidth * np.cos(np.pi * np.arange(num) / (num - 1))


def _cheb_basis(t, num: int):
    """[T_0(t), ..., T_{num-1}(t)] by the three-term recurrence (smooth at t = +-1, so autodiff works there)."""
    rows = [jnp.ones_like(t), t]
    for _ in range(num - 2):
        rows.append(2 * t * rows[-1] - rows[-2])
    return jnp.stack(rows[:num], axis=-1)


@jax.jit
def _cheb_root(coeffs: jax.Array) -> jax.Array:
    """The up-crossing of p(t) = sum_k c_k T_k(t) in [-1, 1] (p(-1) < 0 < p(1) assumed): 30 bisection steps, then
    4 Newton steps from the bracket's midpoint, kept inside the last bracket."""
    p = lambda t: _cheb_basis(t, coeffs.shape[0]) @ coeffs  # noqa: E731

    def bisect(_, lohi):
        lo, hi = lohi
        mid = (lo + hi) / 2
        neg = p(mid) < 0
        return jnp.where(neg, mid, lo), jnp.where(neg, hi, mid)

    lo, hi = jax.lax.fori_loop(0, 30, bisect, (-jnp.ones((), coeffs.dtype), jnp.ones((), coeffs.dtype)))

    def newton(_, t):
        return jnp.clip(t - p(t) / jax.grad(p)(t), lo, hi)

    return jax.lax.fori_loop(0, 4, newton, (lo + hi) / 2)


def root_moments(g, dg, kappas) -> dict[str, np.ndarray]:
    """kappa*_inf(d) as the exact root of the sample-mean derivative, from per-sample (g, dg) [N, M] at the
    Chebyshev-Lobatto nodes ``kappas`` [M] of a bracket (:func:`root_kappas`; docs/regret.md §5.7).

    The sample fixes Z per node and q (which does not depend on kappa), so each sample's dh(kappa) is one smooth
    function; its values at the M nodes give its degree-(M - 1) interpolant, and the interpolant of the mean
    dG_hat is the mean of the samples' interpolants (linearity), with no line fit through grid points.  The root
    of that polynomial in the bracket: bisection then Newton (:func:`_cheb_root`, jitted).  Standard error by the
    delta method: se = sd_i(dh_i(kappa*)) / sqrt(N) / |dG_hat'(kappa*)|.  The root of a sample mean is consistent,
    with an O(1/N) bias, negligible against its O(1/sqrt(N)) se.

    Keys: ``kappa_star``, ``se`` (nan unless the mean derivative rises across the bracket: ``bracketed``),
    ``G`` (the interpolated sample-mean G_d at the root) and ``G_se``, ``slope`` (dG_hat/dkappa at the root), ``dG``
    (the mean derivative at the nodes) and ``sign_changes`` (of it along the nodes).
    """
    g, dg, kappas = (np.asarray(x, np.float64) for x in (g, dg, kappas))
    n, m = dg.shape
    centre, halfwidth = (kappas[-1] + kappas[0]) / 2, (kappas[-1] - kappas[0]) / 2
    to_coeffs = np.linalg.inv(np.polynomial.chebyshev.chebvander((kappas - centre) / halfwidth, m - 1))  # values -> c_k
    mean_dg = dg.mean(0)
    bracketed = bool(mean_dg[0] < 0 < mean_dg[-1])
    t = float(_cheb_root(jnp.asarray(to_coeffs @ mean_dg))) if bracketed else np.nan
    basis = np.polynomial.chebyshev.chebvander(np.array([t]), m - 1)[0] @ to_coeffs  # node values -> value at t
    slope_basis = np.polynomial.chebyshev.chebval(t, np.polynomial.chebyshev.chebder(to_coeffs)) / halfwidth
    dh_root, g_root = dg @ basis, g @ basis  # per sample at the root [N]
    slope = float(slope_basis @ mean_dg)
    changes = np.sum(np.sign(mean_dg[1:]) != np.sign(mean_dg[:-1]))
    return {"kappa_star": np.asarray(centre + halfwidth * t), "se": np.asarray(dh_root.std(ddof=1) / np.sqrt(n) / abs(slope)),
            "G": np.asarray(g_root.mean()), "G_se": np.asarray(g_root.std(ddof=1) / np.sqrt(n)), "slope": np.asarray(slope),
            "dG": mean_dg, "bracketed": np.asarray(bracketed), "sign_changes": np.asarray(changes)}


def limit_root(d: int, num_samples: int, map_fn=None, *, centre: float | None = None, halfwidth: float = ROOT_HALFWIDTH,
               num_kappas: int = ROOT_CHEB, num_nodes: int = LIMIT_NODES, seed: int = 0,
               chunk_size: int = LIMIT_CHUNK) -> dict[str, np.ndarray]:
    """kappa*_inf(d) without a grid fit: :func:`root_moments` of :func:`limit_sample` at :func:`root_kappas` over
    :func:`limit_keys` (the samples of :func:`limit_scan` with the same seed; a prefix of them for fewer samples).

    ``centre`` defaults to :func:`root_centre` (d); the root must lie within ``halfwidth`` of it (else nan). Each
    sample computes q once per node (``limit_integrand``) and dh at all M nodes from it; ``map_fn`` as in
    :func:`limit_scan`.  Per-sample output is [M], so memory is O(N M) for any d.
    """
    kappas = root_kappas(root_centre(d) if centre is None else centre, halfwidth, num_kappas)
    keys = limit_keys(d, num_samples, seed)
    run = map_fn or _default_map
    g, dg, mass = run(limit_sample(d, kappas, num_nodes), keys, min(chunk_size, num_samples))
    return {**root_moments(g, dg, kappas), "kappas": kappas, "mass_error": np.asarray(np.max(mass))}


def _d2_inner(s: float, kappa: float, derivative: bool) -> float:
    """The inner integral of :func:`limit_d2` at one s in (0, 1): 4 int_0^inf phi(D) (p - q)^2 dD, or its
    kappa-derivative 8 int_0^inf phi(D) (p - q) dp/dkappa dD, with p = sigma(-kappa sqrt(2 s) D),
    q = Phi(-sqrt(s / (1 - s)) D) and dp/dkappa = -sqrt(2 s) D p (1 - p). (SciPy is imported here, not with the
    module: it adds over a second to every process that imports ``regret_jax``.)"""
    from scipy import integrate, special

    slope, sharp = np.sqrt(2 * s), np.sqrt(s / (1 - s))

    def f(D):
        p, q = special.expit(-kappa * slope * D), special.ndtr(-sharp * D)
        phi = np.exp(-0.5 * D * D) / np.sqrt(2 * np.pi)
        return 8 * phi * (p - q) * (-slope * D * p * (1 - p)) if derivative else 4 * phi * (p - q) ** 2

    split = min(1.0 / sharp, 40.0)  # Phi's drop has width 1 / sharp
    return sum(integrate.quad(f, lo, hi, epsabs=1e-14, epsrel=1e-12, limit=200)[0]
               for lo, hi in ((0.0, split), (split, np.inf)))


def limit_d2(kappa: float, derivative: bool = False) -> float:
    """G_2(kappa), or dG_2/dkappa with ``derivative``, by deterministic quadrature in float64 (module
    docstring: the d = 2 reduction and its accuracy)."""
    from scipy import integrate

    outer = lambda theta: _d2_inner(np.sin(theta) ** 2, kappa, derivative) * np.sin(2 * theta)  # noqa: E731
    return integrate.quad(outer, 0.0, np.pi / 2, epsabs=1e-13, epsrel=1e-11, limit=200)[0]


def kappa_star_d2(bracket: tuple[float, float] = (1.5, 2.5)) -> float:
    """kappa*_inf(2) = argmin G_2: the root of dG_2/dkappa (:func:`limit_d2`) in ``bracket``, by Brent's method."""
    from scipy import optimize

    return optimize.brentq(lambda kappa: limit_d2(kappa, derivative=True), *bracket, xtol=1e-10)


def centred_moments(R, dR, etas, d: int, T: int) -> dict[str, np.ndarray]:
    """The discrete ray at (d, T) from rows (R, R') [N, E] on ``etas`` [E], with the centred estimators.

    Per eta: ``excess`` = mean (R/sqrt(T) - mu_d)^2, an unbiased estimate of F/T - mu_d^2 = G_T(kappa),
    and ``excess_se``; ``dF`` = mean 2 (R - sqrt(T) mu_d) R' and ``dF_se``; ``F`` = mean R^2 and ``F_se``;
    ``mean_dR`` and ``mean_dR_se`` (E R' = 0, docs/regret.md §4.4).  Root of ``dF``: ``eta_star``,
    ``kappa_star`` = eta* sqrt(T), ``se`` (of kappa*), ``sign_changes``.
    """
    R, dR, etas = (np.asarray(x, np.float64) for x in (R, dR, etas))
    n, sqrt_t, mu = R.shape[0], np.sqrt(T), mu_d(d)

    def mean_se(x):
        return x.mean(0), x.std(0, ddof=1) / np.sqrt(n)

    out = {"etas": etas, "kappas": etas * sqrt_t}
    for name, x in (("excess", (R / sqrt_t - mu) ** 2), ("dF", 2 * (R - sqrt_t * mu) * dR), ("F", R**2), ("mean_dR", dR)):
        out[name], out[f"{name}_se"] = mean_se(x)
    root = find_root(jnp.asarray(etas), jnp.asarray(out["dF"]), jnp.asarray(out["dF_se"]))
    return {**out, "eta_star": np.asarray(root.eta), "kappa_star": np.asarray(root.eta) * sqrt_t,
            "se": np.asarray(root.se) * sqrt_t, "sign_changes": np.asarray(root.sign_changes)}


def centred_scan(d: int, T: int, num_sequences: int, map_fn=None, *, kappas, seed: int = 0,
                 chunk_size: int = 4000) -> dict[str, np.ndarray]:
    """kappa*(d, T): :func:`centred_moments` of :func:`regret_jax.ray_sample` at eta = kappa / sqrt(T).

    The sequences are those of :func:`regret_jax.scan_keys` (d, T, seed); ``map_fn`` as in :func:`limit_scan`.
    """
    etas = scan_etas(T, kappas)[1:]  # without eta = 0
    run = map_fn or _default_map
    rows = run(ray_sample(d, T, etas), scan_keys(d, T, num_sequences, seed), min(chunk_size, num_sequences))
    return centred_moments(*rows, etas, d, T)

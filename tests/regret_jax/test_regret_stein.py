"""The Stein form (12) of F' and the pathwise F'' (docs/regret.md §5.4, §5.6) against numpy loops, closed forms and FD."""
import jax
import jax.numpy as jnp
import numpy as np
from regret_reference import softmax

import regret_jax as rj
from regret_jax.stein import ray_curvature, stein_sample, stein_terms


def _gaussian(seed, shape):
    return rj.flat_normal(jax.random.key(seed), shape)


def _stein_loop(losses, eta):
    """t1 = -sum_t L_{t-1}^T J_t pi_t and t2 = -sum_t L_{t-1}^T J_t e_{a*}, a* = argmin L_T, by a plain loop."""
    T, d = losses.shape
    a_star = int(np.argmin(losses.sum(axis=0)))
    cum, t1, t2 = np.zeros(d), 0.0, 0.0
    for t in range(T):
        pi = softmax(-eta * cum)
        J = np.diag(pi) - np.outer(pi, pi)
        t1 -= cum @ J @ pi
        t2 -= cum @ J @ np.eye(d)[a_star]
        cum = cum + losses[t]
    return t1, t2


def test_stein_terms_match_a_numpy_loop(x64):
    rng = np.random.default_rng(0)
    d, T = 3, 7
    etas = np.array([0.0, 0.3, 1.1, 4.0])
    losses = rng.normal(size=(4, T, d))
    t1, t2 = jax.jit(jax.vmap(stein_terms, in_axes=(0, None)))(jnp.asarray(losses), jnp.asarray(etas))
    want = np.array([[_stein_loop(x, eta) for eta in etas] for x in losses])  # [B, E, 2]
    np.testing.assert_allclose(np.asarray(t1), want[..., 0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(t2), want[..., 1], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(t1)[:, 0], 0.0, atol=1e-13)  # eta = 0: J pi = J 1 / d = 0


def test_t1_is_nonnegative_for_every_sequence(x64):
    losses = _gaussian(0, (2000, 12, 4))
    etas = jnp.asarray([0.0, 0.05, 0.3, 1.0, 3.0, 10.0])
    t1, _ = jax.jit(jax.vmap(stein_terms, in_axes=(0, None)))(losses, etas)
    assert float(jnp.min(t1)) >= -1e-12
    assert float(jnp.min(t1[:, 1:])) > 0  # strictly, once eta > 0 (ties in L have probability 0)


def test_small_eta_slope_of_T1_and_exact_T2_at_zero():
    # E[T1] = eta (d-1) T (T-1) / (2 d^2) + O(eta^3) (T1 is odd in eta: l -> -l maps pi(eta) to pi(-eta));
    # T2(0) = -F'(0)/2 = (T-1) sqrt(T) mu_d / (2 d) (docs/regret.md §5.4)
    d, T, N = 4, 20, 20_000
    eta = 0.02 / np.sqrt(T)  # relative O(eta^2 |L|^2) ~ 4e-4, ten times below the Monte-Carlo error
    losses = _gaussian(1, (N, T, d))
    t1, t2 = jax.jit(jax.vmap(stein_terms, in_axes=(0, None)))(losses, jnp.asarray([0.0, eta]))
    slope = np.asarray(t1[:, 1], np.float64) / eta
    z_slope = (slope.mean() - (d - 1) * T * (T - 1) / (2 * d**2)) / (slope.std(ddof=1) / np.sqrt(N))
    assert abs(z_slope) < 4, z_slope
    assert slope.std(ddof=1) / np.sqrt(N) < 0.01 * slope.mean()  # tight: a factor (T-1)/T or d/(d-1) is many se
    t2_0 = np.asarray(t2[:, 0], np.float64)
    exact = (T - 1) * np.sqrt(T) * rj.mu_d(d) / (2 * d)
    assert abs(t2_0.mean() - exact) < 4 * t2_0.std(ddof=1) / np.sqrt(N)
    assert abs(t2_0.mean() - 1.1 * exact) > 4 * t2_0.std(ddof=1) / np.sqrt(N)


def test_stein_and_pathwise_F_prime_agree_in_expectation_not_pointwise():
    d, T, N = 3, 16, 20_000
    etas = jnp.asarray([0.0, 0.5, 1.0, 5.0]) / np.sqrt(T)  # the root is near 2 / sqrt(T)
    losses = _gaussian(2, (N, T, d))
    R, dR = jax.jit(jax.vmap(rj.ray_regret, in_axes=(0, None)))(losses, etas)
    t1, t2 = jax.jit(jax.vmap(stein_terms, in_axes=(0, None)))(losses, etas)
    path, stein = np.asarray(2 * R * dR, np.float64), np.asarray(2 * (t1 - t2), np.float64)
    diff = stein - path
    z = diff.mean(0) / (diff.std(0, ddof=1) / np.sqrt(N))
    assert np.all(np.abs(z) < 4.5), z
    assert np.all(np.abs(stein.mean(0)) > 5 * stein.std(0, ddof=1) / np.sqrt(N))  # F' != 0 on this grid: the z is not vacuous
    # different estimators: per sequence they disagree by a large fraction of their spread
    assert np.all(np.std(diff, axis=0) > 0.5 * np.std(stein, axis=0))


def test_ray_curvature_against_closed_form_and_finite_differences(x64):
    rng = np.random.default_rng(3)
    d, T, h = 3, 10, 1e-5
    etas = jnp.asarray([0.0, 0.4, 1.5])
    losses = jnp.asarray(rng.normal(size=(64, T, d)))
    R, dR, d2R = jax.jit(jax.vmap(ray_curvature, in_axes=(0, None)))(losses, etas)
    ray = jax.jit(jax.vmap(rj.ray_regret, in_axes=(0, None)))
    R0, dR0 = ray(losses, etas)
    np.testing.assert_array_equal(np.asarray(R), np.asarray(R0))
    np.testing.assert_array_equal(np.asarray(dR), np.asarray(dR0))
    (Rp, dRp), (Rm, dRm) = ray(losses, etas + h), ray(losses, etas - h)
    np.testing.assert_allclose(np.asarray(d2R), np.asarray((dRp - dRm) / (2 * h)), rtol=1e-6, atol=1e-7)
    # F'' = 2 E[R'^2 + R R''] against a central difference of the pathwise F' = 2 E[R R'] on the same sequences
    d2F = np.asarray(jnp.mean(2 * (dR**2 + R * d2R), axis=0))
    fd = np.asarray(jnp.mean(2 * Rp * dRp, axis=0) - jnp.mean(2 * Rm * dRm, axis=0)) / (2 * h)
    np.testing.assert_allclose(d2F, fd, rtol=1e-6)


def test_stein_sample_runs_the_scan_sequences():
    T, d = 9, 3
    etas = rj.scan_etas(T, rj.scan_kappas(num_kappas=8))
    key = rj.scan_keys(d, T, 2)[1]

    @jax.jit
    def both(key):
        losses = jax.random.normal(jax.random.wrap_key_data(key), (T, d))  # the draw of the stationarity scan
        return stein_sample(d, T, etas)(key), rj.ray_sample(d, T, etas)(key), stein_terms(losses, jnp.asarray(etas))

    out, (R, dR), (t1, t2) = both(key)
    for got, want in ((out["R"], R), (out["dR"], dR), (out["t1"], t1), (out["t2"], t2)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert set(out) == {"R", "dR", "d2R", "t1", "t2"} and out["d2R"].shape == (len(etas),)

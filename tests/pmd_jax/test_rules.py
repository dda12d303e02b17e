"""The five fixed rules, the simplex projection and the fitted step (``pmd_jax.rules``; docs/pmd.md section 7),
each against hand-written numbers or an independent numpy computation (``numpy_reference``)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import numpy_reference as ref
from pmd_jax import rules
from pmd_jax.pmd import pmd_step

# A hand example (docs/pmd.md section 7) at eta = 0.8: V = (0.225, 0.05), so pi + eta pi (Q - V) is
# (0.61, 0.306, 0.084) in row 0 and (0.232, 0.192, 0.576) in row 1, both inside the simplex.
PI = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]])
Q = np.array([[0.5, 0.25, -0.5], [0.25, 0.0, 0.0]])
R = np.array([[1.0, 0.0, -1.0], [0.0, 0.5, 0.0]])
ETA = 0.8


def _normalise(w):
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum(-1, keepdims=True)


HAND = {
    "pmd": _normalise([[0.5 * np.exp(0.4), 0.3 * np.exp(0.2), 0.2 * np.exp(-0.4)], [0.2 * np.exp(0.2), 0.2, 0.6]]),
    "additive_projected": np.array([[0.61, 0.306, 0.084], [0.232, 0.192, 0.576]]),
    "prior": PI,
    "boltzmann_q": _normalise([[np.exp(0.4), np.exp(0.2), np.exp(-0.4)], [np.exp(0.2), 1.0, 1.0]]),
    "reward_only": _normalise([[np.exp(0.8), 1.0, np.exp(-0.8)], [1.0, np.exp(0.4), 1.0]]),
}


def test_rules_on_hand_example():
    out = np.asarray(rules.apply_rules(jnp.asarray(PI), jnp.asarray(Q), jnp.asarray(R), ETA))
    assert out.shape == (len(rules.RULES), 2, 3)
    for i, name in enumerate(rules.RULES):
        np.testing.assert_allclose(out[i], HAND[name], rtol=1e-13, atol=1e-15, err_msg=name)


def test_additive_projected_clips_on_hand_example():
    # pi = (0.1, 0.45, 0.45), Q = (-5, 0, 0): V = -0.5, pi + 0.8 pi (Q - V) = (-0.26, 0.63, 0.63); the projection
    # clips the first action (tau = (0.63 + 0.63 - 1) / 2 = 0.13).
    out = rules.apply_rules(jnp.array([[0.1, 0.45, 0.45]]), jnp.array([[-5.0, 0.0, 0.0]]), jnp.zeros((1, 3)), 0.8)
    np.testing.assert_allclose(np.asarray(out[rules.RULES.index("additive_projected")]), [[0.0, 0.5, 0.5]], atol=1e-14)


def _softmax_np(z):
    out = np.empty_like(z)
    for s in range(z.shape[0]):
        w = np.exp(z[s] - z[s].max())
        out[s] = w / w.sum()
    return out


def _random_inputs(rng, n, S=4, A=3):
    pi = rng.dirichlet(np.full(A, 0.7), size=(n, S))
    return pi, rng.normal(0, 2.0, (n, S, A)), rng.uniform(-1, 1, (n, S, A)), rng.uniform(0.2, 1.5, n)


def test_rules_on_random_inputs():
    pi, Q, R, eta = _random_inputs(np.random.default_rng(0), 24)
    out = np.asarray(jax.jit(jax.vmap(rules.apply_rules))(pi, Q, R, eta))
    assert out.shape == (24, len(rules.RULES), 4, 3)
    clipped = 0
    for i in range(24):
        want = {
            "pmd": ref.pmd_step(pi[i], Q[i], eta[i]),
            "additive_projected": ref.project_simplex_np(pi[i] * (1 + eta[i] * (Q[i] - (pi[i] * Q[i]).sum(1)[:, None]))),
            "prior": pi[i],
            "boltzmann_q": _softmax_np(eta[i] * Q[i]),
            "reward_only": _softmax_np(eta[i] * R[i]),
        }
        for j, name in enumerate(rules.RULES):
            np.testing.assert_allclose(out[i, j], want[name], rtol=1e-10, atol=1e-12, err_msg=name)
        clipped += np.sum(want["additive_projected"] == 0)
    assert clipped > 10  # the projection's boundary is exercised


def test_row_l1():
    p = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = np.array([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]])
    np.testing.assert_allclose(np.asarray(rules.row_l1(p, q)), [1.0, 0.0], atol=1e-15)
    a, b = (np.random.default_rng(1).dirichlet(np.ones(3), size=(5, 4)) for _ in range(2))
    want = np.array([[sum(abs(a[i, s, k] - b[i, s, k]) for k in range(3)) for s in range(4)] for i in range(5)])
    np.testing.assert_allclose(np.asarray(rules.row_l1(a, b)), want, rtol=1e-13)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_project_simplex_random_vectors(n):
    rng = np.random.default_rng(n)
    v = rng.normal(0, 2.0, (6, 4, n))  # leading axes with 6 != 4 != n: a swapped axis shows
    got = np.asarray(rules.project_simplex(jnp.asarray(v)))
    np.testing.assert_allclose(got, ref.project_simplex_np(v), atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-12)
    assert got.min() >= 0


TIES = [
    ([0.3, 0.3, 0.3, 0.3], [0.25, 0.25, 0.25, 0.25]),
    ([1.0, 1.0, 0.0], [0.5, 0.5, 0.0]),
    ([2.0, 2.0, 2.0], [1 / 3, 1 / 3, 1 / 3]),
    ([0.5, 0.5, 0.5, -3.0], [1 / 3, 1 / 3, 1 / 3, 0.0]),
    ([1.0, 0.5, 0.5], [2 / 3, 1 / 6, 1 / 6]),
    ([0.0, 3.0, 3.0, -1.0], [0.0, 0.5, 0.5, 0.0]),
    ([-5.0, -5.0, -6.0], [0.5, 0.5, 0.0]),
]


@pytest.mark.parametrize("v, want", TIES)
def test_project_simplex_ties(v, want):
    got = np.asarray(rules.project_simplex(jnp.asarray(v)))
    np.testing.assert_allclose(got, want, atol=1e-14)
    np.testing.assert_allclose(ref.project_simplex_np(np.asarray(v)), want, atol=1e-14)


def test_project_simplex_fixes_simplex_points():
    rng = np.random.default_rng(3)
    on = np.concatenate([rng.dirichlet(np.full(3, 0.5), size=20), np.eye(3), np.full((1, 3), 1 / 3)])
    np.testing.assert_allclose(np.asarray(rules.project_simplex(jnp.asarray(on))), on, atol=1e-15)
    np.testing.assert_allclose(ref.project_simplex_np(on), on, atol=1e-14)


@pytest.fixture(scope="module")
def batch():
    pi, Q, _, _ = _random_inputs(np.random.default_rng(4), 16)
    return pi, Q


@pytest.mark.parametrize("eta", [0.8, 0.05, 0.4, 1.2, 3.7])
def test_fitted_step_recovers_pmd_step(batch, eta):
    pi, Q = map(jnp.asarray, batch)
    fit = jax.jit(rules.fitted_step)
    np.testing.assert_allclose(float(fit(pmd_step(pi, Q, eta), pi, Q)), eta, atol=1e-10)
    # one [S, A] input, and a pooled batch with two leading axes
    np.testing.assert_allclose(float(rules.fitted_step(pmd_step(pi[0], Q[0], eta), pi[0], Q[0])), eta, atol=1e-10)
    pi2, Q2 = pi.reshape(2, 8, 4, 3), Q.reshape(2, 8, 4, 3)
    np.testing.assert_allclose(float(fit(pmd_step(pi2, Q2, eta), pi2, Q2)), eta, atol=1e-10)


def test_fitted_step_float32(batch):
    with jax.enable_x64(False):
        pi, Q = (jnp.asarray(x, jnp.float32) for x in batch)
        got = rules.fitted_step(pmd_step(pi, Q, 0.8), pi, Q)
        assert got.dtype == jnp.float32
    assert abs(float(got) - 0.8) < 2e-6


def test_fitted_step_clips_to_the_bracket(batch):
    pi, Q = map(jnp.asarray, batch)
    np.testing.assert_allclose(float(rules.fitted_step(pmd_step(pi, Q, 12.0), pi, Q)), 10.0, atol=1e-10)
    np.testing.assert_allclose(float(rules.fitted_step(pmd_step(pi, Q, -0.5), pi, Q)), 0.0, atol=1e-10)
    got = rules.fitted_step(pmd_step(pi, Q, 0.3), pi, Q, lo=0.5, hi=2.0)
    np.testing.assert_allclose(float(got), 0.5, atol=1e-10)


def _summed_kl_np(pi_out, pi, Q, eta):
    p_out, p, q = (x.reshape(-1, x.shape[-1]) for x in (pi_out, pi, Q))
    model = ref.pmd_step(p, q, eta)
    return float(np.sum(p_out * (np.log(p_out) - np.log(model))))


def test_fitted_step_matches_brute_force_on_non_pmd_outputs(batch):
    pi, Q = batch
    # a mixture of PMD outputs at varied steps and the prior: no single eta reproduces it
    etas = np.linspace(0.3, 1.5, len(pi))[:, None, None]
    mix = 0.5 * np.stack([ref.pmd_step(pi[i], Q[i], etas[i, 0, 0]) for i in range(len(pi))]) + 0.5 * pi
    got = float(rules.fitted_step(jnp.asarray(mix), jnp.asarray(pi), jnp.asarray(Q)))
    grid = np.linspace(0.0, 2.0, 801)
    want = ref.fitted_step_np(mix, pi, Q, grid)
    assert abs(got - want) <= grid[1] - grid[0], (got, want)
    assert 0.1 < got < 1.0
    # the stationarity condition of docs/pmd.md section 7: the summed KL is flat at the fitted step
    h = 1e-5
    slope = (_summed_kl_np(mix, pi, Q, got + h) - _summed_kl_np(mix, pi, Q, got - h)) / (2 * h)
    curvature = (_summed_kl_np(mix, pi, Q, got + 0.05) + _summed_kl_np(mix, pi, Q, got - 0.05)
                 - 2 * _summed_kl_np(mix, pi, Q, got)) / 0.05**2
    assert abs(slope) < 1e-6 * curvature


def test_fitted_slope():
    x = np.linspace(0.4, 1.2, 9)
    slope, intercept = rules.fitted_slope(jnp.asarray(x), jnp.asarray(0.743 * x + 0.21))
    np.testing.assert_allclose([float(slope), float(intercept)], [0.743, 0.21], rtol=1e-12)
    y = 0.8 * x + np.random.default_rng(5).normal(0, 0.05, x.size)
    np.testing.assert_allclose(np.asarray(rules.fitted_slope(x, y)), np.polyfit(x, y, 1), rtol=1e-10)
    with pytest.raises(ValueError, match="eta_fitted"):
        rules.fitted_slope(x, y[:-1])

"""Fixed-point layer: Q x = x, implicit gradient = unrolled gradient = finite differences."""
import jax
import jax.numpy as jnp
import numpy as np
from regret_reference import stationary

import regret_jax as rj


def _Q(logits):
    return rj.head_matrix(jax.nn.softmax(logits, axis=-1))


def test_fixed_point_is_stationary_batched(x64):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(5, 4, 4)) * 2)
    Q = jax.vmap(_Q)(logits)
    x = jax.vmap(rj.fixed_point)(Q)
    for b in range(5):
        np.testing.assert_allclose(np.asarray(Q[b] @ x[b]), np.asarray(x[b]), atol=1e-13)
        np.testing.assert_allclose(np.asarray(x[b]), stationary(np.asarray(Q[b])), atol=1e-12)
        assert np.all(np.asarray(x[b]) > 0)
    assert not np.allclose(x[0], x[1])


def test_implicit_gradient_matches_unrolled_and_finite_differences(x64):
    rng = np.random.default_rng(1)
    d = 4
    logits = jnp.asarray(rng.normal(size=(d, d)))
    w = jnp.asarray(rng.normal(size=d))

    def objective(lg, solver):
        return jnp.dot(w, solver(_Q(lg))) ** 2

    g_imp = jax.grad(objective)(logits, rj.fixed_point)
    g_unr = jax.grad(objective)(logits, lambda Q: rj.power_iteration(Q, 300))
    np.testing.assert_allclose(np.asarray(g_imp), np.asarray(g_unr), rtol=1e-9, atol=1e-12)
    direction = jnp.asarray(rng.normal(size=(d, d)))
    h = 1e-6
    fd = (objective(logits + h * direction, rj.fixed_point) - objective(logits - h * direction, rj.fixed_point)) / (2 * h)
    np.testing.assert_allclose(float(jnp.sum(g_imp * direction)), float(fd), rtol=1e-7)


def test_implicit_gradient_off_the_stochastic_manifold(x64):
    # a positive Q perturbed in a direction that breaks column sums: normalised power iteration still defines x
    rng = np.random.default_rng(2)
    d = 3
    Q = _Q(jnp.asarray(rng.normal(size=(d, d))))
    w = jnp.asarray(rng.normal(size=d))
    g_imp = jax.grad(lambda M: jnp.dot(w, rj.fixed_point(M)))(Q)
    g_unr = jax.grad(lambda M: jnp.dot(w, rj.power_iteration(M, 300)))(Q)
    np.testing.assert_allclose(np.asarray(g_imp), np.asarray(g_unr), rtol=1e-9, atol=1e-12)

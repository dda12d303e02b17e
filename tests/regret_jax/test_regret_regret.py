"""Eqs. (4), (5), (7), (8) against brute force; the BM decomposition to machine precision."""
import jax
import jax.numpy as jnp
import numpy as np
from regret_reference import blum_mansour, external_regret, swap_regret

import regret_jax as rj


def _random_policies(rng, T, d):
    p = rng.exponential(size=(T, d))
    return p / p.sum(axis=1, keepdims=True)


def test_external_and_swap_regret_brute_force(x64):
    rng = np.random.default_rng(0)
    T, d, B = 7, 3, 4
    pols = np.stack([_random_policies(rng, T, d) for _ in range(B)])
    losses = rng.normal(size=(B, T, d)) + np.arange(B)[:, None, None] * rng.normal(size=(B, 1, d))
    ext = jax.vmap(rj.external_regret)(jnp.asarray(pols), jnp.asarray(losses))
    swp = jax.vmap(rj.swap_regret)(jnp.asarray(pols), jnp.asarray(losses))
    cum = jax.vmap(rj.cumulative_regret)(jnp.asarray(pols), jnp.asarray(losses))
    for b in range(B):
        np.testing.assert_allclose(float(ext[b]), external_regret(pols[b], losses[b]), rtol=1e-12)
        np.testing.assert_allclose(float(swp[b]), swap_regret(pols[b], losses[b]), rtol=1e-12)
        for t in range(T):
            np.testing.assert_allclose(float(cum[b, t]), external_regret(pols[b, : t + 1], losses[b, : t + 1]), rtol=1e-12)
        assert swp[b] >= ext[b] - 1e-12  # swap regret dominates external regret


def test_hand_example():
    # T = 2, d = 2: pi = (1, 0) both rounds, l_1 = (1, 0), l_2 = (1, 0): learner 2, best fixed 0
    pols = jnp.array([[1.0, 0.0], [1.0, 0.0]])
    losses = jnp.array([[1.0, 0.0], [1.0, 0.0]])
    assert float(rj.external_regret(pols, losses)) == 2.0
    assert float(rj.swap_regret(pols, losses)) == 2.0


def test_blum_mansour_recurrence_and_decomposition(x64):
    rng = np.random.default_rng(3)
    d, T = 3, 40
    for eta, shift in [(0.4, 0.0), (1.3, 0.7)]:  # two different instances
        losses = rng.normal(size=(T, d)) + shift * np.arange(d)
        rollout = rj.run_online(rj.swap_learner(rj.bm_params(d, eta)), jnp.asarray(losses))
        x = np.asarray(rollout.policies)
        q = np.asarray(jax.nn.softmax(rollout.states.logits, axis=-1))  # [T, head j, action]
        x_ref, q_ref = blum_mansour(losses, eta)
        np.testing.assert_allclose(x, x_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(q, q_ref, rtol=1e-10, atol=1e-12)
        heads = rj.head_regrets(jnp.asarray(x), jnp.asarray(q), jnp.asarray(losses))
        total = float(jnp.sum(heads))
        np.testing.assert_allclose(total, float(rj.swap_regret(jnp.asarray(x), jnp.asarray(losses))), rtol=0, atol=1e-12)
        np.testing.assert_allclose(total, swap_regret(x, losses), rtol=0, atol=1e-11)
        assert total <= d * float(jnp.max(heads)) + 1e-12


def test_head_regret_is_not_swap_regret_off_the_fixed_point(x64):
    # Eq. (8) needs Q x = x: with x replaced by uniform play it fails, so the test above can fail.
    rng = np.random.default_rng(4)
    d, T = 3, 30
    losses = rng.normal(size=(T, d)) + np.arange(d)
    x_ref, q_ref = blum_mansour(losses, 0.8)
    uniform = np.full_like(x_ref, 1.0 / d)
    heads = rj.head_regrets(jnp.asarray(uniform), jnp.asarray(q_ref), jnp.asarray(losses))
    assert abs(float(jnp.sum(heads)) - swap_regret(uniform, losses)) > 1e-3

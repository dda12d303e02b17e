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


def _constant_heads(logits):
    """Heads with V = 0, k = 0, b = 1 and v_j = ``logits[j]``: after t rounds u_j = t v_j, whatever the losses."""
    d = logits.shape[0]
    return {"V": jnp.zeros((d, d, d * d)), "k": jnp.zeros((d, d * d)), "v": jnp.asarray(logits), "b": jnp.ones(d)}


def test_swap_learner_counts_non_converged_fixed_points():
    d, T = 3, 7
    losses = jax.random.normal(jax.random.key(0), (T, d))
    # column 1 -> actions 2 or 3, columns 2 and 3 -> action 1: period 2 from the uniform start, never converges
    periodic = np.array([[-30.0, 0.0, 0.0], [0.0, -30.0, -30.0], [0.0, -30.0, -30.0]])
    rollout = jax.jit(lambda h: rj.run_online(rj.swap_learner(h), losses))(_constant_heads(periodic))
    # round 1 plays the fixed point of uniform Q (exact); rounds 2..T play the oscillating iterate
    assert int(rollout.final_state.nonconverged) == T - 1
    np.testing.assert_array_equal(np.asarray(rollout.states.nonconverged), np.maximum(np.arange(T) - 1, 0))
    assert not bool(np.asarray(rollout.states.converged)[1:].any()) and bool(rollout.states.converged[0])
    # a mixing Q (Blum-Mansour heads) converges every round, and the played x is the state's fixed point
    bm = jax.jit(lambda: rj.run_online(rj.swap_learner(rj.bm_params(d, 0.7)), losses))()
    assert int(bm.final_state.nonconverged) == 0
    np.testing.assert_array_equal(np.asarray(bm.policies), np.asarray(bm.states.x))
    Q = rj.head_matrix(jax.nn.softmax(bm.states.logits, axis=-1))
    np.testing.assert_allclose(np.asarray(jnp.einsum("tab,tb->ta", Q, bm.policies)), np.asarray(bm.policies), atol=1e-5)


def test_self_play_reports_both_learners_final_states():
    periodic = np.array([[-30.0, 0.0, 0.0], [0.0, -30.0, -30.0], [0.0, -30.0, -30.0]])
    game = rj.zero_sum_game(rj.WEIGHTED_RPS)
    row, col = rj.swap_learner(_constant_heads(periodic)), rj.swap_learner(rj.bm_params(3, 0.5))
    out = jax.jit(lambda r, c: rj.self_play(r, c, game, 6))(row, col)
    assert int(out.row_state.nonconverged) == 5 and int(out.col_state.nonconverged) == 0

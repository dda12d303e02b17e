"""Eqs. (1)-(2), (9): running-sum attention against a literal quadratic loop; Theorem-1 forward = FTRL."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from regret_reference import hedge, quadratic_attention, softmax

import regret_jax as rj


def _full_params(rng, d):
    return [rng.normal(size=s) * 0.4 for s in [(d, d), (d, d), (d, d), (d,), (d,), (d,), (d,)]]


def test_running_sum_equals_quadratic_eq1(x64):
    rng = np.random.default_rng(0)
    d, T, B = 4, 12, 3
    full = [_full_params(rng, d) for _ in range(B)]  # batch elements differ in params and data
    losses = rng.normal(size=(B, T, d))
    reduced = [rj.full_to_reduced(*map(jnp.asarray, f)) for f in full]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *reduced)
    got = jax.vmap(lambda p, l: jax.nn.softmax(rj.causal_logits(p, l), axis=-1))(stacked, jnp.asarray(losses))
    for b in range(B):
        want = quadratic_attention(*full[b], losses[b])
        np.testing.assert_allclose(np.asarray(got[b]), want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.asarray(got[:, 0]), 1.0 / d)  # round 1 is uniform


def test_theorem1_configuration_is_entropic_ftrl(x64):
    rng = np.random.default_rng(1)
    d, T = 5, 30
    etas = np.array([0.05, 0.3, 1.7])
    losses = rng.normal(size=(3, T, d)) + rng.normal(size=(3, 1, d))
    module = rj.SimplexAttention(d)
    for eta, seq in zip(etas, losses):
        got = module.apply({"params": {"head": rj.ftrl_params(d, eta)}}, jnp.asarray(seq))
        np.testing.assert_allclose(np.asarray(got), hedge(seq, eta), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(np.asarray(rj.ftrl_policies(jnp.asarray(seq), eta)), hedge(seq, eta), rtol=1e-13)


def test_multihead_bm_configuration_reads_own_block(x64):
    rng = np.random.default_rng(2)
    d, T, eta = 3, 9, 0.6
    z = rng.normal(size=(T, d * d))
    q = rj.MultiHeadSimplexAttention(d).apply({"params": {"heads": rj.bm_params(d, eta)}}, jnp.asarray(z))
    assert q.shape == (T, d, d)
    for j in range(d):
        np.testing.assert_allclose(np.asarray(q[:, j]), hedge(z[:, j * d:(j + 1) * d], eta), rtol=1e-13)
    Q = rj.head_matrix(q)
    np.testing.assert_allclose(np.asarray(Q.sum(axis=1)), 1.0, rtol=1e-13)  # column-stochastic


def test_module_init_shapes_and_heads_differ():
    d = 3
    variables = jax.jit(rj.MultiHeadSimplexAttention(d).init)(jax.random.key(0), jnp.zeros((4, d * d)))
    heads = variables["params"]["heads"]
    assert heads["V"].shape == (d, d, d * d) and heads["k"].shape == (d, d * d) and heads["b"].shape == (d,)
    assert not np.allclose(heads["V"][0], heads["V"][1])
    single = jax.eval_shape(rj.SimplexAttention(d).init, jax.random.key(0), jnp.zeros((4, d)))["params"]["head"]
    assert single["V"].shape == (d, d) and single["b"].shape == ()


def test_token_contribution_single_token():
    # hand example: V = I, v = (1, 0), k = (1, -1), b = 2, z = (3, 1): (z + v) * (2 + 3 - 1) = (16, 4)
    params = {"V": jnp.eye(2), "v": jnp.array([1.0, 0.0]), "k": jnp.array([1.0, -1.0]), "b": jnp.array(2.0)}
    np.testing.assert_allclose(rj.token_contributions(params, jnp.array([3.0, 1.0])), [16.0, 4.0])
    with pytest.raises(AssertionError):
        rj.token_contributions(params, jnp.ones(3))


def test_softmax_reference_sanity():
    np.testing.assert_allclose(softmax(np.array([0.0, np.log(3.0)])), [0.25, 0.75])

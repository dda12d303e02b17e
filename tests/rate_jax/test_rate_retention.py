"""The MRV retention bound on random instances meeting its assumptions, its counterexamples, the
convex form of a multi-head MRV update and the cue separation of two memories."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rate_jax import (MRV, alignment_alpha, counterexample, cue_separation, mrv_convex_form, mrv_update,
                      no_anti_alignment, retention_bound, retention_ratio, sample_instances)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _check(key, m, d, alpha):
    """Vectorised over 64 instances: (A1 error, A2 error, A3 margin, A4 holds, bound margin)."""
    memory, values, attention = sample_instances(key, 64, m, d, alpha)
    ratio = retention_ratio(memory, mrv_update(attention, values))  # A5
    return (jnp.max(jnp.abs(jnp.linalg.norm(memory, axis=-1) - 1.0)),
            jnp.max(jnp.abs(attention.sum(-1) - 1.0)),
            jnp.min(alignment_alpha(memory, values, attention) - alpha),
            jnp.all(no_anti_alignment(memory, values)),
            jnp.min(retention_bound(alpha, m) - ratio))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), m=st.sampled_from([2, 7]), d=st.just(3),
       alpha=st.floats(0.0, 1.0))
def test_bound_holds_when_assumptions_hold(seed, m, d, alpha):
    a1, a2, a3, a4, margin = _check(jax.random.key(seed), m, d, alpha)
    assert a1 < 1e-5 and a2 < 1e-5 and a3 > -1e-5 and bool(a4)
    assert margin > -1e-5


def test_bound_closed_forms():
    assert float(retention_bound(1.0, 1)) == 0.0
    np.testing.assert_allclose(float(retention_bound(0.0, 5)), np.sqrt(2.0))
    np.testing.assert_allclose(float(retention_bound(0.5, 4)), np.sqrt(2 * (1 - 0.125)))
    # perfect alignment with identity attention: nothing changes
    eye = np.eye(3)
    assert float(retention_ratio(eye, mrv_update(eye, eye))) == 0.0
    # hand example, m = 2, d = 2: m_i = e1, values (e1, e2), attention rows (1/2, 1/2):
    # u_i = (e1 + e2)/2, ||u_i - m_i||^2 = 1/2 per row, ratio = sqrt(1/2) <= sqrt(2(1 - 1/2)) = 1
    memory = np.array([[1.0, 0.0], [1.0, 0.0]])
    values = np.array([[1.0, 0.0], [0.0, 1.0]])
    half = np.full((2, 2), 0.5)
    np.testing.assert_allclose(float(retention_ratio(memory, mrv_update(half, values))), np.sqrt(0.5), rtol=1e-6)
    np.testing.assert_allclose(float(alignment_alpha(memory, values, half)), 1.0, rtol=1e-6)


@pytest.mark.parametrize("which", ["A1", "A3", "A4"])
def test_bound_fails_when_an_assumption_is_dropped(which):
    memory, values, attention, alpha = counterexample(which)
    ratio = float(retention_ratio(memory, mrv_update(attention, values)))
    assert ratio > float(retention_bound(alpha, memory.shape[0])) + 0.1
    if which == "A4":
        assert not bool(no_anti_alignment(memory, values))
    if which == "A3":
        assert float(alignment_alpha(memory, values, attention)) < alpha
    if which == "A1":
        assert not np.allclose(np.linalg.norm(values, axis=-1), 1.0)
    with pytest.raises(ValueError, match="which"):
        counterexample("A9")


def test_sampler_reaches_both_ends_of_the_bound():
    """m = 1, alpha = 1: the update returns m_1 (bound 0); m = 3, alpha = 0: far from trivial."""
    memory, values, attention = sample_instances(jax.random.key(1), 64, 1, 4, 1.0)
    assert float(retention_ratio(memory, mrv_update(attention, values)).max()) < 1e-3
    memory, values, attention = sample_instances(jax.random.key(2), 64, 3, 4, 0.0)
    assert float(retention_ratio(memory, mrv_update(attention, values)).max()) > 0.3


@pytest.mark.parametrize("heads", [1, 2])
def test_mrv_convex_form_is_the_mrv_update(heads):
    """The trained-model reading: the H-head MRV output equals weights @ effective values, with
    non-negative weights whose rows sum to one, against the flax module itself."""
    b, m, d = 3, 4, 8
    k_old, k_new, k_init, k_bias = jax.random.split(jax.random.key(heads), 4)
    old, new = jax.random.normal(k_old, (b, m, d)), jax.random.normal(k_new, (b, m, d))
    params = MRV(heads, d).init(k_init, old, new)
    # non-zero biases, so a dropped bias term shows
    params = jax.tree.map(lambda p, k: p + 0.3 * jax.random.normal(k, p.shape), params,
                          jax.tree.unflatten(jax.tree.structure(params),
                                             list(jax.random.split(k_bias, len(jax.tree.leaves(params))))))
    out, attention = MRV(heads, d).apply(params, old, new)
    weights, values = mrv_convex_form(params["params"], new, attention)
    assert weights.shape == (b, m, heads * m) and values.shape == (b, heads * m, d)
    np.testing.assert_allclose(np.asarray(weights @ values), np.asarray(out), atol=1e-5, rtol=1e-5)
    assert float(weights.min()) >= 0.0
    np.testing.assert_allclose(np.asarray(weights.sum(-1)), 1.0, atol=1e-6)


def test_cue_separation_hand_examples():
    a = np.array([[3.0, 4.0]])  # ||a|| = 5
    assert float(cue_separation(a, a)) == 0.0
    np.testing.assert_allclose(float(cue_separation(a, np.zeros((1, 2)))), 5.0 / 2.5)
    np.testing.assert_allclose(float(cue_separation(a, np.array([[3.0, 0.0]]))), 4.0 / 4.0)
    np.testing.assert_allclose(float(cue_separation(a, -a)), 10.0 / 5.0)

"""Sampling arms and the closed loop of the coverage study (PolicyAttention, arXiv 2609.30500, sections 8 and 15)."""
import jax
import jax.numpy as jnp
import numpy as np

from pmd_jax import decoder
from pmd_jax.loop import closed_loop, decoder_critic, exact_critic
from pmd_jax.mdp import RandomMDPFamily, bellman_operator, uniform_policy
from pmd_jax.pmd import pmd_step
from pmd_jax.sampling import Arm, sample_packet

S, A, N_MAX = 4, 3, 4 * 3 * 24


def _mdp(seed=0):
    fam = RandomMDPFamily(gamma=0.8, r_max=1.0, concentration=1.0, num_states=S, num_actions=A)
    return fam.sample(jax.random.key(seed))


def _packets(arm, m, pi, seed=0, stream_state=2):
    keys = jax.random.split(jax.random.key(seed), 8)
    return jax.vmap(lambda k: sample_packet(k, _mdp(), pi, arm, m, stream_state, N_MAX))(keys)


def _np(tree):
    return jax.tree.map(np.asarray, tree)


def test_balanced_arm_has_exactly_m_per_pair():
    for m in (6, 24):
        p = _np(_packets(Arm.BALANCED, m, uniform_policy(S, A)))
        assert np.all(p.counts == m) and np.all(p.transitions.valid.sum(1) == S * A * m)
        tr = p.transitions
        counts = np.zeros((8, S, A), int)
        for b in range(8):
            for i in np.flatnonzero(tr.valid[b]):
                counts[b, tr.s[b, i], tr.a[b, i]] += 1
        assert np.array_equal(counts, p.counts)


def test_uniform_pairs_budget_and_counts():
    p = _np(_packets(Arm.UNIFORM_PAIRS, 6, uniform_policy(S, A)))
    assert np.all(p.counts.sum((1, 2)) == S * A * 6) and np.all(p.transitions.valid.sum(1) == 72)
    assert p.counts.min() < 6 < p.counts.max()  # random pairs, not balanced
    tr = p.transitions
    for b in range(8):
        v = tr.valid[b]
        np.testing.assert_array_equal(np.bincount(tr.s[b][v] * A + tr.a[b][v], minlength=S * A), p.counts[b].reshape(-1))


def test_on_policy_stream_is_one_continuing_trajectory():
    pi = jnp.asarray(np.random.default_rng(0).dirichlet(np.ones(A), size=S))
    p = _np(_packets(Arm.ON_POLICY, 6, pi, stream_state=2))
    tr = p.transitions
    for b in range(8):
        v = np.flatnonzero(tr.valid[b])
        assert len(v) == 72 and tr.s[b, 0] == 2
        np.testing.assert_array_equal(tr.s_next[b, v[:-1]], tr.s[b, v[1:]])  # the chain continues
        np.testing.assert_array_equal(tr.a_next[b, v[:-1]], tr.a[b, v[1:]])  # a' is the next action taken
        assert p.stream_state[b] == tr.s_next[b, v[-1]]
        np.testing.assert_array_equal(np.bincount(tr.s[b][v] * A + tr.a[b][v], minlength=S * A), p.counts[b].reshape(-1))
    assert np.all(p.counts.sum((1, 2)) == 72)


def test_exploring_stream_targets_the_policy_but_behaves_uniformly_at_times():
    greedy = jnp.eye(A)[jnp.array([0, 1, 2, 0])]  # deterministic pi_hat
    p = _np(_packets(Arm.EXPLORING, 24, jnp.clip(greedy, 1e-30, 1.0)))
    tr = p.transitions
    v = tr.valid
    np.testing.assert_array_equal(tr.a_next[v], np.array([0, 1, 2, 0])[tr.s_next[v]])  # a' ~ pi_hat
    off = tr.a[v] != np.array([0, 1, 2, 0])[tr.s[v]]
    # Behaviour deviates with probability 0.2 * (A - 1) / A = 0.133 per step.
    assert 0.09 < off.mean() < 0.18


def test_exact_backup_is_one_exact_policy_evaluation_step():
    mdp = _mdp(1)
    params = decoder.construct_params(S, A, 0.8, 16.0, 16.0)
    pi = jnp.asarray(np.random.default_rng(1).dirichlet(np.ones(A), size=S))
    Q = jnp.asarray(np.random.default_rng(2).normal(size=(S, A)))
    out = decoder_critic(params, decoder.Layout(S, A), mdp, Arm.EXACT_BACKUP, 0, N_MAX)(jax.random.key(0), pi, Q, 0)
    P, R = np.asarray(mdp.P), np.asarray(mdp.R)
    want = R + 0.8 * np.einsum("sat,t->sa", P, (np.asarray(pi) * np.asarray(Q)).sum(1))
    np.testing.assert_allclose(out.Q_next, want, atol=1e-5)
    assert np.all(np.asarray(out.counts) == 0)


def test_carry_q_leaves_exactly_the_unvisited_pairs_unchanged():
    mdp = _mdp(2)
    params = decoder.construct_params(S, A, 0.8, 16.0, 16.0)
    layout = decoder.Layout(S, A)
    pi = jnp.clip(jnp.eye(A)[jnp.array([0, 0, 1, 1])], 1e-6, 1.0)  # a near-deterministic stream leaves pairs unvisited
    pi = pi / pi.sum(1, keepdims=True)
    Q = jnp.asarray(np.random.default_rng(3).normal(size=(S, A)))
    key = jax.random.key(5)
    carry = decoder_critic(params, layout, mdp, Arm.ON_POLICY_CARRY, 6, N_MAX)(key, pi, Q, 1)
    plain = decoder_critic(params, layout, mdp, Arm.ON_POLICY, 6, N_MAX)(key, pi, Q, 1)
    unvisited = np.asarray(carry.counts) == 0
    assert unvisited.any() and (~unvisited).any()
    np.testing.assert_array_equal(np.asarray(carry.Q_next)[unvisited], np.asarray(Q)[unvisited])
    np.testing.assert_array_equal(np.asarray(carry.Q_next)[~unvisited], np.asarray(plain.Q_next)[~unvisited])
    np.testing.assert_array_equal(carry.counts, plain.counts)


def test_loop_records_residuals_against_the_exact_backup():
    """In the loop, delta_k is the sup distance to F^{pi_hat} Q_k; it is 0 for the exact critic."""
    mdp = _mdp(3)
    params = decoder.construct_params(S, A, 0.8, 16.0, 16.0)
    layout = decoder.Layout(S, A)
    actor = lambda pi, Q, eta: decoder.apply_actor(params, layout, pi, Q, eta)
    pi0, Q0 = uniform_policy(S, A, jnp.float64), jnp.zeros((S, A))
    exact = closed_loop(jax.random.key(0), mdp, actor, exact_critic(mdp), pi0, Q0, 0, 0.8, 5)
    assert float(exact.delta.max()) == 0.0
    sampled = closed_loop(jax.random.key(0), mdp, actor, decoder_critic(params, layout, mdp, Arm.BALANCED, 6, N_MAX), pi0, Q0, 0, 0.8, 5)
    assert float(sampled.delta.min()) > 0.0 and np.all(np.asarray(sampled.counts) == 6)
    # Round 0 by hand: pi_hat_1 from the actor, then delta_0 = |Q_1 - F^{pi_hat_1} Q_0|.
    pi1 = actor(pi0, Q0, 0.8)
    critic = decoder_critic(params, layout, mdp, Arm.BALANCED, 6, N_MAX)
    q1 = critic(jax.random.split(jax.random.key(0), 5)[0], pi1, Q0, 0).Q_next
    np.testing.assert_allclose(sampled.delta[0], np.max(np.abs(q1 - bellman_operator(mdp, pi1, Q0))), rtol=1e-6)


def test_packet_rewards_are_those_of_the_sampled_pair_on_every_arm():
    """A transition (s, a, r, s', a') carries r = R(s, a) of its own pair, not of the successor (R distinct per pair)."""
    mdp = _mdp()
    R = np.asarray(mdp.R)
    assert len(np.unique(R)) == R.size
    for arm in (Arm.BALANCED, Arm.UNIFORM_PAIRS, Arm.ON_POLICY, Arm.EXPLORING):
        tr = _np(_packets(arm, 6, uniform_policy(S, A)).transitions)
        for b in range(tr.s.shape[0]):
            for i in np.flatnonzero(tr.valid[b]):
                assert tr.r[b, i] == R[tr.s[b, i], tr.a[b, i]], (arm, b, i)


def test_loop_routing_error_is_measured_against_pmd_of_the_old_policy():
    """zeta_k = max_s ||pi_hat_{k+1}(.|s) - PMD(pi_k, Q_k)(.|s)||_1: an actor that is exactly PMD has zeta = 0 on
    every round; an actor that returns the uniform policy has, by hand, ||uniform - PMD(pi_k, Q_k)||_1 with pi_k
    uniform and Q_k the exact critic's iterates."""
    mdp = _mdp(1)
    pi0, Q0 = uniform_policy(S, A, jnp.float64), jnp.zeros((S, A))
    exact = closed_loop(jax.random.key(0), mdp, pmd_step, exact_critic(mdp), pi0, Q0, 0, 0.8, 4)
    assert float(np.max(exact.zeta)) < 1e-12
    stay = lambda pi, Q, eta: pi0
    trace = closed_loop(jax.random.key(0), mdp, stay, exact_critic(mdp), pi0, Q0, 0, 0.8, 4)
    Q, expected = np.zeros((S, A)), []
    P, R, u = np.asarray(mdp.P), np.asarray(mdp.R), np.full((S, A), 1.0 / A)
    for _ in range(4):
        w = u * np.exp(0.8 * Q)
        expected.append(np.max(np.abs(u - w / w.sum(1, keepdims=True)).sum(1)))
        Q = R + 0.8 * np.einsum("xay,y->xa", P, (u * Q).sum(1))
    np.testing.assert_allclose(trace.zeta, expected, rtol=1e-6, atol=1e-9)
    assert expected[1] > 1e-3

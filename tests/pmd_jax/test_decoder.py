"""The decoder's tests listed in section 16 of the PolicyAttention paper (arXiv 2609.30500), each against
an independent computation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pmd_jax import bound, decoder
from pmd_jax import numpy_reference as ref
from pmd_jax.mdp import RandomMDPFamily, uniform_policy


def _random_instance(seed, S, A, r_max=1.0, gamma=0.8):
    """A random policy with full support and a Q table with |Q| <= B_Q."""
    rng = np.random.default_rng(seed)
    pi = rng.dirichlet(np.ones(A), size=S)
    q_bound = r_max / (1 - gamma)
    Q = rng.uniform(-q_bound, q_bound, size=(S, A))
    return pi, Q


def _intermediates(cfg, tokens, mask):
    params = decoder.construct_params(cfg.num_states, cfg.num_actions, cfg.gamma, cfg.kappa, cfg.nu)
    model = decoder.make_decoder(cfg.num_states, cfg.num_actions)
    out, state = model.apply(params, tokens, mask, mutable=["intermediates"])
    return out, state["intermediates"]


def _balanced_transitions(seed, mdp, pi_next, m):
    """``m`` fresh samples per pair: s' ~ P(.|s,a), a' ~ pi_next(.|s')."""
    rng = np.random.default_rng(seed)
    S, A = mdp.R.shape
    s, a = np.repeat(np.arange(S), A * m), np.tile(np.repeat(np.arange(A), m), S)
    P = np.asarray(mdp.P)
    s_next = np.array([rng.choice(S, p=P[i, j]) for i, j in zip(s, a)])
    a_next = np.array([rng.choice(A, p=np.asarray(pi_next)[k]) for k in s_next])
    r = np.asarray(mdp.R)[s, a]
    perm = rng.permutation(len(s))  # packet order must not matter
    return decoder.Transitions(*(jnp.asarray(x[perm]) for x in (s, a, r, s_next, a_next)), valid=jnp.ones(len(s), bool))


@pytest.mark.parametrize("S,A", [(2, 2), (4, 3), (3, 5)])
def test_shapes_and_widths(S, A):
    L = decoder.Layout(S, A)
    assert L.width == 5 * S + 5 * A + 11 and L.head_dim == S + A + 3
    params = decoder.construct_params(S, A, 0.8, 8.0, 20.0)
    init = decoder.make_decoder(S, A).init(jax.random.key(0), jnp.zeros((3, L.width)), jnp.ones((3, 3), bool))
    assert jax.tree.structure(params) == jax.tree.structure(init)
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, init)
    cfg = decoder.DecoderConfig(S, A, 0.8, 8.0, 20.0)
    pi, Q = _random_instance(0, S, A)
    assert decoder.actor_call(params, cfg, jnp.asarray(pi), jnp.asarray(Q), 0.5).shape == (S, A)


def test_score_identity():
    """Actor logits = log pi + eta Q + kappa 1{same state} on memories, -nu on queries."""
    S, A, kappa, nu, eta = 3, 4, 6.0, 11.0, 0.7
    cfg = decoder.DecoderConfig(S, A, 0.8, kappa, nu)
    pi, Q = _random_instance(1, S, A)
    tokens = decoder.actor_tokens(cfg.layout, jnp.asarray(pi), jnp.asarray(Q), eta)
    mask = decoder.attention_mask(cfg.layout, tokens)
    _, inter = _intermediates(cfg, tokens, mask)
    logits = np.asarray(inter["attn_1"]["logits"][0])[0]  # block 2, PMD head: [T, T]
    for s in range(S):
        row = logits[S * A + s]
        expected = [np.log(pi[sm, a]) + eta * Q[sm, a] + kappa * (sm == s) for sm in range(S) for a in range(A)]
        expected += [-nu] * (s + 1)  # the visible query tokens 0..s
        got = row[: S * A + s + 1]
        shift = got - np.array(expected)
        np.testing.assert_allclose(shift, shift[0], atol=1e-12)


def test_masked_exactness():
    """With the state-local mask the row is PMD mixed only with the query tokens' uniform values."""
    S, A, kappa, nu, eta = 4, 3, 5.0, 3.0, 1.3
    cfg = decoder.DecoderConfig(S, A, 0.8, kappa, nu)
    params = decoder.construct_params(S, A, cfg.gamma, kappa, nu)
    pi, Q = _random_instance(2, S, A)
    got = np.asarray(decoder.actor_call(params, cfg, jnp.asarray(pi), jnp.asarray(Q), eta, state_local=True))
    p = ref.pmd_step(pi, Q, eta)
    for s in range(S):
        z_int = np.exp(kappa) * np.sum(pi[s] * np.exp(eta * Q[s]))
        z_q = (s + 1) * np.exp(-nu)
        np.testing.assert_allclose(got[s], (z_int * p[s] + z_q / A) / (z_int + z_q), rtol=0, atol=1e-13)
    big_nu = decoder.construct_params(S, A, cfg.gamma, kappa, 60.0)
    exact = np.asarray(decoder.actor_call(big_nu, cfg, jnp.asarray(pi), jnp.asarray(Q), eta, state_local=True))
    np.testing.assert_allclose(exact, p, atol=1e-14)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    S=st.integers(1, 3),
    A=st.integers(1, 3),
    eta=st.floats(0.0, 3.0),
    kappa=st.floats(0.5, 20.0),
    nu=st.floats(0.5, 20.0),
)
def test_routing_envelope(seed, S, A, eta, kappa, nu):
    """zeta <= 2R/(1+R) with R from the declared caps (section 13)."""
    with jax.enable_x64(True):
        cfg = decoder.DecoderConfig(S, A, 0.8, kappa, nu)
        params = decoder.construct_params(S, A, cfg.gamma, kappa, nu)
        pi, Q = _random_instance(seed, S, A)
        got = np.asarray(decoder.actor_call(params, cfg, jnp.asarray(pi), jnp.asarray(Q), eta))
        zeta = np.max(np.abs(got - ref.pmd_step(pi, Q, eta)).sum(axis=1))
        envelope = float(bound.routing_error_bound(S, eta, kappa, nu, cfg.q_bound))
        assert zeta <= envelope + 1e-12


def test_critic_bound_and_cross_check():
    """The critic equals the per-pair TD mean up to 2 B_Q (gamma lambda_1 + lambda_2)."""
    S, A, m, gamma = 4, 3, 5, 0.8
    for kappa, nu in [(6.0, 8.0), (16.0, 16.0)]:
        cfg = decoder.DecoderConfig(S, A, gamma, kappa, nu)
        params = decoder.construct_params(S, A, gamma, kappa, nu)
        family = RandomMDPFamily(gamma=gamma, r_max=1.0, concentration=1.0, num_states=S, num_actions=A)
        mdp = family.sample(jax.random.key(3))
        pi, Q = _random_instance(4, S, A)
        tr = _balanced_transitions(5, mdp, pi, m)
        got = np.asarray(decoder.critic_call(params, cfg, jnp.asarray(Q), tr))
        want = ref.td_targets_mean(Q, *(np.asarray(x) for x in tr[:5]), gamma)
        lam1, lam2 = bound.critic_leak_bounds(S, A, kappa, nu, S * A * m, m)
        err = np.max(np.abs(got - want))
        assert err <= float(bound.critic_error_bound(cfg.q_bound, gamma, lam1, lam2)) + 1e-12
        if kappa == 16.0:
            assert err < 1e-5  # margins of the coverage study: the critic is TD up to tiny leakage


def test_critic_masks_unused_slots():
    """Masked (invalid) transition slots change nothing, whatever they contain."""
    S, A, gamma = 2, 3, 0.8
    cfg = decoder.DecoderConfig(S, A, gamma, 10.0, 10.0)
    params = decoder.construct_params(S, A, gamma, 10.0, 10.0)
    Q = jnp.asarray(_random_instance(6, S, A)[1])
    s = jnp.array([0, 0, 1, 1, 0, 1, 1, 0, 1])
    a = jnp.array([0, 1, 2, 0, 2, 1, 2, 0, 1])
    tr = decoder.Transitions(s, a, jnp.linspace(-1, 1, 9), jnp.roll(s, 1), jnp.roll(a, 2), jnp.ones(9, bool))
    base = decoder.critic_call(params, cfg, Q, tr)
    junk = decoder.Transitions(
        jnp.concatenate([s, jnp.array([1, 0])]), jnp.concatenate([a, jnp.array([2, 2])]),
        jnp.concatenate([tr.r, jnp.array([50.0, -50.0])]), jnp.concatenate([tr.s_next, jnp.array([0, 1])]),
        jnp.concatenate([tr.a_next, jnp.array([1, 0])]), jnp.concatenate([tr.valid, jnp.array([False, False])]),
    )
    np.testing.assert_allclose(decoder.critic_call(params, cfg, Q, junk), base, atol=1e-14)


def test_cross_call_silence():
    """Critic heads write nothing on actor packets; the actor head writes nothing the critic reads."""
    S, A = 3, 2
    cfg = decoder.DecoderConfig(S, A, 0.8, 8.0, 12.0)
    L = cfg.layout
    pi, Q = (jnp.asarray(x) for x in _random_instance(7, S, A))
    tokens = decoder.actor_tokens(L, pi, Q, 0.9)
    out, _ = _intermediates(cfg, tokens, decoder.attention_mask(L, tokens))
    assert np.all(np.asarray(out[:, L.index("target")]) == 0.0)
    assert np.all(np.asarray(out[:, L.index("q_out")]) == 0.0)
    # In the critic call no token attends forward, and evaluation queries put only
    # leakage-sized mass outside their own transitions; eta_q stays zero.
    tr = decoder.Transitions(jnp.array([0, 1, 2, 0]), jnp.array([1, 0, 1, 0]), jnp.array([0.5, -0.2, 0.1, 0.9]),
                             jnp.array([2, 2, 0, 1]), jnp.array([0, 1, 1, 0]), jnp.ones(4, bool))
    ctok = decoder.critic_tokens(L, Q, tr)
    cmask = decoder.attention_mask(L, ctok)
    cout, inter = _intermediates(cfg, ctok, cmask)
    assert np.all(np.asarray(cout[:, L.index("eta_q")]) == 0.0)
    avg = np.asarray(inter["attn_1"]["weights"][0])[1]  # block 2, averaging head: [T, T]
    SA, n = S * A, 4
    for i, (s, a) in enumerate([(0, 1), (1, 0), (2, 1), (0, 0)]):
        row = avg[SA + n + s * A + a]
        assert row[:SA].sum() <= SA * np.exp(-cfg.nu - 2 * cfg.kappa) + 1e-15  # Q memories: role margin
        assert row[SA + n :].sum() <= SA * np.exp(-cfg.nu - 2 * cfg.kappa) + 1e-15  # eval queries
        assert row[SA + i] > 1 - 1e-3  # its own transition (one sample per pair here)
    # Zeroing the actor's head leaves the critic's output unchanged, and vice versa.
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu)
    no_actor = jax.tree.map(lambda x: x, params)
    no_actor["params"]["attn_1"]["wo"] = params["params"]["attn_1"]["wo"].at[0].set(0.0)
    np.testing.assert_array_equal(decoder.critic_call(no_actor, cfg, Q, tr), decoder.critic_call(params, cfg, Q, tr))
    no_critic = jax.tree.map(lambda x: x, params)
    no_critic["params"]["attn_0"]["wo"] = jnp.zeros_like(params["params"]["attn_0"]["wo"])
    no_critic["params"]["attn_1"]["wo"] = params["params"]["attn_1"]["wo"].at[1].set(0.0)
    np.testing.assert_array_equal(decoder.actor_call(no_critic, cfg, pi, Q, 0.9), decoder.actor_call(params, cfg, pi, Q, 0.9))


def test_feed_forward_gate():
    """Unit 1 computes eta * Q on actor memories only; unit 2 forms r + gamma lookup on transitions only."""
    S, A, gamma = 2, 2, 0.7
    cfg = decoder.DecoderConfig(S, A, gamma, 9.0, 9.0)
    L = cfg.layout
    pi, Q = (jnp.asarray(x) for x in _random_instance(8, S, A))
    tokens = decoder.actor_tokens(L, pi, Q, 1.7)
    _, inter = _intermediates(cfg, tokens, decoder.attention_mask(L, tokens))
    hidden = np.asarray(inter["ffn_0"]["hidden"][0])
    np.testing.assert_allclose(hidden[: S * A, 0], 1.7 * np.asarray(Q).reshape(-1), atol=1e-14)
    assert np.all(hidden[S * A :, 0] == 0.0) and np.all(hidden[:, 1] == 0.0)
    tr = decoder.Transitions(jnp.array([0, 1]), jnp.array([1, 1]), jnp.array([0.3, -0.4]),
                             jnp.array([1, 0]), jnp.array([0, 1]), jnp.ones(2, bool))
    ctok = decoder.critic_tokens(L, Q, tr)
    cout, inter = _intermediates(cfg, ctok, decoder.attention_mask(L, ctok))
    hidden = np.asarray(inter["ffn_0"]["hidden"][0])
    assert np.all(hidden[:, 0] == 0.0)
    lookup = np.asarray(cout[:, L.index("lookup")])
    is_trans = np.zeros(len(ctok), bool)
    is_trans[S * A : S * A + 2] = True
    np.testing.assert_allclose(hidden[is_trans, 1], gamma * lookup[is_trans], atol=1e-15)
    assert np.all(hidden[~is_trans, 1] == 0.0) and np.any(lookup[~is_trans] != 0.0)  # the gate is what zeroes them
    target = np.asarray(cout[:, L.index("target")])
    lam1, _ = bound.critic_leak_bounds(S, A, cfg.kappa, cfg.nu, 2, 1)
    tol = gamma * 2 * float(np.abs(Q).max()) * float(lam1)  # lookup leakage, section 13
    np.testing.assert_allclose(target[is_trans], [0.3 + gamma * Q[1, 0], -0.4 + gamma * Q[0, 1]], rtol=0, atol=tol)
    assert np.all(target[~is_trans] == 0.0)


def test_shared_weights_match_numpy_forward():
    """One parameter tree serves both calls, and both equal an independent numpy forward pass."""
    S, A = 2, 3
    cfg = decoder.DecoderConfig(S, A, 0.8, 7.0, 9.0)
    L = cfg.layout
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu)
    params_np = jax.tree.map(np.asarray, params)
    pi, Q = (jnp.asarray(x) for x in _random_instance(9, S, A))
    tr = decoder.Transitions(jnp.array([0, 1, 1]), jnp.array([2, 0, 1]), jnp.array([0.1, 0.2, -0.3]),
                             jnp.array([1, 1, 0]), jnp.array([0, 2, 1]), jnp.ones(3, bool))

    @jax.jit
    def both_calls(p):
        return decoder.apply_actor(p, L, pi, Q, 0.6), decoder.critic_call(p, cfg, Q, tr)

    pi_hat, q_next = both_calls(params)
    atok = decoder.actor_tokens(L, pi, Q, 0.6)
    ref_actor = ref.decoder_forward(params_np, np.asarray(atok), np.asarray(decoder.attention_mask(L, atok)))
    np.testing.assert_allclose(pi_hat, ref_actor[S * A :, L.slice("pi_out")], atol=1e-13)
    ctok = decoder.critic_tokens(L, Q, tr)
    ref_critic = ref.decoder_forward(params_np, np.asarray(ctok), np.asarray(decoder.attention_mask(L, ctok)))
    np.testing.assert_allclose(q_next.reshape(-1), ref_critic[S * A + 3 :, L.index("q_out")], atol=1e-13)


def test_causal_mask():
    """Changing a later token never changes an earlier token's output."""
    S, A = 3, 2
    cfg = decoder.DecoderConfig(S, A, 0.8, 8.0, 8.0)
    L = cfg.layout
    pi, Q = (jnp.asarray(x) for x in _random_instance(10, S, A))
    tokens = decoder.actor_tokens(L, pi, Q, 1.0)
    mask = decoder.attention_mask(L, tokens)
    assert not np.any(np.triu(np.asarray(mask), 1))
    out, _ = _intermediates(cfg, tokens, mask)
    changed = tokens.at[-1, L.slice("query_s")].set(jnp.array([1.0, 0.0, 0.0]))
    out2, _ = _intermediates(cfg, changed, decoder.attention_mask(L, changed))
    np.testing.assert_array_equal(out[:-1], out2[:-1])
    assert not np.allclose(out[-1], out2[-1])


def test_actor_and_critic_cross_check_on_random_mdps():
    """Batch of random MDPs: actor ~ numpy PMD and critic ~ numpy TD within their envelopes."""
    S, A, m, gamma, kappa, nu, eta = 4, 3, 6, 0.8, 16.0, 16.0, 0.8
    cfg = decoder.DecoderConfig(S, A, gamma, kappa, nu)
    params = decoder.construct_params(S, A, gamma, kappa, nu)
    family = RandomMDPFamily(gamma=gamma, r_max=1.0, concentration=1.0, num_states=S, num_actions=A)
    mdps = jax.vmap(family.sample)(jax.random.split(jax.random.key(11), 3))
    envelope = float(bound.routing_error_bound(S, eta, kappa, nu, cfg.q_bound))
    outputs = []
    for i in range(3):
        mdp = jax.tree.map(lambda x, i=i: x[i], mdps)
        pi0 = np.asarray(uniform_policy(S, A, jnp.float64))
        Q = ref.policy_evaluation(np.asarray(mdp.P), np.asarray(mdp.R), gamma, pi0)
        pi_hat = np.asarray(decoder.actor_call(params, cfg, jnp.asarray(pi0), jnp.asarray(Q), eta))
        assert np.max(np.abs(pi_hat - ref.pmd_step(pi0, Q, eta)).sum(1)) <= envelope
        tr = _balanced_transitions(12 + i, mdp, pi_hat, m)
        q_next = np.asarray(decoder.critic_call(params, cfg, jnp.asarray(Q), tr))
        np.testing.assert_allclose(q_next, ref.td_targets_mean(Q, *(np.asarray(x) for x in tr[:5]), gamma), atol=1e-5)
        outputs.append(q_next)
    assert not np.allclose(outputs[0], outputs[1])  # the MDPs differ, so must the outputs


@pytest.mark.parametrize(
    "field,kwargs",
    [
        ("gamma", dict(gamma=1.0)),
        ("gamma", dict(gamma=0.0)),
        ("kappa", dict(kappa=0.0)),
        ("nu", dict(nu=-1.0)),
        ("num_states", dict(num_states=0)),
        ("num_actions", dict(num_actions=0)),
    ],
)
def test_config_validation(field, kwargs):
    base = dict(num_states=2, num_actions=2, gamma=0.8, kappa=8.0, nu=20.0)
    with pytest.raises(ValueError, match=field):
        decoder.DecoderConfig(**{**base, **kwargs})


def test_negative_or_uncapped_eta_is_rejected():
    cfg = decoder.DecoderConfig(2, 2, 0.8, 8.0, 20.0, eta_max=3.0)
    params = decoder.construct_params(2, 2, 0.8, 8.0, 20.0)
    pi = uniform_policy(2, 2, jnp.float64)
    with pytest.raises(ValueError, match="eta"):
        decoder.actor_call(params, cfg, pi, jnp.zeros((2, 2)), -0.1)
    with pytest.raises(ValueError, match="eta_max"):
        decoder.actor_call(params, cfg, pi, jnp.zeros((2, 2)), 3.5)

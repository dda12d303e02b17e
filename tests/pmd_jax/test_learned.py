"""The learned actor and critic (``pmd_jax.learned``, ``pmd_jax.transformer``, ``pmd_jax.train``; docs/pmd.md §8):
packets against numpy loops over the tables, causality of the pre-LN Transformer, the KL-proximal identity, the
sampled transitions and TD targets, input checks and a tiny two-chunk training run of each role."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import learned, train
from pmd_jax import numpy_reference as ref
from pmd_jax.decoder import Transitions
from pmd_jax.mdp import RandomMDPFamily
from pmd_jax.pmd import pmd_step
from pmd_jax.transformer import ModelConfig, PreLNTransformer

TINY = ModelConfig(d_model=8, num_layers=1, num_heads=2)

# A hand 2-state / 3-action actor input; pi[1, 2] = 1e-30 has log -69.1, floored to -40.
PI = np.array([[0.5, 0.3, 0.2], [0.6, 0.4 - 1e-30, 1e-30]])
Q = np.array([[1.0, -0.5, 0.25], [0.0, 2.0, -1.5]])
ETA = 0.7


def _rand_policy(rng, shape):
    w = rng.gamma(0.7, size=shape) + 1e-3
    return w / w.sum(-1, keepdims=True)


# --- 1. actor packet -------------------------------------------------------------------------------------------


def test_actor_tokens_match_the_table():
    S, A = PI.shape
    got = np.asarray(learned.actor_tokens(jnp.asarray(PI), jnp.asarray(Q), ETA))
    assert got.shape == (S, A + 1, learned.actor_token_width(S, A)) == (2, 4, 9)
    want = np.zeros((S, A + 1, S + A + 4))
    for s in range(S):
        for t in range(A + 1):
            want[s, t, s] = 1.0  # state one-hot on every token
            want[s, t, S + A + 2] = ETA  # eta on every token
            if t < A:  # memory of action t
                want[s, t, S + t] = 1.0
                want[s, t, S + A] = max(np.log(PI[s, t]), -40.0)
                want[s, t, S + A + 1] = Q[s, t]
            else:  # query
                want[s, t, S + A + 3] = 1.0
    np.testing.assert_array_equal(got, want)
    assert got[1, 2, S + A] == -40.0
    zero = np.asarray(learned.actor_tokens(jnp.asarray(_with(PI, (1, 2), 0.0)), jnp.asarray(Q), ETA))
    assert zero[1, 2, S + A] == -40.0 and np.all(np.isfinite(zero))  # an exact 0 is floored too


# --- 2. critic packet ------------------------------------------------------------------------------------------


def test_critic_tokens_match_the_table():
    S, A = 2, 3
    Qc = np.arange(S * A, dtype=np.float64).reshape(S, A) * 0.5 - 1.0
    tr = Transitions(s=jnp.array([1, 0, 1, 0]), a=jnp.array([2, 0, 1, 1]), r=jnp.array([0.3, -0.7, 1.1, 0.05]),
                     s_next=jnp.array([0, 0, 1, 1]), a_next=jnp.array([1, 2, 0, 2]), valid=jnp.ones(4, bool))
    got = np.asarray(learned.critic_tokens(jnp.asarray(Qc), tr))
    n = 4
    F = learned.critic_token_width(S, A)
    assert got.shape == (2 * S * A + n, F) == (16, 15)
    o_s, o_a, o_s2, o_a2, o_q, o_r = 3, 3 + S, 3 + S + A, 3 + 2 * S + A, 3 + 2 * S + 2 * A, 3 + 2 * S + 2 * A + 1
    want = np.zeros((2 * S * A + n, F))
    row = 0
    for s in range(S):  # memories, pair-major
        for a in range(A):
            want[row, 0] = 1.0
            want[row, o_s + s] = want[row, o_a + a] = 1.0
            want[row, o_q] = Qc[s, a]
            row += 1
    for i in range(n):  # transitions
        want[row, 1] = 1.0
        want[row, o_s + int(tr.s[i])] = want[row, o_a + int(tr.a[i])] = 1.0
        want[row, o_s2 + int(tr.s_next[i])] = want[row, o_a2 + int(tr.a_next[i])] = 1.0
        want[row, o_r] = float(tr.r[i])
        row += 1
    for s in range(S):  # evaluation queries
        for a in range(A):
            want[row, 2] = 1.0
            want[row, o_s + s] = want[row, o_a + a] = 1.0
            row += 1
    np.testing.assert_array_equal(got, want)


# --- 3. causality and read-out ---------------------------------------------------------------------------------


def test_pre_ln_transformer_is_causal():
    model = PreLNTransformer(ModelConfig(d_model=8, num_layers=2, num_heads=2), out_dim=3, max_len=6)
    x = jax.random.normal(jax.random.key(0), (6, 5))
    params = jax.jit(model.init)(jax.random.key(1), x)
    # Row t + 1 of the batch: x with every token after t redrawn (row 0 is x itself).
    noise = jax.random.normal(jax.random.key(2), (5, 6, 5))
    later = jnp.arange(6)[None, :, None] > jnp.arange(5)[:, None, None]
    batch = jnp.concatenate([x[None], jnp.where(later, noise, x[None])])
    out = np.asarray(jax.jit(model.apply)(params, batch))
    assert out.shape == (6, 6, 3)
    for t in range(5):
        np.testing.assert_allclose(out[t + 1, : t + 1], out[0, : t + 1], rtol=0, atol=1e-12)
        assert np.abs(out[t + 1, t + 1] - out[0, t + 1]).max() > 1e-6  # the changed token's own output moves
    with pytest.raises(ValueError, match="max_len"):
        model.apply(params, jnp.zeros((7, 5)))


def test_learned_actor_rows_are_log_distributions_and_packets_per_state():
    actor = learned.LearnedActor(TINY, num_states=4, num_actions=3)
    params = jax.jit(actor.init)(jax.random.key(3))
    log_policy = jax.jit(lambda p, q, e: actor.log_policy(params, p, q, e))
    rng = np.random.default_rng(0)
    pi, Qa = _rand_policy(rng, (4, 3)), rng.normal(size=(4, 3))
    out = np.asarray(log_policy(pi, Qa, 0.8))
    assert out.shape == (4, 3)
    np.testing.assert_allclose(np.exp(out).sum(-1), 1.0, atol=1e-12)
    pi2, Q2 = pi.copy(), Qa.copy()  # change state 2's inputs only
    pi2[2], Q2[2] = _rand_policy(rng, 3), rng.normal(size=3) * 3
    out2 = np.asarray(log_policy(pi2, Q2, 0.8))
    np.testing.assert_allclose(np.delete(out2, 2, 0), np.delete(out, 2, 0), rtol=0, atol=1e-13)
    assert np.abs(out2[2] - out[2]).max() > 1e-6
    assert np.abs(np.asarray(log_policy(pi, Qa, 1.1)) - out).max() > 1e-6  # the step is read


def test_learned_critic_reads_the_transitions():
    critic = learned.LearnedCritic(TINY, num_states=2, num_actions=2, num_transitions=8)
    params = jax.jit(critic.init)(jax.random.key(4))
    q_values = jax.jit(lambda q, tr: critic.q_values(params, q, tr))
    tr = Transitions(s=jnp.repeat(jnp.arange(2), 4), a=jnp.tile(jnp.repeat(jnp.arange(2), 2), 2),
                     r=jnp.linspace(-1.0, 1.0, 8), s_next=jnp.array([0, 1, 1, 0, 0, 0, 1, 1]),
                     a_next=jnp.array([1, 0, 1, 1, 0, 0, 1, 0]), valid=jnp.ones(8, bool))
    Qc = jnp.array([[0.1, -0.2], [0.3, 0.4]])
    out = np.asarray(q_values(Qc, tr))
    assert out.shape == (2, 2) and np.all(np.isfinite(out))
    assert np.abs(np.asarray(q_values(Qc, tr._replace(r=tr.r + 1.0))) - out).max() > 1e-6
    with pytest.raises(ValueError, match="transitions"):
        critic.q_values(params, Qc, jax.tree.map(lambda x: x[:6], tr))


# --- 4. objectives ---------------------------------------------------------------------------------------------


def _objective_loop(log_new, pi, Qa, eta):
    S, A = pi.shape
    out = np.zeros(S)
    for s in range(S):
        for a in range(A):
            p = np.exp(log_new[s, a])
            out[s] += p * Qa[s, a] - p * (log_new[s, a] - np.log(pi[s, a])) / eta
    return out


def _random_inputs(rng, S=4, A=3):
    pi, Qa = _rand_policy(rng, (S, A)), rng.normal(size=(S, A)) * 2
    new = _rand_policy(rng, (S, A))
    return pi, Qa, np.log(new)


def test_kl_proximal_objective_against_loop_and_identity():
    rng = np.random.default_rng(1)
    for eta in (0.4, 0.9, 3.0):
        pi, Qa, log_new = _random_inputs(rng)
        J = np.asarray(learned.kl_proximal_objective(jnp.asarray(log_new), jnp.asarray(pi), jnp.asarray(Qa), eta))
        np.testing.assert_allclose(J, _objective_loop(log_new, pi, Qa, eta), rtol=1e-12, atol=1e-12)
        # J(pi') = (1/eta) (log Z - KL(pi' || p*)), p* = pi e^{eta Q} / Z
        Z = np.sum(pi * np.exp(eta * Qa), -1)
        p_star = pi * np.exp(eta * Qa) / Z[:, None]
        new = np.exp(log_new)
        kl = np.sum(new * (log_new - np.log(p_star)), -1)
        np.testing.assert_allclose(J, (np.log(Z) - kl) / eta, rtol=0, atol=1e-10)
        J_star = np.asarray(learned.kl_proximal_objective(jnp.log(pmd_step(pi, Qa, eta)), pi, Qa, eta))
        np.testing.assert_allclose(J_star, np.log(Z) / eta, rtol=0, atol=1e-10)


def test_pmd_row_maximises_the_objective():
    rng = np.random.default_rng(2)
    pi, Qa, _ = _random_inputs(rng)
    eta = 0.8
    star = np.asarray(pmd_step(pi, Qa, eta))
    J_star = np.asarray(learned.kl_proximal_objective(jnp.log(star), pi, Qa, eta))
    for scale in (1e-3, 1e-2, 1e-1):
        for _ in range(20):
            d = rng.normal(size=star.shape) * scale
            d -= d.mean(-1, keepdims=True)  # stays on the simplex's affine hull
            other = np.clip(star + d, 1e-9, None)
            other /= other.sum(-1, keepdims=True)
            J = np.asarray(learned.kl_proximal_objective(jnp.log(other), pi, Qa, eta))
            assert np.all(J < J_star)


def test_actor_loss_both_objectives_and_batch_shapes():
    rng = np.random.default_rng(3)
    B, S, A = 5, 4, 3
    pi, Qa = _rand_policy(rng, (B, S, A)), rng.normal(size=(B, S, A))
    log_new = np.log(_rand_policy(rng, (B, S, A)))
    eta = rng.uniform(0.4, 1.2, size=B)
    J = np.stack([_objective_loop(log_new[b], pi[b], Qa[b], eta[b]) for b in range(B)])
    assert np.asarray(learned.kl_proximal_objective(log_new, pi, Qa, eta)).shape == (B, S)
    free = float(learned.actor_loss(log_new, pi, Qa, eta, 0.0))
    np.testing.assert_allclose(free, np.mean(-J), rtol=1e-12)
    ce = 0.0
    for b in range(B):
        for s in range(S):
            w = pi[b, s] * np.exp(eta[b] * Qa[b, s])
            ce -= np.sum(w / w.sum() * log_new[b, s])
    sup = float(learned.actor_loss(log_new, pi, Qa, eta, 1.0))
    np.testing.assert_allclose(sup, ce / (B * S), rtol=1e-12)
    vm = jax.vmap(lambda ln, p, q, e: learned.actor_loss(ln, p, q, e, 0.0))(log_new, pi, Qa, eta)
    assert vm.shape == (B,)
    np.testing.assert_allclose(np.asarray(vm), np.mean(-J, axis=1), rtol=1e-12)


# --- 5. transitions and TD targets -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_mdp():
    with jax.enable_x64(True):
        return RandomMDPFamily(gamma=0.8, r_max=1.0, concentration=1.0, num_states=3, num_actions=2).sample(
            jax.random.key(7))


def test_balanced_transitions_order_rewards_and_frequencies(small_mdp):
    S, A, m = 3, 2, 4000
    pi = jnp.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    tr = learned.balanced_transitions(jax.random.key(8), small_mdp, pi, m)
    s, a, s2, a2, r = (np.asarray(x) for x in (tr.s, tr.a, tr.s_next, tr.a_next, tr.r))
    assert s.shape == (S * A * m,) and np.asarray(tr.valid).all()
    pair = np.arange(S * A * m) // m
    np.testing.assert_array_equal(s, pair // A)
    np.testing.assert_array_equal(a, pair % A)
    np.testing.assert_array_equal(r, np.asarray(small_mdp.R)[s, a])
    P = np.asarray(small_mdp.P)
    chi2, df = 0.0, 0
    for x in range(S):
        for u in range(A):
            sel = (s == x) & (a == u)
            assert sel.sum() == m
            counts = np.bincount(s2[sel], minlength=S)
            exp = m * P[x, u]
            keep = exp > 5
            chi2 += np.sum((counts[keep] - exp[keep]) ** 2 / exp[keep])
            df += keep.sum() - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, df)
    pi_np = np.asarray(pi)
    chi2, df = 0.0, 0
    for y in range(S):
        sel = s2 == y
        counts = np.bincount(a2[sel], minlength=A)
        exp = sel.sum() * pi_np[y]
        chi2 += np.sum((counts - exp) ** 2 / exp)
        df += A - 1
    assert chi2 < df + 6 * np.sqrt(2 * df), (chi2, df)


def test_td_targets_match_numpy_reference(small_mdp):
    m = 5
    pi = jnp.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    Qc = np.array([[0.4, -1.0], [2.0, 0.3], [-0.6, 1.2]])
    tr = learned.balanced_transitions(jax.random.key(9), small_mdp, pi, m)
    got = np.asarray(learned.td_targets(tr, jnp.asarray(Qc), 0.8, m))
    want = ref.td_targets_mean(Qc, *(np.asarray(x) for x in (tr.s, tr.a, tr.r, tr.s_next, tr.a_next)), 0.8)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


# --- 6. input checks -------------------------------------------------------------------------------------------

GOOD_PI = np.full((4, 3), 1 / 3)
GOOD_Q = np.zeros((4, 3))


def _with(arr, idx, value):
    out = np.array(arr, dtype=np.float64)
    out[idx] = value
    return out


@pytest.mark.parametrize("pi, Qa, eta, field", [
    (np.full((4, 2), 0.5), np.zeros((4, 2)), 0.8, "memories"),
    (np.full((3, 3), 1 / 3), np.zeros((3, 3)), 0.8, "states"),
    (GOOD_PI, np.zeros((4, 2)), 0.8, "Q"),
    (GOOD_PI, _with(GOOD_Q, (1, 1), np.nan), 0.8, "Q"),
    (GOOD_PI, _with(GOOD_Q, (1, 1), np.inf), 0.8, "Q"),
    (_with(_with(GOOD_PI, (0, 0), -0.1), (0, 1), 1 / 3 + 0.1), GOOD_Q, 0.8, "pi"),
    (_with(GOOD_PI, (2, 0), 0.5), GOOD_Q, 0.8, "pi"),
    (_with(_with(GOOD_PI, (3, 0), 0.0), (3, 1), 2 / 3), GOOD_Q, 0.8, "pi"),
    (GOOD_PI, GOOD_Q, 0.3, "eta"),
    (GOOD_PI, GOOD_Q, 1.3, "eta"),
    (GOOD_PI, GOOD_Q, np.array([0.8, 0.8]), "eta"),
])
def test_check_actor_inputs_names_the_field(pi, Qa, eta, field):
    with pytest.raises(ValueError, match=rf"^{field}:" if field in ("pi", "Q", "eta") else field):
        learned.check_actor_inputs(pi, Qa, eta, (0.4, 1.2), 4, 3)


def test_check_actor_inputs_accepts_a_good_input():
    learned.check_actor_inputs(GOOD_PI, GOOD_Q, 0.8, (0.4, 1.2), 4, 3)
    learned.check_actor_inputs(GOOD_PI, GOOD_Q, 0.4, (0.4, 1.2), 4, 3)  # ends included


# --- 7. training -----------------------------------------------------------------------------------------------

TCFG = train.TrainConfig(model=TINY, num_steps=4, batch_size=4, n_train_mdps=8, warmup=0)


def test_make_chunk_rejects_bad_arguments():
    with pytest.raises(ValueError, match="role"):
        train.make_chunk(TCFG, "critc", 2)
    with pytest.raises(ValueError, match="num_chunks"):
        train.make_chunk(TCFG, "actor", 3)
    with pytest.raises(ValueError, match="num_chunks"):
        train.make_chunk(TCFG, "actor", 0)


@pytest.mark.parametrize("field, kwargs", [
    ("num_steps", {"num_steps": 0}),
    ("batch_size", {"batch_size": 0}),
    ("warmup", {"warmup": 4}),
    ("warmup", {"warmup": -1}),
    ("family", {"family": "uniform"}),
    ("gamma", {"gamma": 1.0}),
])
def test_train_config_errors_name_the_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        train.TrainConfig(**{"model": TINY, "num_steps": 4, "warmup": 0, **kwargs})


@pytest.mark.parametrize("role", ["actor"])  # the critic's run: tests/experiments/test_study_pmd_learned.py
def test_two_chunk_training_run(role):
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 2))
    run0 = train.init_run(TCFG, role, keys, np.array([0.0, 1.0]))
    chunk = jax.jit(train.make_chunk(TCFG, role, 2))
    run = chunk(chunk(run0, 0), 1)
    loss = np.asarray(run.curves["loss"])
    assert loss.shape == (2, 4) and np.all(np.isfinite(loss))
    assert np.all(loss != 0)  # filled by both chunks
    before, after = jax.tree.leaves(run0.state.params), jax.tree.leaves(run.state.params)
    for b, a in zip(before, after):
        assert a.shape == b.shape
        assert np.all(np.abs(np.asarray(a) - np.asarray(b)).reshape(2, -1).max(-1) > 0)  # every run moved
    again = chunk(chunk(run0, 0), 1)  # same keys -> the same parameters and losses, bit for bit
    np.testing.assert_array_equal(np.asarray(again.curves["loss"]), loss)
    for x, y in zip(after, jax.tree.leaves(again.state.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_critic_example_wiring():
    mdp = jax.tree.map(lambda x: x[0], TCFG.pool())
    key = jax.random.key(10)
    Qm, pi, packet, target = jax.jit(lambda k, m: train.critic_example(TCFG, k, m))(key, mdp)
    assert Qm.shape == pi.shape == target.shape == (4, 3) and packet.s.shape == (4 * 3 * TCFG.samples_per_pair,)
    np.testing.assert_allclose(np.asarray(pi).sum(-1), 1.0, atol=1e-12)
    # The target: per pair the mean of target_samples fresh draws under pi (the fifth key), not the packet's.
    fresh = learned.balanced_transitions(jax.random.split(key, 5)[4], mdp, pi, TCFG.target_samples)
    want = ref.td_targets_mean(np.asarray(Qm), *(np.asarray(x) for x in (fresh.s, fresh.a, fresh.r, fresh.s_next,
                                                                           fresh.a_next)), float(mdp.gamma))
    np.testing.assert_allclose(np.asarray(target), want, rtol=1e-12, atol=1e-13)
    from_packet = ref.td_targets_mean(np.asarray(Qm), *(np.asarray(x) for x in (packet.s, packet.a, packet.r,
                                                                                 packet.s_next, packet.a_next)),
                                      float(mdp.gamma))
    assert np.abs(from_packet - want).max() > 1e-6

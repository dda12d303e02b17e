"""Visible and masked full-packet actors (``pmd_jax.visibility``; docs/pmd.md §10) and the extra mask and
positions of ``PreLNTransformer``: the packet against a hand table, the shared sequence against S literal
packets, the mask's exact invariance, the replacement, the pair's shared start and the default model unchanged."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import train, visibility
from pmd_jax.transformer import ModelConfig, PreLNTransformer

TINY = ModelConfig(d_model=8, num_layers=2, num_heads=2)
# A hand 2-state / 2-action input; pi[1, 1] = 1e-30 has log -69.1, floored to -40.
PI = np.array([[0.7, 0.3], [1.0 - 1e-30, 1e-30]])
Q = np.array([[1.0, -0.5], [0.25, 2.0]])
ETA = 0.6


def _numpy_params(model, tokens, seed):
    """Parameters of ``model`` filled with N(0, 0.5^2) draws by numpy (shapes by tracing only: no init to compile)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda a: rng.normal(0, 0.5, a.shape), jax.eval_shape(model.init, jax.random.key(0), *tokens))


def _rand_input(rng, S, A):
    w = rng.gamma(0.7, size=(S, A)) + 1e-3
    return w / w.sum(-1, keepdims=True), rng.normal(size=(S, A))


def _hand_packet(pi, Q, eta, s):
    """State ``s``'s literal packet ``[S A + 1, S + A + 4]`` by a loop over the table of the module docstring."""
    S, A = pi.shape
    rows = []
    for sp in range(S):
        for a in range(A):
            t = np.zeros(S + A + 4)
            t[sp], t[S + a] = 1.0, 1.0
            t[S + A], t[S + A + 1], t[S + A + 2] = max(np.log(pi[sp, a]), -40.0), Q[sp, a], eta
            rows.append(t)
    q = np.zeros(S + A + 4)
    q[s], q[S + A + 2], q[S + A + 3] = 1.0, eta, 1.0
    return np.stack(rows + [q])


# --- 1. packet layout ------------------------------------------------------------------------------------------


def test_full_packet_tokens_match_the_hand_table():
    got = np.asarray(jax.jit(visibility.full_packet_tokens)(PI, Q, ETA))
    S, A = PI.shape
    assert got.shape == (S * A + S, S + A + 4) == (6, 8)
    want = np.array([
        # s0 s1 a0 a1 log_pi          Q     eta  query
        [1, 0, 1, 0, np.log(0.7), 1.0, ETA, 0],
        [1, 0, 0, 1, np.log(0.3), -0.5, ETA, 0],
        [0, 1, 1, 0, np.log(1 - 1e-30), 0.25, ETA, 0],
        [0, 1, 0, 1, -40.0, 2.0, ETA, 0],
        [1, 0, 0, 0, 0.0, 0.0, ETA, 1],  # query of state 0
        [0, 1, 0, 0, 0.0, 0.0, ETA, 1],  # query of state 1
    ])
    np.testing.assert_array_equal(got, want)
    for s in range(S):  # memories + query s at its packet's last position = state s's literal packet
        np.testing.assert_array_equal(np.concatenate([got[:S * A], got[S * A + s:S * A + s + 1]]),
                                      _hand_packet(PI, Q, ETA, s))
    np.testing.assert_array_equal(visibility.packet_positions(2, 2), [0, 1, 2, 3, 4, 4])
    assert visibility.packet_length(4, 3) == 13  # the paper's 12 memories and a query


def test_packet_mask_matches_the_hand_table():
    tokens = np.asarray(jax.jit(visibility.full_packet_tokens)(PI, Q, ETA))
    # token order: m(0,0) m(0,1) m(1,0) m(1,1) q0 q1
    visible = np.ones((6, 6), bool)
    visible[:, 4:] = np.eye(6, dtype=bool)[:, 4:]  # a query is read by no token but itself
    state = np.array([0, 0, 1, 1, 0, 1])
    local = (state[:, None] == state[None, :]) & visible
    mask = jax.jit(visibility.packet_mask, static_argnums=1)
    np.testing.assert_array_equal(np.asarray(mask(tokens, 2, 0.0)), visible)
    np.testing.assert_array_equal(np.asarray(mask(tokens, 2, 1.0)), local)
    np.testing.assert_array_equal(np.asarray(mask(tokens, 2, 0.7)), local)


def test_replace_other_states_keeps_row_s_only():
    other_pi, other_Q = np.array([[0.1, 0.9], [0.2, 0.8]]), np.array([[9.0, 8.0], [7.0, 6.0]])
    for s in range(2):
        p, q = (np.asarray(a) for a in visibility.replace_other_states(PI, Q, other_pi, other_Q, s))
        for r in range(2):
            np.testing.assert_array_equal(p[r], PI[r] if r == s else other_pi[r])
            np.testing.assert_array_equal(q[r], Q[r] if r == s else other_Q[r])


# --- 2. the shared sequence is S packets -----------------------------------------------------------------------
# One actor (S = 3, A = 2, two layers: a leak through a memory's hidden state needs two) and its compiled programs
# serve sections 2 and 3 (each program compiles once).

ACTOR = visibility.FullPacketActor(TINY, num_states=3, num_actions=2)


@functools.cache
def _programs():
    """``(params, log_policy, both)``: jitted; ``both`` reads the rows with the others' memories kept and replaced
    through one program (the study's path)."""
    params = _numpy_params(ACTOR.model, (np.zeros((7, 9)),), 3)
    both = jax.vmap(lambda p, pi, Q, e, a, b, m: ACTOR.log_policy_replaced(p, pi, Q, e, a, b, m),
                    in_axes=(None, None, None, None, 0, 0, None))
    return params, jax.jit(ACTOR.log_policy), jax.jit(both)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return _rand_input(rng, 3, 2) + _rand_input(rng, 3, 2)


@pytest.mark.parametrize("masked", [0.0, 1.0])
def test_shared_sequence_equals_separate_packets(masked):
    S, A = 3, 2
    params, log_policy, _ = _programs()
    pi, Qr, _, _ = _inputs(0)
    got = np.asarray(log_policy(params, pi, Qr, 0.9, masked))
    model = PreLNTransformer(TINY, out_dim=A, max_len=S * A + 1)
    packets = np.stack([_hand_packet(pi, Qr, 0.9, s) for s in range(S)])  # S literal packets [S, S A + 1, F]
    st = packets[..., :S]
    mask = np.einsum("bis,bjs->bij", st, st) > 0.5 if masked else np.ones((S, S * A + 1, S * A + 1), bool)
    logits = np.asarray(jax.jit(model.apply)(params, packets, mask))[:, -1]
    want = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-12)


# --- 3. the mask: exact invariance of the masked actor --------------------------------------------------------


def test_masked_output_bit_identical_when_other_states_are_replaced():
    params, log_policy, both = _programs()
    pi, Qr, other_pi, other_Q = _inputs(2)
    base = {m: np.asarray(log_policy(params, pi, Qr, 0.8, m)) for m in (0.0, 1.0)}
    for s in range(3):
        p, q = (np.asarray(a) for a in visibility.replace_other_states(pi, Qr, other_pi, other_Q, s))
        masked = np.asarray(log_policy(params, p, q, 0.8, 1.0))
        visible = np.asarray(log_policy(params, p, q, 0.8, 0.0))
        np.testing.assert_array_equal(masked[s], base[1.0][s])  # bit for bit
        assert np.abs(masked - base[1.0]).max() > 1e-6  # the replaced states' own rows do change
        assert np.abs(visible[s] - base[0.0][s]).sum() > 1e-4  # the visible actor reads the other states
    for m in (0.0, 1.0):  # the study's path: the input itself as "other", then the other input
        own, moved = np.asarray(both(params, pi, Qr, 0.8, np.stack([pi, other_pi]), np.stack([Qr, other_Q]), m))
        np.testing.assert_allclose(own, base[m], rtol=0, atol=1e-12)
        if m:
            np.testing.assert_array_equal(own, moved)
        else:
            assert np.abs(own - moved).sum(-1).min() > 1e-4


def test_masked_row_reads_its_own_state():
    params, log_policy, _ = _programs()
    pi, Qr, _, _ = _inputs(4)
    base = np.asarray(log_policy(params, pi, Qr, 0.8, 1.0))
    moved = np.asarray(log_policy(params, pi, Qr + np.array([[0.0, 0.0], [3.0, -1.0], [0.0, 0.0]]), 0.8, 1.0))
    np.testing.assert_array_equal(moved[[0, 2]], base[[0, 2]])
    assert np.abs(moved[1] - base[1]).max() > 1e-4


def test_log_policy_checks_concrete_inputs():
    params, _, _ = _programs()
    pi, Qr, _, _ = _inputs(5)
    with pytest.raises(ValueError, match="eta"):
        ACTOR.log_policy(params, pi, Qr, 5.0, 0.0)
    with pytest.raises(ValueError, match="pi"):
        ACTOR.log_policy_replaced(params, pi, Qr, 0.8, pi * 1.1, Qr, 1.0)


# --- 4. training: the pair shares its start --------------------------------------------------------------------
# init_run and make_chunk are checked with cheap stand-ins for the actor's initialiser and batch loss (compiling the
# real ones takes most of a minute on 2 shared cores; the study trains them), and the real state by its shapes.

TCFG = train.TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=2, batch_size=2,
                         n_train_mdps=4, warmup=0, num_states=3, num_actions=2)
MASKED = np.array([0.0, 1.0, 1.0, 0.0, 1.0])  # runs: seeds a, a, a, b, b
FLAGS = {"supervised": np.array([0.0, 0.0, 0.0, 0.0, 1.0]), "masked": MASKED}


def _keys():
    a, b = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 2)))
    return np.stack([a, a, a, b, b])


def test_pair_shares_initial_parameters_and_data_keys(monkeypatch):
    shapes = jax.eval_shape(lambda k: train.init_run(TCFG, visibility.ROLE, k, FLAGS), _keys())  # traced only
    want = jax.eval_shape(TCFG.full_packet_actor().init, jax.random.key(0))
    assert isinstance(shapes.state, train.MaskedTrainState)
    assert jax.tree.map(lambda a: (5,) + a.shape, want) == jax.tree.map(lambda a: a.shape, shapes.state.params)
    monkeypatch.setattr(visibility.FullPacketActor, "init", lambda self, key: {"w": jax.random.normal(key, (4,))})
    run = train.init_run(TCFG, visibility.ROLE, _keys(), FLAGS)
    np.testing.assert_array_equal(np.asarray(run.state.masked), MASKED)
    np.testing.assert_array_equal(np.asarray(run.state.supervised), FLAGS["supervised"])
    w, key = np.asarray(run.state.params["w"]), np.asarray(run.state.key)
    for x in (w, key):  # pair (a visible, a masked) and pair (b visible, b masked): same weights, same data keys
        np.testing.assert_array_equal(x[0], x[1])
        np.testing.assert_array_equal(x[3], x[4])
        assert not np.array_equal(x[0], x[3])
    assert np.asarray(run.curves["loss"]).shape == (5, 2)


def test_make_chunk_passes_both_flags_to_the_full_packet_loss(monkeypatch):
    """``loss(params, key, supervised, masked) = sum(w) + 10 supervised + 100 masked`` recorded for every run."""
    def fake(config, pool):
        return lambda params, key, supervised, masked: jnp.sum(params["w"]) + 10 * supervised + 100 * masked

    monkeypatch.setattr(train.TrainConfig, "pool", lambda self: None)
    monkeypatch.setattr(train, "full_packet_actor_batch_loss", fake)
    monkeypatch.setattr(visibility.FullPacketActor, "init", lambda self, key: {"w": jax.random.normal(key, (4,))})
    run0 = train.init_run(TCFG, visibility.ROLE, _keys(), FLAGS)
    run = jax.jit(train.make_chunk(TCFG, visibility.ROLE, 1))(run0, 0)
    loss = np.asarray(run.curves["loss"])
    w0 = np.asarray(run0.state.params["w"]).sum(-1)
    np.testing.assert_allclose(loss[:, 0], w0 + 10 * FLAGS["supervised"] + 100 * MASKED, rtol=1e-6)
    assert np.all(loss[:, 1] < loss[:, 0])  # the step descended on it
    np.testing.assert_array_equal(np.asarray(run.state.masked), MASKED)  # the flag survives the step


def test_init_run_flags_errors_name_the_field():
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="masked"):
        train.init_run(TCFG, visibility.ROLE, keys, np.zeros(2))
    with pytest.raises(ValueError, match="masked"):
        train.init_run(TCFG, visibility.ROLE, keys, {"supervised": np.zeros(2), "masked": np.zeros(3)})
    with pytest.raises(ValueError, match="role"):
        train.init_run(TCFG, "full_packet", keys, np.zeros(2))


# --- 5. PreLNTransformer: default unchanged, extra mask and positions ---------------------------------------------

ONE = ModelConfig(d_model=8, num_layers=1, num_heads=2)
# The PreLNTransformer before the optional mask and positions were added (HEAD a7cd41d, float64), on the input and
# parameters of ``_golden``: its last outputs, its parameter count and number of parameter arrays.
GOLDEN_LAST = np.array([[2.559824275180042, 0.28432692477330124, -0.6339905347572496],
                        [2.7143003119315647, 0.10826302760210685, -0.648489105212932]])
GOLDEN_SIZE = (1003, 23)
MODEL = PreLNTransformer(ONE, out_dim=3, max_len=6)


ONES = np.ones((2, 5, 5), bool)
BLOCK = ONES.copy()
BLOCK[:, 1:, 0] = False  # no later token reads token 0
APART = ONES.copy()
APART[:, 4, 3] = False  # a copy of token 3 in place of token 4 does not read token 3


@functools.cache
def _golden():
    """``(x, params, outputs)``: the golden input and parameters, and every variant the two tests read, in one
    program."""
    x = jnp.asarray(np.random.default_rng(5).normal(size=(2, 5, 4)))
    params = _numpy_params(MODEL, (x,), 6)
    x2, copy = x.at[:, 0].add(1.0), x.at[:, 4].set(x[:, 3])

    @jax.jit
    def outputs(p):
        return {"default": MODEL.apply(p, x), "ones": MODEL.apply(p, x, ONES, np.arange(5)),
                "block": MODEL.apply(p, x, BLOCK), "block2": MODEL.apply(p, x2, BLOCK), "free2": MODEL.apply(p, x2, ONES),
                "shared": MODEL.apply(p, copy, APART, np.array([0, 1, 2, 3, 3])), "apart": MODEL.apply(p, copy, APART)}

    return x, params, {k: np.asarray(v) for k, v in outputs(params).items()}


def test_default_transformer_unchanged_without_mask():
    x, params, out = _golden()
    assert x.dtype == np.float64
    np.testing.assert_allclose(out["default"][:, -1], GOLDEN_LAST, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["ones"], out["default"], rtol=0, atol=1e-14)  # all-True mask, default positions
    shapes = jax.eval_shape(MODEL.init, jax.random.key(6), x, ONES)  # a mask adds no parameters
    assert jax.tree.map(lambda a: a.shape, shapes) == jax.tree.map(lambda a: a.shape, params)
    leaves = jax.tree.leaves(params)
    assert (sum(a.size for a in leaves), len(leaves)) == GOLDEN_SIZE


def test_extra_mask_and_positions_act():
    x, params, out = _golden()
    np.testing.assert_array_equal(out["block2"][:, 1:], out["block"][:, 1:])
    assert np.abs(out["block2"][:, 0] - out["block"][:, 0]).max() > 1e-6
    assert np.abs(out["free2"][:, 1:] - out["default"][:, 1:]).max() > 1e-6  # without the mask they read token 0
    # at position 3 the copy reads what token 3 reads; at its own position 4 it does not
    np.testing.assert_allclose(out["shared"][:, 4], out["shared"][:, 3], rtol=0, atol=1e-12)
    assert np.abs(out["apart"][:, 4] - out["apart"][:, 3]).max() > 1e-6
    with pytest.raises(ValueError, match="mask"):
        MODEL.apply(params, x, jnp.ones((5, 5), bool))
    with pytest.raises(ValueError, match="positions"):
        MODEL.apply(params, x, None, np.arange(4))
    with pytest.raises(ValueError, match="positions"):
        MODEL.apply(params, x, None, np.array([0, 1, 2, 3, 6]))

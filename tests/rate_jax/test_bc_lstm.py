"""BC-LSTM (``rate_jax.bc_lstm``) against numpy: the LSTM's equations, the masked loss, training's
chunking and the environment evaluation against a step-by-step Python loop."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import bc_lstm
from rate_jax.tasks import PopgymTask

CFG = bc_lstm.LSTMConfig(hidden=6, embed=5, num_train=8, batch_size=4, num_steps=6, learning_rate=1e-2,
                         warmup_steps=2)
TASK = PopgymTask("repeat_previous", "easy")
ACTIONS = TASK.num_actions


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _np_policy(params, obs):
    """Logits [B, T, A] of episodes ``obs`` [B, T, D] by the equations of the module docstring, in
    float64: x = W_x o + b_x; i, f, o = sigmoid, g = tanh of W_{.} x + U_{.} h + b_{.};
    c' = f c + i g; h' = o tanh(c'); logits = W_a h' + b_a."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    lstm = p["lstm"]
    b, t, _ = obs.shape
    c = np.zeros((b, CFG.hidden))
    h = np.zeros((b, CFG.hidden))
    out = []
    for step in range(t):
        x = obs[:, step] @ p["embed"]["kernel"] + p["embed"]["bias"]
        gate = {g: x @ lstm[f"i{g}"]["kernel"] + h @ lstm[f"h{g}"]["kernel"] + lstm[f"h{g}"]["bias"]
                for g in "ifgo"}
        c = _sigmoid(gate["f"]) * c + _sigmoid(gate["i"]) * np.tanh(gate["g"])
        h = _sigmoid(gate["o"]) * np.tanh(c)
        out.append(h @ p["head"]["kernel"] + p["head"]["bias"])
    return np.stack(out, 1)


@pytest.fixture(scope="module")
def state():
    return jax.jit(lambda k: bc_lstm.init_state(CFG, TASK, TASK.oracle_steps + 1, k))(jax.random.PRNGKey(3))


def test_sequence_logits_match_the_lstm_equations(state):
    obs = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (3, 7, TASK.obs_dim)))
    got = bc_lstm.sequence_logits(CFG, ACTIONS, state.params, jnp.asarray(obs))
    np.testing.assert_allclose(np.asarray(got), _np_policy(state.params, obs), rtol=1e-5, atol=1e-5)


def test_loss_is_the_masked_mean_cross_entropy(state):
    data = jax.tree.map(lambda x: x[:3], state.data)
    mask = np.asarray(data.action_mask, np.float64).copy()
    mask[0, 5:] = 0.0  # mask some steps that have actions: they must not count
    data = data.replace(action_mask=jnp.asarray(mask, data.action_mask.dtype))
    logits = _np_policy(state.params, np.asarray(data.obs, np.float64))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(logp, np.asarray(data.actions)[..., None], -1)[..., 0]
    want = -(picked * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(bc_lstm.loss(CFG, ACTIONS, state.params, data)), want, rtol=1e-5)


def test_init_states_maps_init_state_over_keys():
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    both = jax.jit(lambda ks: bc_lstm.init_states(CFG, TASK, TASK.oracle_steps + 1, ks))(keys)
    for i in range(2):
        one = bc_lstm.init_state(CFG, TASK, TASK.oracle_steps + 1, keys[i])
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(jax.tree.map(lambda x, i=i: x[i], both))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.array_equal(np.asarray(both.data.obs[0]), np.asarray(both.data.obs[1]))


def test_chunks_resume_the_same_run_and_record_every_step():
    states = jax.jit(lambda ks: bc_lstm.init_states(CFG, TASK, TASK.oracle_steps + 1, ks))(
        jax.random.split(jax.random.PRNGKey(2), 2))
    whole = jax.jit(bc_lstm.make_chunk(CFG, ACTIONS, 1))(states, 0)
    halves = jax.jit(bc_lstm.make_chunk(CFG, ACTIONS, 2))
    split = halves(halves(states, 0), 1)
    assert int(whole.step[0]) == CFG.num_steps
    np.testing.assert_allclose(np.asarray(split.losses), np.asarray(whole.losses), rtol=1e-6)
    assert np.all(np.asarray(whole.losses) > 0)
    # the first recorded loss is the loss of the initial parameters on the first batch
    idx = jax.random.randint(jax.random.fold_in(states.key[0], 0), (CFG.batch_size,), 0, CFG.num_train)
    first = bc_lstm.loss(CFG, ACTIONS, jax.tree.map(lambda x: x[0], states.params),
                         jax.tree.map(lambda x: x[0][idx], states.data))
    np.testing.assert_allclose(float(whole.losses[0, 0]), float(first), rtol=1e-6)
    with pytest.raises(ValueError, match="num_chunks"):
        bc_lstm.make_chunk(CFG, ACTIONS, 4)


def test_step_s_trains_on_the_batch_of_fold_in_key_s():
    """At a negligible learning rate the parameters stay put, so the loss recorded at step s is the
    initial parameters' loss on step s's batch, indices ``randint(fold_in(key, s))``; the batches differ."""
    cfg = dataclasses.replace(CFG, learning_rate=1e-12)
    states = jax.jit(lambda ks: bc_lstm.init_states(cfg, TASK, TASK.oracle_steps + 1, ks))(jax.random.PRNGKey(5)[None])
    got = np.asarray(jax.jit(bc_lstm.make_chunk(cfg, ACTIONS, 1))(states, 0).losses[0])
    one = jax.tree.map(lambda x: x[0], states)
    want = [float(bc_lstm.loss(cfg, ACTIONS, one.params, jax.tree.map(
        lambda x, s=s: x[jax.random.randint(jax.random.fold_in(one.key, s), (cfg.batch_size,), 0, cfg.num_train)],
        one.data))) for s in range(cfg.num_steps)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.ptp(want) > 1e-3


def test_training_learns_repeat_previous():
    """RepeatPrevious needs the card of 4 steps back; a trained BC-LSTM's loss falls well below the
    loss of guessing among 4 suits (ln 4 = 1.39)."""
    cfg = dataclasses.replace(CFG, hidden=32, embed=16, num_train=64, batch_size=16, num_steps=150)
    states = jax.jit(lambda ks: bc_lstm.init_states(cfg, TASK, TASK.oracle_steps + 1, ks))(
        jax.random.PRNGKey(4)[None])
    losses = np.asarray(jax.jit(bc_lstm.make_chunk(cfg, ACTIONS, 1))(states, 0).losses[0])
    assert losses[:5].mean() > 1.2
    assert losses[-10:].mean() < 0.5


def test_env_evaluate_matches_a_python_loop(state):
    """Greedy episodes in the environment against a Python loop over ``env.reset`` / ``env.step``
    with the numpy policy re-run on the whole history at every step; the evaluation runs 5 steps
    past the episode's end, which must not count."""
    env_params = TASK.env_params(2)
    key = jax.random.PRNGKey(7)
    evaluate = bc_lstm.make_env_evaluate(CFG, ACTIONS, TASK.env, TASK.oracle_steps + 5)
    got = jax.jit(evaluate)(state.params, key, env_params)
    for e, k in enumerate(jax.random.split(key, 2)):
        p = jax.tree.map(lambda x, e=e: x[e], env_params)
        k_reset, k_steps = jax.random.split(k)
        obs, env_state = TASK.env.reset(k_reset, p)
        history, ret = [np.asarray(obs, np.float64)], 0.0
        for k_step in jax.random.split(k_steps, TASK.oracle_steps + 5):
            action = int(np.argmax(_np_policy(state.params, np.stack(history)[None])[0, -1]))
            obs, env_state, reward, done, _ = TASK.env.step(k_step, env_state, jnp.int32(action), p)
            ret += float(reward)
            history.append(np.asarray(obs, np.float64))
            if bool(done):
                break
        np.testing.assert_allclose(float(got[e]), ret, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("field,value", [("hidden", 0), ("num_steps", 1.5), ("learning_rate", 0.0),
                                         ("warmup_steps", -1), ("weight_decay", -0.1), ("lr_end_factor", 2.0)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=f"LSTMConfig.{field}"):
        dataclasses.replace(CFG, **{field: value})

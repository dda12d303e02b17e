"""The shift episode and the attention diagnostics of ``uat_jax.mechanism``, by hand and
against independent numpy computations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import darkroom, domains, mechanism
from uat_jax.config import ModelConfig
from uat_jax.feedback import FeedbackChannel, shift
from uat_jax.model import DecisionTransformer, init_cache, init_params, sequence_logits
from uat_jax.rollout import rollout

GOALS = jnp.array([[0, 5], [5, 0], [9, 9]], jnp.int32)


def _env(horizon=6):
    return mechanism.ShiftEnv.make(darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), horizon=horizon), GOALS)


def test_segments_by_hand():
    assert mechanism.shift_steps(30) == (10, 20)
    assert mechanism.shift_steps(7) == (2, 4)
    np.testing.assert_array_equal(mechanism.segment_of(7), [0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(mechanism.since_shift(7), [0, 1, 0, 1, 0, 1, 2])
    np.testing.assert_array_equal(_env().goals, np.asarray(GOALS)[[0, 0, 1, 1, 2, 2]])
    run = jnp.arange(10).reshape(5, 2)  # goals (0, 1), (2, 3), ... of five consecutive episodes
    np.testing.assert_array_equal(mechanism.consecutive_goals(run, 3)[2], [[4, 5], [6, 7], [8, 9]])
    np.testing.assert_array_equal(mechanism.consecutive_goals(run, 3)[:, 0], run[:3])
    with pytest.raises(ValueError, match="4 shift episodes need 6 goals, got 5"):
        mechanism.consecutive_goals(run, 4)
    with pytest.raises(ValueError, match="horizon >= 3"):
        mechanism.shift_steps(2)
    with pytest.raises(ValueError, match="segment_goals must have shape"):
        mechanism.ShiftEnv.make(darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), horizon=6), GOALS[:2])


def test_a_step_is_played_against_its_segments_goal():
    env, dom = _env(), mechanism.SHIFT_DARKROOM
    state = darkroom.EnvState(pos=jnp.array([0, 0]), t=jnp.asarray(2))  # first step of segment 1, goal (5, 0)
    _, new, reward, _, info = dom.transition(jnp.asarray(0.9), state, jnp.asarray(4), env)  # right: away from (5, 0)
    assert float(reward) == pytest.approx(-0.5 - 0.01) and not bool(info["at_goal"])
    np.testing.assert_array_equal(new.pos, [0, 1])
    assert int(dom.expert(state, env)) == 2  # down, towards (5, 0)
    _, _, last_of_0, _, _ = dom.transition(jnp.asarray(0.9), state.replace(t=jnp.asarray(1)), jnp.asarray(4), env)
    assert float(last_of_0) == pytest.approx(0.5 - 0.01)  # still segment 0: towards (0, 5)
    assert int(dom.expert(state.replace(t=jnp.asarray(1)), env)) == 4  # segment 0: right, towards (0, 5)
    rec = [dom.record(state.replace(t=jnp.asarray(t)), info, env) for t in range(6)]
    assert [int(r["regime"]) for r in rec] == [0, 0, 1, 1, 2, 2]
    assert [bool(r["switched"]) for r in rec] == [False, False, True, False, True, False]
    assert [int(r["distance"]) for r in rec] == [5, 5, 5, 5, 18, 18]


def _tiny_model(kind="vt", n_layers=2):
    cfg = ModelConfig(kind=kind, obs_dim=darkroom.OBS_DIM, n_actions=darkroom.N_ACTIONS, d_model=8, n_heads=2,
                      d_ff=8, n_layers=n_layers, horizon=6, d_u=4)
    model = DecisionTransformer(cfg)
    return model, init_params(model, jax.random.key(3))


def test_a_shift_episode_with_one_goal_is_the_plain_episode():
    model, params = _tiny_model("uat")
    channel = FeedbackChannel.make("clean")
    base = darkroom.EnvParams(goal=GOALS[1], horizon=6)
    same = mechanism.ShiftEnv.make(base, jnp.stack([GOALS[1]] * 3))
    a = rollout(model, params, jax.random.key(5), mechanism.SHIFT_DARKROOM, same, channel, False)
    b = rollout(model, params, jax.random.key(5), domains.DARKROOM, base, channel, False)
    for x, y in zip(jax.tree.leaves((a.obs, a.actions, a.rewards, a.expert)), jax.tree.leaves((b.obs, b.actions,
                                                                                                b.rewards, b.expert))):
        np.testing.assert_array_equal(x, y)
    shifted = rollout(model, params, jax.random.key(5), mechanism.SHIFT_DARKROOM, _env(), channel, False)
    assert int(shifted.record["regime"][-1]) == 2 and not np.array_equal(shifted.expert, b.expert)


def _numpy_attention(model, params, traj):
    """Softmax of the causal scores q.k / sqrt(d_m) from each layer's sown (LayerNorm-ed) input."""
    prev_action, prev_reward = shift(traj.actions, traj.fed_rewards)
    _, state = model.apply(params, traj.obs, prev_action, prev_reward,
                           init_cache(model.cfg), mutable=["intermediates"])
    (x,) = state["intermediates"]["blocks"]["attn"]["attn_input"]
    blocks = params["params"]["blocks"]["attn"]
    out = []
    for layer in range(x.shape[0]):
        proj = {n: (np.einsum("nd,dhm->nhm", x[layer], blocks[n]["kernel"][layer]) + blocks[n]["bias"][layer])
                for n in ("W_Q", "W_K")}
        T, H = x.shape[1], proj["W_Q"].shape[1]
        w = np.zeros((H, T, T))
        for h in range(H):
            for t in range(T):
                s = np.array([proj["W_Q"][t, h] @ proj["W_K"][j, h] for j in range(t + 1)]) / np.sqrt(model.cfg.d_head)
                w[h, t, :t + 1] = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        out.append(w)
    return np.stack(out)


def test_attention_weights_match_a_numpy_recomputation():
    model, params = _tiny_model("vt")
    traj = rollout(model, params, jax.random.key(1), mechanism.SHIFT_DARKROOM, _env(), FeedbackChannel.make("clean"),
                   False)
    w = np.asarray(mechanism.attention_weights(model, params, traj))
    assert w.shape == (2, 2, 6, 6)
    np.testing.assert_allclose(w, _numpy_attention(model, params, traj), atol=1e-5)


def test_active_mass_matches_a_loop():
    T = 7
    seg = [0, 0, 1, 1, 2, 2, 2]
    w = np.asarray(jax.random.uniform(jax.random.key(0), (2, 3, T, T)))
    want = np.zeros((2, 3, T))
    for t in range(T):
        if seg[t] >= 1:
            want[..., t] = sum(w[..., t, j] for j in range(t + 1) if seg[j] == seg[t])
    np.testing.assert_allclose(mechanism.active_mass(jnp.asarray(w)), want, rtol=1e-6)
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    np.testing.assert_allclose(mechanism.uniform_active_mass(T), [0, 0, 1 / 3, 2 / 4, 1 / 5, 2 / 6, 3 / 7], rtol=1e-6)
    np.testing.assert_allclose(mechanism.active_mass(jnp.asarray(uniform)), mechanism.uniform_active_mass(T),
                               rtol=1e-6)


def test_oracle_log_prob_is_the_log_softmax_at_the_expert_action():
    model, params = _tiny_model("uat", n_layers=1)
    traj = rollout(model, params, jax.random.key(2), mechanism.SHIFT_DARKROOM, _env(), FeedbackChannel.make("clean"),
                   False)
    logits = np.asarray(sequence_logits(model, params, traj.obs, traj.actions, traj.fed_rewards))
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = log_p[np.arange(6), np.asarray(traj.expert)]
    np.testing.assert_allclose(mechanism.oracle_log_prob(model, params, traj), want, rtol=1e-5)


def test_attention_maps_need_one_token_per_step():
    model, params = _tiny_model("dt", n_layers=1)
    traj = rollout(model, params, jax.random.key(2), mechanism.SHIFT_DARKROOM, _env(), FeedbackChannel.make("clean"),
                   False)
    with pytest.raises(ValueError, match="one token per step"):
        mechanism.attention_weights(model, params, traj)

"""Implicit Q-learning (``uat_jax.iql``): each loss of Kostrikov et al. (arXiv 2110.06169, eqs. 5-7)
against a numpy loop, the logging policy's action rates, the transitions cut from trajectories, a
fit on a two-state bandit whose values and best actions are known in closed form, and the
evaluation episodes shared with the transformer cells."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import cells, domains, iql, sepsis
from uat_jax.model import init_params
from uat_jax.rollout import Trajectory
from uat_jax.schedules import SCHEDULES
from uat_jax.train import CellKeys, Task, eval_episodes, evaluation_rollout, task_model

TAU = 0.7


def test_expectile_loss_by_hand():
    u = jnp.asarray([-2.0, -0.5, 0.0, 1.0, 3.0])
    expected = [0.3 * 4, 0.3 * 0.25, 0.0, 0.7 * 1, 0.7 * 9]
    np.testing.assert_allclose(iql.expectile_loss(u, TAU), expected, rtol=1e-6)


def _batch(n=7, a=4, seed=0):
    rng = np.random.default_rng(seed)
    return dict(q_target=rng.normal(size=(n, 2)), v=rng.normal(size=n), reward=rng.normal(size=n),
                terminal=rng.random(n) < 0.4, v_next=rng.normal(size=n), q=rng.normal(size=(n, 2)),
                logits=rng.normal(size=(n, a)), action=rng.integers(0, a, n))


def test_losses_against_numpy_loops():
    b, gamma, beta, cap = _batch(), 0.9, 3.0, 5.0
    n = b["v"].size
    value = np.mean([(TAU if min(b["q_target"][i]) - b["v"][i] >= 0 else 1 - TAU)
                     * (min(b["q_target"][i]) - b["v"][i]) ** 2 for i in range(n)])
    target = np.array([b["reward"][i] + (0.0 if b["terminal"][i] else gamma * b["v_next"][i]) for i in range(n)])
    critic = np.mean([sum((target[i] - b["q"][i, h]) ** 2 for h in range(2)) for i in range(n)])
    weights = np.array([min(np.exp(beta * (min(b["q_target"][i]) - b["v"][i])), cap) for i in range(n)])
    assert weights.max() == cap and weights.min() < cap  # the clip acts on some, not all
    log_pi = [b["logits"][i, b["action"][i]] - np.log(np.exp(b["logits"][i]).sum()) for i in range(n)]
    actor = -np.mean(weights * np.array(log_pi))
    j = {k: jnp.asarray(v) for k, v in b.items()}
    np.testing.assert_allclose(iql.value_loss(j["q_target"], j["v"], TAU), value, rtol=1e-5)
    got_target = iql.td_target(j["reward"], j["terminal"], j["v_next"], gamma)
    np.testing.assert_allclose(got_target, target, rtol=1e-5)
    np.testing.assert_allclose(iql.critic_loss(j["q"], got_target), critic, rtol=1e-5)
    got_weights = iql.awr_weights(j["q_target"], j["v"], beta, cap)
    np.testing.assert_allclose(got_weights, weights, rtol=1e-5)
    np.testing.assert_allclose(iql.actor_loss(j["logits"], j["action"], got_weights), actor, rtol=1e-5)


def test_at_action_picks_the_action_of_each_row():
    q = jnp.arange(2 * 2 * 3.0).reshape(2, 2, 3)  # [N, heads, A]
    np.testing.assert_array_equal(iql.at_action(q, jnp.asarray([2, 0])), [[2, 5], [6, 9]])
    np.testing.assert_array_equal(iql.at_action(q[:, 0], jnp.asarray([1, 2])), [1, 8])


def test_logging_policy_probabilities():
    for eps in (0.0, 0.3, 1.0):
        logp, _ = iql.logging_policy(eps, 5)((), None, None, None, jnp.asarray(3))
        p = np.exp(np.asarray(logp))
        np.testing.assert_allclose(p, [eps / 5] * 3 + [1 - eps + eps / 5] + [eps / 5], rtol=1e-6)


def _traj(record):
    B, T = 2, 4
    obs = np.arange(B * T * 3.0).reshape(B, T, 3)
    return Trajectory(obs=jnp.asarray(obs), actions=jnp.arange(B * T).reshape(B, T), rewards=jnp.arange(B * T).reshape(B, T) / 10.0,
                      fed_rewards=jnp.zeros((B, T)), expert=jnp.zeros((B, T), int),
                      record=record), obs


def test_transitions_pair_each_step_with_the_next_observation():
    terminated = np.zeros((2, 4), bool)
    terminated[0, 1] = terminated[1, 3] = True
    traj, obs = _traj({"terminated": jnp.asarray(terminated)})
    tr = iql.transitions_of(traj)
    assert tr.obs.shape == (6, 3)  # T - 1 = 3 per episode: the last step's next observation is not recorded
    np.testing.assert_array_equal(tr.obs, obs[:, :3].reshape(6, 3))
    np.testing.assert_array_equal(tr.next_obs, obs[:, 1:].reshape(6, 3))
    np.testing.assert_array_equal(tr.action, [0, 1, 2, 4, 5, 6])
    np.testing.assert_allclose(tr.reward, np.array([0, 1, 2, 4, 5, 6]) / 10.0)
    np.testing.assert_array_equal(tr.terminal, [False, True, False, False, False, False])
    assert not np.asarray(iql.transitions_of(_traj({})[0]).terminal).any()  # DarkRoom: no stay ends


@pytest.fixture(scope="module")
def env():
    return sepsis.make_params(horizon=48)


def test_logged_episodes_follow_the_epsilon_expert(env):
    train_cfg = cells.Size(horizon=48, eval_episodes=4).train_config(domain="sepsis")
    task, eps, n = Task.make(SCHEDULES[0]), 0.3, 128
    traj = jax.jit(lambda k: iql.play_episodes(iql.logging_policy(eps, 5), train_cfg, k, task, k, jnp.arange(n),
                                               False, env))(jax.random.key(0))
    agree = float(np.mean(np.asarray(traj.actions) == np.asarray(traj.expert)))
    rate, sd = 1 - eps + eps / 5, np.sqrt(0.76 * 0.24 / (n * 48))
    assert abs(agree - rate) < 4 * sd
    assert 0 < np.asarray(traj.record["terminated"]).mean() < 0.2  # stays end (death or recovery) inside episodes


def test_fit_recovers_bandit_values_and_best_actions():
    """Two states (one-hot observations), three actions tried uniformly, every step terminal. State 0 pays
    0, 0.5, 1 and state 1 pays 1, 0, 0, so Q = r, the best actions are 2 and 0, and V is the tau-expectile
    of each state's rewards: v = sum_i w_i q_i / sum_i w_i with w_i = tau above v, 1 - tau below, i.e.
    (0.9 + 0.1 * 0.5) / 1.1 and 0.9 / 1.1 at tau = 0.9 (the mean, 0.5 and 1/3, at tau = 0.5)."""
    rewards = np.array([[0.0, 0.5, 1.0], [1.0, 0.0, 0.0]])
    state, action = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    state, action = np.tile(state.ravel(), 20), np.tile(action.ravel(), 20)
    obs = np.eye(2, dtype=np.float32)[state]
    data = iql.Transitions(obs=jnp.asarray(obs), action=jnp.asarray(action),
                           reward=jnp.asarray(rewards[state, action], jnp.float32), next_obs=jnp.asarray(obs),
                           terminal=jnp.ones(state.size, bool))
    cfg = iql.IqlConfig(hidden=32, steps=3000, batch_size=480, lr=1e-3, expectile=0.9, polyak=0.05)
    params, losses = jax.jit(iql.make_fit(cfg, 2, 3))(jax.random.key(0), data)
    net = iql.Networks(cfg.hidden, 3)
    q, v, logits = net.apply(params, jnp.eye(2))
    np.testing.assert_allclose(np.asarray(q), np.repeat(rewards[:, None], 2, 1), atol=0.03)
    np.testing.assert_allclose(np.asarray(v), [0.95 / 1.1, 0.9 / 1.1], atol=0.02)  # Adam jitters V by ~0.01
    np.testing.assert_array_equal(np.asarray(logits).argmax(-1), [2, 0])
    assert float(losses["critic"][-100:].mean()) < 0.01 * float(losses["critic"][:10].mean())


def test_cell_evaluates_on_the_transformer_cells_episodes(env):
    """IQL's greedy play meets the patients and regime schedules the transformer cell of the same key plays."""
    size = cells.Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=48, batch_size=2, epochs=1, eval_episodes=3)
    train_cfg = size.train_config("vt", domain="sepsis")
    task, cfg = Task.make(SCHEDULES[0]), iql.IqlConfig(episodes=4, hidden=8, steps=3, batch_size=8)
    keys = CellKeys.of(jax.random.key(5))
    model = task_model(train_cfg.model, task)
    theirs = evaluation_rollout(train_cfg, init_params(model, keys.init), keys.eval, task, keys.run, env)
    params = iql.make_fit(cfg, sepsis.OBS_DIM, 5)(keys.init, iql.collect(keys.epochs, cfg, train_cfg, task, keys.run,
                                                                         env))[0]
    ours = iql.play_episodes(iql.greedy_policy(params, cfg, 5), train_cfg, keys.eval, task, keys.run,
                             eval_episodes(train_cfg), True, env)
    np.testing.assert_array_equal(ours.record["regime"], theirs.record["regime"])
    np.testing.assert_array_equal(ours.obs[:, 0], theirs.obs[:, 0])
    item = {"key": np.asarray(jax.random.key_data(jax.random.key(5))), "task": task}
    out = iql.make_cell(cfg, train_cfg)(item, env)
    assert set(out) >= {*domains.SEPSIS.metrics(ours), "loss", "value_loss", "actor_loss", "critic_loss"}
    assert out["loss"].shape == (3,)
    assert float(out["accuracy"]) == pytest.approx(float(domains.SEPSIS.metrics(ours)["accuracy"]))


@pytest.mark.parametrize("field, value", [("episodes", 0), ("epsilon", 1.5), ("expectile", 1.0), ("lr", 0.0),
                                          ("steps", 2.5), ("discount", -0.1)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=f"iql.{field}"):
        iql.IqlConfig(**{field: value})

"""(1) DarkRoom rollouts feed the model the corrupted reward while the true reward is what
is recorded and scored; (2) training episodes take their goals from one run of the task's
schedule, in episode order, and evaluation continues that run."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import random_params
from uat_jax import darkroom, schedules
from uat_jax import train as train_mod
from uat_jax.domains import DARKROOM
from uat_jax.feedback import NO_ACTION, FeedbackChannel
from uat_jax.model import DecisionTransformer
from uat_jax.rollout import Trajectory, rollout
from uat_jax.train import Task, TrainConfig, batch_rollout, make_train

H = 8
SIZE = 5


class _ProbeModel:
    """Stands in for the DecisionTransformer: records (step, prev_action, prev_reward) it is fed
    and returns fixed logits (greedy: always action 'down', so the rewards are nonzero)."""

    def __init__(self, cfg, seen):
        self.cfg, self.seen = cfg, seen

    def apply(self, params, obs, prev_action, prev_reward, cache):
        jax.debug.callback(lambda s, a, r: self.seen.append((int(s), int(a[0]), float(r[0]))),
                           cache.step, prev_action, prev_reward, ordered=True)
        logits = jnp.array([[0.0, 0.0, 1.0, 0.0, 0.0]])
        return logits, cache.replace(step=cache.step + 1)


def _probe_rollout(name, sigma=0.0, seed=0):
    seen = []
    model = _ProbeModel(tiny("uat", horizon=H), seen)
    env = darkroom.EnvParams(goal=jnp.array([4, 2], jnp.int32), size=SIZE, horizon=H)
    traj = rollout(model, None, jax.random.key(seed), DARKROOM, env, FeedbackChannel.make(name, sigma), True)
    jax.block_until_ready(traj)
    jax.effects_barrier()
    assert [s for s, _, _ in seen] == list(range(H))
    fed = np.array([r for _, _, r in seen])
    prev_a = np.array([a for _, a, _ in seen])
    return traj, fed, prev_a


@pytest.mark.parametrize("name,sigma", [("sign_flip", 0.0), ("null", 0.0), ("gaussian", 1.0)])
def test_rollout_feeds_the_corrupted_reward_and_scores_the_true_one(name, sigma):
    traj, fed, prev_a = _probe_rollout(name, sigma)
    clean, fed_clean, _ = _probe_rollout("clean")
    true = np.asarray(traj.rewards)
    # the environment's rewards do not depend on the corruption (same key, same fixed policy)
    np.testing.assert_allclose(true, np.asarray(clean.rewards), rtol=0, atol=0)
    assert np.all(np.abs(true) > 1e-3)  # DarkRoom rewards are never 0 (step cost)
    # the shift: step 0 sees the zero pair, step t sees (a_{t-1}, r~_{t-1})
    assert prev_a[0] == NO_ACTION and fed[0] == 0.0
    np.testing.assert_array_equal(prev_a[1:], np.asarray(traj.actions)[:-1])
    np.testing.assert_allclose(fed_clean[1:], true[:-1], rtol=1e-6)
    seen = fed[1:]  # r~_0 .. r~_{T-2} as the model received them
    if name == "sign_flip":
        np.testing.assert_allclose(seen, -true[:-1], rtol=1e-6)
    elif name == "null":
        np.testing.assert_array_equal(seen, 0.0)
    else:
        noise = seen - true[:-1]
        assert np.all(np.abs(noise) > 1e-4) and 0.2 < noise.std() < 3.0
    assert np.all(np.abs(seen - true[:-1]) > 1e-4), "the model was fed the clean reward"
    # what the rollout records as fed is what the model received
    np.testing.assert_allclose(np.asarray(traj.fed_rewards)[:-1], seen, rtol=1e-6)


# ---------------------------------------------------------------------------- schedules


def _expected_goals(name, run_key, episodes):
    """Goals of ``episodes`` of one run, from the schedule's own function (not goal_at)."""
    fn = {"gradual": schedules.gradual, "abrupt": schedules.abrupt, "cyclic": schedules.cyclic}[name]
    return [tuple(int(x) for x in np.asarray(fn(run_key, jnp.asarray(e), SIZE))) for e in episodes]


def _spy_on_goals(monkeypatch, record, fake=False):
    """Records (greedy, goal) of every rollout; ``fake`` skips the model (a constant episode)."""
    real = train_mod.rollout

    def spy(model, params, key, domain, env, channel, greedy):
        jax.debug.callback(lambda g: record.append((bool(greedy), tuple(int(x) for x in np.asarray(g)))), env.goal)
        if fake:
            T = env.horizon
            return Trajectory(obs=jnp.zeros((T, darkroom.OBS_DIM)), actions=jnp.zeros(T, jnp.int32),
                              rewards=jnp.zeros(T), fed_rewards=jnp.zeros(T), expert=jnp.zeros(T, jnp.int32),
                              record={"distance": jnp.ones(T, jnp.int32), "at_goal": jnp.zeros(T, bool)})
        return real(model, params, key, domain, env, channel, greedy)

    monkeypatch.setattr(train_mod, "rollout", spy)


CFG = TrainConfig(model=tiny("uat", horizon=6), epochs=3, batch_size=4, eval_episodes=5, grid_size=SIZE)


def test_training_follows_one_run_of_the_schedule_in_episode_order(monkeypatch):
    """Cell key -> run key (the second of four splits); epoch i trains on episodes i B .. i B + B - 1
    of that one run, and evaluation plays the episodes after the last training episode."""
    key = jax.random.key(7)
    run_key = jax.random.split(key, 4)[1]
    B, E = CFG.batch_size, CFG.epochs
    goals = {}
    record = []
    _spy_on_goals(monkeypatch, record, fake=True)  # only the goals matter here: keep the program small
    monkeypatch.setattr(train_mod, "sequence_logits",
                        lambda model, params, o, a, r, k=None: jnp.zeros(a.shape + (darkroom.N_ACTIONS,))
                        + 0.0 * sum(jnp.sum(x) for x in jax.tree.leaves(params)))
    train = jax.jit(make_train(CFG))  # one program for the three schedules (array leaves)
    for name in ("gradual", "abrupt", "cyclic"):
        record.clear()
        result = train(key, Task.make(name))
        jax.block_until_ready(result)
        jax.effects_barrier()
        expected = _expected_goals(name, run_key, range(E * B))
        got = [tuple(g) for g in np.asarray(result.settings).reshape(-1, 2).tolist()]
        assert got == expected, name  # the recorded training goals, in episode order
        # ... are the goals the rollouts were played on, and evaluation continues the same run
        assert collections.Counter(g for greedy, g in record if not greedy) == collections.Counter(expected), name
        assert collections.Counter(g for greedy, g in record if greedy) == collections.Counter(
            _expected_goals(name, run_key, range(E * B, E * B + CFG.eval_episodes))), name
        goals[name] = got
    # the schedules are three tasks: one run visits a drifting line, one jump goal, four waypoints
    assert goals["gradual"] != goals["abrupt"] != goals["cyclic"] != goals["gradual"]
    assert [len(set(goals[n])) for n in ("abrupt", "cyclic")] == [2, 4]  # 12 episodes: blocks 0-5, 6-11
    assert len(set(goals["gradual"])) >= 6  # a bounce revisits at most half of 12 drifting episodes
    assert len(set(goals["abrupt"][:6])) == 1 and goals["cyclic"][4:] == goals["cyclic"][:-4]


def test_batch_rollout_plays_each_given_goal(monkeypatch):
    model = DecisionTransformer(CFG.model)
    params = random_params(model, 2)
    run_key = jax.random.key(5)
    episodes = jnp.array([0, 1, 2, 3, 7, 13])
    out = {}
    record = []
    _spy_on_goals(monkeypatch, record)

    @jax.jit
    def run(task):
        goals = train_mod.episode_settings(CFG, task, run_key, episodes)
        return goals, batch_rollout(CFG, model, params, jax.random.split(jax.random.key(9), goals.shape[0]), task.channel, goals,
                                    greedy=False)

    for name in ("gradual", "abrupt", "cyclic"):
        record.clear()
        goals, traj = run(Task.make(name))
        jax.block_until_ready(traj)
        jax.effects_barrier()
        expected = _expected_goals(name, run_key, np.asarray(episodes).tolist())
        assert [tuple(g) for g in np.asarray(goals).tolist()] == expected, name
        assert collections.Counter(g for _, g in record) == collections.Counter(expected), name
        out[name] = (expected, traj)
    assert out["gradual"][0] != out["cyclic"][0]
    assert not np.array_equal(out["gradual"][1].expert, out["cyclic"][1].expert)

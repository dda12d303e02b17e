"""Memory tasks beyond T-Maze (``rate_jax.tasks``) in training and evaluation: the generic rollout
(``make_env_evaluate``) against a step-by-step Python replay of its own actions, the tasks' data
against the environments' generators, and the configuration errors."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rate_jax
from rate_jax import RATE, ModelConfig, Segment, minigrid_memory, popgym, tmaze
from rate_jax.tasks import MinigridTask, PopgymTask, one_hot_view

EPISODES = 6


def _params(cfg: ModelConfig, seed: int):
    k = cfg.segment_len
    seg = Segment(obs=jnp.zeros((1, k, cfg.obs_dim)), actions=jnp.zeros((1, k), jnp.int32), rtg=jnp.zeros((1, k)),
                  action_known=jnp.zeros((1, k)))
    return RATE(cfg).init(jax.random.key(seed), seg)


def _config(task, segment_len=4):
    return ModelConfig(obs_dim=task.obs_dim, num_actions=task.num_actions, segment_len=segment_len, n_layer=1,
                       d_model=16, n_head=2, d_head=8, num_mem_tokens=2, n_head_ca=1, mem_len=4)


def _replay(env, key, env_params, actions):
    """Reset each episode with the rollout's reset key and apply its recorded actions one by one
    in Python until done: (return, length, success or NaN, chose or NaN) per episode."""
    k_reset, _ = jax.random.split(key)
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    out = []
    for i, k in enumerate(jax.random.split(k_reset, actions.shape[0])):
        p = jax.tree.map(lambda x, i=i: x[i], env_params)
        _, state = reset(k, p)
        ret, flags = 0.0, {"success": np.nan, "chose": np.nan}
        for t, a in enumerate(actions[i]):  # noqa: B007 (t: the steps taken, read after the loop)
            _, state, reward, done, info = step(jax.random.key(0), state, jnp.int32(a), p)
            ret += float(reward)
            for name in flags:
                if name in info and not flags[name] == 1.0:
                    flags[name] = float(info[name])
            if bool(done):
                break
        out.append((ret, t + 1, flags["success"], flags["chose"]))
    return np.asarray(out)


@pytest.mark.parametrize("task", [PopgymTask("count_recall"), MinigridTask(7, time_limit=20)], ids=lambda t: type(t).__name__ + getattr(t, "name", ""))
def test_env_evaluate_matches_a_python_replay_of_its_actions(task):
    """Return, length and success of every episode equal a step-by-step replay of the argmax actions
    the rollout chose (a dropped live mask, a reward counted after the end or a wrong reset key fails)."""
    cfg = _config(task)
    steps = task.oracle_steps + 4 if isinstance(task, PopgymTask) else 24  # past the end of every episode
    env_params = task.env_params(EPISODES)
    key = jax.random.key(5)
    out = jax.jit(rate_jax.make_env_evaluate(cfg, task.env, steps))(_params(cfg, 1), key, env_params)
    replay = _replay(task.env, key, env_params, np.asarray(out.actions)[:, :steps])
    np.testing.assert_allclose(np.asarray(out.episode_return), replay[:, 0], atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out.episode_length), replay[:, 1])
    np.testing.assert_array_equal(np.asarray(out.success), replay[:, 2])
    np.testing.assert_array_equal(np.asarray(out.chose), replay[:, 3])
    assert (replay[:, 1] < steps).all()  # every episode ended inside the rollout, so its end is tested
    if isinstance(task, PopgymTask):
        assert np.isnan(np.asarray(out.success)).all() and np.isnan(np.asarray(out.chose)).all()  # POPGym: neither
        assert np.unique(np.asarray(out.episode_return)).size > 1  # the episodes differ: a real comparison


def test_tmaze_success_is_the_goal_reward():
    """T-Maze's info["success"] (what the evaluators now read) holds exactly when the step ends on the
    goal cell, where the reward is 1, over every transition from every cell of short corridors (the
    earlier evaluators read return >= 1)."""
    cells = [(length, x, y, goal, a) for length in (1, 2, 3) for x in range(length + 1) for y in (-1, 0, 1)
             for goal in (-1, 1) for a in range(4) if y == 0 or x == length]
    length, x, y, goal, a = (jnp.asarray(v, jnp.int32) for v in zip(*cells))
    state = tmaze.EnvState(x=x, y=y, goal_y=goal, time=jnp.zeros_like(x))
    keys = jax.random.split(jax.random.key(0), len(cells))
    _, new, reward, done, info = jax.jit(jax.vmap(tmaze.step))(keys, state, a, jax.vmap(tmaze.make_params)(length))
    success, chose, reward = np.asarray(info["success"]), np.asarray(info["chose"]), np.asarray(reward)
    at_junction = np.asarray(new.x) == np.asarray(length)
    on_goal = at_junction & (np.asarray(new.y) == np.asarray(goal))
    np.testing.assert_array_equal(success, on_goal)  # the agent now stands on the goal cell
    np.testing.assert_array_equal(chose, at_junction & (np.asarray(new.y) != 0))  # on either goal candidate
    np.testing.assert_array_equal(reward, on_goal.astype(np.float32))
    assert 0 < success.sum() < chose.sum() == np.asarray(done).sum()  # some end on the wrong side; no time-outs here


def test_task_data_are_the_generators_episodes():
    key = jax.random.key(4)
    task = PopgymTask("repeat_previous")
    traj = task.data(key, 5, 55)
    eps = popgym.generate(key, popgym.REPEAT_PREVIOUS, "easy", 5, 55)
    for field in ("obs", "actions", "rtg", "action_mask"):
        np.testing.assert_array_equal(np.asarray(getattr(traj, field)), np.asarray(getattr(eps, field)))
    np.testing.assert_array_equal(np.asarray(traj.corridor_length), np.asarray(eps.length) - 1)  # the final action
    assert np.asarray(traj.action_mask)[np.arange(5), np.asarray(traj.corridor_length)].all()
    assert not np.asarray(traj.action_mask)[np.arange(5), np.asarray(eps.length)].any()
    grid = MinigridTask(9)
    got = grid.data(key, 4, 20)
    want = minigrid_memory.generate(key, minigrid_memory.authors_params(np.full(4, 9)), 20)
    want = want.replace(obs=one_hot_view(want.obs))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert got.obs.shape == (4, 20, 45) and grid.obs_dim == 45


def test_one_hot_view_by_hand():
    """Two cells (object, colour, state): a green ball and a grey wall, then an unseen cell."""
    obs = jnp.asarray([[6.0, 1, 0, 2, 5, 0, 0, 0, 0]])
    want = np.zeros((1, 15))
    want[0, 4] = want[0, 5 + 2] = want[0, 10 + 0] = 1.0  # ball = slot 4, wall = slot 2, unseen = slot 0
    np.testing.assert_array_equal(np.asarray(one_hot_view(obs)), want)


def test_train_config_with_a_task():
    task = PopgymTask("repeat_previous")
    model = ModelConfig(obs_dim=4, num_actions=4, segment_len=18, n_layer=1, d_model=16, n_head=2, d_head=8,
                        num_mem_tokens=2, n_head_ca=1)
    cfg = rate_jax.TrainConfig(model=model, task=task, num_segments=3, num_train=8, num_val=4, batch_size=4,
                               num_steps=2)
    state = rate_jax.init_state(cfg, jax.random.key(0))
    assert state.train_data.obs.shape == (8, 54, 4) and state.val_data.obs.shape == (4, 54, 4)
    np.testing.assert_array_equal(np.asarray(state.train_data.rtg[:, 0]), 1.0)  # oracle episodes
    with pytest.raises(ValueError, match="num_segments"):
        dataclasses.replace(cfg, num_segments=2)  # K*N = 36 < 52
    with pytest.raises(ValueError, match="model"):
        dataclasses.replace(cfg, model=dataclasses.replace(model, obs_dim=5))
    with pytest.raises(ValueError, match="corridor_lengths"):
        dataclasses.replace(cfg, corridor_lengths=(4,))
    with pytest.raises(ValueError, match="PopgymTask.name"):
        PopgymTask("battleship")
    with pytest.raises(ValueError, match="PopgymTask.level"):
        PopgymTask("autoencode", "extreme")
    with pytest.raises(ValueError, match="size"):
        MinigridTask(8)


def test_dt_with_the_segment_context():
    base = ModelConfig(segment_len=5, num_mem_tokens=3, mem_len=4, n_head_ca=1)
    dt, segments = rate_jax.variant("DT", base, 3, dt_context="segment")
    assert segments == 3 and dt == dataclasses.replace(base, num_mem_tokens=0, mem_len=0, n_head_ca=0)
    assert rate_jax.variant("DT", base, 3)[0].segment_len == 15  # the default: the whole trajectory
    with pytest.raises(ValueError, match="dt_context"):
        rate_jax.variant("DT", base, 3, dt_context="window")

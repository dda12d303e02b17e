"""T-Maze dynamics and the oracle dataset against hand-worked episodes and a numpy T-Maze."""
import jax
import jax.numpy as jnp
import numpy as np

import rate_reference as ref
from rate_jax import dataset, segment_corridor_lengths, tmaze
from rate_jax.tmaze import DOWN, LEFT, RIGHT, UP


def run(params, goal_y, actions):
    """Step the JAX env through ``actions`` from a reset with the given goal side."""
    _, state = tmaze.reset(jax.random.key(0), params)
    state = state.replace(goal_y=jnp.int32(goal_y))
    step = jax.jit(tmaze.step)
    rows = []
    for i, a in enumerate(actions):
        obs, state, reward, done, _ = step(jax.random.key(i + 1), state, jnp.int32(a), params)
        rows.append((np.asarray(obs[:3]).tolist(), int(state.x), int(state.y), float(reward), bool(done)))
    return rows


def test_hand_worked_episode():
    params = tmaze.EnvParams(corridor_length=jnp.int32(3), episode_length=jnp.int32(10))
    obs0, state0 = tmaze.reset(jax.random.key(3), params)
    assert obs0[1] == state0.goal_y and obs0[0] == 0 and obs0[2] == 0  # the cue shows at the first step only
    rows = run(params, +1, [LEFT, RIGHT, UP, RIGHT, RIGHT, RIGHT, UP])
    # (y, cue, flag), x, y, reward, done
    assert rows == [
        ([0, 0, 0], 0, 0, 0.0, False),  # left wall: stay on the oracle cell, cue gone
        ([0, 0, 0], 1, 0, 0.0, False),
        ([0, 0, 0], 1, 0, 0.0, False),  # up inside the corridor: blocked
        ([0, 0, 0], 2, 0, 0.0, False),
        ([0, 0, 1], 3, 0, 0.0, False),  # junction flag
        ([0, 0, 1], 3, 0, 0.0, False),  # right of the junction: blocked
        ([1, 0, 1], 3, 1, 1.0, True),  # correct turn
    ]
    wrong = run(params, +1, [RIGHT, RIGHT, RIGHT, DOWN])
    assert wrong[-1] == ([-1, 0, 1], 3, -1, 0.0, True)
    timeout = run(tmaze.make_params(3), -1, [RIGHT] * 5)  # episode_length = 5
    assert [r[-1] for r in timeout] == [False] * 4 + [True] and timeout[-1][3] == 0.0


def test_matches_numpy_tmaze_side_by_side():
    num, horizon = 24, 14
    lengths = jnp.asarray(np.arange(num) % 6 + 1, jnp.int32)
    params = jax.vmap(tmaze.make_params)(lengths)
    keys = jax.random.split(jax.random.key(7), num)
    # biased random actions so that many episodes reach the junction
    actions = jax.random.choice(jax.random.key(8), 4, (horizon, num), p=jnp.array([0.6, 0.15, 0.1, 0.15]))

    def roll(key, p, acts):
        obs0, state = tmaze.reset(key, p)

        def body(s, inp):
            k, a = inp
            obs, s, r, d, _ = tmaze.step(k, s, a, p)
            return s, (obs, r, d)

        _, (obs, rew, done) = jax.lax.scan(body, state, (jax.random.split(key, horizon), acts))
        return obs0, state.goal_y, obs, rew, done

    obs0, goal, obs, rew, done = jax.jit(jax.vmap(roll, in_axes=(0, 0, 1)))(keys, params, actions)
    noise = np.asarray(obs[..., 3])
    assert set(np.unique(noise)) == {-1.0, 0.0, 1.0}
    assert set(np.unique(np.asarray(goal))) == {-1, 1}
    finished = 0
    for e in range(num):
        env = ref.NumpyTMaze(int(lengths[e]), int(lengths[e]) + 2, int(goal[e]))
        np.testing.assert_array_equal(np.asarray(obs0[e, :3]), env.obs())
        for t in range(horizon):
            o, r, d = env.step(int(actions[t, e]))
            np.testing.assert_array_equal(np.asarray(obs[e, t, :3]), o)
            assert float(rew[e, t]) == r and bool(done[e, t]) == d
            if d:
                finished += 1
                break
    assert finished == num  # every episode ends within its horizon


def test_oracle_dataset_structure_and_solves_every_maze():
    lengths = jnp.asarray([1, 4, 7, 10, 10, 4], jnp.int32)
    max_steps = 12
    data = jax.jit(dataset.generate, static_argnums=2)(jax.random.key(11), lengths, max_steps)
    assert data.obs.shape == (6, 12, 4) and data.actions.shape == (6, 12)
    for e in range(6):
        length, goal = int(lengths[e]), int(data.goal_y[e])
        mask = np.asarray(data.action_mask[e])
        np.testing.assert_array_equal(mask, np.arange(max_steps) <= length)  # L + 1 actions
        turn = UP if goal == 1 else DOWN
        np.testing.assert_array_equal(np.asarray(data.actions[e, :length + 1]), [RIGHT] * length + [turn])
        np.testing.assert_array_equal(np.asarray(data.rtg[e]), (np.arange(max_steps) <= length).astype(float))
        obs = np.asarray(data.obs[e])
        assert obs[0, 1] == goal and not obs[1:, 1].any()  # cue only in the first observation
        np.testing.assert_array_equal(obs[:length + 2, 2], np.arange(length + 2) >= length)  # junction flag
        assert obs[length + 1, 0] == goal and (obs[length + 2:] == obs[length + 1]).all()  # padding repeats
        env = ref.NumpyTMaze(length, length + 2, goal)  # replay: the oracle actions solve the maze
        rewards = [env.step(int(a))[1] for a in np.asarray(data.actions[e, :length + 1])]
        assert rewards == [0.0] * length + [1.0] and env.t == length + 1
    assert set(np.asarray(data.goal_y).tolist()) == {-1, 1}


def test_segment_corridor_lengths():
    assert segment_corridor_lengths(5, 3) == (3, 8, 13)
    assert segment_corridor_lengths(50, 3) == (48, 98, 148)  # the authors' T = 50, 100, 150


def test_mirror_is_the_other_goal_side_s_oracle_trajectory(monkeypatch):
    """mirror(trajectory with goal g) equals the oracle trajectory generated with goal -g (same keys)."""
    reset = tmaze.reset

    def generate_with_goal(goal):
        with monkeypatch.context() as mp:
            mp.setattr(tmaze, "reset", lambda key, p: (lambda o, s: (o.at[1].set(goal), s.replace(
                goal_y=jnp.int32(goal))))(*reset(key, p)))
            return dataset.generate(jax.random.key(4), jnp.asarray([3, 7, 10]), 12)

    up, down = generate_with_goal(1), generate_with_goal(-1)
    assert (np.asarray(up.goal_y) == 1).all() and (np.asarray(down.goal_y) == -1).all()
    assert np.abs(np.asarray(up.obs) - np.asarray(down.obs)).max() > 0  # the pair differs
    for name in ("obs", "actions", "rtg", "action_mask", "corridor_length", "goal_y"):
        np.testing.assert_array_equal(np.asarray(getattr(dataset.mirror(up), name)), np.asarray(getattr(down, name)),
                                      err_msg=name)

"""DarkRoom (Appendix C.1) against a hand-worked episode and a numpy re-implementation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import darkroom

MOVES = {0: (0, 0), 1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}


def np_step(pos, action, goal, size=10):
    """Independent numpy transition: returns (new_pos, reward)."""
    dr, dc = MOVES[int(action)]
    new = (min(max(pos[0] + dr, 0), size - 1), min(max(pos[1] + dc, 0), size - 1))
    d_old = abs(pos[0] - goal[0]) + abs(pos[1] - goal[1])
    d_new = abs(new[0] - goal[0]) + abs(new[1] - goal[1])
    reward = -0.01 + (2.0 if d_new == 0 else 0.0) + (0.5 if d_new < d_old else 0.0) - (0.5 if d_new > d_old else 0.0)
    return new, reward


def np_walls(pos, size=10):
    return [float(not (0 <= pos[0] + dr < size and 0 <= pos[1] + dc < size))
            for dr in (-1, 0, 1) for dc in (-1, 0, 1)]


def params(goal, **kw):
    return darkroom.EnvParams(goal=jnp.asarray(goal, jnp.int32), **kw)


def test_hand_worked_episode():
    env = params((2, 3), cue_prob=1.0)
    state = darkroom.EnvState(pos=jnp.array([0, 0]), t=jnp.array(0))
    # action: (expected position, expected reward), worked out by hand from C.1
    script = [(1, (0, 0), -0.01),   # up into the wall: no move, distance 5 -> 5
              (2, (1, 0), 0.49),    # down: 5 -> 4
              (4, (1, 1), 0.49),    # right: 4 -> 3
              (3, (1, 0), -0.51),   # left: 3 -> 4
              (0, (1, 0), -0.01),   # stay
              (2, (2, 0), 0.49),    # 4 -> 3
              (4, (2, 1), 0.49),    # 3 -> 2 (cue range)
              (4, (2, 2), 0.49),    # 2 -> 1
              (4, (2, 3), 2.49),    # reaches the goal: +2 +0.5 -0.01
              (0, (2, 3), 1.99)]    # stays on the goal: +2 -0.01
    for i, (action, pos, reward) in enumerate(script):
        obs, state, r, done, info = darkroom.step(jax.random.key(i), state, jnp.array(action), env)
        assert tuple(np.asarray(state.pos)) == pos
        assert float(r) == pytest.approx(reward, abs=1e-6)
        assert bool(info["at_goal"]) == (pos == (2, 3))
        assert float(obs[-1]) == float(abs(pos[0] - 2) + abs(pos[1] - 3) <= 2)
    assert int(state.t) == len(script)
    # the 3x3 wall mask at the corner (0, 0), row-major over (dr, dc)
    obs = darkroom.observe(jax.random.key(0), jnp.array([0, 0]), env)
    np.testing.assert_array_equal(obs[:9], [1, 1, 1, 1, 0, 0, 1, 0, 0])


def test_matches_numpy_side_by_side(rng):
    for episode in range(4):
        goal = tuple(int(g) for g in rng.integers(0, 10, 2))
        env = params(goal, cue_prob=float(episode % 2), horizon=30)
        obs, state = darkroom.reset(jax.random.key(episode), env)
        pos = tuple(int(p) for p in state.pos)
        assert pos != goal
        step = jax.jit(darkroom.step)
        for t in range(30):
            action = int(rng.integers(0, 5))
            obs, state, r, done, _ = step(jax.random.key(100 + t), state, jnp.array(action), env)
            pos, reward = np_step(pos, action, goal)
            assert tuple(int(p) for p in state.pos) == pos
            assert float(r) == pytest.approx(reward, abs=1e-6)
            np.testing.assert_array_equal(obs[:9], np_walls(pos))
            near = abs(pos[0] - goal[0]) + abs(pos[1] - goal[1]) <= 2
            assert float(obs[9]) == float(near and episode % 2 == 1)
            assert bool(done) == (t == 29)


def test_cue_fires_half_the_time_near_goal_only():
    env = params((5, 5))
    keys = jax.random.split(jax.random.key(0), 4000)
    near = jax.vmap(lambda k: darkroom.observe(k, jnp.array([4, 4]), env))(keys)[:, 9]
    far = jax.vmap(lambda k: darkroom.observe(k, jnp.array([2, 4]), env))(keys)[:, 9]
    assert abs(float(near.mean()) - 0.5) < 0.04  # 5 sigma of a Binomial(4000, 0.5) mean
    assert float(far.max()) == 0.0


def test_reset_uniform_over_non_goal_cells():
    env = params((3, 7))
    starts = jax.vmap(lambda k: darkroom.reset(k, env)[1].pos)(jax.random.split(jax.random.key(1), 19800))
    counts = np.zeros((10, 10))
    np.add.at(counts, (np.asarray(starts[:, 0]), np.asarray(starts[:, 1])), 1)
    assert counts[3, 7] == 0
    others = np.delete(counts.ravel(), 37)
    assert others.min() > 200 - 5 * 14 and others.max() < 200 + 5 * 14  # 200 +- 5 sigma


def test_expert_is_manhattan_optimal_with_stated_ties():
    cells = np.array([(r, c) for r in range(10) for c in range(10)])
    pos, goal = np.repeat(cells, 100, 0), np.tile(cells, (100, 1))
    actions = np.asarray(jax.vmap(darkroom.expert_action)(jnp.asarray(pos), jnp.asarray(goal)))
    for p, g, a in zip(pos, goal, actions):
        d = abs(p - g).sum()
        if d == 0:
            assert a == 0
            continue
        new, _ = np_step(tuple(p), a, tuple(g))
        assert abs(np.array(new) - g).sum() == d - 1  # optimal: distance drops by one
        vertical = abs(g[0] - p[0]) >= abs(g[1] - p[1])
        assert (a in (1, 2)) == vertical  # larger gap first, ties vertical


def test_batch_of_different_goals_is_independent():
    goals = jnp.array([[0, 0], [9, 9], [4, 6]])
    state = darkroom.EnvState(pos=jnp.array([[5, 5]] * 3), t=jnp.zeros(3, jnp.int32))
    batched = jax.vmap(lambda g, s: darkroom.step(jax.random.key(0), s, jnp.array(1), params(g))[2])(goals, state)
    expected = [np_step((5, 5), 1, tuple(np.asarray(g)))[1] for g in goals]
    np.testing.assert_allclose(batched, expected, atol=1e-6)
    assert len(set(np.round(expected, 3))) > 1

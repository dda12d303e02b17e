"""Goal schedules across episodes (Appendix C.1 as read in uat_jax.schedules), each goal
sequence checked against a brute-force numpy loop that builds it episode by episode."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import schedules

SIZE = 10
EPISODES = 60
RUNS = 64


@functools.cache
def all_goals(name: str) -> np.ndarray:
    """Goals [RUNS, EPISODES, 2] of runs 0..RUNS-1, one compiled program per schedule."""
    sid = jnp.int32(schedules.schedule_id(name))
    per_run = jax.vmap(lambda k, e: schedules.goal_at(sid, k, e, SIZE), in_axes=(None, 0))
    fn = jax.jit(jax.vmap(per_run, in_axes=(0, None)))
    return np.asarray(fn(jax.random.split(jax.random.key(0), RUNS), jnp.arange(EPISODES)))


def _bounce(start, velocity, n):
    """The drift as a loop: step by ``velocity``; an axis that would leave the grid reverses."""
    pos, v, out = np.array(start), np.array(velocity), []
    for _ in range(n):
        out.append(pos.copy())
        for axis in range(2):
            if not 0 <= pos[axis] + v[axis] < SIZE:
                v[axis] = -v[axis]
        pos = pos + v
    return np.array(out)


def test_gradual_drift_is_a_bouncing_walk_one_cell_per_episode():
    directions = set()
    for g in all_goals("gradual"):
        # the first move gives the direction (already reflected if the start is on the border)
        np.testing.assert_array_equal(g, _bounce(g[0], g[1] - g[0], EPISODES))
        assert (np.abs(np.diff(g, axis=0)).max(-1) == 1).all()  # one cell (king move) every episode
        assert 10 <= len({tuple(x) for x in g}) <= 18  # one reflected line of the 10 x 10 grid
        directions.add(tuple(g[1] - g[0]))
    assert len(directions) == 8  # every direction of {-1, 0, 1}^2 but (0, 0) occurs
    assert len({tuple(g[0]) for g in all_goals("gradual")}) > 40  # uniform starts: many cells


def test_abrupt_goal_is_constant_for_six_episodes_then_jumps():
    changes = []
    for g in all_goals("abrupt"):
        for e in range(1, EPISODES):  # the loop: a new draw only where e is a multiple of 6
            if e % 6:
                np.testing.assert_array_equal(g[e], g[e - 1])
            else:
                changes.append(not np.array_equal(g[e], g[e - 1]))
    assert np.mean(changes) > 0.95  # a uniform redraw keeps the goal with probability 1/100
    assert len({tuple(x) for x in all_goals("abrupt")[:, ::6].reshape(-1, 2)}) > 90  # uniform on the grid


def test_cyclic_has_period_four_over_four_distinct_waypoints():
    for g in all_goals("cyclic"):
        waypoints = g[:4]
        assert len({tuple(x) for x in waypoints}) == 4
        np.testing.assert_array_equal(g, np.array([waypoints[e % 4] for e in range(EPISODES)]))
    assert len({tuple(x) for x in all_goals("cyclic")[:, :4].reshape(-1, 2)}) > 90


def test_runs_differ_and_switch_matches_direct_functions():
    key = jax.random.split(jax.random.key(0), RUNS)[0]
    for name, fn in zip(schedules.SCHEDULES, (schedules.gradual, schedules.abrupt, schedules.cyclic)):
        direct = np.asarray(jax.jit(jax.vmap(lambda e, fn=fn: fn(key, e, SIZE)))(jnp.arange(EPISODES)))
        np.testing.assert_array_equal(all_goals(name)[0], direct)
        assert not np.array_equal(all_goals(name)[0], all_goals(name)[1])


def test_distinct_goals_counts_cells_like_a_python_set(rng):
    goals = rng.integers(0, 4, size=(7, 5, 2))
    assert int(schedules.distinct_goals(jnp.asarray(goals), 4)) == len({tuple(x) for x in goals.reshape(-1, 2)})
    # (r, c) and (c, r) are different cells: an index r + c (a dropped factor) would merge them
    assert int(schedules.distinct_goals(jnp.array([[0, 1], [1, 0], [0, 1]]), 4)) == 2


def test_schedule_id_rejects_unknown_names():
    assert [schedules.schedule_id(n) for n in schedules.SCHEDULES] == [0, 1, 2]
    with pytest.raises(ValueError, match="schedule must be one of"):
        schedules.schedule_id("weekly")

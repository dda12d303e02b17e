"""Goal schedules across episodes (Appendix C.1 as read in uat_jax.schedules)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from uat_jax import schedules

EPISODES = jnp.arange(48)
RUNS = 10


@functools.cache
def all_goals(name: str) -> np.ndarray:
    """Goals [RUNS, 48, 2] of runs 0..RUNS-1, one compiled program per schedule."""
    sid = jnp.int32(schedules.schedule_id(name))
    per_run = jax.vmap(lambda k, e: schedules.goal_at(sid, k, e, 10), in_axes=(None, 0))
    fn = jax.jit(jax.vmap(per_run, in_axes=(0, None)))
    return np.asarray(fn(jax.random.split(jax.random.key(0), RUNS), EPISODES))


def test_gradual_drift_moves_one_cell_per_axis_and_reflects():
    for g in all_goals("gradual"):
        assert g.min() >= 0 and g.max() <= 9
        step = np.abs(np.diff(g, axis=0))
        assert step.max() <= 1  # at most one cell per axis per episode
        moving = step.sum(0) > 0
        assert moving.any() and (step[:, moving] == 1).all()  # a moving axis never pauses
        axis = int(np.argmax(moving))
        assert {0, 9} <= set(g[:, axis].tolist())  # 48 episodes span a full reflection


def test_abrupt_jumps_every_six_episodes():
    for g in all_goals("abrupt"):
        blocks = g.reshape(8, 6, 2)
        assert (blocks == blocks[:, :1]).all()  # constant within a block of six
        assert len({tuple(b[0]) for b in blocks}) > 4  # and it jumps between blocks


def test_cyclic_visits_four_distinct_waypoints():
    for g in all_goals("cyclic"):
        assert (g[4:] == g[:-4]).all()
        assert len({tuple(x) for x in g[:4]}) == 4


def test_runs_differ_and_switch_matches_direct_functions():
    key = jax.random.split(jax.random.key(0), RUNS)[0]
    for name, fn in zip(schedules.SCHEDULES, (schedules.gradual, schedules.abrupt, schedules.cyclic)):
        direct = np.asarray(jax.jit(jax.vmap(lambda e, fn=fn: fn(key, e, 10)))(EPISODES))
        np.testing.assert_array_equal(all_goals(name)[0], direct)
        assert not np.array_equal(all_goals(name)[0], all_goals(name)[1])

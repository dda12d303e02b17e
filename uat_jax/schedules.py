"""Hidden-goal schedules across DarkRoom episodes (UAT paper, Appendix C.1).

C.1: "The hidden goal remains fixed within each episode and follows one of three
schedules across episodes: gradual drift, abrupt jumps every six episodes, or a
four-waypoint cyclic schedule. Model histories and utility states are reset at episode
boundaries". The paper names the schedules only; our readings:

- gradual drift (0): a uniform start cell and a direction v in {-1, 0, 1}^2 \\ {0}; the
  goal moves one cell along v per episode, reflecting off the border (each coordinate
  folded onto [0, size - 1] with period 2 (size - 1)), so a run visits one reflected
  line: 10 to 18 cells of the 10 x 10 grid;
- abrupt jumps (1): a uniform goal, redrawn every ``ABRUPT_PERIOD`` = 6 episodes;
- cyclic (2): four distinct uniform waypoints visited in turn, one per episode.

A *run* is one instance of a schedule (one ``run_key``: one start and direction, one
sequence of jump goals, one set of waypoints) and its episodes 0, 1, 2, ...; the goal
of episode ``e`` is a pure function ``goal_at(schedule, run_key, e)``, so any episode
is drawn without simulating the ones before it. The schedule id is an array leaf, so
the three schedules vmap in one program.

Because histories reset at episode boundaries, a schedule can act on a model only
through which goals its run visits, and in which order. The schedules are three tasks
only if a training run follows one run's episode order: ``uat_jax.train`` gives each
training cell one run, trains epoch ``i`` on its episodes ``i B, ..., i B + B - 1``
and evaluates on the episodes that follow. (Drawing a fresh run per episode would make
every schedule's goal uniform on the grid, i.e. one task three times.)
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

SCHEDULES = ("gradual", "abrupt", "cyclic")
ABRUPT_PERIOD = 6
N_WAYPOINTS = 4


def _cell(idx: jax.Array, size: int) -> jax.Array:
    return jnp.stack([idx // size, idx % size]).astype(jnp.int32)


def _reflect(x: jax.Array, size: int) -> jax.Array:
    """Fold the integer line onto [0, size - 1] by reflection at both ends."""
    period = 2 * (size - 1)
    m = jnp.mod(x, period)
    return jnp.where(m <= size - 1, m, period - m)


def gradual(run_key: jax.Array, episode: jax.Array, size: int) -> jax.Array:
    """Goal of ``episode`` under gradual drift (one cell per episode, reflecting)."""
    k_start, k_dir = jax.random.split(run_key)
    start = _cell(jax.random.randint(k_start, (), 0, size * size), size)
    d = jax.random.randint(k_dir, (), 0, 8)
    d = d + (d >= 4)  # skip the (0, 0) direction in the 3x3 block
    v = jnp.stack([d // 3 - 1, d % 3 - 1])
    return _reflect(start + v * episode, size).astype(jnp.int32)


def abrupt(run_key: jax.Array, episode: jax.Array, size: int) -> jax.Array:
    """Goal of ``episode`` under abrupt jumps every ABRUPT_PERIOD episodes."""
    key = jax.random.fold_in(run_key, episode // ABRUPT_PERIOD)
    return _cell(jax.random.randint(key, (), 0, size * size), size)


def cyclic(run_key: jax.Array, episode: jax.Array, size: int) -> jax.Array:
    """Goal of ``episode`` under the four-waypoint cycle."""
    waypoints = jax.random.choice(run_key, size * size, (N_WAYPOINTS,), replace=False)
    return _cell(waypoints[episode % N_WAYPOINTS], size)


def goal_at(schedule: jax.Array, run_key: jax.Array, episode: jax.Array, size: int) -> jax.Array:
    """Goal [2] of ``episode`` of the run ``run_key`` under schedule id ``schedule``."""
    branches = [functools.partial(fn, size=size) for fn in (gradual, abrupt, cyclic)]
    return jax.lax.switch(schedule, branches, run_key, episode)


def distinct_goals(goals: jax.Array, size: int) -> jax.Array:
    """Number of distinct cells among the goals ``[..., 2]`` of a size x size grid."""
    idx = (goals[..., 0] * size + goals[..., 1]).ravel()
    return jnp.zeros(size * size, bool).at[idx].set(True).sum()


def schedule_id(name: str) -> int:
    """Index of a schedule name in SCHEDULES."""
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {name!r}")
    return SCHEDULES.index(name)

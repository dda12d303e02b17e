"""DarkRoom with a hidden goal (UAT paper, Appendix C.1 Domain A), gymnax-style.

A ``size x size`` grid (10 x 10) whose only walls are its border. Positions are
(row, col); actions are 0 stay, 1 up (row - 1), 2 down (row + 1), 3 left (col - 1),
4 right (col + 1); a move into the border leaves the agent in place.

Observation (10-dim): the 3x3 wall mask around the agent, row-major over offsets
(dr, dc) in {-1, 0, 1}^2 (1 where that cell is outside the grid; the centre is always
0), then a binary cue that fires with probability ``cue_prob`` when the agent is within
Manhattan distance ``cue_radius`` of the goal (the goal cell included).

Reward of the transition p -> p' (reading: the four terms of C.1 add up):
r = goal_reward * [p' = goal] + shaping * ([d' < d] - [d' > d]) + step_cost, with
d, d' the Manhattan distances to the goal, i.e. +2, +-0.5 and -0.01.
The episode lasts ``horizon`` steps and does not end at the goal (staying there keeps
earning the goal reward), so every episode has exactly T steps.

The expert (Appendix C.2) sees the goal and takes a Manhattan-optimal move: it
closes the larger of |d_row|, |d_col| first, a tie going to the vertical move, and
stays (action 0) at the goal. This single label is the oracle of the accuracy metric.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

N_ACTIONS = 5
OBS_DIM = 10
MOVES = jnp.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=jnp.int32)
"""Displacement (d_row, d_col) of each action."""


@struct.dataclass
class EnvParams:
    """One DarkRoom task; every float is an array leaf so tasks vmap."""

    goal: jax.Array  # [2] int32, hidden goal (row, col)
    cue_prob: jax.Array = 0.5
    cue_radius: jax.Array = 2
    goal_reward: jax.Array = 2.0
    shaping: jax.Array = 0.5
    step_cost: jax.Array = -0.01
    size: int = struct.field(pytree_node=False, default=10)
    horizon: int = struct.field(pytree_node=False, default=60)


@struct.dataclass
class EnvState:
    pos: jax.Array  # [2] int32
    t: jax.Array  # [] int32, steps taken


def manhattan(a: jax.Array, b: jax.Array) -> jax.Array:
    """|a - b|_1 over the last axis."""
    return jnp.abs(a - b).sum(-1)


def observe(key: jax.Array, pos: jax.Array, params: EnvParams) -> jax.Array:
    """The 10-dim observation of C.1 at ``pos`` (a fresh cue draw from ``key``)."""
    return observe_with(jax.random.uniform(key), pos, params)


def observe_with(u: jax.Array, pos: jax.Array, params: EnvParams) -> jax.Array:
    """:func:`observe` given its uniform ``u``: the cue shows near the goal when u < cue_prob."""
    offsets = jnp.stack(jnp.meshgrid(jnp.arange(-1, 2), jnp.arange(-1, 2), indexing="ij"), -1)
    cells = pos + offsets.reshape(9, 2)
    wall = jnp.any((cells < 0) | (cells >= params.size), axis=-1)
    near = manhattan(pos, params.goal) <= params.cue_radius
    cue = near & (u < params.cue_prob)
    return jnp.concatenate([wall, cue[None]]).astype(jnp.float32)


def reset(key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """Uniform start on the size^2 - 1 non-goal cells; returns (obs, state)."""
    k_pos, k_obs = jax.random.split(key)
    goal_idx = params.goal[0] * params.size + params.goal[1]
    idx = jax.random.randint(k_pos, (), 0, params.size * params.size - 1)
    idx = idx + (idx >= goal_idx)
    pos = jnp.stack([idx // params.size, idx % params.size]).astype(jnp.int32)
    return observe(k_obs, pos, params), EnvState(pos=pos, t=jnp.zeros((), jnp.int32))


def draw_steps(key: jax.Array, params: EnvParams) -> jax.Array:
    """The randomness of a whole episode, drawn before it is played: [horizon] uniforms,
    step t's cue draw (:func:`transition`)."""
    return jax.random.uniform(key, (params.horizon,))


def transition(u: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """One transition given its cue uniform ``u``; returns (obs, state, reward, done, info),
    ``info["at_goal"]`` saying whether the new position is the goal."""
    chex.assert_shape(action, ())
    pos = jnp.clip(state.pos + MOVES[action], 0, params.size - 1)
    d_old = manhattan(state.pos, params.goal)
    d_new = manhattan(pos, params.goal)
    at_goal = d_new == 0
    reward = (params.goal_reward * at_goal
              + params.shaping * ((d_new < d_old).astype(jnp.float32) - (d_new > d_old))
              + params.step_cost)
    new_state = EnvState(pos=pos, t=state.t + 1)
    done = new_state.t >= params.horizon
    return observe_with(u, pos, params), new_state, reward.astype(jnp.float32), done, {"at_goal": at_goal}


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """:func:`transition` with the cue drawn from ``key``."""
    return transition(jax.random.uniform(key), state, action, params)


def expert_action(pos: jax.Array, goal: jax.Array) -> jax.Array:
    """Manhattan-optimal action of C.2 (larger gap first, ties vertical, stay at goal)."""
    d_row, d_col = goal[0] - pos[0], goal[1] - pos[1]
    vertical = jnp.where(d_row < 0, 1, 2)
    horizontal = jnp.where(d_col < 0, 3, 4)
    move = jnp.where(jnp.abs(d_row) >= jnp.abs(d_col), vertical, horizontal)
    return jnp.where((d_row == 0) & (d_col == 0), 0, move).astype(jnp.int32)

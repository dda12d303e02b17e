"""T-Maze (passive, classic) as pure gymnax-style functions.

The T-Maze task of "Recurrent Action Transformer with Memory" (arXiv 2306.09459),
following the authors' ``TMazeClassicPassive`` and the observation wrapper of their
dataset and evaluation code::

                          g(+1)
    o--------------------j
                          g(-1)

The agent starts on the oracle cell x = 0 of a corridor x = 0..L (L =
``corridor_length``); the junction is x = L with goal candidates (L, +1) and (L, -1).
The goal side goal_y in {-1, +1} is drawn at reset. Actions 0..3 move by
(+1, 0), (0, +1), (-1, 0), (0, -1); a move off the maze leaves the agent in place.
The episode ends when the agent stands on a goal candidate or when
``episode_length`` steps have passed; the reward is 1 at the end iff y = goal_y,
else 0 (``penalty = 0``, ``goal_reward = 1``).

Observation (y, cue, junction flag, noise) as the authors' wrapper builds it (x is
dropped): cue = goal_y only in the first observation (the oracle is "visited" at
reset), junction flag = 1 iff x = L, noise uniform in {-1, 0, 1} at every step.

``step`` does not reset automatically; callers stop counting after ``done``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

NUM_ACTIONS = 4
OBS_DIM = 4
ACTION_DX = (1, 0, -1, 0)
ACTION_DY = (0, 1, 0, -1)
RIGHT, UP, LEFT, DOWN = 0, 1, 2, 3


@struct.dataclass
class EnvParams:
    """corridor_length L [] int32 and episode_length T [] int32 (array leaves, so vmappable)."""

    corridor_length: jax.Array
    episode_length: jax.Array


@struct.dataclass
class EnvState:
    """Position (x, y), goal side goal_y in {-1, +1} and time step, all [] int32."""

    x: jax.Array
    y: jax.Array
    goal_y: jax.Array
    time: jax.Array


def make_params(corridor_length) -> EnvParams:
    """The authors' pairing: episode_length = corridor_length + 2 (oracle needs L + 1 steps)."""
    corridor_length = jnp.asarray(corridor_length, jnp.int32)
    return EnvParams(corridor_length=corridor_length, episode_length=corridor_length + 2)


def observation(key: jax.Array, state: EnvState, params: EnvParams) -> jax.Array:
    """(y, cue, junction flag, noise) as float32 [4]."""
    noise = jax.random.randint(key, (), -1, 2)
    cue = jnp.where(state.time == 0, state.goal_y, 0)
    flag = (state.x == params.corridor_length).astype(jnp.int32)
    return jnp.stack([state.y, cue, flag, noise]).astype(jnp.float32)


def reset(key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """Start at the oracle cell with a goal side drawn uniformly from {-1, +1}."""
    k_goal, k_obs = jax.random.split(key)
    goal_y = 2 * jax.random.bernoulli(k_goal).astype(jnp.int32) - 1
    zero = jnp.zeros((), jnp.int32)
    state = EnvState(x=zero, y=zero, goal_y=goal_y, time=zero)
    return observation(k_obs, state, params), state


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """One transition; returns (obs, state, reward, done, {"success": bool, "chose": bool}) (chose:
    the agent turned at the junction onto a goal candidate, which ends the episode; success: that
    candidate is the goal, where the reward is 1; an episode that ends without a choice timed out)."""
    nx = state.x + jnp.asarray(ACTION_DX)[action]
    ny = state.y + jnp.asarray(ACTION_DY)[action]
    length = params.corridor_length
    on_corridor = (ny == 0) & (nx >= 0) & (nx <= length)
    on_goal = (nx == length) & (jnp.abs(ny) == 1)
    valid = on_corridor | on_goal
    state = EnvState(x=jnp.where(valid, nx, state.x), y=jnp.where(valid, ny, state.y), goal_y=state.goal_y,
                     time=state.time + 1)
    done = (state.time >= params.episode_length) | ((state.x == length) & (state.y != 0))
    chose = (state.x == length) & (state.y != 0)
    success = chose & (state.y == state.goal_y)
    return observation(key, state, params), state, jnp.where(success, 1.0, 0.0), done, {"success": success,
                                                                                         "chose": chose}


def oracle_action(state: EnvState, params: EnvParams) -> jax.Array:
    """The authors' data-generating policy: right along the corridor, then turn to goal_y."""
    turn = jnp.where(state.goal_y == 1, UP, DOWN)
    return jnp.where(state.x == params.corridor_length, turn, RIGHT).astype(jnp.int32)

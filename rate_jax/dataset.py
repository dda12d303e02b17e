"""The oracle T-Maze dataset (authors' ``tmaze_dataset.py``), generated in JAX.

Win-only trajectories of the oracle policy (:func:`rate_jax.tmaze.oracle_action`);
a trajectory with corridor L has L + 2 observations and L + 1 actions. It is padded
to ``max_steps`` as the authors' "diff" mode does: observations repeat the last one,
the action at the final observation and at padding is absent (``action_mask = 0``),
return-to-go is 0 after the reward and in padding. Return-to-go starts at the goal
reward 1 and is R_{t+1} = R_t - r_t.

Reading of "corridor lengths drawn up to K*N - 2": the authors use the lengths
K*n - 2 for n = 1..N (one file per n); :func:`segment_corridor_lengths` gives that
set, and :func:`generate` accepts any corridor lengths <= max_steps - 2.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rate_jax import tmaze


@struct.dataclass
class Trajectories:
    """obs [B, T, 4]; actions [B, T] int32; rtg [B, T]; action_mask [B, T] (1 = target
    exists); corridor_length [B] int32; goal_y [B] int32."""

    obs: jax.Array
    actions: jax.Array
    rtg: jax.Array
    action_mask: jax.Array
    corridor_length: jax.Array
    goal_y: jax.Array


def segment_corridor_lengths(segment_len: int, num_segments: int) -> tuple[int, ...]:
    """The authors' training corridors K*n - 2, n = 1..N (episodes of 1..N full segments)."""
    if segment_len < 3 or num_segments < 1:
        raise ValueError("segment_len must be >= 3 and num_segments >= 1")
    return tuple(segment_len * n - 2 for n in range(1, num_segments + 1))


def _episode(key: jax.Array, corridor_length: jax.Array, max_steps: int):
    params = tmaze.make_params(corridor_length)
    k_reset, k_steps = jax.random.split(key)
    obs0, state0 = tmaze.reset(k_reset, params)

    def body(carry, k):
        obs, state, rtg, done = carry
        action = tmaze.oracle_action(state, params)
        next_obs, next_state, reward, step_done, _ = tmaze.step(k, state, action, params)
        record = (obs, action, rtg, (~done).astype(jnp.float32))
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(done, b, a), new, old)
        carry = (keep(next_obs, obs), keep(next_state, state), jnp.where(done, rtg, rtg - reward),
                 done | step_done)
        return carry, record

    init = (obs0, state0, jnp.ones(()), jnp.zeros((), bool))
    _, (obs, actions, rtg, mask) = jax.lax.scan(body, init, jax.random.split(k_steps, max_steps))
    return Trajectories(obs=obs, actions=actions * mask.astype(jnp.int32), rtg=rtg, action_mask=mask,
                        corridor_length=corridor_length, goal_y=state0.goal_y)


def generate(key: jax.Array, corridor_lengths: jax.Array, max_steps: int) -> Trajectories:
    """One oracle trajectory per entry of ``corridor_lengths`` [B], each padded to ``max_steps``.

    The final observation (index L + 1) is recorded with ``action_mask = 0``; after it,
    the frozen final observation repeats with return-to-go 0.
    """
    corridor_lengths = jnp.asarray(corridor_lengths, jnp.int32)
    chex.assert_rank(corridor_lengths, 1)
    keys = jax.random.split(key, corridor_lengths.shape[0])
    return jax.vmap(_episode, in_axes=(0, 0, None))(keys, corridor_lengths, max_steps)


def mirror(traj: Trajectories) -> Trajectories:
    """The same trajectories with the goal on the other side: cue, goal side, y and the turn negated.

    T-Maze is symmetric in y, so this is exactly the oracle trajectory that the other goal
    side would give with the same noise observations (tested against a forced reset).
    """
    flip_y = jnp.asarray([-1.0, -1.0, 1.0, 1.0])  # (y, cue, junction flag, noise)
    swap = jnp.asarray([tmaze.RIGHT, tmaze.DOWN, tmaze.LEFT, tmaze.UP], jnp.int32)  # UP <-> DOWN
    actions = jnp.where(traj.action_mask > 0, swap[traj.actions], traj.actions)
    return traj.replace(obs=traj.obs * flip_y, actions=actions, goal_y=-traj.goal_y)


def sample_corridor_lengths(key: jax.Array, choices: tuple[int, ...], num: int) -> jax.Array:
    """``num`` corridor lengths drawn uniformly from ``choices`` (int32 [num])."""
    return jax.random.choice(key, jnp.asarray(np.asarray(choices, np.int32)), (num,))

"""Mechanism diagnostics: how a trained UAT and Vanilla-TF react to a hidden goal shift
inside one DarkRoom episode (UAT paper, "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making", arXiv 2607.18910, section 6.5, Figures 2
and 4).

A *shift episode* is a DarkRoom episode of the model's horizon T whose hidden goal changes
twice: segment 0 is steps [0, s_1), segment 1 [s_1, s_2), segment 2 [s_2, T), with
s_1 = floor(T / 3), s_2 = floor(2 T / 3) (:func:`shift_steps`). Step t (0-based) is played
against the goal of its segment: its reward, whether it reaches the goal, the expert's
action and the cue of the observation it produces all use ``goals[t]``, so the cue shown
at step s_k itself is still the old goal's. Readings and departures: the paper's
diagnostic is one episode of T = 150; our models learn a position table of their
training horizon, so the diagnostic episode has that horizon (30 at the CPU size). The
models are trained on episodes whose goal is fixed (``uat_jax.train``), so a shift inside
an episode is outside their training distribution for both models alike; what can carry
the new goal to the policy is the fed feedback (a_{t-1}, r_{t-1}), which only UAT reads.

The per-step record carries the segment as ``"regime"`` and the first step of segments
1 and 2 as ``"switched"``, so ``uat_jax.rollout.regime_accuracy`` and
``post_shift_accuracy`` apply unchanged.

Attention (:func:`attention_weights`): the softmax of the masked scores every layer's
``FeedbackAttention`` sows ("attn_logits"), over the parallel causal pass of a played
episode: w[l, h, t, j], the weight query step t puts on key step j. The *active-segment
mass* of query t in segment k >= 1 is sum_{j in segment k, j <= t} w[l, h, t, j], the
attention on the steps since the last shift (:func:`active_mass`); a uniform causal
attention gives (t - s_k + 1) / (t + 1) (:func:`uniform_active_mass`).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from uat_jax import darkroom, domains
from uat_jax.feedback import shift
from uat_jax.model import DecisionTransformer, init_cache, sequence_logits
from uat_jax.rollout import Trajectory

N_SEGMENTS = 3


def shift_steps(horizon: int) -> tuple[int, int]:
    """(s_1, s_2) = (floor(T / 3), floor(2 T / 3)): the steps the two hidden shifts take effect."""
    if horizon < N_SEGMENTS:
        raise ValueError(f"a shift episode needs a horizon >= {N_SEGMENTS}, got {horizon}")
    return horizon // 3, 2 * horizon // 3


def segment_of(horizon: int) -> jax.Array:
    """[T] int32: the segment (0, 1, 2) of every step."""
    t = jnp.arange(horizon)
    return sum((t >= s).astype(jnp.int32) for s in shift_steps(horizon))


def since_shift(horizon: int) -> jax.Array:
    """[T] int32: steps since the start of the step's segment (t - s_k; t in segment 0)."""
    starts = jnp.asarray((0, *shift_steps(horizon)))
    return jnp.arange(horizon) - starts[segment_of(horizon)]


@struct.dataclass
class ShiftEnv:
    """DarkRoom parameters ``base`` (grid, horizon, cue; ``base.goal`` unused) and the goal
    ``goals`` [T, 2] in force at each step."""

    base: darkroom.EnvParams
    goals: jax.Array

    @property
    def horizon(self) -> int:
        return self.base.horizon

    @classmethod
    def make(cls, base: darkroom.EnvParams, segment_goals: jax.Array) -> ShiftEnv:
        """The shift episode whose segment k has goal ``segment_goals[k]`` ([3, 2])."""
        if segment_goals.shape[-2:] != (N_SEGMENTS, 2):
            raise ValueError(f"segment_goals must have shape [{N_SEGMENTS}, 2], got {segment_goals.shape}")
        return cls(base=base, goals=segment_goals[segment_of(base.horizon)])

    def at(self, t: jax.Array) -> darkroom.EnvParams:
        """DarkRoom's parameters at step ``t``: the goal of its segment."""
        return self.base.replace(goal=self.goals[t])


def consecutive_goals(goals: jax.Array, episodes: int) -> jax.Array:
    """[episodes, 3, 2]: shift episode i's segment goals, ``goals[i], goals[i + 1], goals[i + 2]``
    of a run's consecutive episodes ``goals`` [>= episodes + 2, 2]."""
    if goals.shape[0] < episodes + N_SEGMENTS - 1:
        raise ValueError(f"{episodes} shift episodes need {episodes + N_SEGMENTS - 1} goals, got {goals.shape[0]}")
    return jnp.stack([goals[k:k + episodes] for k in range(N_SEGMENTS)], 1)


def _record(state: darkroom.EnvState, info: dict, env: ShiftEnv) -> dict:
    t = state.t
    return {"distance": darkroom.manhattan(state.pos, env.goals[t]), "at_goal": info["at_goal"],
            "regime": segment_of(env.horizon)[t],
            "switched": jnp.any(t == jnp.asarray(shift_steps(env.horizon)))}


SHIFT_DARKROOM = dataclasses.replace(
    domains.DARKROOM, name="darkroom_shift", env_type=ShiftEnv,
    reset=lambda key, env: darkroom.reset(key, env.at(0)),
    draw_steps=lambda key, env: darkroom.draw_steps(key, env.base),
    transition=lambda u, state, action, env: darkroom.transition(u, state, action, env.at(state.t)),
    expert=lambda state, env: darkroom.expert_action(state.pos, env.goals[state.t]),
    record=_record)
"""The shift episode as a ``uat_jax.domains.Domain`` for ``uat_jax.rollout.rollout``
(diagnostic only: no training configuration names it)."""


def attention_weights(model: DecisionTransformer, params, traj: Trajectory) -> jax.Array:
    """w [L, H, T, T] of one played episode: the causal parallel pass over its observations
    and shifted (a, fed r), every layer's softmax over keys (one token per step: UAT, VT)."""
    if model.cfg.tokens_per_step != 1:
        raise ValueError(f"attention maps are per step for one token per step, got kind {model.cfg.kind!r}")
    prev_action, prev_reward = shift(traj.actions, traj.fed_rewards)
    _, state = model.apply(params, traj.obs, prev_action, prev_reward, init_cache(model.cfg),
                           mutable=["intermediates"])
    (logits,) = state["intermediates"]["blocks"]["attn"]["attn_logits"]
    return jax.nn.softmax(logits, axis=-1)


def active_mask(horizon: int) -> jax.Array:
    """[T, T] bool: key j lies in query t's segment, j <= t, and that segment is 1 or 2."""
    seg = segment_of(horizon)
    t, j = jnp.arange(horizon)[:, None], jnp.arange(horizon)[None, :]
    return (seg[:, None] == seg[None, :]) & (j <= t) & (seg[:, None] >= 1)


def active_mass(weights: jax.Array) -> jax.Array:
    """[..., T] attention mass every query puts on its segment's steps so far (0 in segment 0)."""
    return jnp.sum(jnp.where(active_mask(weights.shape[-1]), weights, 0.0), -1)


def uniform_active_mass(horizon: int) -> jax.Array:
    """[T] :func:`active_mass` of uniform causal attention: (t - s_k + 1) / (t + 1) in segment k >= 1."""
    t = jnp.arange(horizon)
    return jnp.sum(active_mask(horizon), -1) / (t + 1)


def oracle_log_prob(model: DecisionTransformer, params, traj: Trajectory) -> jax.Array:
    """[T] log pi(a*_t | H_t): the policy's log-probability of the expert action at every step
    of the played episode (the parallel pass equals the causal rollout's logits)."""
    logits = sequence_logits(model, params, traj.obs, traj.actions, traj.fed_rewards)
    return jnp.take_along_axis(jax.nn.log_softmax(logits), traj.expert[:, None], -1)[:, 0]

"""Causal step-by-step rollout of a policy in DarkRoom, and the Domain A metrics.

UAT paper, section 4.3 (rollout-then-optimize; test-time causal inference without
expert guidance) and Appendix C.3 (metrics). At step t the policy sees o_1..o_t and
the fed feedback (a_{j-1}, r~_{j-1}) for j <= t through its decode cache; the expert's
action at the visited state is recorded as the label and never shown to the policy.

Readings: training rollouts sample from the policy (on-policy, "akin to on-policy RL");
evaluation is greedy (argmax). Navigation efficiency is eta = d* / max(t_goal, d*),
d* the start-goal Manhattan distance and t_goal the number of steps taken when the
agent first stands on the goal (T if never).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from uat_jax import darkroom
from uat_jax.feedback import NO_ACTION, FeedbackChannel, corrupt
from uat_jax.model import DecisionTransformer, DecodeCache, init_cache


@struct.dataclass
class Trajectory:
    """One episode; every field has leading axis T unless noted."""

    obs: jax.Array  # [T, obs_dim] o_t, seen before acting at step t
    actions: jax.Array  # [T] int32 a_t chosen by the policy
    rewards: jax.Array  # [T] realised r_t
    fed_rewards: jax.Array  # [T] r~_t, the (possibly corrupted) reward fed to the model
    expert: jax.Array  # [T] int32 expert action at the state of step t
    d_star: jax.Array  # [] start-goal Manhattan distance
    t_goal: jax.Array  # [] steps until the goal is first reached (T if never)


@struct.dataclass
class _Carry:
    state: darkroom.EnvState
    obs: jax.Array
    cache: DecodeCache
    prev_action: jax.Array
    prev_reward: jax.Array
    rewards: jax.Array
    t_goal: jax.Array


def rollout(model: DecisionTransformer, params, key: jax.Array, env: darkroom.EnvParams,
            channel: FeedbackChannel, greedy: jax.Array | bool) -> Trajectory:
    """One episode of the policy ``params`` in ``env`` (a pure function of ``key``);
    ``greedy`` (traceable) picks argmax actions instead of sampling."""
    T = env.horizon
    if model.cfg.horizon != T:
        raise ValueError(f"model horizon {model.cfg.horizon} != environment horizon {T}")
    k_reset, k_act, k_env, k_fb = jax.random.split(key, 4)
    obs, state = darkroom.reset(k_reset, env)

    def body(c: _Carry, t: jax.Array):
        logits, cache = model.apply(params, c.obs[None], c.prev_action[None],
                                    c.prev_reward[None], c.cache)
        logits = logits[0]
        sampled = jax.random.categorical(jax.random.fold_in(k_act, t), logits)
        action = jnp.where(greedy, jnp.argmax(logits), sampled)
        expert = darkroom.expert_action(c.state.pos, env.goal)
        obs, state, reward, _, info = darkroom.step(jax.random.fold_in(k_env, t), c.state,
                                                    action, env)
        rewards = c.rewards.at[t].set(reward)
        fed = corrupt(jax.random.fold_in(k_fb, t), t, rewards, channel)
        t_goal = jnp.where((c.t_goal == T) & info["at_goal"], t + 1, c.t_goal)
        out = (c.obs, action.astype(jnp.int32), reward, fed, expert)
        return _Carry(state, obs, cache, action.astype(jnp.int32), fed, rewards, t_goal), out

    carry = _Carry(state=state, obs=obs, cache=init_cache(model.cfg),
                   prev_action=jnp.asarray(NO_ACTION, jnp.int32), prev_reward=jnp.zeros(()),
                   rewards=jnp.zeros(T), t_goal=jnp.asarray(T, jnp.int32))
    carry, (obs_seq, actions, rewards, fed, expert) = jax.lax.scan(body, carry, jnp.arange(T))
    return Trajectory(obs=obs_seq, actions=actions, rewards=rewards, fed_rewards=fed,
                      expert=expert, d_star=darkroom.manhattan(state.pos, env.goal),
                      t_goal=carry.t_goal)


def accuracy(traj: Trajectory) -> jax.Array:
    """Per-step accuracy against the oracle action (C.3), averaged over all axes."""
    return jnp.mean(traj.actions == traj.expert)


def efficiency(traj: Trajectory) -> jax.Array:
    """Navigation efficiency eta = d* / max(t_goal, d*) (C.3), averaged over episodes."""
    return jnp.mean(traj.d_star / jnp.maximum(traj.t_goal, traj.d_star))

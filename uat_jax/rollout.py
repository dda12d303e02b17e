"""Causal step-by-step rollout of a policy in a domain, and the Appendix C.3 metrics.

UAT paper, section 4.3 (rollout-then-optimize; test-time causal inference without
expert guidance) and Appendix C.3 (metrics). At step t the policy sees o_1..o_t and
the fed feedback (a_{j-1}, r~_{j-1}) for j <= t through its decode cache; the expert's
action at the visited state is recorded as the label and never shown to a learned policy
(:func:`play` runs any policy; :func:`rollout` a model's; only the logging policy of the
offline baseline ``uat_jax.iql`` reads the expert).
The domain (``uat_jax.domains``: DarkRoom, sepsis) supplies reset, step, expert and what
the metrics need of each step (``Trajectory.record``).

Readings: training rollouts sample from the policy (on-policy, "akin to on-policy RL");
evaluation is greedy (argmax). Navigation efficiency (DarkRoom) is eta = d* / max(t_goal,
d*), d* the start-goal Manhattan distance and t_goal the number of steps taken when the
agent first stands on the goal (T if never). Per-regime accuracy (sepsis) averages over
the steps acted under each regime; post-shift accuracy over the first ``window`` steps
of every segment after the first (the step a switch takes effect and the ``window - 1``
after it; the C.3 "first 5 steps after each switch"); the recovery curve (Figure 4) is the
accuracy k = 0, 1, ... steps after the latest switch.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from uat_jax.feedback import NO_ACTION, FeedbackChannel, FeedbackNoise, corrupt
from uat_jax.model import DecisionTransformer, DecodeCache, init_cache


@struct.dataclass
class Trajectory:
    """One episode; every field has leading axis T (after any batch axes)."""

    obs: jax.Array  # [T, obs_dim] o_t, seen before acting at step t
    actions: jax.Array  # [T] int32 a_t chosen by the policy
    rewards: jax.Array  # [T] realised r_t
    fed_rewards: jax.Array  # [T] r~_t, the (possibly corrupted) reward fed to the model
    expert: jax.Array  # [T] int32 expert action at the state of step t
    record: dict  # {name: [T]} the domain's per-step record (``uat_jax.domains``)


@struct.dataclass
class _Carry:
    state: object
    obs: jax.Array
    policy_state: object
    prev_action: jax.Array
    prev_reward: jax.Array
    rewards: jax.Array


def play(policy, policy_state, key: jax.Array, domain, env, channel: FeedbackChannel,
         greedy: jax.Array | bool) -> Trajectory:
    """One episode of ``policy`` in ``domain``'s environment ``env`` (a pure function of ``key``).

    ``policy(policy_state, obs, prev_action, prev_reward, expert) -> (logits [domain.n_actions], policy_state)``
    acts on o_t and the fed pair (a_{t-1}, r~_{t-1}) (``NO_ACTION`` and 0 at t = 0). ``expert`` is
    the expert's action at the current state: a learned policy ignores it; only the logging policy
    of an offline baseline (``uat_jax.iql``) reads it. ``greedy`` (traceable) picks argmax actions
    instead of sampling."""
    T = env.horizon
    k_reset, k_act, k_env, k_fb = jax.random.split(key, 4)
    obs, state = domain.reset(k_reset, env)
    # Every draw of the episode is made before it is played: the sampled action at step t
    # is argmax(logits + gumbel[t]) (= jax.random.categorical(k_act, logits of all steps)),
    # the environment steps with row t of the domain's draw_steps, the feedback is corrupted with noise[t].
    gumbel = jax.random.gumbel(k_act, (T, domain.n_actions))
    draws = (domain.draw_steps(k_env, env), FeedbackNoise.draw(k_fb, T))

    def body(c: _Carry, xs):
        t, g, step_draws, noise = xs
        expert = domain.expert(c.state, env)
        logits, policy_state = policy(c.policy_state, c.obs, c.prev_action, c.prev_reward, expert)
        action = jnp.argmax(jnp.where(greedy, logits, logits + g)).astype(jnp.int32)
        obs, state, reward, _, info = domain.transition(step_draws, c.state, action, env)
        rewards = c.rewards.at[t].set(reward)
        fed = corrupt(noise, t, rewards, channel)
        out = (c.obs, action, reward, fed, expert, domain.record(c.state, info, env))
        return _Carry(state, obs, policy_state, action, fed, rewards), out

    carry = _Carry(state=state, obs=obs, policy_state=policy_state,
                   prev_action=jnp.asarray(NO_ACTION, jnp.int32), prev_reward=jnp.zeros(()),
                   rewards=jnp.zeros(T))
    _, (obs_seq, actions, rewards, fed, expert, record) = jax.lax.scan(body, carry, (jnp.arange(T), gumbel, *draws))
    return Trajectory(obs=obs_seq, actions=actions, rewards=rewards, fed_rewards=fed, expert=expert,
                      record=record)


def rollout(model: DecisionTransformer, params, key: jax.Array, domain, env,
            channel: FeedbackChannel, greedy: jax.Array | bool) -> Trajectory:
    """One episode of the model's policy ``params`` (:func:`play`), the model decoding
    step by step through its cache."""
    if model.cfg.horizon != env.horizon:
        raise ValueError(f"model horizon {model.cfg.horizon} != environment horizon {env.horizon}")
    if model.cfg.n_actions != domain.n_actions:
        raise ValueError(f"model n_actions {model.cfg.n_actions} != the {domain.name} domain's {domain.n_actions}")

    def policy(cache: DecodeCache, obs, prev_action, prev_reward, expert):
        logits, cache = model.apply(params, obs[None], prev_action[None], prev_reward[None], cache)
        return logits[0], cache

    return play(policy, init_cache(model.cfg), key, domain, env, channel, greedy)


def accuracy(traj: Trajectory) -> jax.Array:
    """Per-step accuracy against the oracle action (C.3), averaged over all axes."""
    return jnp.mean(traj.actions == traj.expert)


def efficiency(traj: Trajectory) -> jax.Array:
    """Navigation efficiency eta = d* / max(t_goal, d*) (C.3), averaged over episodes;
    d* is the distance before the first step, t_goal the step count at the first arrival."""
    at_goal, T = traj.record["at_goal"], traj.actions.shape[-1]
    t_goal = jnp.where(at_goal.any(-1), jnp.argmax(at_goal, -1) + 1, T)
    d_star = traj.record["distance"][..., 0]
    return jnp.mean(d_star / jnp.maximum(t_goal, d_star))


def masked_accuracy(traj: Trajectory, mask: jax.Array) -> jax.Array:
    """Accuracy over the steps where ``mask`` (same shape as the actions) holds (NaN if none)."""
    hits = (traj.actions == traj.expert) & mask
    return jnp.sum(hits) / jnp.sum(mask)


def regime_accuracy(traj: Trajectory, n_regimes: int) -> jax.Array:
    """[n_regimes] accuracy over the steps acted under each regime (``record["regime"]``)."""
    regime = traj.record["regime"]
    return jax.vmap(lambda k: masked_accuracy(traj, regime == k))(jnp.arange(n_regimes))


def post_shift_mask(switched: jax.Array, window: int) -> jax.Array:
    """True at the steps t with a switch at some t' in [t - window + 1, t] (last axis = time)."""
    counts = jnp.cumsum(switched.astype(jnp.int32), -1)
    pad = jnp.zeros(counts.shape[:-1] + (window,), counts.dtype)
    return (counts - jnp.concatenate([pad, counts], -1)[..., :counts.shape[-1]]) > 0


def post_shift_accuracy(traj: Trajectory, window: int) -> jax.Array:
    """Accuracy over the first ``window`` steps after each regime switch (C.3)."""
    return masked_accuracy(traj, post_shift_mask(traj.record["switched"], window))


def steps_since_switch(switched: jax.Array) -> jax.Array:
    """[..., T] int32: t minus the step of the latest switch at or before t (0 at a switch
    step); -1 before the first switch (last axis = time)."""
    t = jnp.arange(switched.shape[-1])
    latest = jax.lax.cummax(jnp.where(switched, t, -1), axis=switched.ndim - 1)
    return jnp.where(latest >= 0, t - latest, -1)


def recovery_curve(traj: Trajectory, window: int) -> jax.Array:
    """[window] accuracy k = 0 .. window - 1 steps after the latest regime switch (Figure 4's
    post-shift recovery; NaN at a k no step reaches). Where every segment lasts at least
    ``window`` steps each switch adds one step to every k, so the mean of the first 5 entries
    is :func:`post_shift_accuracy` at window 5."""
    since = steps_since_switch(traj.record["switched"])
    return jax.vmap(lambda k: masked_accuracy(traj, since == k))(jnp.arange(window))

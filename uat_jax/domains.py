"""The environments rollout-then-optimize runs on: what ``uat_jax.rollout`` and
``uat_jax.train`` need of DarkRoom (Domain A) and of non-stationary sepsis treatment
(Domain B) of "Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential
Decision Making" (UAT, arXiv 2607.18910), Appendix C.1-C.3.

A :class:`Domain` is static (a training configuration names it); its environment
parameters ``env`` (``darkroom.EnvParams``, ``sepsis.EnvParams``) are arguments of the
compiled programs, never constants, so sepsis's tables reach a sweep as one replicated
argument (``experiments.sweep.sweep_map(shared=...)``).

- ``reset(key, env)``, ``draw_steps(key, env)``, ``transition(draws_t, state, action, env)``: an
  episode's start; all the randomness of its steps, drawn before it is played (leading axis
  T); one step given row t of those draws. A rollout so makes no random draw inside its time
  loop: on CPU each draw there is a rolled threefry loop run at every step.
- ``setting(env, task, run_key, episode)``: what episode ``episode`` of a cell's run changes
  in the environment. DarkRoom: the goal [2] of the task's schedule
  (``uat_jax.schedules.goal_at``). Sepsis: nothing (shape [0]); each episode draws its own
  hidden regime schedule in ``sepsis.reset``, so the episodes of a run are i.i.d.
- ``with_setting(env, setting)``: that episode's environment.
- ``record(state, info, env)``: what the metrics need of one step, read before the step
  (``state``) and from its ``info``. DarkRoom: the Manhattan distance to the goal and
  whether the step reached it; sepsis: the regime acting, whether it switched at this step
  and whether the stay ended at it (death or recovery; the offline log of ``uat_jax.iql``).
- ``metrics(traj)``: the Appendix C.3 metrics over a batch of episodes (``uat_jax.rollout``);
  sepsis adds the recovery curve of Figure 4, ``recovery`` [RECOVERY_STEPS].
- ``settings_metrics(settings, env)``: what a study reports of the training episodes' settings
  (DarkRoom: ``distinct_goals``, the cells that were a goal; sepsis: nothing).
- ``default_env(grid_size, horizon)``: the environment when none is given (DarkRoom's grid), or
  ``None`` where the domain needs its own (sepsis: the tables).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp

from uat_jax import darkroom, sepsis
from uat_jax.rollout import accuracy, efficiency, post_shift_accuracy, recovery_curve, regime_accuracy
from uat_jax.schedules import distinct_goals, goal_at

POST_SHIFT_STEPS = 5
"""C.3 post-shift accuracy: the first 5 steps after each regime switch."""
RECOVERY_STEPS = 8
"""Length of the sepsis recovery curve (Figure 4): sepsis's default shortest segment, so each
switch adds one step to every point of the curve."""


@dataclasses.dataclass(frozen=True)
class Domain:
    """The functions of one domain (module docstring); frozen, so a static argument."""

    name: str
    env_type: type
    obs_dim: int
    n_actions: int
    reset: Callable
    draw_steps: Callable
    transition: Callable
    expert: Callable
    record: Callable
    setting: Callable
    with_setting: Callable
    metrics: Callable
    settings_metrics: Callable
    default_env: Callable


def _darkroom_metrics(traj) -> dict:
    return {"accuracy": accuracy(traj), "efficiency": efficiency(traj)}


def _sepsis_metrics(traj) -> dict:
    per_regime = regime_accuracy(traj, len(sepsis.REGIMES))
    return {"accuracy": accuracy(traj), "post_shift_accuracy": post_shift_accuracy(traj, POST_SHIFT_STEPS),
            "recovery": recovery_curve(traj, RECOVERY_STEPS),
            **{f"accuracy_{name}": per_regime[k] for k, name in enumerate(sepsis.REGIMES)}}


DARKROOM = Domain(
    name="darkroom", env_type=darkroom.EnvParams, obs_dim=darkroom.OBS_DIM, n_actions=darkroom.N_ACTIONS,
    reset=darkroom.reset, draw_steps=darkroom.draw_steps, transition=darkroom.transition,
    expert=lambda state, env: darkroom.expert_action(state.pos, env.goal),
    record=lambda state, info, env: {"distance": darkroom.manhattan(state.pos, env.goal),
                                     "at_goal": info["at_goal"]},
    setting=lambda env, task, run_key, episode: goal_at(task.schedule, run_key, episode, env.size),
    with_setting=lambda env, goal: env.replace(goal=goal),
    metrics=_darkroom_metrics,
    settings_metrics=lambda goals, env: {"distinct_goals": distinct_goals(goals, env.size)},
    default_env=lambda grid_size, horizon: darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), size=grid_size,
                                                              horizon=horizon))

SEPSIS = Domain(
    name="sepsis", env_type=sepsis.EnvParams, obs_dim=sepsis.OBS_DIM, n_actions=sepsis.N_ACTIONS,
    reset=sepsis.reset, draw_steps=sepsis.draw_steps, transition=sepsis.transition,
    expert=sepsis.expert_action,
    record=lambda state, info, env: {"regime": info["regime"], "switched": info["switched"],
                                     "terminated": info["terminated"]},
    setting=lambda env, task, run_key, episode: jnp.zeros((0,), jnp.int32),
    with_setting=lambda env, setting: env,
    metrics=_sepsis_metrics,
    settings_metrics=lambda settings, env: {},
    default_env=lambda grid_size, horizon: None)

DOMAINS = {d.name: d for d in (DARKROOM, SEPSIS)}


def get(name: str) -> Domain:
    """The domain called ``name``, with a clear error for an unknown one."""
    if name not in DOMAINS:
        raise ValueError(f"domain must be one of {tuple(DOMAINS)}, got {name!r}")
    return DOMAINS[name]


def check_env(domain: Domain, env) -> None:
    """Raise if ``env`` is not ``domain``'s environment parameters."""
    if not isinstance(env, domain.env_type):
        raise ValueError(f"the {domain.name} domain needs a {domain.env_type.__module__}.{domain.env_type.__name__}, "
                         f"got {type(env).__name__}")


"""Rollout-then-optimize behaviour cloning on DarkRoom (UAT paper, section 4.3, Table 3).

Episodes (our reading of Appendix C.1, see ``uat_jax.schedules``): a training cell owns
one run of its task's goal schedule (one ``run_key``, drawn from the cell's key, so
every model trained from that key sees the same goals). Epoch ``i`` trains on the run's
episodes ``i B, ..., i B + B - 1`` (``train_episodes``), in order, so over training the
model sees the schedule's goals as the schedule produces them (a drifting line, a jump
every 6 episodes, four waypoints); evaluation plays the ``eval_episodes`` episodes that
follow the last training episode (``eval_episodes``), i.e. the run's future under the
same schedule. Histories reset at every episode boundary (each episode is one rollout).

One epoch: (1) roll the current policy out causally, without gradient, on the epoch's B
episodes to collect (a_t, r~_t); (2) one causally masked parallel forward pass over the
(B, T) tensor with dropout gives all logits; (3) one optimiser step on the
cross-entropy against the expert's actions, L_CE = -1/(BT) sum log pi(a*_{b,t} | H_{b,t})
(Eq. 18). Optimiser (Table 3): global-norm clipping at 1.0, then AdamW (weight decay
1e-5, our reading of "Adam + weight decay") at the base lr, and at the "UE & regime" lr
for the utility encoder E (with its action embedding f_a) and the readout W_rho.
The fixed epoch count replaces the paper's early stopping (max 500 / patience 100),
which needs a validation loop outside a jitted program.

``make_train(cfg)`` returns a pure ``train(key, task)``: seeds, schedules, feedback
corruptions and, for a ``traced_variant`` model, the member of the switched family
(``Task.variant``) are ``jax.vmap``-ed over (key, task) in one program.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct, traverse_util

from uat_jax import darkroom
from uat_jax.config import SWITCHED, ModelConfig
from uat_jax.feedback import FeedbackChannel
from uat_jax.model import DecisionTransformer, init_params, sequence_logits
from uat_jax.rollout import Trajectory, accuracy, efficiency, rollout
from uat_jax.schedules import SCHEDULES, goal_at

UE_MODULES = ("utility_encoder", "regime_readout")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Table 3 Domain A defaults (epochs fixed, see the module docstring)."""

    model: ModelConfig = ModelConfig()
    epochs: int = 500
    batch_size: int = 256
    lr: float = 2e-3
    ue_lr: float = 2e-2
    weight_decay: float = 1e-5
    grad_clip: float = 1.0
    eval_episodes: int = 256
    grid_size: int = 10

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "eval_episodes", "lr", "ue_lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.grid_size < 2:
            raise ValueError(f"grid_size must be >= 2, got {self.grid_size}")


@struct.dataclass
class Task:
    """What a sweep varies, as array leaves: the goal schedule id, the feedback channel and,
    for a ``traced_variant`` model only, the member of ``SWITCHED`` trained."""

    schedule: jax.Array  # [] int32 index into SCHEDULES
    channel: FeedbackChannel
    variant: jax.Array | None = None  # [] int32 index into SWITCHED, or None (static model)

    @classmethod
    def make(cls, schedule: str, corruption: str = "clean", sigma: float = 0.0,
             variant: str | None = None) -> Task:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        task = cls(schedule=jnp.asarray(SCHEDULES.index(schedule), jnp.int32),
                   channel=FeedbackChannel.make(corruption, sigma))
        return task if variant is None else task.with_variant(variant)

    def with_variant(self, name: str) -> Task:
        """This task for member ``name`` of ``SWITCHED`` (a ``traced_variant`` model)."""
        if name not in SWITCHED:
            raise ValueError(f"variant must be one of {SWITCHED}, got {name!r}")
        return self.replace(variant=jnp.asarray(SWITCHED.index(name), jnp.int32))


@struct.dataclass
class EvalMetrics:
    accuracy: jax.Array  # [] per-step accuracy against the oracle action
    efficiency: jax.Array  # [] navigation efficiency


@struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState


@struct.dataclass
class TrainResult:
    params: dict
    loss: jax.Array  # [epochs] training cross-entropy
    train_accuracy: jax.Array  # [epochs] argmax of the parallel pass vs the expert
    goals: jax.Array  # [epochs, B, 2] int32 goal of every training episode
    eval: EvalMetrics  # greedy causal inference on the run's episodes after training


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Clip, then AdamW with the base lr, or the UE lr for E, f_a and W_rho."""

    def labels(params):
        flat = traverse_util.flatten_dict(params)
        return traverse_util.unflatten_dict(
            {path: "ue" if any(m in path for m in UE_MODULES) else "base" for path in flat})

    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.multi_transform({"base": optax.adamw(cfg.lr, weight_decay=cfg.weight_decay),
                               "ue": optax.adamw(cfg.ue_lr, weight_decay=cfg.weight_decay)},
                              labels))


def train_episodes(cfg: TrainConfig, epoch: jax.Array) -> jax.Array:
    """Episode indices [B] of the run that epoch ``epoch`` trains on: epoch * B + b."""
    return epoch * cfg.batch_size + jnp.arange(cfg.batch_size)


def eval_episodes(cfg: TrainConfig) -> jax.Array:
    """Episode indices [eval_episodes] evaluated: the ones after the last training episode."""
    return cfg.epochs * cfg.batch_size + jnp.arange(cfg.eval_episodes)


def episode_goals(cfg: TrainConfig, task: Task, run_key: jax.Array, episodes: jax.Array) -> jax.Array:
    """Goals [n, 2] of ``episodes`` [n] of the run ``run_key`` under the task's schedule."""
    return jax.vmap(lambda e: goal_at(task.schedule, run_key, e, cfg.grid_size))(episodes)


def batch_rollout(cfg: TrainConfig, model, params, keys: jax.Array, channel: FeedbackChannel, goals: jax.Array,
                  greedy: bool) -> Trajectory:
    """One episode per goal of ``goals`` [B, 2], episode ``b`` played from ``keys[b]``."""
    env = darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), size=cfg.grid_size,
                             horizon=cfg.model.horizon)
    return jax.vmap(lambda g, k: rollout(model, params, k, env.replace(goal=g), channel, greedy))(goals, keys)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Eq. 18: mean over every axis of -log softmax(logits)[label]."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def task_model(cfg: ModelConfig, task: Task) -> DecisionTransformer:
    """The model ``cfg`` run as the task's member (``task.variant``, traced models only)."""
    if cfg.traced_variant != (task.variant is not None):
        raise ValueError("task.variant must be given exactly when the model has traced_variant=True, "
                         f"got traced_variant={cfg.traced_variant} and task.variant={task.variant!r}")
    return DecisionTransformer(cfg, variant=task.variant)


def make_evaluate(cfg: TrainConfig):
    """``evaluate(params, key, task, run_key) -> EvalMetrics``: greedy causal inference on
    the ``eval_episodes`` episodes of the run ``run_key`` that follow training."""

    def evaluate(params, key, task: Task, run_key) -> EvalMetrics:
        model = task_model(cfg.model, task)
        goals = episode_goals(cfg, task, run_key, eval_episodes(cfg))
        traj = batch_rollout(cfg, model, params, jax.random.split(key, goals.shape[0]), task.channel, goals,
                             greedy=True)
        return EvalMetrics(accuracy=accuracy(traj), efficiency=efficiency(traj))

    return evaluate


@struct.dataclass
class CellKeys:
    """The keys a training cell derives from its key: initialisation, its run of the goal
    schedule, the training epochs and the evaluation after training."""

    init: jax.Array
    run: jax.Array
    epochs: jax.Array
    eval: jax.Array

    @classmethod
    def of(cls, key: jax.Array) -> CellKeys:
        return cls(*jax.random.split(key, 4))


def make_train(cfg: TrainConfig):
    """``train(key, task) -> TrainResult``, pure and jittable (see module docstring)."""
    optimizer = make_optimizer(cfg)
    evaluate = make_evaluate(cfg)

    def train(key, task: Task) -> TrainResult:
        model = task_model(cfg.model, task)

        def loss_fn(params, traj: Trajectory, dropout_key):
            keys = jax.random.split(dropout_key, traj.actions.shape[0])
            logits = jax.vmap(lambda o, a, r, k: sequence_logits(model, params, o, a, r, k))(
                traj.obs, traj.actions, traj.fed_rewards, keys)
            return cross_entropy(logits, traj.expert), jnp.mean(logits.argmax(-1) == traj.expert)

        keys = CellKeys.of(key)
        k_epochs, run_key = keys.epochs, keys.run
        params = init_params(model, keys.init)

        def epoch(state: TrainState, i):
            k_roll, k_drop = jax.random.split(jax.random.fold_in(k_epochs, i))
            goals = episode_goals(cfg, task, run_key, train_episodes(cfg, i))
            traj = batch_rollout(cfg, model, jax.lax.stop_gradient(state.params),
                                 jax.random.split(k_roll, cfg.batch_size), task.channel, goals, greedy=False)
            (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, traj, k_drop)
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            return TrainState(optax.apply_updates(state.params, updates), opt_state), (loss, acc, goals)

        state = TrainState(params, optimizer.init(params))
        state, (loss, acc, goals) = jax.lax.scan(epoch, state, jnp.arange(cfg.epochs))
        return TrainResult(params=state.params, loss=loss, train_accuracy=acc, goals=goals,
                           eval=evaluate(state.params, keys.eval, task, run_key))

    return train

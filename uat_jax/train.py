"""Rollout-then-optimize behaviour cloning on DarkRoom and sepsis (UAT paper, section 4.3, Table 3).

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

The domain (``TrainConfig.domain``, ``uat_jax.domains``) decides what an episode of the
run is: DarkRoom's episodes follow the goal schedule as above; sepsis's episodes are
i.i.d. (each draws its hidden regime schedule at reset), so "the run's episodes" are
fresh patients and the schedule of ``Task`` is unused there.

``make_train(cfg)`` returns a pure ``train(key, task, env=None)``: seeds, schedules, feedback
corruptions and, for a ``traced_variant`` model, the member of the switched family
(``Task.variant``) are ``jax.vmap``-ed over (key, task) in one program; ``env`` (the
domain's environment parameters, default DarkRoom's of ``grid_size``; required for sepsis,
whose tables it carries) is one argument every cell reads.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct, traverse_util

from uat_jax import domains
from uat_jax.config import ModelConfig, variant_index
from uat_jax.feedback import FeedbackChannel
from uat_jax.model import DecisionTransformer, init_params, sequence_logits
from uat_jax.rollout import Trajectory, rollout
from uat_jax.schedules import SCHEDULES

UE_MODULES = ("utility_encoder", "regime_readout")


def check_optimizer_fields(cfg, extra: tuple[str, ...] = ()) -> None:
    """Raise unless ``cfg``'s epochs, batch_size, lr, ue_lr, grad_clip and ``extra`` fields are > 0
    and its weight_decay >= 0 (the fields :func:`make_optimizer` and a training loop read)."""
    for name in ("epochs", "batch_size", *extra, "lr", "ue_lr", "grad_clip"):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(cfg, name)!r}")
    if cfg.weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {cfg.weight_decay}")


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
    grid_size: int = 10  # DarkRoom only
    domain: str = "darkroom"  # a name of uat_jax.domains.DOMAINS

    def __post_init__(self) -> None:
        env = domains.get(self.domain)
        if (self.model.obs_dim, self.model.n_actions) != (env.obs_dim, env.n_actions):
            raise ValueError(f"the {self.domain} domain has obs_dim {env.obs_dim} and n_actions {env.n_actions}, "
                             f"got model.obs_dim {self.model.obs_dim} and model.n_actions {self.model.n_actions}")
        check_optimizer_fields(self, ("eval_episodes",))
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
        return self.replace(variant=variant_index(name))


@struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState


@struct.dataclass
class TrainResult:
    params: dict
    loss: jax.Array  # [epochs] training cross-entropy
    train_accuracy: jax.Array  # [epochs] argmax of the parallel pass vs the expert
    settings: jax.Array  # [epochs, B, ...] every training episode's setting (DarkRoom: its goal [2])
    eval: dict  # the domain's metrics of greedy causal inference on the run's episodes after training


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


def default_env(cfg: TrainConfig, env=None):
    """``env``, checked against the domain, or DarkRoom's of ``grid_size`` and the model's horizon."""
    domain = domains.get(cfg.domain)
    env = domain.default_env(cfg.grid_size, cfg.model.horizon) if env is None else env
    if env is None:
        raise ValueError(f"the {cfg.domain} domain needs its environment parameters (env=...)")
    domains.check_env(domain, env)
    return env


def episode_settings(cfg: TrainConfig, task: Task, run_key: jax.Array, episodes: jax.Array, env=None) -> jax.Array:
    """Settings [n, ...] of ``episodes`` [n] of the run ``run_key`` (DarkRoom: goals [n, 2] under
    the task's schedule; ``uat_jax.domains``)."""
    domain, env = domains.get(cfg.domain), default_env(cfg, env)
    return jax.vmap(lambda e: domain.setting(env, task, run_key, e))(episodes)


def batch_rollout(cfg: TrainConfig, model, params, keys: jax.Array, channel: FeedbackChannel, settings: jax.Array,
                  greedy: bool, env=None) -> Trajectory:
    """One episode per setting of ``settings`` [B, ...] (DarkRoom: goals [B, 2]), episode ``b``
    played from ``keys[b]`` in ``env`` (:func:`default_env`) with that setting."""
    domain, env = domains.get(cfg.domain), default_env(cfg, env)
    return jax.vmap(lambda s, k: rollout(model, params, k, domain, domain.with_setting(env, s), channel, greedy))(
        settings, keys)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Eq. 18: mean over every axis of -log softmax(logits)[label]."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def task_model(cfg: ModelConfig, task: Task) -> DecisionTransformer:
    """The model ``cfg`` run as the task's member (``task.variant``, traced models only)."""
    if cfg.traced_variant != (task.variant is not None):
        raise ValueError("task.variant must be given exactly when the model has traced_variant=True, "
                         f"got traced_variant={cfg.traced_variant} and task.variant={task.variant!r}")
    return DecisionTransformer(cfg, variant=task.variant)


def evaluation_rollout(cfg: TrainConfig, params, key: jax.Array, task: Task, run_key: jax.Array,
                       env=None) -> Trajectory:
    """Greedy causal inference of ``params`` on the ``eval_episodes`` episodes of the run
    ``run_key`` that follow training, episode ``b`` played from split ``b`` of ``key``."""
    model = task_model(cfg.model, task)
    settings = episode_settings(cfg, task, run_key, eval_episodes(cfg), env)
    return batch_rollout(cfg, model, params, jax.random.split(key, settings.shape[0]), task.channel, settings,
                         greedy=True, env=env)


def make_evaluate(cfg: TrainConfig):
    """``evaluate(params, key, task, run_key, env=None) -> metrics``: the domain's metrics
    (``uat_jax.domains``) of :func:`evaluation_rollout`."""
    domain = domains.get(cfg.domain)

    def evaluate(params, key, task: Task, run_key, env=None) -> dict:
        return domain.metrics(evaluation_rollout(cfg, params, key, task, run_key, env))

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
    """``train(key, task, env=None) -> TrainResult``, pure and jittable (see module docstring)."""
    optimizer = make_optimizer(cfg)
    evaluate = make_evaluate(cfg)

    def train(key, task: Task, env=None) -> TrainResult:
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
            settings = episode_settings(cfg, task, run_key, train_episodes(cfg, i), env)
            traj = batch_rollout(cfg, model, jax.lax.stop_gradient(state.params),
                                 jax.random.split(k_roll, cfg.batch_size), task.channel, settings, greedy=False,
                                 env=env)
            (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, traj, k_drop)
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            return TrainState(optax.apply_updates(state.params, updates), opt_state), (loss, acc, settings)

        state = TrainState(params, optimizer.init(params))
        state, (loss, acc, settings) = jax.lax.scan(epoch, state, jnp.arange(cfg.epochs))
        return TrainResult(params=state.params, loss=loss, train_accuracy=acc, settings=settings,
                           eval=evaluate(state.params, keys.eval, task, run_key, env))

    return train

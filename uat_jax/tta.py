"""Test-time adaptation baselines of the UAT paper: TENT and CoTTA on a trained Vanilla-TF.

UAT paper ("Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential
Decision Making", arXiv 2607.18910), section 6.1 (baselines), Appendix C.2 ("Feedback
access by model family": TENT and CoTTA are feedback-blind, they see o_1..o_t only) and
Table 6 (TENT and CoTTA have Vanilla-TF's 109,828 parameters): both adapt a trained
Vanilla-TF (``ModelConfig(kind="vt")``, or the traced switched union run as member
"vt") at test time, from its own predictions only.

- TENT (Wang, Shelhamer, Liu, Olshausen, Darrell, "Tent: Fully Test-time Adaptation by
  Entropy Minimization", arXiv 2006.10726, section 3): on each test batch the model
  predicts, then the affine parameters of its normalisation layers (its "modulation
  parameters"; here the LayerNorm scale and bias of ``embed_norm``, ``blocks/ln_attn``,
  ``blocks/ln_ff``, ``final_norm``, :func:`norm_mask`) take one Adam step on the batch's
  mean prediction entropy H(y) = -sum_a p(a) log p(a) (its entropy objective); everything
  else stays frozen. A LayerNorm normalises each token with its own statistics, so
  TENT's other half (test-batch normalisation statistics in BatchNorm) has no
  counterpart here.
- CoTTA (Wang, Fink, Van Gool, Dai, "Continual Test-Time Domain Adaptation",
  arXiv 2203.13591, section 3). Weight-averaged pseudo-labels: a teacher theta', the
  exponential moving average theta' <- alpha theta' + (1 - alpha) theta of the student
  theta (:func:`teacher_ema`), gives the pseudo-label y' = f_theta'(x), and the student
  (all parameters) takes one Adam step on the cross-entropy -sum_a y'_a log f_theta(x)_a.
  Augmentation-averaged pseudo-labels: y' is replaced by (1/N) sum_i f_theta'(aug_i(x))
  where the source model's confidence max_a f_theta0(x)_a is below a threshold p_th
  (:func:`pseudo_labels`). Stochastic restoration: after the teacher update, every
  element of every student parameter is reset to its source value with probability p
  (:func:`stochastic_restore`). The predictions are the teacher's.

Setting (our reading): the test stream is the evaluation stream of
``train.make_evaluate`` -- the ``eval_episodes`` episodes of the cell's run after
training (``train.eval_episodes``), each started from its own split of the evaluation
key exactly as there, so a TTA evaluation sees the same start cells, cues and goals as
the plain evaluation of the same parameters (common random numbers). The stream is cut
into consecutive batches of ``batch_size`` episodes; a ``lax.scan`` over the batches
(1) rolls the batch out greedily and causally with the current prediction parameters
(TENT: the adapted parameters; CoTTA: the teacher), recording the rollout, then
(2) adapts on that batch's trajectories through the causally masked parallel pass
(``model.sequence_logits``, deterministic: no dropout). For a causal model the parallel
logits at step t are the logits the rollout acted on, so the objective is built on
exactly the predictions made; the "samples" of the papers are the B x T steps of the
batch (loss: their mean). :func:`make_tta_stream` returns the episodes and the final
adaptation state; :func:`make_tta_evaluate` the metrics of ``make_evaluate`` over all the
stream's episodes, so adaptation helps only the later batches, as in online TTA (the
adaptation on the last batch plays no episode).

Readings for our vector observations and sequences:

- CoTTA's augmentation (image transforms in the paper) is additive Gaussian noise on
  the observations, aug_i(o_1..o_T) = o_t + ``aug_std`` * eps_{i,t}, drawn independently
  per copy, episode and step (:func:`augment`); one parallel pass per copy.
- The augmentation average is the mean of the teacher's probabilities (the paper's
  "augmentation-averaged prediction"; the authors' released code averages logits), and
  the confidence switch acts per prediction (per step), on the confidence of the
  source model theta_0 (the released code averages that confidence over the batch).
- Optimiser: Adam (optax defaults b1 = 0.9, b2 = 0.999), one step per batch, its state
  carried over the stream; lr 1e-3 for both (TENT's CIFAR setting, CoTTA's).
  Defaults not from the papers: ``batch_size`` 16 episodes (16 T predictions),
  ``n_augment`` 8 (CoTTA: 32), ``aug_std`` 0.1 on binary observations, confidence
  threshold 0.9 (CoTTA: from the source model's confidence on source data).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from uat_jax.model import DecisionTransformer, sequence_logits
from uat_jax import domains
from uat_jax.rollout import Trajectory
from uat_jax.train import Task, TrainConfig, batch_rollout, episode_settings, eval_episodes, task_model

NORM_LAYERS = ("embed_norm", "ln_attn", "ln_ff", "final_norm")
"""The LayerNorms of ``model.DecisionTransformer`` whose scale and bias TENT adapts."""


def _check_unit(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _check_common(lr: float, batch_size: int) -> None:
    if not lr >= 0.0:
        raise ValueError(f"lr must be >= 0, got {lr!r}")
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")


@dataclasses.dataclass(frozen=True)
class TentConfig:
    """TENT: Adam learning rate on the norm affines, episodes per test batch."""

    lr: float = 1e-3
    batch_size: int = 16

    def __post_init__(self) -> None:
        _check_common(self.lr, self.batch_size)


@dataclasses.dataclass(frozen=True)
class CottaConfig:
    """CoTTA: Adam lr, episodes per batch, teacher EMA decay alpha, restoration
    probability p, augmented copies N, augmentation noise std, confidence threshold p_th."""

    lr: float = 1e-3
    batch_size: int = 16
    ema_decay: float = 0.999
    restore_prob: float = 0.01
    n_augment: int = 8
    aug_std: float = 0.1
    confidence: float = 0.9

    def __post_init__(self) -> None:
        _check_common(self.lr, self.batch_size)
        for name in ("ema_decay", "restore_prob", "confidence"):
            _check_unit(name, getattr(self, name))
        if not (isinstance(self.n_augment, int) and self.n_augment >= 1):
            raise ValueError(f"n_augment must be an integer >= 1, got {self.n_augment!r}")
        if not self.aug_std >= 0.0:
            raise ValueError(f"aug_std must be >= 0, got {self.aug_std!r}")


METHODS = {"tent": TentConfig, "cotta": CottaConfig}
"""The test-time adaptation methods by name (their config classes)."""


@struct.dataclass
class CottaState:
    """Student theta (adapted), teacher theta' (predicts), source theta_0 (restores to)."""

    student: dict
    teacher: dict
    source: dict
    opt_state: optax.OptState


def norm_mask(params) -> dict:
    """True on the LayerNorm scale and bias leaves of ``NORM_LAYERS``, False elsewhere
    (TENT's modulation parameters, TENT section 3)."""
    def is_norm(path, _):
        names = [getattr(k, "key", None) for k in path]
        return len(names) >= 2 and names[-2] in NORM_LAYERS and names[-1] in ("scale", "bias")

    return jax.tree_util.tree_map_with_path(is_norm, params)


def tta_optimizer(method: TentConfig | CottaConfig) -> optax.GradientTransformation:
    """Adam at ``method.lr``: on the :func:`norm_mask` leaves only for TENT (zero update
    elsewhere), on every parameter for CoTTA."""
    if isinstance(method, CottaConfig):
        return optax.adam(method.lr)
    labels = lambda params: jax.tree.map(lambda m: "norm" if m else "frozen", norm_mask(params))
    return optax.multi_transform({"norm": optax.adam(method.lr), "frozen": optax.set_to_zero()}, labels)


def prediction_entropy(logits: jax.Array) -> jax.Array:
    """TENT's entropy objective, H = -sum_a p_a log p_a with p = softmax(logits), averaged
    over every leading axis (the predictions of the batch)."""
    return -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), -1).mean()


def batch_logits(model: DecisionTransformer, params, traj: Trajectory, obs: jax.Array | None = None) -> jax.Array:
    """Deterministic causally masked parallel pass over each episode of ``traj``: logits
    [B, T, A] from its observations (or ``obs`` [B, T, obs_dim] in their place) and the
    fed (a, r~) that the rollout fed (a Vanilla-TF reads neither)."""
    obs = traj.obs if obs is None else obs
    return jax.vmap(lambda o, a, r: sequence_logits(model, params, o, a, r))(obs, traj.actions, traj.fed_rewards)


def tent_update(model: DecisionTransformer, params, opt_state, traj: Trajectory,
                optimizer: optax.GradientTransformation):
    """One TENT step on a batch (TENT section 3, Algorithm: predict, then update the norm
    affines on the batch entropy): returns (params, opt_state, entropy before the step).
    ``optimizer`` is ``tta_optimizer(TentConfig(...))``, which leaves every other leaf
    unchanged."""
    entropy, grads = jax.value_and_grad(lambda p: prediction_entropy(batch_logits(model, p, traj)))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, entropy


def augment(key: jax.Array, obs: jax.Array, n: int, std: float) -> jax.Array:
    """N augmented copies [n, *obs.shape] of the observations: o + std * eps, eps ~ N(0, I)
    independent per copy and element (our reading of CoTTA's aug_i for vector inputs)."""
    return obs[None] + std * jax.random.normal(key, (n,) + obs.shape, obs.dtype)


def pseudo_labels(model: DecisionTransformer, teacher, source, traj: Trajectory, key: jax.Array,
                  cfg: CottaConfig) -> jax.Array:
    """CoTTA's weight- and augmentation-averaged pseudo-labels: the teacher's probabilities
    [B, T, A] at every step, replaced by their mean over ``cfg.n_augment`` augmented copies
    where the source model's confidence max_a p_theta0(a) at that step is below
    ``cfg.confidence``."""
    copies = jnp.concatenate([traj.obs[None], augment(key, traj.obs, cfg.n_augment, cfg.aug_std)])
    probs = jax.vmap(lambda o: jax.nn.softmax(batch_logits(model, teacher, traj, o)))(copies)  # [1 + N, B, T, A]
    confidence = jax.nn.softmax(batch_logits(model, source, traj)).max(-1)
    return jnp.where((confidence < cfg.confidence)[..., None], probs[1:].mean(0), probs[0])


def teacher_ema(teacher, student, decay: float):
    """CoTTA's teacher update, theta' <- alpha theta' + (1 - alpha) theta, written
    theta' + (1 - alpha)(theta - theta') (so theta' stays bitwise put where theta = theta')."""
    return jax.tree.map(lambda t, s: t + (1.0 - decay) * (s - t), teacher, student)


def stochastic_restore(params, source, key: jax.Array, prob: float):
    """CoTTA's stochastic restoration: each element of each leaf reset to its ``source``
    value with probability ``prob``, independently (one Bernoulli draw over all the
    elements at once)."""
    flat, unravel = ravel_pytree(params)
    restore = jax.random.bernoulli(key, prob, flat.shape)
    return unravel(jnp.where(restore, ravel_pytree(source)[0], flat))


def cotta_update(model: DecisionTransformer, state: CottaState, traj: Trajectory, key: jax.Array,
                 optimizer: optax.GradientTransformation, cfg: CottaConfig) -> CottaState:
    """One CoTTA step on a batch (CoTTA Algorithm 1): pseudo-labels from the teacher, one
    student step on their cross-entropy, teacher EMA of the stepped student, then
    stochastic restoration of the student. ``optimizer`` is ``tta_optimizer(cfg)``."""
    k_aug, k_restore = jax.random.split(key)
    target = jax.lax.stop_gradient(pseudo_labels(model, state.teacher, state.source, traj, k_aug, cfg))
    loss = lambda p: optax.softmax_cross_entropy(batch_logits(model, p, traj), target).mean()
    grads = jax.grad(loss)(state.student)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.student)
    student = optax.apply_updates(state.student, updates)
    teacher = teacher_ema(state.teacher, student, cfg.ema_decay)
    student = stochastic_restore(student, state.source, k_restore, cfg.restore_prob)
    return CottaState(student=student, teacher=teacher, source=state.source, opt_state=opt_state)


def adaptation_keys(key: jax.Array, cfg: TrainConfig, n_batches: int) -> jax.Array:
    """Keys [n_batches] of the adaptation steps: splits of fold_in(key, eval_episodes), a
    key none of the rollouts' ``split(key, eval_episodes)`` uses."""
    return jax.random.split(jax.random.fold_in(key, cfg.eval_episodes), n_batches)


def make_tta_stream(cfg: TrainConfig, method: TentConfig | CottaConfig):
    """``stream(params, key, task, run_key, env=None) -> (state, traj)``: ``method`` run online over the
    evaluation stream (module docstring). ``traj`` holds the ``eval_episodes`` greedy episodes
    in stream order; ``state`` is the final adaptation state, TENT's (params, opt_state) or a
    :class:`CottaState`. Pure, jittable and vmappable."""
    if not isinstance(method, TentConfig | CottaConfig):
        raise ValueError(f"method must be a TentConfig or a CottaConfig, got {type(method).__name__}")
    if cfg.model.kind != "vt" and not cfg.model.traced_variant:
        raise ValueError("TENT and CoTTA adapt a Vanilla-TF: cfg.model.kind must be 'vt' (or the traced "
                         f"switched union, run as member 'vt'), got kind={cfg.model.kind!r}")
    if cfg.eval_episodes % method.batch_size:
        raise ValueError(f"eval_episodes ({cfg.eval_episodes}) must be a multiple of the TTA batch_size "
                         f"({method.batch_size})")
    n_batches, size = cfg.eval_episodes // method.batch_size, method.batch_size
    optimizer = tta_optimizer(method)
    if isinstance(method, TentConfig):
        init = lambda p: (p, optimizer.init(p))
        predictor = lambda state: state[0]
        adapt = lambda model, state, traj, key: tent_update(model, *state, traj, optimizer)[:2]
    else:
        init = lambda p: CottaState(student=p, teacher=p, source=p, opt_state=optimizer.init(p))
        predictor = lambda state: state.teacher
        adapt = lambda model, state, traj, key: cotta_update(model, state, traj, key, optimizer, method)

    def stream(params, key, task: Task, run_key, env=None):
        model = task_model(cfg.model, task)
        settings = episode_settings(cfg, task, run_key, eval_episodes(cfg), env)
        settings = settings.reshape((n_batches, size) + settings.shape[1:])
        keys = jax.random.split(key, cfg.eval_episodes).reshape(n_batches, size)

        def batch(state, xs):
            settings_b, keys_b, key_b = xs
            traj = batch_rollout(cfg, model, predictor(state), keys_b, task.channel, settings_b, greedy=True,
                                 env=env)
            return adapt(model, state, traj, key_b), traj

        state, traj = jax.lax.scan(batch, init(params), (settings, keys, adaptation_keys(key, cfg, n_batches)))
        return state, jax.tree.map(lambda x: x.reshape((cfg.eval_episodes,) + x.shape[2:]), traj)

    return stream


def make_tta_evaluate(cfg: TrainConfig, method: TentConfig | CottaConfig):
    """``evaluate(params, key, task, run_key, env=None) -> metrics``, the signature of
    ``train.make_evaluate(cfg)``'s function: the metrics of :func:`make_tta_stream`'s
    episodes, so adaptation helps only the later batches; pure, jittable and vmappable."""
    stream, domain = make_tta_stream(cfg, method), domains.get(cfg.domain)

    def evaluate(params, key, task: Task, run_key, env=None) -> dict:
        return domain.metrics(stream(params, key, task, run_key, env)[1])

    return evaluate

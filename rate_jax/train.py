"""Offline training of the RATE family on oracle data: ``make_train(config) -> train(key)``.

The data are oracle T-Maze trajectories (:mod:`rate_jax.dataset`) or, with
``TrainConfig.task``, oracle episodes of another memory task (:mod:`rate_jax.tasks`).

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv
2306.09459), training objective: the per-segment action loss L(a_n, \\hat a_n)
(cross-entropy at the observation tokens, return-conditioned as in DT), unrolled over
segments (Algorithm 1); the cache never carries gradient.

Gradient through memory, a deliberate choice (``TrainConfig.detach_memory``):
* ``False`` (default): full backpropagation through the N segments of a trajectory;
  the loss is the mean of the per-segment mean losses and one optimiser step is taken
  per batch. The memory write path (suffix tokens, MRV) is trained by the loss of
  later segments, which is what the cue task needs, and N is small (3 in the paper).
* ``True``: the authors' trainer (``src/trainer.py``): one optimiser step per segment,
  with M_n detached before segment n (M_0 still receives the first segment's
  gradient). Note, from reading that code: with M_n detached, no loss depends
  differentiably on the MRV weights or on the suffix outputs, so they receive no
  gradient at all; the memory then carries whatever the shared layers happen to write.

Optimiser as in the authors' ``TMaze.sh``: AdamW, gradient clipping, linear warm-up
then linear decay to ``lr_end_factor`` times the peak learning rate.

Per-step training metrics (:data:`STEP_METRICS`, recorded inside the ``lax.scan`` of
:func:`make_update`): ``loss`` (mean segment loss of the batch) and ``grad_norm`` (global
norm of the gradient before clipping; with ``detach_memory``, the mean over the
segments that make an update). :func:`init_chunked` / :func:`make_chunk` run a
seed-vmapped training a chunk of steps at a time and write them into fixed-shape
``[seeds, num_steps]`` buffers, for a chunked and checkpointed driver.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rate_jax import dataset
from rate_jax.config import ModelConfig
from rate_jax.model import RATE, Segment, split_segments, unroll


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run. Trajectories have ``model.segment_len * num_segments`` steps.

    ``corridor_lengths``: the T-Maze corridors of the data (default: K*n - 2, n = 1..N, the
    authors' set); each must be <= K*N - 2. ``task``: another memory task
    (:class:`rate_jax.tasks.PopgymTask`, :class:`rate_jax.tasks.MinigridTask`) whose oracle
    episodes are the data instead (then K*N must exceed its ``oracle_steps`` and the model's
    sizes must be the task's).
    """

    model: ModelConfig
    task: object | None = None
    num_segments: int = 3
    corridor_lengths: tuple[int, ...] | None = None
    num_train: int = 512
    num_val: int = 128
    batch_size: int = 32
    num_steps: int = 500
    learning_rate: float = 3e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    warmup_steps: int = 50
    lr_end_factor: float = 0.01
    grad_clip: float = 1.0
    detach_memory: bool = False

    def __post_init__(self):
        def need(cond, field, allowed, value):
            if not cond:
                raise ValueError(f"TrainConfig.{field} must be {allowed}, got {value!r}")

        for name in ("num_segments", "num_train", "num_val", "batch_size", "num_steps"):
            value = getattr(self, name)
            need(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)
        need(isinstance(self.warmup_steps, int) and self.warmup_steps >= 0, "warmup_steps", "an integer >= 0",
             self.warmup_steps)
        for name in ("learning_rate", "grad_clip"):
            need(getattr(self, name) > 0, name, "> 0", getattr(self, name))
        need(self.weight_decay >= 0, "weight_decay", ">= 0", self.weight_decay)
        for name in ("beta1", "beta2", "lr_end_factor"):
            need(0 <= getattr(self, name) <= 1, name, "in [0, 1]", getattr(self, name))
        if self.task is not None:
            task = self.task
            need(self.corridor_lengths is None, "corridor_lengths", "None with a task (they are T-Maze's)",
                 self.corridor_lengths)
            need(self.max_steps > task.oracle_steps, "num_segments",
                 f"such that K*N > {task.oracle_steps} (the longest oracle episode of the task)", self.num_segments)
            need((self.model.obs_dim, self.model.num_actions) == (task.obs_dim, task.num_actions),
                 "model", f"sizes obs_dim={task.obs_dim}, num_actions={task.num_actions} (the task's)",
                 (self.model.obs_dim, self.model.num_actions))
            return
        need(self.model.segment_len >= 3, "model.segment_len", ">= 3 for T-Maze data", self.model.segment_len)
        longest = self.max_steps - 2
        need(all(1 <= c <= longest for c in self.lengths), "corridor_lengths",
             f"integers in [1, {longest}] (K*N - 2)", self.corridor_lengths)

    @property
    def max_steps(self) -> int:
        """K*N, the padded trajectory length."""
        return self.model.segment_len * self.num_segments

    @property
    def lengths(self) -> tuple[int, ...]:
        """The T-Maze training corridors."""
        if self.corridor_lengths is not None:
            return tuple(self.corridor_lengths)
        return dataset.segment_corridor_lengths(self.model.segment_len, self.num_segments)


@struct.dataclass
class TrainState:
    """Everything a training run carries; vmapped over seeds, checkpointed between chunks.

    train_data / val_data: :class:`rate_jax.dataset.Trajectories` [num_train / num_val, K*N].
    """

    params: dict
    opt_state: optax.OptState
    train_data: dataset.Trajectories
    val_data: dataset.Trajectories
    key: jax.Array
    step: jax.Array


STEP_METRICS = ("loss", "grad_norm")


@struct.dataclass
class TrainMetrics:
    """loss [steps] (mean segment loss per batch); grad_norm [steps] (global gradient norm
    before clipping); val_turn_accuracy [] (teacher-forced accuracy of the memory-dependent
    decision, T-Maze's turn at the junction, on held-out trajectories); val_accuracy [] (all actions)."""

    loss: jax.Array
    grad_norm: jax.Array
    val_turn_accuracy: jax.Array
    val_accuracy: jax.Array


def to_segments(traj: dataset.Trajectories, segment_len: int) -> Segment:
    """Model input [N, B, K, ...] from trajectories [B, K*N, ...] (absent actions use the padding token)."""
    return split_segments(Segment(obs=traj.obs, actions=traj.actions, rtg=traj.rtg,
                                  action_known=traj.action_mask), segment_len)


def masked_cross_entropy(logits: jax.Array, actions: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(sum of CE over positions with mask = 1, number of such positions)."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, actions)
    return jnp.sum(ce * mask), jnp.sum(mask)


def warmup_adamw(peak: float, warmup_steps: int, total_steps: int, end_factor: float, weight_decay: float,
                 grad_clip: float, beta1: float = 0.9, beta2: float = 0.999) -> optax.GradientTransformation:
    """Global-norm clipping at ``grad_clip``, then AdamW whose learning rate rises linearly to
    ``peak`` over ``warmup_steps`` updates and falls linearly to ``end_factor * peak`` at update
    ``total_steps``: the RATE studies' optimiser, shared with their baselines (``rate_jax.bc_lstm``)."""
    warm = min(warmup_steps, total_steps)
    schedule = optax.join_schedules(
        [optax.linear_schedule(peak / max(warm, 1), peak, max(warm, 1)),
         optax.linear_schedule(peak, peak * end_factor, max(total_steps - warm, 1))], [warm])
    return optax.chain(optax.clip_by_global_norm(grad_clip),
                       optax.adamw(schedule, beta1, beta2, weight_decay=weight_decay))


def _optimizer(config: TrainConfig) -> optax.GradientTransformation:
    updates_per_batch = 1 if not config.detach_memory else config.num_segments
    return warmup_adamw(config.learning_rate, config.warmup_steps, config.num_steps * updates_per_batch,
                        config.lr_end_factor, config.weight_decay, config.grad_clip, config.beta1, config.beta2)


def init_state(config: TrainConfig, key: jax.Array) -> TrainState:
    """Data (train/validation split drawn from ``key``), parameters and optimiser state."""
    k_data, k_val, k_len, k_vlen, k_init, k_run = jax.random.split(key, 6)
    if config.task is None:
        lens = dataset.sample_corridor_lengths(k_len, config.lengths, config.num_train)
        vlens = dataset.sample_corridor_lengths(k_vlen, config.lengths, config.num_val)
        train_data = dataset.generate(k_data, lens, config.max_steps)
        val_data = dataset.generate(k_val, vlens, config.max_steps)
    else:
        train_data = config.task.data(k_data, config.num_train, config.max_steps)
        val_data = config.task.data(k_val, config.num_val, config.max_steps)
    first = jax.tree.map(lambda x: x[0, :1], to_segments(train_data, config.model.segment_len))
    params = RATE(config.model).init(k_init, first)
    return TrainState(params=params, opt_state=_optimizer(config).init(params), train_data=train_data,
                      val_data=val_data, key=k_run, step=jnp.zeros((), jnp.int32))


def _segment_mean(sums: jax.Array, counts: jax.Array) -> jax.Array:
    """Mean over segments that have targets of the per-segment mean losses."""
    has = counts > 0
    per_segment = sums / jnp.maximum(counts, 1.0)
    return jnp.sum(jnp.where(has, per_segment, 0.0)) / jnp.maximum(jnp.sum(has), 1)


def bptt_loss(model: RATE, params, segments: Segment, masks: jax.Array, key=None) -> jax.Array:
    """The full-backpropagation objective: unroll all N segments from M_0 (``unroll``) and
    average the per-segment mean cross-entropies. segments [N, B, K, ...], masks [N, B, K]."""
    carry = model.apply(params, segments.rtg.shape[1], method=RATE.initial_carry)
    outs = unroll(model, params, segments, carry, key=key)
    sums, counts = jax.vmap(masked_cross_entropy)(outs.logits, segments.actions, masks)
    return _segment_mean(sums, counts)


def make_update(config: TrainConfig, num_steps: int
                ) -> Callable[[TrainState], tuple[TrainState, dict[str, jax.Array]]]:
    """``update(state) -> (state, {metric: [num_steps]})``: ``num_steps`` batches as one ``lax.scan``.

    The metrics are :data:`STEP_METRICS`, one value per step.
    """
    model = RATE(config.model)
    tx = _optimizer(config)
    k_len = config.model.segment_len

    def batch_of(state, key):
        idx = jax.random.randint(key, (config.batch_size,), 0, config.num_train)
        traj = jax.tree.map(lambda x: x[idx], state.train_data)
        return to_segments(traj, k_len), split_segments(traj.action_mask, k_len)

    def bptt_step(state, key):
        k_batch, k_drop = jax.random.split(key)
        segs, masks = batch_of(state, k_batch)

        loss, grads = jax.value_and_grad(bptt_loss, argnums=1)(model, state.params, segs, masks, k_drop)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        new = state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state)
        return new, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

    def detached_step(state, key):
        k_batch, k_drop = jax.random.split(key)
        segs, masks = batch_of(state, k_batch)

        def segment_loss(params, seg, mask, memory, carry, first, k):
            initial = model.apply(params, config.batch_size, method=RATE.initial_carry)
            # M_0 keeps its gradient (authors: the first segment reads the parameter itself)
            carry = carry.replace(memory=jnp.where(first, initial.memory, jax.lax.stop_gradient(memory)))
            out = model.apply(params, seg, carry, False, rngs={"dropout": k})
            s, c = masked_cross_entropy(out.logits, seg.actions, mask)
            return s / jnp.maximum(c, 1.0), (out.carry, s, c)

        def body(inner, inputs):
            params, opt_state, carry = inner
            seg, mask, n, k = inputs
            (_, (new_carry, s, c)), grads = jax.value_and_grad(segment_loss, has_aux=True)(
                params, seg, mask, carry.memory, carry, n == 0, k)
            updates, new_opt = tx.update(grads, opt_state, params)
            take = c > 0  # a segment with no targets in the whole batch makes no update
            params = jax.tree.map(lambda a, b: jnp.where(take, a, b), optax.apply_updates(params, updates), params)
            opt_state = jax.tree.map(lambda a, b: jnp.where(take, a, b), new_opt, opt_state)
            return (params, opt_state, new_carry), (s, c, optax.tree.norm(grads))

        carry = model.apply(state.params, config.batch_size, method=RATE.initial_carry)
        n = config.num_segments
        (params, opt_state, _), (sums, counts, norms) = jax.lax.scan(
            body, (state.params, state.opt_state, carry), (segs, masks, jnp.arange(n), jax.random.split(k_drop, n)))
        took = counts > 0
        grad_norm = jnp.sum(jnp.where(took, norms, 0.0)) / jnp.maximum(jnp.sum(took), 1)
        metrics = {"loss": _segment_mean(sums, counts), "grad_norm": grad_norm}
        return state.replace(params=params, opt_state=opt_state), metrics

    one_step = detached_step if config.detach_memory else bptt_step

    def update(state: TrainState):
        keys = jax.random.split(state.key, num_steps + 1)
        state, metrics = jax.lax.scan(one_step, state, keys[1:])
        return state.replace(key=keys[0], step=state.step + num_steps), metrics

    return update


def make_validate(config: TrainConfig) -> Callable[[TrainState], tuple[jax.Array, jax.Array]]:
    """``validate(state) -> (decision accuracy, all-action accuracy)`` on the held-out
    trajectories; the decision is the action at index ``corridor_length`` (T-Maze: the turn)."""
    model = RATE(config.model)

    def validate(state: TrainState):
        val = state.val_data
        segs = to_segments(val, config.model.segment_len)
        carry = model.apply(state.params, config.num_val, method=RATE.initial_carry)
        logits = unroll(model, state.params, segs, carry).logits  # [N, B, K, A]
        logits = jnp.swapaxes(logits, 0, 1).reshape(config.num_val, config.max_steps, -1)
        correct = (jnp.argmax(logits, -1) == val.actions).astype(jnp.float32)
        turn = val.corridor_length  # T-Maze: the turn is taken at the observation with index L
        turn_correct = jnp.take_along_axis(correct, turn[:, None], axis=1)[:, 0]
        all_acc = jnp.sum(correct * val.action_mask) / jnp.sum(val.action_mask)
        return jnp.mean(turn_correct), all_acc

    return validate


def make_train(config: TrainConfig) -> Callable[[jax.Array], tuple[TrainState, TrainMetrics]]:
    """``train(key) -> (final TrainState, TrainMetrics)``, jittable; sweep with ``jax.vmap(train)``."""
    update = make_update(config, config.num_steps)
    validate = make_validate(config)

    def train(key):
        state, metrics = update(init_state(config, key))
        turn_acc, acc = validate(state)
        return state, TrainMetrics(loss=metrics["loss"], grad_norm=metrics["grad_norm"], val_turn_accuracy=turn_acc,
                                   val_accuracy=acc)

    return train


@struct.dataclass
class ChunkedRun:
    """A seed-vmapped training run advanced a chunk of steps at a time (:func:`make_chunk`).

    train: :class:`TrainState` with a leading seed axis S; curves: {metric: [S, num_steps]}
    for every metric of :data:`STEP_METRICS`, zero where a step has not run yet.
    """

    train: TrainState
    curves: dict


def init_chunked(config: TrainConfig, keys: jax.Array) -> ChunkedRun:
    """The start of a chunked run: one :func:`init_state` per raw key (``keys`` [S, 2] uint32)."""
    states = jax.jit(jax.vmap(lambda k: init_state(config, k)))(keys)
    s = keys.shape[0]
    return ChunkedRun(train=states, curves={k: jnp.zeros((s, config.num_steps)) for k in STEP_METRICS})


def make_chunk(config: TrainConfig, num_chunks: int) -> Callable[[ChunkedRun, jax.Array], ChunkedRun]:
    """``chunk(run, i) -> run``: steps ``i*C .. (i+1)*C - 1`` (C = num_steps / num_chunks) of every
    seed, their metrics written into ``run.curves`` at those steps (a pure, jittable function)."""
    if num_chunks < 1 or config.num_steps % num_chunks:
        raise ValueError(f"num_chunks must be >= 1 and divide num_steps={config.num_steps}, got {num_chunks}")
    per_chunk = config.num_steps // num_chunks
    update = jax.vmap(make_update(config, per_chunk))

    def chunk(run: ChunkedRun, i) -> ChunkedRun:
        state, metrics = update(run.train)
        curves = {k: jax.lax.dynamic_update_slice(run.curves[k], metrics[k], (0, i * per_chunk)) for k in run.curves}
        return ChunkedRun(train=state, curves=curves)

    return chunk

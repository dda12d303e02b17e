"""Training and evaluation shared by the RATE studies: not a study itself.

Training (``rate.tmaze``, ``rate.mrv``, ``rate.popgym``, ``rate.minigrid_memory``): one
model configuration, every seed in one vmapped program, chunked and checkpointed by
``experiments.seeds.train_chunked`` with a NaN guard on the recorded per-step loss.
Evaluation in a task environment (``rate.popgym``, ``rate.minigrid_memory``): every seed
on every episode as one compiled program (``rate_jax.make_env_evaluate``).
"""
from __future__ import annotations

import dataclasses
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import rate_jax
from experiments import seeds
from experiments.registry import RunContext

NOISE = "RATE+memory noise"  # the arm: RATE evaluated with noise in place of the memory passed between segments
# Every model a RATE study may train (``rate_jax.VARIANTS``: the baselines and the two ablations,
# RATE without its valve and RATE without its Transformer-XL cache) and the prefix of its metrics.
METRIC_NAMES = {"RATE": "rate", "DT": "dt", "RMT": "rmt", "TrXL": "trxl", "RATE-noMRV": "rate_no_mrv",
                "RATE-nocache": "rate_no_cache"}


QUICK_SHAPE = {"n_layer": 2, "n_head": 2, "num_mem_tokens": 3, "mem_len": 0}
"""The one rule by which every RATE study's quick preset scales the authors' model down to CPU size
(``quick_model``): two layers of two heads that split the width (d_head = d_model / 2), three memory
tokens, no Transformer-XL cache, whatever the authors' script has (T-Maze and the valve: 10 layers of
4 heads, 15 tokens; POPGym: 8 layers of 10 heads, 30 tokens, a 40-step cache). The width is the
authors' 64 where the long-corridor memory needs it (``rate.tmaze``, ``rate.mrv``) and 32 where the
tasks are read within the training length (``rate.popgym``, ``rate.minigrid_memory``); segment length,
feed-forward width, cross-attention heads and dropout are each study's, screened and named in its
``QUICK`` comment. The FULL presets are the authors' script lines flag for flag (each study's
``FULL`` comment; tests compare them). A test asserts every quick preset keeps this rule."""


def quick_model(d_model: int, **study) -> rate_jax.ModelConfig:
    """A RATE study's quick model: :data:`QUICK_SHAPE` at width ``d_model`` (heads of d_model / 2),
    the study's own choices ``study`` (segment length, feed-forward width, cross-attention heads,
    dropout) on top."""
    return rate_jax.ModelConfig(d_model=d_model, d_head=d_model // QUICK_SHAPE["n_head"], **QUICK_SHAPE, **study)


@dataclasses.dataclass(frozen=True)
class BaselineLine:
    """The hyper-parameters the authors' script gives some baselines (``variants``) where they differ
    from RATE's line; a field left None keeps RATE's. ``num_mem_tokens`` applies to a variant that has
    memory tokens (RMT), not to one without (DT, TrXL)."""

    variants: tuple[str, ...]
    n_layer: int | None = None
    n_head: int | None = None
    d_inner: int | None = None
    dropatt: float | None = None
    num_mem_tokens: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    weight_decay: float | None = None

    def apply(self, name: str, cfg: rate_jax.TrainConfig) -> rate_jax.TrainConfig:
        """``cfg`` of model ``name`` on this line if ``name`` is one of ``variants``, else unchanged."""
        if name not in self.variants:
            return cfg
        pick = lambda names: {k: getattr(self, k) for k in names if getattr(self, k) is not None}  # noqa: E731
        model = pick(("n_layer", "n_head", "d_inner", "dropatt"))
        if cfg.model.num_mem_tokens > 0:
            model.update(pick(("num_mem_tokens",)))
        return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model),
                                   **pick(("batch_size", "learning_rate", "weight_decay")))


@dataclasses.dataclass(frozen=True)
class Budget:
    """How a RATE study trains each model (``rate.popgym``, ``rate.minigrid_memory``):
    ``num_steps`` optimiser steps in ``chunks`` checkpointed chunks, batches of ``batch_size``
    from ``num_train`` oracle episodes (``num_val`` held out), AdamW at ``learning_rate`` with
    ``warmup_steps`` of linear warm-up, then linear decay to ``lr_end_factor`` times the peak,
    ``weight_decay`` and global-norm clipping at ``grad_clip`` (``rate_jax.TrainConfig``).

    ``detach_memory``: the authors' trainer (one optimiser step per segment, the memory passed
    between segments detached; ``rate_jax.TrainConfig.detach_memory``, docs/rate.md section 7)
    instead of full backpropagation through every segment. Full backpropagation is the default
    because under the detached trainer no loss depends on the Memory Retention Valve's weights,
    so the valve is never trained (a tested consequence of the chain rule)."""

    num_steps: int
    chunks: int
    batch_size: int
    num_train: int
    num_val: int
    learning_rate: float
    warmup_steps: int
    weight_decay: float
    lr_end_factor: float = 0.01
    grad_clip: float = 1.0
    detach_memory: bool = False

    def __post_init__(self):
        def need(cond, field, allowed):
            if not cond:
                raise ValueError(f"training.{field} must be {allowed}, got {getattr(self, field)!r}")

        for name in ("num_steps", "chunks", "batch_size", "num_train", "num_val"):
            need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "an integer >= 1")
        need(self.num_steps % self.chunks == 0, "chunks", f"a divisor of num_steps={self.num_steps}")
        need(self.learning_rate > 0, "learning_rate", "> 0")
        need(isinstance(self.warmup_steps, int) and self.warmup_steps >= 0, "warmup_steps", "an integer >= 0")
        need(self.weight_decay >= 0, "weight_decay", ">= 0")
        need(0 <= self.lr_end_factor <= 1, "lr_end_factor", "in [0, 1]")
        need(self.grad_clip > 0, "grad_clip", "> 0")
        need(isinstance(self.detach_memory, bool), "detach_memory", "a bool")

    def train_config(self, model: rate_jax.ModelConfig, num_segments: int, task) -> rate_jax.TrainConfig:
        return rate_jax.TrainConfig(
            model=model, task=task, num_segments=num_segments, num_train=self.num_train, num_val=self.num_val,
            batch_size=self.batch_size, num_steps=self.num_steps, learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps, weight_decay=self.weight_decay,
            lr_end_factor=self.lr_end_factor, grad_clip=self.grad_clip, detach_memory=self.detach_memory)


def train_seeds(ctx: RunContext, name: str, tcfg: rate_jax.TrainConfig, num_seeds: int, stream: int, chunks: int):
    """Train ``tcfg`` from the keys ``seed_keys(num_seeds, stream)``, checkpointed as ``ckpt_<name>``.

    Returns (TrainState with leading axis S (host arrays), curves {metric: [S, num_steps]},
    teacher-forced validation accuracy [S] of the decision (T-Maze: the turn), of all actions [S]).
    """
    keys = jnp.asarray(seeds.seed_keys(num_seeds, stream))  # raw uint32 keys: checkpointable
    per_chunk = tcfg.num_steps // chunks
    state = seeds.train_chunked(ctx, f"ckpt_{name}", rate_jax.make_chunk(tcfg, chunks),
                                rate_jax.init_chunked(tcfg, keys), chunks, model=name,
                                loss_so_far=lambda run, items, done: run.curves["loss"][items, : done * per_chunk])
    turn, acc = jax.jit(jax.vmap(rate_jax.make_validate(tcfg)))(state.train)
    return state.train, {k: np.asarray(v) for k, v in state.curves.items()}, np.asarray(turn), np.asarray(acc)


DT_WINDOWS = ("restart", "sliding")  # how DT's K-step context moves at evaluation (``evaluate_seeds``'s ``window``)


def evaluate_seeds(ctx: RunContext, name: str, model: rate_jax.ModelConfig, task, env_params,
                   max_steps: int, params, keys, noise: tuple[bool, ...] = (False,), window: str = "restart"
                   ) -> list[dict[str, np.ndarray]]:
    """Every seed (``params`` and evaluation ``keys`` [S] stacked) on every episode of
    ``env_params`` (leading axis E) of ``task.env``, from return-to-go ``task.initial_rtg``,
    each run for ``max_steps`` steps, once per ``noise`` flag (``memory_noise`` of
    ``rate_jax.make_env_evaluate``: every memory passed between segments replaced by noise,
    the paper's ablation and the RATE studies' negative control): per flag
    {"success", "chose", "episode_return", "episode_length": [S, E]} (success and chose, as in
    ``rate_jax.evaluate.EvalResult``, NaN where the task reports none). One compiled program for every flag (the noise is drawn either way, so the
    clean run does not depend on it); its compile time is recorded on ``ctx`` and logged with
    the run time. ``window`` (one of :data:`DT_WINDOWS`, for a model without memory or cache):
    ``"restart"`` runs segments of K steps, the context restarting at each boundary
    (``rate_jax.make_env_evaluate``); ``"sliding"`` drops the oldest step at every step once K are
    in context, as the authors evaluate their DT (``rate_jax.make_sliding_evaluate``)."""
    if window not in DT_WINDOWS:
        raise ValueError(f"window must be one of {DT_WINDOWS}, got {window!r}")
    make = rate_jax.make_sliding_evaluate if window == "sliding" else rate_jax.make_env_evaluate
    evaluate = make(model, task.env, max_steps, task.initial_rtg)
    t0 = time.perf_counter()
    program = jax.jit(jax.vmap(evaluate, in_axes=(0, 0, None, None))).lower(
        params, keys, env_params, jnp.asarray(False)).compile()
    compile_s = time.perf_counter() - t0
    ctx.record_compile(compile_s)
    t0, results = time.perf_counter(), []
    for flag in noise:
        out = program(params, keys, env_params, jnp.asarray(flag))
        results.append({k: np.asarray(getattr(out, k)) for k in ("success", "chose", "episode_return",
                                                                 "episode_length")})
    print(f"[{ctx.study}] evaluate {name}: compile {compile_s:.1f} s, run {time.perf_counter() - t0:.1f} s "
          f"({len(noise)} flag(s))", file=sys.stderr, flush=True)
    return results

"""Independent seeds: one key stream per purpose, and a training run vmapped over seeds.

``--seeds N`` sets a study's seed count (its ``seeds_field``); the seeds are the keys
``seed_keys(N, stream)``. Streams keep purposes apart: the judged seeds of every study
come from :data:`JUDGED`, and quick sizes are chosen on seeds from :data:`SCREENING`,
so no judged seed was ever seen while choosing a configuration.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from experiments import sweep
from experiments.registry import RunContext

__all__ = ["JUDGED", "SCREENING", "seed_keys", "train_over_seeds"]

JUDGED = 0
SCREENING = 1


def seed_keys(num_seeds: int, stream: int = JUDGED) -> np.ndarray:
    """Raw key data ``[num_seeds, 2]`` (uint32) of seeds 0..num_seeds-1 of ``stream``.

    The judged stream is ``split(key(0), num_seeds)``; stream ``s > 0`` splits
    ``fold_in(key(0), s)``, a key no judged seed derives from.
    """
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
    root = jax.random.key(0) if stream == JUDGED else jax.random.fold_in(jax.random.key(0), stream)
    keys = jax.random.split(root, num_seeds)
    return np.asarray(jax.random.key_data(keys))


def train_over_seeds(
    ctx: RunContext,
    name: str,
    train: Callable[[jax.Array], Any],
    num_seeds: int,
    *,
    stream: int = JUDGED,
    guard: sweep.LossGuard | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> sweep.SweepResult:
    """``jax.vmap(train)`` over ``num_seeds`` keys as one checkpointed ``sweep_map``.

    ``train(key)`` is a pure jittable training run; every output leaf gains a leading
    seed axis. The run checkpoints under ``ctx.checkpoint(name)`` and its compile
    time is recorded on ``ctx``.
    """
    keys = seed_keys(num_seeds, stream)
    result = sweep.sweep_map(
        lambda k: train(jax.random.wrap_key_data(k)), keys,
        chunk_size=-(-num_seeds // jax.device_count()),
        checkpoint=ctx.checkpoint(name, stream=stream, **(fingerprint or {})),
        guard=guard, desc=f"{ctx.study} {name}",
    )
    ctx.record_compile(result.compile_s)
    return result

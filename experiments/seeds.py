"""Independent seeds and the checkpointed programs of one run that train over them.

``--seeds N`` sets a study's seed count (its ``seeds_field``); the seeds are the keys
``seed_keys(N, stream)``. Streams keep purposes apart: the judged seeds of every study
come from :data:`JUDGED`; :data:`SCREENING` is a stream no judged seed derives from,
for choosing configurations.

The helpers below are the study-facing form of the sweep engine: each runs one
checkpointed program under ``ctx.checkpoint(name)``, records its compile time on
``ctx`` and, given ``loss_of``, stops at the first non-finite training loss naming the
task and seed.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

from experiments import sweep
from experiments.registry import RunContext

__all__ = ["JUDGED", "SCREENING", "check_stream", "chunk_for", "map_fn", "mapped", "seed_keys", "train_grid",
           "train_over_seeds", "train_chunked"]

JUDGED = 0
SCREENING = 1


def check_stream(stream) -> None:
    """A study config's ``stream`` field must name one of the two streams: a clear error otherwise."""
    if isinstance(stream, bool) or stream not in (JUDGED, SCREENING):
        raise ValueError(f"stream must be {JUDGED} (judged seeds) or {SCREENING} (screening seeds), got {stream!r}")


def seed_keys(num_seeds: int, stream: int = JUDGED) -> np.ndarray:
    """Raw key data ``[num_seeds, 2]`` (uint32) of seeds 0..num_seeds-1 of ``stream``.

    The judged stream is ``split(key(0), num_seeds)``; stream ``s > 0`` splits
    ``fold_in(key(0), s)``, a key no judged seed derives from.
    """
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}")
    root = jax.random.key(0) if stream == JUDGED else jax.random.fold_in(jax.random.key(0), stream)
    return np.asarray(jax.random.key_data(jax.random.split(root, num_seeds)))


def mapped(ctx: RunContext, name: str, fn: Callable[..., Any], inputs: Any, chunk_size: int, *,
           guard: sweep.LossGuard | None = None, shared: Any = None, **fingerprint: Any) -> Any:
    """``sweep.sweep_map(fn, inputs, shared=shared)`` checkpointed as ``name`` of this run; returns its outputs."""
    result = sweep.sweep_map(fn, inputs, chunk_size=chunk_size, checkpoint=ctx.checkpoint(name, **fingerprint),
                             guard=guard, desc=f"{ctx.study} {name}", shared=shared)
    ctx.record_compile(result.compile_s)
    return result.outputs


def map_fn(ctx: RunContext, name: str, **fingerprint: Any) -> Callable[[Callable, Any, int], Any]:
    """``map_fn(fn, inputs, chunk_size)``: :func:`mapped` as ``name`` of this run, for a library
    function that takes the batched map it runs on (e.g. ``regret_jax.scan``)."""
    return lambda fn, inputs, chunk_size: mapped(ctx, name, fn, inputs, chunk_size, **fingerprint)


def _describe(labels: Sequence[str], num_seeds: int) -> Callable[[int], str]:
    if len(labels) == 1:
        return lambda i: f"seed {i % num_seeds}"
    return lambda i: f"{labels[i // num_seeds]}, seed {i % num_seeds}"


def _guard(ctx: RunContext, name: str, loss_of, describe) -> sweep.LossGuard | None:
    if loss_of is None:
        return None
    return sweep.LossGuard(f"{ctx.study} {name}", lambda out, items, done: np.asarray(loss_of(out)), describe)


def chunk_for(n: int, max_chunk: int | None = None) -> int:
    """The items one device computes per call when ``n`` items are spread over every device: all
    of its share, or with ``max_chunk`` the size k in [``max_chunk`` / 2, ``max_chunk``] that pads the
    share least to whole chunks (the largest such k): 36 items at most 8 a call are 6 calls of 6, not
    5 of 8 with 4 repeated items."""
    share = -(-n // jax.device_count())
    if max_chunk is None or share <= max_chunk:
        return share
    return min(range((max_chunk + 1) // 2, max_chunk + 1), key=lambda k: (-(-share // k) * k, -k))


def train_grid(ctx: RunContext, name: str, train_item: Callable[..., Any], items: Any, *,
               labels: Sequence[str], num_seeds: int, loss_of: Callable[[Any], Any] | None = None,
               shared: Any = None, max_chunk: int | None = None, **fingerprint: Any) -> Any:
    """``train_item`` over a task-major grid ``labels x seeds`` (item ``i``: task ``i // S``,
    seed ``i % S``) as one program, every device busy, at most ``max_chunk`` items per device and
    call (:func:`chunk_for`); ``loss_of(outputs)`` is ``[items, steps]``.
    With ``shared``, ``train_item(item, shared)`` (``sweep.sweep_map``)."""
    guard = _guard(ctx, name, loss_of, _describe(labels, num_seeds))
    return mapped(ctx, name, train_item, items, chunk_for(len(labels) * num_seeds, max_chunk), guard=guard,
                  shared=shared, labels=list(labels), **fingerprint)


def train_over_seeds(ctx: RunContext, name: str, train: Callable[[jax.Array], Any], num_seeds: int, *,
                     stream: int = JUDGED, loss_of: Callable[[Any], Any] | None = None,
                     **fingerprint: Any) -> Any:
    """``jax.vmap(train)`` over ``num_seeds`` keys of ``stream``; every output leaf gains a seed axis."""
    return train_grid(ctx, name, lambda k: train(jax.random.wrap_key_data(k)), seed_keys(num_seeds, stream),
                      labels=("",), num_seeds=num_seeds, loss_of=loss_of, stream=stream, **fingerprint)


def train_chunked(ctx: RunContext, name: str, chunk_fn: Callable[[Any, jax.Array], Any], state: Any,
                  num_chunks: int, *, loss_so_far: Callable[[Any, np.ndarray, int], Any] | None = None,
                  **fingerprint: Any) -> Any:
    """A seed-vmapped training state advanced by ``chunk_fn`` for ``num_chunks`` chunks (``run_chunks``).

    The state is sharded over the devices when its seed axis divides evenly;
    ``loss_so_far(state, seeds, chunks_done)`` gives the losses recorded so far
    ``[seeds, steps]``. Returns the final state as host arrays.
    """
    if jax.tree.leaves(state)[0].shape[0] % jax.device_count() == 0:
        state = sweep.shard_leading(state)
    guard = None if loss_so_far is None else sweep.LossGuard(f"{ctx.study} {name}", loss_so_far)
    result = sweep.run_chunks(chunk_fn, state, num_chunks, checkpoint=ctx.checkpoint(name, **fingerprint),
                              guard=guard, desc=f"{ctx.study} {name}")
    ctx.record_compile(result.compile_s)
    return result.state

"""The sweep engine: vmapped, sharded, chunked, checkpointed (DESIGN.md section 3).

Two entry points share one chunk driver (:func:`_drive`: progress bar, checkpoint
after each step, resume, clean-up):

* :func:`sweep_map` maps a per-item function over the leading axis of its inputs
  (seeds, grid cells, MDPs), one chunk of items per device at a time, and gathers
  the outputs in a host buffer.
* :func:`run_chunks` advances one state pytree (vmapped train states, metric
  buffers, keys) by a pure ``chunk_fn(state, i)`` for ``i = 0 .. num_chunks-1``.

Both compile their program once with ``.lower(...).compile()`` (``compile_s``) and
report the time of the chunk loop, restore and checkpoint saves included, as
``run_s``. A :class:`LossGuard` stops a sweep at the first non-finite training loss,
after the checkpoint of the chunk that produced it is saved (finished work is kept).

With several processes (``experiments.distributed``) the mesh spans every process's
devices, inputs are placed shard by shard and outputs gathered to every process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm import tqdm

from experiments.checkpoint import CheckpointSpec
from experiments.distributed import global_array, to_host

__all__ = [
    "ChunksResult",
    "LossGuard",
    "NonFiniteLoss",
    "SweepResult",
    "device_mesh",
    "run_chunks",
    "shard_leading",
    "sweep_map",
]

_AXIS = "sweep"


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep_map` returns.

    ``outputs``: numpy pytree with leading axis N; ``compile_s``/``run_s``: seconds;
    ``resumed_chunks``: chunks restored from a checkpoint rather than computed.
    """

    outputs: Any
    compile_s: float
    run_s: float
    resumed_chunks: int = 0


@dataclasses.dataclass(frozen=True)
class ChunksResult:
    """What :func:`run_chunks` returns (``state`` after the last chunk; see SweepResult)."""

    state: Any
    compile_s: float
    run_s: float
    resumed_chunks: int = 0


class NonFiniteLoss(FloatingPointError):
    """A training loss turned NaN or infinite; the message names the run, seed and step."""


@dataclasses.dataclass(frozen=True)
class LossGuard:
    """Stops a sweep at the first non-finite loss.

    ``loss_of(tree, items, done)`` returns the losses computed so far as a host array
    ``[len(items), steps]``, where ``tree`` is the state (``run_chunks``, items are
    the leading-axis indices) or the outputs of the chunk just computed (``sweep_map``,
    items are their global item indices) and ``done`` the number of chunks finished.
    ``describe(item)`` names an item ("seed 2", "task gradual, seed 0").
    """

    label: str
    loss_of: Callable[[Any, np.ndarray, int], np.ndarray]
    describe: Callable[[int], str] = lambda item: f"seed {item}"

    def __call__(self, tree: Any, items: np.ndarray, done: int) -> None:
        loss = np.asarray(self.loss_of(tree, items, done))
        bad = ~np.isfinite(loss)
        if bad.any():
            row, step = (int(v[0]) for v in np.nonzero(bad))
            raise NonFiniteLoss(
                f"{self.label}: non-finite loss {loss[row, step]} at {self.describe(int(items[row]))}, "
                f"step {step}; the checkpoint of the finished chunks is kept"
            )


def device_mesh() -> Mesh:
    """A 1-D mesh over all visible devices, axis name ``"sweep"``."""
    return Mesh(np.asarray(jax.devices()), (_AXIS,))


def _leading_sharding() -> NamedSharding:
    return NamedSharding(device_mesh(), PartitionSpec(_AXIS))


def shard_leading(tree: Any) -> Any:
    """Place every leaf of ``tree`` split along its leading axis over :func:`device_mesh`.

    Raises ``ValueError`` (with the sizes) when a leaf's leading axis is not a
    multiple of the device count.
    """
    n_dev = jax.device_count()
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] % n_dev:
            raise ValueError(
                f"shard_leading: leaf {jax.tree_util.keystr(path)} has shape {jnp.shape(leaf)}; "
                f"its leading axis must be a multiple of the device count {n_dev}"
            )
    sharding = _leading_sharding()
    return jax.tree.map(
        lambda x: global_array(x, sharding) if isinstance(x, np.ndarray) else jax.device_put(x, sharding), tree
    )


def _signature(tree: Any) -> dict[str, Any]:
    """Tree structure, shapes and dtypes, for a checkpoint fingerprint."""
    leaves, treedef = jax.tree.flatten(tree)
    return {
        "treedef": str(treedef),
        "leaves": [f"{x.dtype}{list(x.shape)}" for x in leaves],
    }


def _digest(tree: Any) -> str:
    """SHA-256 of every leaf's bytes, in tree order (a fingerprint of array contents)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()


def _drive(
    step: Callable[[Any, int], Any],
    state: Any,
    num_chunks: int,
    *,
    stride: int,
    checkpoint: CheckpointSpec | None,
    harness: dict[str, Any],
    desc: str,
    after: Callable[[Any, int, int], None] | None = None,
) -> tuple[Any, int, float]:
    """``state <- step(state, i)`` for ``i = start, start + stride, ...`` below ``num_chunks``.

    ``step(state, i)`` does chunks ``i .. min(i + stride, num_chunks) - 1``; the
    checkpoint after it is numbered by the chunks done, so a run can resume with a
    different ``stride``; ``after(state, i, done)`` runs after that save (the loss
    guard). ``start`` is 0, or the chunks done in the restored checkpoint. Returns
    ``(state, start, seconds of restore + loop)``. On success the checkpoint folder is
    removed; on an exception it is kept (after pending saves).
    """
    ckpt = None if checkpoint is None else checkpoint.open(harness)
    start = 0
    t0 = time.perf_counter()
    try:
        if ckpt is not None:
            restored = ckpt.restore(state)
            if restored is not None:
                start, state = restored
        with tqdm(total=num_chunks, initial=start, desc=desc or "sweep", unit="chunk", file=sys.stderr) as bar:
            for i in range(start, num_chunks, stride):
                state = step(state, i)
                done = min(i + stride, num_chunks)
                if ckpt is not None:
                    ckpt.save(done, state)
                if after is not None:
                    after(state, i, done)
                bar.update(done - i)
        state = jax.block_until_ready(state)
    except BaseException:
        if ckpt is not None:
            ckpt.close()
        raise
    if ckpt is not None:
        ckpt.finish()
    return state, start, time.perf_counter() - t0


def _leading_size(inputs: Any) -> int:
    sizes = {x.shape[0] if x.ndim else None for x in jax.tree.leaves(inputs)}
    if not sizes or None in sizes or len(sizes) != 1:
        shapes = jax.tree.map(jnp.shape, inputs)
        raise ValueError(f"sweep_map: all input leaves need one common leading axis, got shapes {shapes}")
    return sizes.pop()


def sweep_map(
    fn: Callable[[Any], Any],
    inputs: Any,
    *,
    chunk_size: int,
    checkpoint: CheckpointSpec | None = None,
    guard: LossGuard | None = None,
    desc: str = "",
    shared: Any = None,
) -> SweepResult:
    """``jax.vmap(fn)(inputs)`` a chunk per device at a time, sharded over all devices.

    With ``shared`` (a pytree of arrays every item reads, e.g. an environment's tables),
    ``fn(item, shared)`` is mapped over the items only: ``shared`` is an argument of the
    compiled program, replicated on every device, never a per-item copy nor a constant
    folded into the program; its shapes and a digest of its contents join the checkpoint
    fingerprint.

    ``inputs`` is a pytree whose leaves share a leading axis of size N (>= 1).
    Chunk ``k`` is items ``k*chunk_size .. (k+1)*chunk_size - 1``; the input is
    padded at its end, by repeating the last item, to whole chunks. One step of the
    compiled ``jax.jit(jax.vmap(fn))`` (compiled once) runs the next D chunks, one
    per device (D = device count), as a ``[D*chunk_size, ...]`` batch sharded with
    :func:`shard_leading`. Its outputs go to a preallocated host buffer, which is
    checkpointed after each step when ``checkpoint`` is given, numbered by the chunks
    done, with ``chunk_size``, N and the output shapes added to its fingerprint;
    ``checkpoint.resume`` continues from the last saved chunk, on any device count.
    Output leaves must be numeric (no typed PRNG keys). ``guard`` sees each step's
    outputs with their item indices.

    Reading of "the chunking independent of device count": ``chunk_size`` is the
    batch one device computes at once, not split further over devices, because XLA
    may round differently for different batch shapes (seen: the pmd.reversal row
    function gives other last bits at batch 1 than at batch 2). So every item is
    computed in the same chunk, at the same batch shape, on 1 or many devices, and
    the outputs are bitwise identical across device counts and across a kill and
    resume, as far as XLA compiles an embarrassingly parallel sharded program to
    the same per-device code as the one-device program (it does in our tests).
    """
    if chunk_size < 1:
        raise ValueError(f"sweep_map: chunk_size must be >= 1, got {chunk_size}")
    inputs = jax.tree.map(np.asarray, inputs)
    n = _leading_size(inputs)
    n_dev = jax.device_count()
    per_step = chunk_size * n_dev
    num_chunks = -(-n // chunk_size)

    sharding = _leading_sharding()
    abstract_in = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct((per_step,) + x.shape[1:], x.dtype, sharding=sharding), inputs
    )
    t0 = time.perf_counter()
    if shared is None:
        compiled, extra = jax.jit(jax.vmap(fn)).lower(abstract_in).compile(), ()
    else:
        shared = jax.device_put(jax.tree.map(np.asarray, shared), NamedSharding(device_mesh(), PartitionSpec()))
        compiled, extra = jax.jit(jax.vmap(fn, in_axes=(0, None))).lower(abstract_in, shared).compile(), (shared,)
    compile_s = time.perf_counter() - t0
    buffer = jax.tree.map(lambda s: np.zeros((n,) + s.shape[1:], s.dtype), compiled.out_info)

    def step(buf: Any, k: int) -> Any:
        lo = k * chunk_size
        hi = min(lo + per_step, n)
        idx = np.minimum(lo + np.arange(per_step), n - 1)
        out = to_host(compiled(shard_leading(jax.tree.map(lambda x: x[idx], inputs)), *extra))
        for b, o in zip(jax.tree.leaves(buf), jax.tree.leaves(out)):
            b[lo:hi] = o[: hi - lo]
        return buf

    def after(buf: Any, k: int, done: int) -> None:
        items = np.arange(k * chunk_size, min(done * chunk_size, n))
        guard(jax.tree.map(lambda b: b[items], buf), items, done)

    harness = {"kind": "sweep_map", "n": n, "chunk_size": chunk_size, "outputs": _signature(buffer)}
    if shared is not None:
        harness["shared"] = {**_signature(shared), "sha256": _digest(shared)}
    buffer, resumed, run_s = _drive(
        step, buffer, num_chunks, stride=n_dev, checkpoint=checkpoint, harness=harness, desc=desc,
        after=None if guard is None else after,
    )
    return SweepResult(
        outputs=jax.tree.map(np.asarray, buffer), compile_s=compile_s, run_s=run_s, resumed_chunks=resumed
    )


def run_chunks(
    chunk_fn: Callable[[Any, jax.Array], Any],
    init_state: Any,
    num_chunks: int,
    *,
    checkpoint: CheckpointSpec | None = None,
    guard: LossGuard | None = None,
    desc: str = "",
) -> ChunksResult:
    """``state <- chunk_fn(state, i)`` for ``i in range(num_chunks)``, checkpointed.

    ``chunk_fn`` is a pure jittable function of the state pytree and an int32
    chunk index that returns a state of the same structure, shapes and dtypes; it is
    compiled once, with the output placed like the input (so a state sharded with
    :func:`shard_leading` stays sharded). With ``checkpoint`` the state is saved after
    each chunk and ``checkpoint.resume`` continues from the last saved chunk,
    restoring into the shapes, dtypes and shardings of ``init_state``; the final state
    equals an uninterrupted run's bitwise. ``guard`` sees the state after each chunk
    (host copy). The returned state is gathered to host arrays.
    """
    if num_chunks < 1:
        raise ValueError(f"run_chunks: num_chunks must be >= 1, got {num_chunks}")
    state = jax.tree.map(jnp.asarray, init_state)
    index = jax.ShapeDtypeStruct((), jnp.int32)
    out_shapes = jax.eval_shape(chunk_fn, state, index)
    if _signature(out_shapes) != _signature(state):
        raise ValueError(
            "run_chunks: chunk_fn must return a state like its input; "
            f"input {_signature(state)}, output {_signature(out_shapes)}"
        )
    shardings = jax.tree.map(lambda x: x.sharding, state)
    t0 = time.perf_counter()
    compiled = jax.jit(chunk_fn, out_shardings=shardings).lower(state, index).compile()
    compile_s = time.perf_counter() - t0

    def after(s: Any, i: int, done: int) -> None:
        host = to_host(s)
        guard(host, np.arange(jax.tree.leaves(host)[0].shape[0]), done)

    harness = {"kind": "run_chunks", "num_chunks": num_chunks, "state": _signature(state)}
    state, resumed, run_s = _drive(
        lambda s, i: compiled(s, np.int32(i)),
        state,
        num_chunks,
        stride=1,
        checkpoint=checkpoint,
        harness=harness,
        desc=desc,
        after=None if guard is None else after,
    )
    return ChunksResult(state=to_host(state), compile_s=compile_s, run_s=run_s, resumed_chunks=resumed)

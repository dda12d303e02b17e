"""Helpers for ``bench`` functions: timing (compile time apart from run time), XLA's peak
memory estimate and the process's resident peak, the matrix-multiply FLOPs of a program, the
machine's measured matrix-multiply rate, and a program's time per kind of XLA operation."""
from __future__ import annotations

import collections
import gzip
import json
import math
import pathlib
import re
import resource
import sys
import tempfile
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.extend.core import jaxprs_in_params

__all__ = ["dot_flops", "matmul_peak_gflops", "maxrss_bytes", "op_profile", "peak_mb", "peak_rss_bytes", "time_alternating",
           "time_call", "time_python"]


def _seconds(call: Callable[[], Any]) -> float:
    """Wall seconds of one call of ``call``, waited for with ``block_until_ready``."""
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - t0


def _summary(times: list[float]) -> dict[str, float]:
    return {"mean_s": sum(times) / len(times), "min_s": min(times), "calls": len(times)}


def _repeat(call: Callable[[], Any], repeats: int, min_total_s: float = 0.0) -> dict[str, float]:
    """Seconds of ``repeats`` calls of ``call`` (each waited for with ``block_until_ready``), and of
    more calls while the calls so far have taken less than ``min_total_s`` in all: a program of
    milliseconds (on an accelerator) is timed over many calls, one of seconds (on a CPU) once.
    ``{"mean_s", "min_s", "calls"}``."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times: list[float] = []
    while len(times) < repeats or sum(times) < min_total_s:
        times.append(_seconds(call))
    return _summary(times)


def time_call(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> dict[str, float]:
    """Time a jittable ``fn(*args)``: ``{"compile_s", "mean_s", "min_s", "calls"}``.

    ``compile_s`` is ``jax.jit(fn).lower(*args).compile()``; then one untimed
    warm-up call, then ``repeats`` timed calls of the compiled program.
    """
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))
    return {"compile_s": compile_s, **_repeat(lambda: compiled(*args), repeats)}


def time_python(fn: Callable[..., Any], *args: Any, repeats: int = 5, min_total_s: float = 0.0) -> dict[str, float]:
    """Time a plain Python callable (e.g. a loop baseline): ``{"mean_s", "min_s", "calls"}`` of at
    least ``repeats`` calls lasting at least ``min_total_s`` together (see :func:`_repeat`), no warm-up."""
    return _repeat(lambda: fn(*args), repeats, min_total_s)


def time_alternating(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, dict[str, float]]:
    """Time several warmed-up callables against each other: ``rounds`` rounds, each calling every
    one of ``calls`` once in turn (each waited for with ``block_until_ready``), so a drift in the
    machine's speed (another process, the CPU's clock) reaches all of them alike; the order of
    the calls alternates between rounds. ``{name: {"mean_s", "min_s", "calls"}}``."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(rounds):
        for name in (list(calls) if r % 2 == 0 else list(calls)[::-1]):
            times[name].append(_seconds(calls[name]))
    return {name: _summary(t) for name, t in times.items()}


def peak_mb(compiled) -> float:
    """XLA's estimate of a compiled program's peak memory, in MiB: argument + output + temp -
    alias bytes of ``compiled.memory_analysis()`` (the buffers live at once when the program's
    largest temporary allocation is; aliased outputs reuse argument buffers). The field
    ``peak_memory_in_bytes`` is not used: on the CPU backend it leaves the temp buffers out."""
    m = compiled.memory_analysis()
    return (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
            - m.alias_size_in_bytes) / 2**20


def _dot_general_flops(eqn) -> int:
    """2 x (batch) x (lhs free) x (rhs free) x (contracted) multiply-adds of one ``dot_general``."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval.shape for v in eqn.invars)
    free = lambda shape, used: math.prod(n for d, n in enumerate(shape) if d not in used)  # noqa: E731
    return (2 * math.prod(lhs[d] for d in (*lhs_batch, *lhs_contract))
            * free(lhs, (*lhs_contract, *lhs_batch)) * free(rhs, (*rhs_contract, *rhs_batch)))


def _jaxpr_flops(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            total += _dot_general_flops(eqn)
        elif name == "scan":
            total += eqn.params["length"] * _jaxpr_flops(eqn.params["jaxpr"].jaxpr)
        elif name == "while":
            raise ValueError("dot_flops cannot count a while loop (unknown trip count); use lax.scan")
        elif name == "cond":
            total += max(_jaxpr_flops(b.jaxpr) for b in eqn.params["branches"])
        else:
            for sub in jaxprs_in_params(eqn.params):
                total += _jaxpr_flops(sub)
    return total


def dot_flops(fn: Callable[..., Any], *args: Any) -> int:
    """Floating-point operations of the matrix multiplies (every ``dot_general``, 2 per
    multiply-add) of ``fn(*args)``, counted on its jaxpr: each ``lax.scan`` body times its
    length, the costlier branch of a ``cond``, nested calls (jit, custom_vjp, remat) once per
    call. XLA's own ``cost_analysis`` counts a loop body once whatever its trip count, so it
    cannot count a scanned model. Elementwise work (softmax, norms, activations) is not
    counted: in the benchmarked models it is a small share, and it runs far below the
    matrix-multiply rate that :func:`matmul_peak_gflops` measures."""
    return _jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def matmul_peak_gflops(n: int = 1024, repeats: int = 10) -> float:
    """This machine's float32 matrix-multiply rate, GFLOP/s: 2 n^3 over the best of ``repeats``
    timed ``n x n`` products (compiled, one warm-up), every core XLA uses."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    best = time_call(lambda x, y: x @ y, a, a + 1.0, repeats=repeats)["min_s"]
    return 2 * n**3 / best / 1e9


def maxrss_bytes(ru_maxrss: int) -> int:
    """``getrusage``'s ``ru_maxrss`` in bytes: Linux counts KiB, macOS bytes."""
    return int(ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024)


def peak_rss_bytes() -> int:
    """This process's peak resident memory so far, in bytes (``getrusage``): the measure of a process
    that a PyTorch script's memory is usually reported in, and which also holds what compiling took,
    unlike :func:`peak_mb`."""
    return maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


_HLO_NAME = re.compile(r"^([a-z][a-z0-9_\-]*?)(\.\d+)?$")


def op_profile(call: Callable[[], Any], calls: int = 3, top: int = 12) -> dict[str, float]:
    """Milliseconds per call of ``call`` (a warmed-up compiled program) spent in each kind of XLA
    operation, from a ``jax.profiler`` trace of ``calls`` calls: the events named like HLO instructions
    (``copy.12``, ``transpose.3``, ``dot.7``, ``ynn_fusion.40``), grouped by the name without its number.
    The ``top`` largest kinds, then ``"other"`` (the rest); on a CPU the operations of one program may
    run on several threads at once, so the sum can exceed the wall time."""
    with tempfile.TemporaryDirectory(prefix="op-profile-") as folder:
        jax.block_until_ready(call())
        jax.profiler.start_trace(folder)
        try:
            for _ in range(calls):
                jax.block_until_ready(call())
        finally:
            jax.profiler.stop_trace()
        traces = sorted(pathlib.Path(folder).rglob("*.trace.json.gz"))
        if not traces:
            raise RuntimeError("jax.profiler wrote no trace")
        events = json.loads(gzip.decompress(traces[-1].read_bytes()))["traceEvents"]
    per_kind: collections.Counter = collections.Counter()
    for e in events:
        match = _HLO_NAME.match(e.get("name", "")) if e.get("ph") == "X" else None
        if match:
            per_kind[match.group(1)] += e["dur"] / 1e3 / calls  # the trace counts microseconds
    ranked = per_kind.most_common()
    out = dict(ranked[:top])
    if len(ranked) > top:
        out["other"] = sum(ms for _, ms in ranked[top:])
    return out

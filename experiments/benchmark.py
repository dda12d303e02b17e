"""Timing helpers for ``bench`` functions: compile time apart from run time."""
from __future__ import annotations

import time
from typing import Any, Callable

import jax

__all__ = ["time_call", "time_python"]


def _repeat(call: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Seconds of ``repeats`` calls of ``call`` (each waited for with ``block_until_ready``)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    return {"mean_s": sum(times) / repeats, "min_s": min(times)}


def time_call(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> dict[str, float]:
    """Time a jittable ``fn(*args)``: ``{"compile_s", "mean_s", "min_s"}``.

    ``compile_s`` is ``jax.jit(fn).lower(*args).compile()``; then one untimed
    warm-up call, then ``repeats`` timed calls of the compiled program.
    """
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))
    return {"compile_s": compile_s, **_repeat(lambda: compiled(*args), repeats)}


def time_python(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> dict[str, float]:
    """Time a plain Python callable (e.g. a loop baseline): ``{"mean_s", "min_s"}``, no warm-up."""
    return _repeat(lambda: fn(*args), repeats)

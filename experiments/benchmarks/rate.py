"""Benchmarks of the RATE studies: the authors' T-Maze model, forward/backward, evaluation, seeds vmapped vs looped."""
from __future__ import annotations

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp

import rate_jax
from experiments import benchmark
from experiments.registry import bench
from experiments.studies.rate import tmaze as _tmaze  # noqa: F401 - registers rate.tmaze before its bench

# The benchmark configuration: the authors' T-Maze model with a 32-wide feed-forward
# block, m = 15, K = 50, N = 3, a batch of 64 trajectories of 150 steps.
BENCH_MODEL = rate_jax.ModelConfig(segment_len=50, n_layer=10, d_model=64, n_head=4, d_head=32, d_inner=32,
                                   num_mem_tokens=15, mem_len=0, n_head_ca=2)
BENCH_SEEDS = 2


def _log(msg: str) -> None:
    print(f"[rate.tmaze bench] {msg}", file=sys.stderr, flush=True)


@bench("rate.tmaze")
def tmaze(out_dir) -> dict:
    """Forward(+backward) per batch, peak memory, parameters, evaluation step time, seeds vmapped vs looped.

    One timed call each after compilation and a warm-up (the programs take seconds on a CPU).
    Evaluation runs one segment (50 steps) of 100 episodes with incremental decoding
    (``RATE.decode``: fixed-size key/value buffers, so later segments cost the same per step),
    including the per-segment memory write.
    """
    seeds = BENCH_SEEDS
    tcfg = rate_jax.TrainConfig(model=BENCH_MODEL, num_segments=3, corridor_lengths=(148,), num_train=64,
                                num_val=8, batch_size=64, num_steps=1)
    state = jax.jit(functools.partial(rate_jax.init_state, tcfg))(jax.random.PRNGKey(0))
    model = rate_jax.RATE(BENCH_MODEL)
    segs = rate_jax.to_segments(state.train_data, BENCH_MODEL.segment_len)
    masks = rate_jax.split_segments(state.train_data.action_mask, BENCH_MODEL.segment_len)

    def loss(params):
        return rate_jax.bptt_loss(model, params, segs, masks)

    grad_fn = jax.value_and_grad(loss)
    fwd_bwd = benchmark.time_call(grad_fn, state.params, repeats=1)
    _log(f"forward+backward {fwd_bwd}")
    fwd = benchmark.time_call(loss, state.params, repeats=1)
    _log(f"forward {fwd}")
    memory = jax.jit(grad_fn).lower(state.params).compile().memory_analysis()
    peak = None if memory is None else int(memory.temp_size_in_bytes + memory.argument_size_in_bytes
                                           + memory.output_size_in_bytes)
    num_params = int(sum(x.size for x in jax.tree.leaves(state.params)))

    steps = BENCH_MODEL.segment_len
    evaluate = rate_jax.make_evaluate(BENCH_MODEL, steps)
    ev = benchmark.time_call(evaluate, state.params, jax.random.PRNGKey(1), jnp.full((100,), 148, jnp.int32),
                             repeats=1)
    _log(f"evaluate {steps} steps x 100 episodes {ev}")

    keys = jax.random.split(jax.random.PRNGKey(2), seeds)
    states = jax.jit(jax.vmap(functools.partial(rate_jax.init_state, tcfg)))(keys)
    update = rate_jax.make_update(tcfg, 1)
    vmapped = benchmark.time_call(jax.vmap(update), states, repeats=1)
    one = jax.jit(update)
    singles = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(seeds)]
    jax.block_until_ready(one(singles[0]))
    looped = benchmark.time_python(lambda: [one(s) for s in singles], repeats=1)
    _log(f"train step, {seeds} seeds: vmapped {vmapped}, looped {looped}")
    return {
        "config": dataclasses.asdict(BENCH_MODEL) | {"batch": 64, "trajectory_steps": 150, "seeds": seeds},
        "forward_backward_ms_per_batch": 1e3 * fwd_bwd["min_s"],
        "forward_ms_per_batch": 1e3 * fwd["min_s"],
        "compile_s": {"forward_backward": fwd_bwd["compile_s"], "forward": fwd["compile_s"],
                      "evaluate": ev["compile_s"], "train_step_vmapped": vmapped["compile_s"]},
        "peak_memory_bytes_forward_backward": peak,
        "parameters": num_params,
        "eval_seconds_per_env_step_100_episodes": ev["min_s"] / steps,
        "eval_env_steps_per_s_100_episodes": 100 * steps / ev["min_s"],
        "train_step_seeds_vmapped_s": vmapped["min_s"],
        "train_step_seeds_looped_s": looped["min_s"],
        "seeds_looped_over_vmapped": looped["min_s"] / vmapped["min_s"],
        "authors_pytorch_2core_cpu": {"forward_backward_s": 23.0, "memory_gb": 5.9,
                                      "eval_seconds_per_env_step_100_episodes": 1.4},
    }

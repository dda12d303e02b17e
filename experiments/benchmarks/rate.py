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
AUTHORS = {"forward_backward_s": 8.3, "forward_backward_median_s": 8.7, "memory_gb": 4.1,
           "eval_seconds_per_env_step_100_episodes": 0.74}
"""The authors' PyTorch code (CognitiveAISystems/RATE) at this configuration, PyTorch 2.13 on 2 CPU
threads of this machine type, idle, measured alternating with ours (issue 16): forward+backward min
and median, resident memory, evaluation of 100 episodes per environment step."""
GOALS = {"forward_backward_s": 4.2, "eval_seconds_per_env_step_100_episodes": 0.025, "peak_fraction": 0.75}
"""Issue 16's speed goals on 2 idle cores: forward+backward <= 4.2 s (>= 75% of the machine's
matrix-multiply rate), evaluation <= 25 ms per environment step, peak memory below the authors'."""


def _log(msg: str) -> None:
    print(f"[rate.tmaze bench] {msg}", file=sys.stderr, flush=True)


@bench("rate.tmaze")
def tmaze(out_dir) -> dict:
    """Forward(+backward) per batch, peak memory, parameters, evaluation step time, seeds vmapped vs looped.

    One timed call each after compilation and a warm-up (the programs take seconds on a CPU).
    Evaluation runs one segment (50 steps) of 100 episodes with incremental decoding
    (``RATE.decode``: fixed-size key/value buffers, so later segments cost the same per step),
    including the per-segment memory write. FLOPs: the matrix multiplies of the forward+backward
    program (:func:`experiments.benchmark.dot_flops`, every scan times its length), against the
    float32 matrix-multiply rate measured on this machine (:func:`experiments.benchmark.matmul_peak_gflops`).
    Peak memory: XLA's estimate for the compiled program (:func:`experiments.benchmark.peak_mb`).
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
    peak = benchmark.peak_mb(jax.jit(grad_fn).lower(state.params).compile()) * 2**20
    flops = benchmark.dot_flops(grad_fn, state.params)
    machine = benchmark.matmul_peak_gflops()
    achieved = flops / fwd_bwd["min_s"] / 1e9
    _log(f"forward+backward {flops / 1e9:.1f} GFLOP of matrix multiplies: {achieved:.1f} GFLOP/s, "
         f"{achieved / machine:.0%} of the measured {machine:.1f} GFLOP/s; peak {peak / 2**30:.2f} GiB")
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
        "forward_backward_dot_gflop": flops / 1e9,
        "forward_backward_gflops_per_s": achieved,
        "machine_matmul_gflops_per_s": machine,
        "fraction_of_matmul_peak": achieved / machine,
        "parameters": num_params,
        "eval_seconds_per_env_step_100_episodes": ev["min_s"] / steps,
        "eval_env_steps_per_s_100_episodes": 100 * steps / ev["min_s"],
        "train_step_seeds_vmapped_s": vmapped["min_s"],
        "train_step_seeds_looped_s": looped["min_s"],
        "seeds_looped_over_vmapped": looped["min_s"] / vmapped["min_s"],
        "authors_pytorch_2core_cpu": AUTHORS,
        "speedup_over_authors": {"forward_backward": AUTHORS["forward_backward_s"] / fwd_bwd["min_s"],
                                 "evaluation": AUTHORS["eval_seconds_per_env_step_100_episodes"] / (ev["min_s"] / steps)},
        "goals": GOALS,
        "goals_met": {"forward_backward": fwd_bwd["min_s"] <= GOALS["forward_backward_s"],
                      "evaluation": ev["min_s"] / steps <= GOALS["eval_seconds_per_env_step_100_episodes"],
                      "peak_fraction": achieved / machine >= GOALS["peak_fraction"],
                      "memory_below_authors": peak < AUTHORS["memory_gb"] * 1e9},
    }

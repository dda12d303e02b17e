"""Benchmarks of the RATE studies: the authors' T-Maze model, forward/backward, evaluation, seeds vmapped vs looped."""
from __future__ import annotations

import dataclasses
import functools
import sys
import time

import jax
import jax.numpy as jnp

import rate_jax
from experiments import benchmark
from experiments.registry import bench
from experiments.studies.rate import tmaze as tmaze_study  # also registers rate.tmaze before its bench

# The benchmark configuration: the authors' T-Maze model with a 32-wide feed-forward
# block, m = 15, K = 50, N = 3, a batch of 64 trajectories of 150 steps.
BENCH_MODEL = rate_jax.ModelConfig(segment_len=50, n_layer=10, d_model=64, n_head=4, d_head=32, d_inner=32,
                                   num_mem_tokens=15, mem_len=0, n_head_ca=2)
AUTHORS_MODEL = dataclasses.replace(BENCH_MODEL, d_inner=0, dropout=0.2)
"""The authors' own T-Maze configuration: no feed-forward block, dropout 0.2 (the bench's model keeps a
32-wide feed-forward block and no dropout)."""
BENCH_SEEDS = 2
AUTHORS = {"forward_backward_s": 8.3, "forward_backward_median_s": 8.7, "memory_gb": 4.1,
           "eval_seconds_per_env_step_100_episodes": 0.74}
"""The authors' PyTorch code (CognitiveAISystems/RATE) at this configuration, PyTorch 2.13 on 2 CPU
threads of this machine type, idle, measured alternating with ours (issue 16): forward+backward min
and median, resident memory, evaluation of 100 episodes per environment step."""
GOALS = {"forward_backward_s": 4.2, "eval_seconds_per_env_step_100_episodes": 0.025, "peak_fraction": 0.75}
"""Issue 16's speed goals on 2 idle cores: forward+backward <= 4.2 s (>= 75% of the machine's
matrix-multiply rate), evaluation <= 25 ms per environment step, peak memory below the authors'."""


REPEATS = 3
QUICK_STEPS = 100
QUICK_ROUNDS = 5
"""Seeds vmapped against looped at the quick size (issue 16): ``rate.tmaze --quick``'s RATE and
seeds, ``QUICK_STEPS`` training steps per call, the best of ``QUICK_ROUNDS`` alternating rounds."""


def _seeds_vmapped_vs_looped(tcfg: rate_jax.TrainConfig, seeds: int, steps: int, rounds: int) -> dict:
    """``steps`` training steps of ``seeds`` seeds as one vmapped program against a Python loop over the
    seeds of the one-seed program, both compiled and warmed up first, then timed in alternating rounds
    (:func:`experiments.benchmark.time_alternating`, best call each): ``{"compile_s"`` (the vmapped
    program), ``"vmapped_s", "looped_s", "looped_over_vmapped"}`` (above 1: vmapping is faster)."""
    states = jax.jit(jax.vmap(functools.partial(rate_jax.init_state, tcfg)))(
        jax.random.split(jax.random.PRNGKey(2), seeds))
    update = rate_jax.make_update(tcfg, steps)
    t0 = time.perf_counter()
    vmapped = jax.jit(jax.vmap(update)).lower(states).compile()
    compile_s = time.perf_counter() - t0
    one = jax.jit(update)
    singles = [jax.tree.map(lambda x, i=i: x[i], states) for i in range(seeds)]
    jax.block_until_ready((vmapped(states), one(singles[0])))
    timed = benchmark.time_alternating({"vmapped": lambda: vmapped(states),
                                        "looped": lambda: [one(s) for s in singles]}, rounds)
    v, looped = timed["vmapped"]["min_s"], timed["looped"]["min_s"]
    return {"compile_s": compile_s, "vmapped_s": v, "looped_s": looped, "looped_over_vmapped": looped / v}


def _authors_configuration(tcfg: rate_jax.TrainConfig, segs, masks) -> dict:
    """Forward+backward and forward per batch (best of ``REPEATS``, ms) at ``AUTHORS_MODEL`` on the bench
    model's batch ``segs``, ``masks``, dropout drawn from one key passed as an argument (so it is traced)."""
    cfg = dataclasses.replace(tcfg, model=AUTHORS_MODEL)
    params = jax.jit(functools.partial(rate_jax.init_state, cfg))(jax.random.PRNGKey(0)).params
    model = rate_jax.RATE(AUTHORS_MODEL)

    def loss(params, key):
        return rate_jax.bptt_loss(model, params, segs, masks, key=key)

    key = jax.random.PRNGKey(3)
    fwd_bwd = benchmark.time_call(jax.value_and_grad(loss), params, key, repeats=REPEATS)
    fwd = benchmark.time_call(loss, params, key, repeats=REPEATS)
    return {"forward_backward_ms_per_batch": 1e3 * fwd_bwd["min_s"], "forward_ms_per_batch": 1e3 * fwd["min_s"],
            "compile_s": fwd_bwd["compile_s"]}


def _quick_train_config() -> rate_jax.TrainConfig:
    """``rate.tmaze --quick``'s RATE training config, ``QUICK_STEPS`` steps per timed call."""
    return dataclasses.replace(tmaze_study.QUICK.train_config("RATE"), num_steps=QUICK_STEPS)


def _log(msg: str) -> None:
    print(f"[rate.tmaze bench] {msg}", file=sys.stderr, flush=True)


@bench("rate.tmaze")
def tmaze(out_dir) -> dict:
    """Forward(+backward) per batch, peak memory, parameters, evaluation step time, seeds vmapped vs looped.

    ``REPEATS`` timed calls each after compilation and a warm-up, the best reported (the programs
    take seconds on a CPU, and one call's time varied by about 20% over a day); seeds vmapped
    against looped in alternating rounds, at the authors' configuration (one training step, 2
    rounds) and at the quick size (``QUICK_STEPS``, ``QUICK_ROUNDS``).
    Evaluation runs one segment (50 steps) of 100 episodes with incremental decoding
    (``RATE.decode``: fixed-size key/value buffers, so later segments cost the same per step),
    including the per-segment memory write. FLOPs: the matrix multiplies of the forward+backward
    program (:func:`experiments.benchmark.dot_flops`, every scan times its length), against the
    float32 matrix-multiply rate measured on this machine (:func:`experiments.benchmark.matmul_peak_gflops`).
    Peak memory: XLA's estimate for the compiled program (:func:`experiments.benchmark.peak_mb`) and the
    process's resident peak after the forward+backward timings (:func:`experiments.benchmark.peak_rss_bytes`,
    the measure of the authors' figure; it includes what compiling took). ``profile_ms``: the
    forward+backward's time per kind of XLA operation (:func:`experiments.benchmark.op_profile`).
    ``ours_at_authors_configuration``: forward+backward and forward at ``AUTHORS_MODEL`` (dropout on; a key
    not starting with "authors", which would mark reference numbers for ``experiments.perf_log``).
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
    fwd_bwd = benchmark.time_call(grad_fn, state.params, repeats=REPEATS)
    _log(f"forward+backward {fwd_bwd}")
    fwd = benchmark.time_call(loss, state.params, repeats=REPEATS)
    _log(f"forward {fwd}")
    rss = benchmark.peak_rss_bytes()
    compiled = jax.jit(grad_fn).lower(state.params).compile()
    peak = benchmark.peak_mb(compiled) * 2**20
    profile = benchmark.op_profile(lambda: compiled(state.params), calls=1)
    _log(f"forward+backward per kind of operation, ms: {profile}")
    flops = benchmark.dot_flops(grad_fn, state.params)
    machine = benchmark.matmul_peak_gflops()
    achieved = flops / fwd_bwd["min_s"] / 1e9
    _log(f"forward+backward {flops / 1e9:.1f} GFLOP of matrix multiplies: {achieved:.1f} GFLOP/s, "
         f"{achieved / machine:.0%} of the measured {machine:.1f} GFLOP/s; peak {peak / 2**30:.2f} GiB")
    num_params = int(sum(x.size for x in jax.tree.leaves(state.params)))
    authors = _authors_configuration(tcfg, segs, masks)
    _log(f"the authors' configuration (no feed-forward block, dropout 0.2): {authors}")

    steps = BENCH_MODEL.segment_len
    evaluate = rate_jax.make_evaluate(BENCH_MODEL, steps)
    ev = benchmark.time_call(evaluate, state.params, jax.random.PRNGKey(1), jnp.full((100,), 148, jnp.int32),
                             repeats=REPEATS)
    _log(f"evaluate {steps} steps x 100 episodes {ev}")

    authors_seeds = _seeds_vmapped_vs_looped(tcfg, seeds, steps=1, rounds=2)
    _log(f"train step of the authors' configuration, {seeds} seeds: {authors_seeds}")
    quick_seeds = _seeds_vmapped_vs_looped(_quick_train_config(), tmaze_study.QUICK.seeds, steps=QUICK_STEPS,
                                           rounds=QUICK_ROUNDS)
    _log(f"{QUICK_STEPS} train steps of rate.tmaze --quick's RATE, {tmaze_study.QUICK.seeds} seeds: {quick_seeds}")
    return {
        "config": dataclasses.asdict(BENCH_MODEL) | {"batch": 64, "trajectory_steps": 150, "seeds": seeds},
        "forward_backward_ms_per_batch": 1e3 * fwd_bwd["min_s"],
        "forward_ms_per_batch": 1e3 * fwd["min_s"],
        "compile_s": {"forward_backward": fwd_bwd["compile_s"], "forward": fwd["compile_s"],
                      "evaluate": ev["compile_s"], "train_step_vmapped": authors_seeds["compile_s"]},
        "peak_memory_bytes_forward_backward": peak,
        "peak_rss_bytes_after_forward_backward": rss,
        "profile_ms": profile,
        "ours_at_authors_configuration": authors,
        "forward_backward_dot_gflop": flops / 1e9,
        "forward_backward_gflops_per_s": achieved,
        "machine_matmul_gflops_per_s": machine,
        "fraction_of_matmul_peak": achieved / machine,
        "parameters": num_params,
        "eval_seconds_per_env_step_100_episodes": ev["min_s"] / steps,
        "eval_env_steps_per_s_100_episodes": 100 * steps / ev["min_s"],
        "train_step_seeds_vmapped_s": authors_seeds["vmapped_s"],
        "train_step_seeds_looped_s": authors_seeds["looped_s"],
        "seeds_looped_over_vmapped": authors_seeds["looped_over_vmapped"],
        "quick_seeds": {"seeds": tmaze_study.QUICK.seeds, "train_steps": QUICK_STEPS, "rounds": QUICK_ROUNDS,
                        **quick_seeds},
        "authors_pytorch_2core_cpu": AUTHORS,
        "speedup_over_authors": {"forward_backward": AUTHORS["forward_backward_s"] / fwd_bwd["min_s"],
                                 "evaluation": AUTHORS["eval_seconds_per_env_step_100_episodes"] / (ev["min_s"] / steps)},
        "goals": GOALS,
        "goals_met": {"forward_backward": fwd_bwd["min_s"] <= GOALS["forward_backward_s"],
                      "evaluation": ev["min_s"] / steps <= GOALS["eval_seconds_per_env_step_100_episodes"],
                      "peak_fraction": achieved / machine >= GOALS["peak_fraction"],
                      "memory_below_authors": peak < AUTHORS["memory_gb"] * 1e9,
                      "seeds_vmapped_not_slower_quick": quick_seeds["looped_over_vmapped"] >= 1.0},
    }

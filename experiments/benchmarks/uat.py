"""Benchmarks of the UAT studies: training and inference cost, and seeds vmapped against a loop."""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from experiments import benchmark
from experiments.registry import bench
from experiments.studies.uat import darkroom as darkroom_study
from uat_jax.model import DecisionTransformer, init_cache, init_params
from uat_jax.train import Task, make_train


def _inference_step_s(model_cfg, batch: int) -> float:
    """Seconds of one causal decode step of ``batch`` episodes with the KV cache (best of 5)."""
    net = DecisionTransformer(model_cfg)
    params = init_params(net, jax.random.key(0))
    step = jax.vmap(lambda o, c: net.apply(params, o, jnp.zeros(1, jnp.int32), jnp.zeros(1), c))
    caches = jax.vmap(lambda _: init_cache(model_cfg))(jnp.arange(batch))
    return benchmark.time_call(step, jnp.zeros((batch, 1, model_cfg.obs_dim)), caches, repeats=5)["min_s"]


@bench("uat.darkroom")
def darkroom(out_dir) -> dict:
    """Training ms per epoch and inference ms per step, UAT vs VT (one seed), and seeds
    vmapped in one program vs a Python loop over seeds, at the full (Table 3) size, the
    size of the paper's Table 6 timings (32.4 / 17.1 ms per epoch, 3.1 / 2.1 ms per step,
    one GPU).

    ms per epoch = (time of 11 epochs - time of 1 epoch) / 10, so the final evaluation and
    set-up cancel; inference = one causal step of a batch of B episodes with the KV cache."""
    size = darkroom_study.FULL.size
    task = Task.make("gradual")
    result: dict = {"size": dataclasses.asdict(size)}
    for model in ("uat", "vt"):
        cfg = size.train_config(model)
        t1 = benchmark.time_call(make_train(dataclasses.replace(cfg, epochs=1)), jax.random.key(0), task, repeats=2)
        t11 = benchmark.time_call(make_train(dataclasses.replace(cfg, epochs=11)), jax.random.key(0), task, repeats=2)
        result[f"train_ms_per_epoch_{model}"] = 1000 * (t11["min_s"] - t1["min_s"]) / 10
        result[f"infer_ms_per_step_{model}"] = 1000 * _inference_step_s(cfg.model, size.batch_size)
        result[f"compile_s_{model}"] = t11["compile_s"]
    paper = darkroom_study.PAPER_TIMING
    result["train_ratio_uat_over_vt"] = result["train_ms_per_epoch_uat"] / result["train_ms_per_epoch_vt"]
    result["infer_ratio_uat_over_vt"] = result["infer_ms_per_step_uat"] / result["infer_ms_per_step_vt"]
    result["paper_train_ratio"] = paper["train_ms_per_epoch_uat"] / paper["train_ms_per_epoch_vt"]
    result["paper_infer_ratio"] = paper["infer_ms_per_step_uat"] / paper["infer_ms_per_step_vt"]
    seeds = 3
    train = make_train(dataclasses.replace(size.train_config("uat"), epochs=5))
    keys = jax.random.split(jax.random.key(0), seeds)
    vm = benchmark.time_call(jax.vmap(train, in_axes=(0, None)), keys, task, repeats=1)
    single = jax.jit(train)
    jax.block_until_ready(single(keys[0], task))
    t0 = time.perf_counter()
    jax.block_until_ready([single(k, task) for k in keys])
    loop_s = time.perf_counter() - t0
    result.update(vmapped_seeds_s=vm["min_s"], loop_seeds_s=loop_s, vmap_speedup=loop_s / vm["min_s"])
    return result

"""Study ``uat.darkroom``: Table 1, Domain A of the UAT paper (arXiv 2607.18910).

UAT and the baselines Vanilla-TF, A-DT, DT-style and GTrXL are trained by
rollout-then-optimize on DarkRoom under the three goal schedules and evaluated by
greedy causal inference: per-step accuracy against the oracle action and navigation
efficiency, seed mean and std. Each model is one program over schedules x seeds.
``--quick`` trains UAT, VT and A-DT only (the
models the checks compare); DT-style and GTrXL run at full size.
Checks: UAT beats VT by a wide margin (> 0.2) on every schedule; UAT is at least on
par with A-DT (mean accuracy gap >= -0.03).
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import uat_jax as uat  # noqa: E402
from experiments import benchmark, io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, bench, study  # noqa: E402
from experiments.studies.uat_common import FULL, mean_std, run_cells, size_for  # noqa: E402

MODELS = ("uat", "vt", "adt", "dt", "gtrxl")
QUICK_MODELS = ("uat", "vt", "adt")  # the models the checks compare; DT-style and GTrXL at full size
PAPER_ACC = {"uat": (0.873, 0.827, 0.842), "vt": (0.362, 0.356, 0.340),
             "gtrxl": (0.328, 0.336, 0.366), "dt": (0.658, 0.738, 0.791),
             "adt": (0.866, 0.826, 0.838)}
WIDE_MARGIN = 0.2
ON_PAR = -0.03


@study("uat.darkroom", "UAT vs VT / A-DT / DT-style / GTrXL on DarkRoom, three goal schedules (Table 1 A)")
def run(ctx: RunContext) -> StudyOutput:
    size = size_for(ctx)
    tasks = [uat.Task.make(s) for s in uat.SCHEDULES]
    metrics, rows, compile_s = {}, {"model": [], "schedule": [], "seed": [], "accuracy": [], "efficiency": []}, 0.0
    models = QUICK_MODELS if ctx.quick else MODELS
    for model in models:
        out, c_s = run_cells(ctx, f"darkroom_{model}", size.train_config(model), tasks, size.seeds)
        compile_s += c_s
        for i, sched in enumerate(uat.SCHEDULES):
            metrics.update(mean_std(f"acc_{model}_{sched}", out["accuracy"][i]))
            metrics.update(mean_std(f"eff_{model}_{sched}", out["efficiency"][i]))
            for s in range(size.seeds):
                for key, val in (("model", model), ("schedule", sched), ("seed", s),
                                 ("accuracy", float(out["accuracy"][i, s])),
                                 ("efficiency", float(out["efficiency"][i, s]))):
                    rows[key].append(val)
    io.write_csv(ctx.out_dir / "darkroom.csv", rows)
    _figure(metrics, models, ctx.out_dir / "darkroom.png")
    checks = [Check(f"uat_beats_vt_{s}", metrics[f"acc_uat_{s}"] - metrics[f"acc_vt_{s}"],
                    f"> {WIDE_MARGIN}", metrics[f"acc_uat_{s}"] - metrics[f"acc_vt_{s}"] > WIDE_MARGIN)
              for s in uat.SCHEDULES]
    gap = float(np.mean([metrics[f"acc_uat_{s}"] - metrics[f"acc_adt_{s}"] for s in uat.SCHEDULES]))
    checks.append(Check("uat_on_par_with_adt", gap, f">= {ON_PAR}", gap >= ON_PAR))
    paper = {f"acc_{m}_{s}": v for m, accs in PAPER_ACC.items() for s, v in zip(uat.SCHEDULES, accs)}
    config = {"size": size.__dict__, "models": models, "schedules": uat.SCHEDULES,
              "train": repr(size.train_config())}
    return StudyOutput(config=config, metrics=metrics, checks=checks, paper=paper, compile_s=compile_s)


def _figure(metrics: dict, models, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(models)
    for j, model in enumerate(models):
        xs = np.arange(3) + (j - (len(models) - 1) / 2) * width
        ax.bar(xs, [metrics[f"acc_{model}_{s}"] for s in uat.SCHEDULES], width,
               yerr=[metrics[f"acc_{model}_{s}_std"] for s in uat.SCHEDULES], label=model)
    ax.set_xticks(np.arange(3), uat.SCHEDULES)
    ax.set_ylabel("per-step accuracy vs oracle")
    ax.set_ylim(0, 1)
    ax.legend(ncol=5, fontsize=7, loc="upper center")
    io.save_figure(fig, path)
    plt.close(fig)


@bench("uat.darkroom")
def run_bench(ctx: RunContext) -> dict:
    """Training ms per epoch and inference ms per step, UAT vs VT (one seed), and
    seeds vmapped in one program vs a Python loop over seeds, at the Table 3 size (FULL),
    the size of the paper's timings (32.4 / 17.1 ms per epoch, 3.1 / 2.1 ms per step, GPU).

    ms per epoch = (time of 11 epochs - time of 1 epoch) / 10, so the final evaluation and
    set-up cancel; inference = one causal step of a batch of B episodes with the KV cache."""
    size = FULL
    task = uat.Task.make("gradual")
    result: dict = {"size": size.__dict__}
    for model in ("uat", "vt"):
        cfg = size.train_config(model)
        one_epoch = dataclasses.replace(cfg, epochs=1)
        eleven_epochs = dataclasses.replace(cfg, epochs=11)
        t1 = benchmark.time_call(uat.make_train(one_epoch), jax.random.key(0), task, repeats=2)
        t11 = benchmark.time_call(uat.make_train(eleven_epochs), jax.random.key(0), task, repeats=2)
        result[f"train_ms_per_epoch_{model}"] = 1000 * (t11["min_s"] - t1["min_s"]) / 10
        model_ = uat.DecisionTransformer(cfg.model)
        params = uat.init_params(model_, jax.random.key(0))
        T, B = cfg.model.horizon, size.batch_size
        step = jax.vmap(lambda o, c: model_.apply(params, o, jnp.zeros(1, jnp.int32), jnp.zeros(1), c))
        caches = jax.vmap(lambda _: uat.init_cache(cfg.model))(jnp.arange(B))
        t = benchmark.time_call(step, jnp.zeros((B, 1, cfg.model.obs_dim)), caches, repeats=5)
        result[f"infer_ms_per_step_{model}"] = 1000 * t["min_s"]
        result[f"compile_s_{model}"] = t11["compile_s"]
    result["train_ratio_uat_over_vt"] = result["train_ms_per_epoch_uat"] / result["train_ms_per_epoch_vt"]
    result["infer_ratio_uat_over_vt"] = result["infer_ms_per_step_uat"] / result["infer_ms_per_step_vt"]
    result["paper_train_ratio"] = 32.4 / 17.1
    result["paper_infer_ratio"] = 3.1 / 2.1
    seeds = 3
    cfg = dataclasses.replace(size.train_config("uat"), epochs=5)
    train = uat.make_train(cfg)
    keys = jax.random.split(jax.random.key(0), seeds)
    vm = benchmark.time_call(jax.vmap(train, in_axes=(0, None)), keys, task, repeats=1)
    single = jax.jit(train)
    jax.block_until_ready(single(keys[0], task))
    t0 = time.perf_counter()
    jax.block_until_ready([single(k, task) for k in keys])
    loop_s = time.perf_counter() - t0
    result.update(vmapped_seeds_s=vm["min_s"], loop_seeds_s=loop_s, vmap_speedup=loop_s / vm["min_s"])
    return result

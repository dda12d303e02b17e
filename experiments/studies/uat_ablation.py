"""Study ``uat.ablation``: Table 5, Domain A of the UAT paper (arXiv 2607.18910).

The six one-factor variants of Table 4 (no-action, no-reward, linear, no-Q, no-KV,
no-bias) beside full UAT, trained and evaluated like ``uat.darkroom``. ``--quick``
runs the gradual schedule only. Checks (paper: no-KV 0.506 / no-reward 0.395 vs UAT
0.873 on gradual; no-Q, no-bias, linear within 0.01): no-KV and no-reward fall far
(gap > 0.15) on every schedule run; no-Q, no-bias and linear stay near (|gap| <= 0.05).
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import uat_jax as uat  # noqa: E402
from experiments import io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, study  # noqa: E402
from experiments.studies.uat_common import mean_std, run_cells, size_for  # noqa: E402

VARIANTS = ("uat",) + uat.ABLATIONS
PAPER_ACC = {"no_action": (0.707, 0.605, 0.702), "no_reward": (0.395, 0.415, 0.459),
             "linear": (0.870, 0.826, 0.834), "no_q": (0.872, 0.827, 0.837),
             "no_kv": (0.506, 0.438, 0.505), "no_bias": (0.871, 0.826, 0.840),
             "uat": (0.873, 0.827, 0.842)}
FALL_FAR = 0.15
STAY_NEAR = 0.05


@study("uat.ablation", "Table 4/5 ablations of UAT on DarkRoom (no-action ... no-bias)")
def run(ctx: RunContext) -> StudyOutput:
    size = size_for(ctx)
    schedules = ("gradual",) if ctx.quick else uat.SCHEDULES
    tasks = [uat.Task.make(s) for s in schedules]
    metrics, compile_s = {}, 0.0
    for variant in VARIANTS:
        cfg = size.train_config("uat", None if variant == "uat" else variant)
        out, c_s = run_cells(ctx, f"ablation_{variant}", cfg, tasks, size.seeds)
        compile_s += c_s
        for i, sched in enumerate(schedules):
            metrics.update(mean_std(f"acc_{variant}_{sched}", out["accuracy"][i]))
    checks = []
    for sched in schedules:
        full = metrics[f"acc_uat_{sched}"]
        for variant in ("no_kv", "no_reward"):
            gap = full - metrics[f"acc_{variant}_{sched}"]
            checks.append(Check(f"{variant}_falls_far_{sched}", gap, f"> {FALL_FAR}", gap > FALL_FAR))
        for variant in ("no_q", "no_bias", "linear"):
            gap = abs(full - metrics[f"acc_{variant}_{sched}"])
            checks.append(Check(f"{variant}_stays_near_{sched}", gap, f"<= {STAY_NEAR}", gap <= STAY_NEAR))
    io.write_csv(ctx.out_dir / "ablation.csv",
                 {"variant": [v for v in VARIANTS for _ in schedules],
                  "schedule": [s for _ in VARIANTS for s in schedules],
                  "accuracy": [metrics[f"acc_{v}_{s}"] for v in VARIANTS for s in schedules],
                  "accuracy_std": [metrics[f"acc_{v}_{s}_std"] for v in VARIANTS for s in schedules]})
    _figure(metrics, VARIANTS, schedules, ctx.out_dir / "ablation.png")
    paper = {f"acc_{v}_{s}": accs[uat.SCHEDULES.index(s)] for v, accs in PAPER_ACC.items() for s in schedules}
    return StudyOutput(config={"size": size.__dict__, "schedules": schedules, "variants": VARIANTS},
                       metrics=metrics, checks=checks, paper=paper, compile_s=compile_s)


def _figure(metrics: dict, variants, schedules, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = np.arange(len(variants))
    for j, sched in enumerate(schedules):
        ax.bar(xs + j * 0.25, [metrics[f"acc_{v}_{sched}"] for v in variants], 0.25,
               yerr=[metrics[f"acc_{v}_{sched}_std"] for v in variants], label=sched)
    ax.set_xticks(xs, variants, fontsize=8)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    io.save_figure(fig, path)
    plt.close(fig)

"""Study ``uat.ablation``: Table 5, Domain A of "Breaking Feedback-Blindness:
Utility-Augmented Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910).

The six one-factor variants of Table 4 (no-action, no-reward, linear encoder, no-Q,
no-KV, no-bias; ``uat_jax.config.ablation``) beside full UAT, trained and evaluated
like ``uat.darkroom``, all as one vmapped program over variants x schedules x seeds
(the variant is a traced index into the union of the variants' parameters,
``uat_jax.model``; each variant computes what it computes alone), seed ``s`` of every
variant on the same key. ``--quick`` (the ``uat_jax.cells.CPU`` size,
2 seeds) runs the gradual schedule only; full runs all three at Table 3 size.

Checks, per schedule run, and how each could fail (paper, gradual: UAT 0.873, no-KV
0.506, no-reward 0.395; no-Q 0.872, no-bias 0.871, linear 0.870):

* ``no_kv_falls_far_<schedule>``, ``no_reward_falls_far_<schedule>`` (UAT minus the
  variant > 0.15): the KV pathway and the realised reward carry the feedback gain. It
  fails if the model recovers the goal through the Q pathway alone, or from actions
  without rewards (i.e. if the switch did not remove what it names, or the gain does
  not come from where the paper says).
* ``no_q_stays_near_<schedule>``, ``no_bias_stays_near_<schedule>``,
  ``linear_stays_near_<schedule>`` (|UAT minus the variant| <= 0.05): these components
  only refine. It fails if removing them costs (or gains) more than 0.05 accuracy.
* ``reward_matters_more_than_action_<schedule>`` (no-action minus no-reward > 0; paper
  0.707 - 0.395 on gradual, D.1: "removing reward is more harmful than removing
  action"): the realised reward reveals the goal, the own actions much less. It fails
  if the model gets more from its action history than from the rewards.

A check is made for each of these variants listed in ``variants`` (all of them in
both presets; the last check needs both no-action and no-reward).

At the quick size ``no_kv_falls_far_gradual`` depends on the seeds: on the screening
seeds no-KV reached 0.797 against UAT's 0.846 (gap 0.049, FAIL), on the judged seeds
0.628 against 0.884 (gap 0.256, PASS; 0.624 against 0.882, gap 0.258, since the variants
share one program, whose other batch shape rounds differently); see the QUICK comment.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import train_models
from uat_jax import cells
from uat_jax.config import ABLATIONS
from uat_jax.schedules import SCHEDULES
from uat_jax.train import Task

VARIANTS = ("uat",) + ABLATIONS
PAPER_ACC = {"no_action": (0.707, 0.605, 0.702), "no_reward": (0.395, 0.415, 0.459),
             "linear": (0.870, 0.826, 0.834), "no_q": (0.872, 0.827, 0.837),
             "no_kv": (0.506, 0.438, 0.505), "no_bias": (0.871, 0.826, 0.840),
             "uat": (0.873, 0.827, 0.842)}  # Table 5, Domain A: gradual, abrupt, cyclic
PAPER = {f"acc_{v}_{s}": accs[i] for v, accs in PAPER_ACC.items() for i, s in enumerate(SCHEDULES)}
FALL_FAR = 0.15
STAY_NEAR = 0.05
FAR_VARIANTS = ("no_kv", "no_reward")
NEAR_VARIANTS = ("no_q", "no_bias", "linear")
CLAIMS = {"no_kv": "removing the KV pathway costs UAT most of its feedback gain",
          "no_reward": "removing the reward from the utility encoder costs UAT most of its feedback gain"}


@dataclasses.dataclass(frozen=True)
class AblationConfig:
    """Which variants (``"uat"`` is full UAT), on which schedules, at which size and seeds."""

    size: cells.Size = cells.TABLE3
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    schedules: tuple[str, ...] = SCHEDULES
    variants: tuple[str, ...] = VARIANTS

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        seeds.check_stream(self.stream)
        if not self.schedules or not set(self.schedules) <= set(SCHEDULES) or len(set(self.schedules)) != len(self.schedules):
            raise ValueError(f"schedules must be distinct names from {SCHEDULES}, got {self.schedules}")
        if "uat" not in self.variants or not set(self.variants) <= set(VARIANTS) or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants must be distinct names from {VARIANTS} including 'uat', got {self.variants}")


FULL = AblationConfig()
# Quick size (cells.CPU, 200 epochs, gradual only) screened on the SCREENING stream
# (stream=1, 2 seeds): UAT 0.846, no-action 0.485, no-reward 0.351, linear 0.838,
# no-Q 0.835, no-KV 0.797, no-bias 0.854. Every check passes there except
# no_kv_falls_far_gradual (UAT - no-KV = 0.049 < 0.15: at this size the Q pathway alone
# recovers most of the gain). The size is kept (the suite's runtime leaves no room for a
# larger one); on the judged seeds (one run) all six checks passed, UAT - no-KV = 0.256
# (0.258 once the variants became one program: the same computation, rounded otherwise).
# Re-screened after commit 42a4f86 (new random streams): no-KV 0.710 against UAT
# 0.857 (gap 0.147, FAIL again; the other five pass); the judged run that followed: gap 0.257, all six pass.
QUICK = AblationConfig(size=cells.CPU, seeds=2, schedules=("gradual",))


def compute(cfg: AblationConfig, ctx: RunContext) -> dict:
    """``accuracy``: {variant: [schedules, seeds]}; ``curves``: {"variant/schedule": ...}."""
    runs = {v: [Task.make(s) for s in cfg.schedules] for v in cfg.variants}
    labels = {v: [f"schedule {x}" for x in cfg.schedules] for v in cfg.variants}
    grids = train_models(ctx, "ablation", cfg.size, runs, labels, cfg.seeds, cfg.stream)
    out: dict = {"accuracy": {}, "curves": {}}
    for variant, grid in grids.items():
        out["accuracy"][variant] = grid["accuracy"]
        for i, sched in enumerate(cfg.schedules):
            out["curves"][f"{variant}/{sched}"] = {"loss": grid["loss"][i], "train_accuracy": grid["train_accuracy"][i]}
    return out


def summarize(cfg: AblationConfig, arrays: dict) -> Summary:
    """Seed mean/std accuracy per variant and schedule; the Table 5 checks."""
    metrics: dict[str, float] = {}
    for variant in cfg.variants:
        for i, sched in enumerate(cfg.schedules):
            metrics.update(cells.mean_std(f"acc_{variant}_{sched}", arrays["accuracy"][variant][i]))
    found = []
    for s in cfg.schedules:  # the headline claims are those of the first schedule (Table 5's gradual column)
        full, paper_full = metrics[f"acc_uat_{s}"], PAPER[f"acc_uat_{s}"]
        for v in (v for v in FAR_VARIANTS if v in cfg.variants):
            found.append(checks.above(f"{v}_falls_far_{s}", full - metrics[f"acc_{v}_{s}"], FALL_FAR,
                                      paper=paper_full - PAPER[f"acc_{v}_{s}"],
                                      claim=f"{CLAIMS[v]} ({s} goals)" if s == cfg.schedules[0] else ""))
        for v in (v for v in NEAR_VARIANTS if v in cfg.variants):
            found.append(checks.at_most(f"{v}_stays_near_{s}", abs(full - metrics[f"acc_{v}_{s}"]), STAY_NEAR,
                                        paper=abs(paper_full - PAPER[f"acc_{v}_{s}"])))
        if {"no_action", "no_reward"} <= set(cfg.variants):
            found.append(checks.above(f"reward_matters_more_than_action_{s}",
                                      metrics[f"acc_no_action_{s}"] - metrics[f"acc_no_reward_{s}"], 0.0,
                                      paper=PAPER[f"acc_no_action_{s}"] - PAPER[f"acc_no_reward_{s}"],
                                      claim="removing the reward costs UAT more than removing the action"
                                      if s == cfg.schedules[0] else ""))
    rows = [(v, s) for v in cfg.variants for s in cfg.schedules]
    table = {"variant": [v for v, _ in rows], "schedule": [s for _, s in rows],
             "accuracy": [metrics[f"acc_{v}_{s}"] for v, s in rows],
             "accuracy_std": [metrics[f"acc_{v}_{s}_std"] for v, s in rows],
             "accuracy_paper": [PAPER[f"acc_{v}_{s}"] for v, s in rows],
             "gap_to_uat": [metrics[f"acc_uat_{s}"] - metrics[f"acc_{v}_{s}"] for v, s in rows]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: AblationConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``ablation.csv`` (variant x schedule, seed mean and std) and ``ablation.png`` (bars, paper marked)."""
    metrics = summary.metrics
    rows = [(v, s) for v in cfg.variants for s in cfg.schedules]
    io.write_csv(out_dir / "ablation.csv",
                 {"variant": [v for v, _ in rows], "schedule": [s for _, s in rows],
                  "accuracy": [metrics[f"acc_{v}_{s}"] for v, s in rows],
                  "accuracy_std": [metrics[f"acc_{v}_{s}_std"] for v, s in rows]})
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = np.arange(len(cfg.variants))
    for j, sched in enumerate(cfg.schedules):
        ax.bar(xs + j * 0.25, [metrics[f"acc_{v}_{sched}"] for v in cfg.variants], 0.25,
               yerr=[metrics[f"acc_{v}_{sched}_std"] for v in cfg.variants], label=sched)
        ax.plot(xs + j * 0.25, [PAPER[f"acc_{v}_{sched}"] for v in cfg.variants], "kx", ms=6,
                label="paper" if j == 0 else None)
    ax.set_xticks(xs, cfg.variants, fontsize=8)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "ablation.png")


STUDY = register(Study(
    name="uat.ablation",
    summary="Table 4/5 ablations of UAT on DarkRoom (no-action ... no-bias)",
    config_type=AblationConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds",
    quick_s=85,
))

"""Study ``uat.ablation``: Table 5, Domain A of "Breaking Feedback-Blindness:
Utility-Augmented Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910).

The six one-factor variants of Table 4 (no-action, no-reward, linear encoder, no-Q,
no-KV, no-bias; ``uat_jax.config.ablation``) beside full UAT, trained and evaluated
like ``uat.darkroom``, all as one vmapped program over variants x schedules x seeds
(the variant is a traced index into the union of the variants' parameters,
``uat_jax.model``; each variant computes what it computes alone), seed ``s`` of every
variant on the same key. ``--quick`` (the ``uat_jax.cells.CPU`` size,
3 seeds) runs the gradual schedule only; full runs all three at Table 3 size.

UAT fed null feedback (``uat_null``: full UAT trained and evaluated with every fed reward
zeroed) is one more row of the same program per schedule: the negative control of the checks.

Checks, per schedule run: interval claims over seeds on per-seed paired differences of
models trained from the same key (``experiments.checks``); how each could fail (paper,
gradual: UAT 0.873, no-KV 0.506, no-reward 0.395; no-Q 0.872, no-bias 0.871, linear 0.870):

* ``no_kv_falls_far_<schedule>``, ``no_reward_falls_far_<schedule>`` (UAT - variant > 0.15):
  the KV pathway and the realised reward carry the feedback gain. It fails if the model
  recovers the goal through the Q pathway alone, or from actions without rewards (i.e. if
  the switch did not remove what it names, or the gain does not come from where the paper
  says). Control: UAT fed null feedback in place of UAT (a variant that keeps the base
  pathway must not fall below a feedback-blind UAT; if it does, the switch broke the model).
* ``no_q_stays_near_<schedule>``, ``no_bias_stays_near_<schedule>``,
  ``linear_stays_near_<schedule>`` (UAT - variant within 0 +- 0.05): these components only
  refine. It fails if removing them costs (or gains) more than 0.05 accuracy. Control: UAT
  fed null feedback in place of the variant (it loses the feedback gain, so "near" must fail).
* ``reward_matters_more_than_action_<schedule>`` (no-action - no-reward > 0; paper 0.707 -
  0.395 on gradual, D.1: "removing reward is more harmful than removing action"): the
  realised reward reveals the goal, the own actions much less. It fails if the model gets
  more from its action history than from the rewards. Control: UAT fed null feedback in
  place of no-action (actions, no reward information: it must not beat no-reward).

A check is made for each of these variants listed in ``variants`` (all of them in
both presets; the last check needs both no-action and no-reward).

Table 5's other domains (B, C, D) are rows of ``uat.sepsis``, ``uat.markets`` and ``uat.recsys``: the
same variants as members of each study's family program (their FULL presets; ``models`` at quick size).

Judged quick run (stream 0, once, 3 seeds): 3 pass, 3 inconclusive. UAT - no-KV +0.175 [-0.567, 0.917]
(INCONCLUSIVE: one seed's no-KV reaches UAT, as on the screening seeds earlier; about 560 seeds at this
spread), UAT - no-reward +0.414 [0.191, 0.637] PASS, no-Q -0.001 and no-bias +0.002 within 0 +- 0.05 PASS,
linear +0.005 [-0.046, 0.056] INCONCLUSIVE (about 4 seeds), no-action - no-reward +0.226 [-0.080, 0.532]
INCONCLUSIVE (about 4 seeds). Controls: FAIL except no-KV's (UAT-null - no-KV -0.239, INCONCLUSIVE).
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
CONTROL = "uat_null"  # full UAT trained and evaluated on null feedback: the checks' negative control
FAR_VARIANTS = ("no_kv", "no_reward")
NEAR_VARIANTS = ("no_q", "no_bias", "linear")
_WHAT = {"no_kv": "the KV pathway", "no_reward": "the reward from the utility encoder", "no_q": "the Q pathway",
         "no_bias": "the attention bias", "linear": "the utility encoder's MLP (linear in its place)"}
FALLS_FAR = {v: checks.Claim(
    f"{v}_falls_far_<schedule>", f"removing {_WHAT[v]} costs UAT most of its feedback gain", ">", 0.15,
    control="UAT fed null feedback in place of UAT",
    fails_if="the model recovers the goal without what the switch removes, or the switch does not remove it")
    for v in FAR_VARIANTS}
STAYS_NEAR = {v: checks.Claim(
    f"{v}_stays_near_<schedule>", f"removing {_WHAT[v]} changes UAT's accuracy by at most 0.05", "within", 0.0,
    tol=0.05, control="UAT fed null feedback in place of the variant",
    fails_if="the component carries (or hinders) more than a refinement of the feedback gain")
    for v in NEAR_VARIANTS}
REWARD_OVER_ACTION = checks.Claim(
    "reward_matters_more_than_action_<schedule>", "removing the reward costs UAT more than removing the action",
    ">", 0.0, control="UAT fed null feedback in place of no-action",
    fails_if="the model gets more from its own action history than from the realised rewards")
CLAIMS = (*FALLS_FAR.values(), *STAYS_NEAR.values(), REWARD_OVER_ACTION)


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
# Those were means of 2 seeds against fixed margins; the interval checks need more seeds. The seed count was
# not re-screened here (the shared machine left time for one screening of uat.darkroom's size, whose 100 epochs
# left UAT under-trained, so cells.CPU keeps 200); 3 seeds, like uat.darkroom, at a cost of 8 rows (the
# six variants, UAT and its null-feedback control) x 3 seeds. The no-KV gap moved 0.05-0.26 between seed
# streams, so no_kv_falls_far is expected to stay INCONCLUSIVE at 3 seeds (n_needed in the judged result).
QUICK = AblationConfig(size=cells.CPU, seeds=3, schedules=("gradual",))


def compute(cfg: AblationConfig, ctx: RunContext) -> dict:
    """``accuracy``: {variant: [schedules, seeds]}, with the control ``uat_null``; ``curves``: {"variant/schedule": ...}."""
    n = len(cfg.schedules)
    runs = {v: [Task.make(s) for s in cfg.schedules] for v in cfg.variants}
    runs["uat"] += [Task.make(s, "null") for s in cfg.schedules]  # the control: UAT's own tasks, rows n..2n
    labels = {v: [f"schedule {x}" for x in cfg.schedules] for v in cfg.variants}
    labels["uat"] += [f"schedule {x}, null feedback" for x in cfg.schedules]
    grids = train_models(ctx, "ablation", cfg.size, runs, labels, cfg.seeds, cfg.stream)
    both = grids.pop("uat")
    grids = {"uat": {k: v[:n] for k, v in both.items()}, CONTROL: {k: v[n:] for k, v in both.items()}, **grids}
    out: dict = {"accuracy": {}, "curves": {}}
    for variant, grid in grids.items():
        out["accuracy"][variant] = grid["accuracy"]
        for i, sched in enumerate(cfg.schedules):
            out["curves"][f"{variant}/{sched}"] = {"loss": grid["loss"][i], "train_accuracy": grid["train_accuracy"][i]}
    return out


def summarize(cfg: AblationConfig, arrays: dict) -> Summary:
    """Seed mean/std accuracy per variant (and the control) and schedule; the Table 5 checks, paired over seeds."""
    metrics: dict[str, float] = {}
    acc = arrays["accuracy"]
    rows = (*cfg.variants, CONTROL)
    for variant in rows:
        for i, sched in enumerate(cfg.schedules):
            metrics.update(cells.mean_std(f"acc_{variant}_{sched}", acc[variant][i]))
    paper_gap = lambda a, b, s: PAPER[f"acc_{a}_{s}"] - PAPER[f"acc_{b}_{s}"]  # noqa: E731
    found = []
    for i, s in enumerate(cfg.schedules):
        gap = lambda a, b, i=i: checks.paired(acc[a][i], acc[b][i])  # noqa: E731
        for v in (v for v in FAR_VARIANTS if v in cfg.variants):
            found.append(dataclasses.replace(FALLS_FAR[v], paper=paper_gap("uat", v, s)).judge(
                gap("uat", v), control=gap(CONTROL, v), key=s))
        for v in (v for v in NEAR_VARIANTS if v in cfg.variants):
            found.append(dataclasses.replace(STAYS_NEAR[v], paper=paper_gap("uat", v, s)).judge(
                gap("uat", v), control=gap("uat", CONTROL), key=s))
        if {"no_action", "no_reward"} <= set(cfg.variants):
            found.append(dataclasses.replace(REWARD_OVER_ACTION, paper=paper_gap("no_action", "no_reward", s)).judge(
                gap("no_action", "no_reward"), control=gap(CONTROL, "no_reward"), key=s))
    table_rows = [(v, s) for v in rows for s in cfg.schedules]
    table = {"variant": [v for v, _ in table_rows], "schedule": [s for _, s in table_rows],
             "accuracy": [metrics[f"acc_{v}_{s}"] for v, s in table_rows],
             "accuracy_std": [metrics[f"acc_{v}_{s}_std"] for v, s in table_rows],
             "accuracy_paper": [PAPER.get(f"acc_{v}_{s}", float("nan")) for v, s in table_rows],
             "gap_to_uat": [metrics[f"acc_uat_{s}"] - metrics[f"acc_{v}_{s}"] for v, s in table_rows]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: AblationConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``ablation.csv`` (variant and control x schedule, seed mean and std) and ``ablation.png`` (bars, paper marked)."""
    metrics, table = summary.metrics, summary.tables["table"]
    io.write_csv(out_dir / "ablation.csv", {k: table[k] for k in ("variant", "schedule", "accuracy", "accuracy_std")})
    import matplotlib.pyplot as plt

    rows = (*cfg.variants, CONTROL)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs = np.arange(len(rows))
    for j, sched in enumerate(cfg.schedules):
        ax.bar(xs + j * 0.25, [metrics[f"acc_{v}_{sched}"] for v in rows], 0.25,
               yerr=[metrics[f"acc_{v}_{sched}_std"] for v in rows], label=sched)
        ax.plot(xs + j * 0.25, [PAPER.get(f"acc_{v}_{sched}", np.nan) for v in rows], "kx", ms=6,
                label="paper" if j == 0 else None)
    ax.set_xticks(xs, rows, fontsize=8)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "ablation.png")


STUDY = register(Study(
    name="uat.ablation",
    cost_fields=("size.epochs",),
    summary="Table 4/5 ablations of UAT on DarkRoom (no-action ... no-bias)",
    config_type=AblationConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=120,
))

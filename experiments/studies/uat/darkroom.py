"""Study ``uat.darkroom``: Table 1, Domain A of "Breaking Feedback-Blindness:
Utility-Augmented Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910).

UAT and the baselines Vanilla-TF (VT), A-DT, DT-style and GTrXL are trained by
rollout-then-optimize on DarkRoom under the three goal schedules (gradual, abrupt,
cyclic) and evaluated by greedy causal inference: per-step accuracy against the oracle
action and navigation efficiency, seed mean and std (section 6, Appendix C; the model
and training are ``uat_jax``'s, derivations in ``docs/uat.md``). UAT and VT are one
vmapped program over models x schedules x seeds with A-DT (VT is the switched UAT with both
pathways off, A-DT VT with the fed pair in its input, ``uat_jax.model``), DT-style and GTrXL one program each over
schedules x seeds (``uat_jax.cells``); seed ``s`` of every schedule and model uses the
same key. The test-time adaptation baselines TENT and CoTTA (``uat_jax.tta``) are the
trained VT cells adapted online over their evaluation episodes (one further program;
they see observations only, C.2). The trained UAT and VT cells of each schedule are kept as
the model ``models/<schedule>`` (``uat.mechanism`` plays the cyclic ones). ``--quick`` (the
``uat_jax.cells.CPU`` size: d_model 32, 2 layers, batch 32, 200 epochs, T = 30, 2 seeds) trains UAT, VT and A-DT only, the models
the checks compare, and adapts VT with TENT and CoTTA; DT-style and GTrXL run at full
size (Table 3, 3 seeds).

The three schedules are three tasks (our reading of C.1, ``uat_jax.schedules``): each
training cell follows one run of its schedule in episode order and is evaluated on the
episodes that follow, so a gradual run trains on the 10-18 cells of one drifting line,
an abrupt run on a new uniform goal every 6 episodes, a cyclic run on four waypoints.
``distinct_goals_train_<schedule>`` (seed mean) reports how many distinct goals the
training episodes visited, counted from the goals the training rollouts were played on.

Checks, and how each could fail:

* ``uat_beats_vt_<schedule>`` (> 0.2, one per schedule; paper +0.51, +0.47, +0.50):
  UAT must out-predict the observation-only VT by a wide margin. It fails if UAT does
  not learn to read the shifted (a, r) feedback (a broken shift, utility encoder or
  gate), or if the hidden goal is recoverable from the observations alone or from the
  schedule's few goals (VT can learn the four cyclic waypoints as a prior).
* ``uat_beats_tta_<schedule>`` (UAT minus the better of TENT and CoTTA > 0.2; paper
  +0.53, +0.47, +0.50): adapting the observation-only model's parameters at test time,
  from its own predictions, must not recover what the feedback carries. It fails if the
  adaptation finds the hidden goal from observations alone (the cue near the goal), or if
  UAT fails as in the check above.
* ``uat_on_par_with_adt`` (mean accuracy gap over schedules >= -0.03; paper +0.004):
  conditioning attention on the utility must be at least as good as concatenating the
  feedback to the input (A-DT); it fails if the modulated attention trains worse than
  the plain input-level channel.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import check_models_and_adaptation, keep_cells, train_models
from uat_jax import cells, tta
from uat_jax.schedules import SCHEDULES
from uat_jax.train import Task

PAPER_ACC = {"uat": (0.873, 0.827, 0.842), "vt": (0.362, 0.356, 0.340),
             "gtrxl": (0.328, 0.336, 0.366), "dt": (0.658, 0.738, 0.791),
             "adt": (0.866, 0.826, 0.838), "tent": (0.346, 0.354, 0.346),
             "cotta": (0.346, 0.354, 0.346)}  # Table 1, Domain A: gradual, abrupt, cyclic
PAPER = {f"acc_{m}_{s}": v for m, accs in PAPER_ACC.items() for s, v in zip(SCHEDULES, accs)}

MODELS = ("uat", "vt", "adt", "dt", "gtrxl")
CHECKED = ("uat", "vt", "adt")  # the models the checks compare
KEPT = ("uat", "vt")  # kept per schedule as models/<schedule> (uat.mechanism loads them)
ADAPTATION = tta.METHODS  # test-time adaptation of the trained VT
WIDE_MARGIN = 0.2
ON_PAR = -0.03


@dataclasses.dataclass(frozen=True)
class DarkroomConfig:
    """Which models, on which schedules, at which size, over how many seeds."""

    size: cells.Size = cells.TABLE3
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    models: tuple[str, ...] = MODELS
    schedules: tuple[str, ...] = SCHEDULES
    adapt: tuple[str, ...] = tuple(ADAPTATION)  # TENT / CoTTA rows: the trained VT adapted at test time
    adapt_batch: int = 16  # evaluation episodes per adaptation step (a divisor of size.eval_episodes)

    def __post_init__(self):
        check_models_and_adaptation(self, CHECKED)
        if not self.schedules or not set(self.schedules) <= set(SCHEDULES) or len(set(self.schedules)) != len(self.schedules):
            raise ValueError(f"schedules must be distinct names from {SCHEDULES}, got {self.schedules}")

    @property
    def rows(self) -> tuple[str, ...]:
        """Every reported model: the trained ones, then the test-time adapted VTs."""
        return self.models + self.adapt


FULL = DarkroomConfig()
# Quick size (cells.CPU, 200 epochs) screened on the SCREENING stream (stream=1, 2 seeds),
# with one run per training cell: UAT - VT +0.516 / +0.491 / +0.491 (gradual / abrupt /
# cyclic; VT 0.331 / 0.339 / 0.381), UAT - A-DT -0.010 on average; training visited
# 18 / 100 / 4 distinct goals. Every check passes with margin there, so the size (whose
# 200 epochs an earlier session raised after failures on the judged seeds) is kept. TENT and CoTTA
# (uat_jax.tta defaults, 16 episodes per adaptation step) were added at this size and screened the
# same way before any judged run: TENT 0.329 / 0.339 / 0.376, CoTTA 0.331 / 0.339 / 0.382 (VT 0.331 /
# 0.339 / 0.381: adaptation from the model's own predictions leaves it where it was, as in the
# paper's Table 1), UAT - the better of the two +0.527 / +0.491 / +0.490.
# Re-screened the same way after commit 42a4f86 (new random streams): UAT - VT +0.505 / +0.428 / +0.489,
# UAT - A-DT -0.022 on average, TENT and CoTTA within 0.002 of VT, every check passing. The judged run
# that followed: UAT - VT +0.453 / +0.430 / +0.507, UAT - A-DT -0.029 (a narrow pass against -0.03).
# Later changes of float rounding moved the judged numbers (not re-screened, nothing tuned): at O1 on 2026-12-05
# +0.461 / +0.474 / +0.507 and -0.011; with A-DT in the family program (same day) +0.461 / +0.456 / +0.508, -0.016.
QUICK = DarkroomConfig(size=cells.CPU, seeds=2, models=CHECKED)


def compute(cfg: DarkroomConfig, ctx: RunContext) -> dict:
    """``accuracy``/``efficiency``: {model: [schedules, seeds]}; ``distinct_goals``
    [schedules, seeds] (goals visited in training; every model trains on the same runs);
    ``curves``: {"model/schedule": ...}."""
    runs = {m: [Task.make(s) for s in cfg.schedules] for m in cfg.models}
    labels = {m: [f"schedule {x}" for x in cfg.schedules] for m in cfg.models}
    grids = train_models(ctx, "darkroom", cfg.size, runs, labels, cfg.seeds, cfg.stream,
                         adapt={m: ADAPTATION[m](batch_size=cfg.adapt_batch) for m in cfg.adapt}, keep=KEPT)
    kept = [grids[m].pop("params") for m in KEPT]  # each flat over schedules x seeds
    for i, sched in enumerate(cfg.schedules):
        rows = slice(i * cfg.seeds, (i + 1) * cfg.seeds)
        params = jax.tree.map(lambda *ps, rows=rows: np.concatenate([np.asarray(p)[rows] for p in ps]), *kept)
        keep_cells(ctx, sched, cfg.size.train_config(traced_variant=True), KEPT, params,
                   np.stack([grids[m]["accuracy"][i] for m in KEPT]), cfg.stream)
    out: dict = {"accuracy": {}, "efficiency": {}, "curves": {}}
    for model, grid in grids.items():
        out["accuracy"][model], out["efficiency"][model] = grid["accuracy"], grid["efficiency"]
        if model in cfg.adapt:
            continue
        out["distinct_goals"] = grid["distinct_goals"]
        for i, sched in enumerate(cfg.schedules):
            out["curves"][f"{model}/{sched}"] = {"loss": grid["loss"][i], "train_accuracy": grid["train_accuracy"][i]}
    return out


def summarize(cfg: DarkroomConfig, arrays: dict) -> Summary:
    """Seed mean/std of accuracy and efficiency per model and schedule; the Table 1 checks."""
    metrics: dict[str, float] = {}
    for i, sched in enumerate(cfg.schedules):
        metrics.update(cells.mean_std(f"distinct_goals_train_{sched}", arrays["distinct_goals"][i]))
    for model in cfg.rows:
        for i, sched in enumerate(cfg.schedules):
            metrics.update(cells.mean_std(f"acc_{model}_{sched}", arrays["accuracy"][model][i]))
            metrics.update(cells.mean_std(f"eff_{model}_{sched}", arrays["efficiency"][model][i]))
    gap = lambda a, b, s: metrics[f"acc_{a}_{s}"] - metrics[f"acc_{b}_{s}"]  # noqa: E731
    paper_gap = lambda a, b, s: PAPER[f"acc_{a}_{s}"] - PAPER[f"acc_{b}_{s}"]  # noqa: E731
    found = [checks.above(f"uat_beats_vt_{s}", gap("uat", "vt", s), WIDE_MARGIN, paper=paper_gap("uat", "vt", s),
                          claim=f"UAT beats the observation-only Vanilla-TF by a wide margin ({s} goals)")
             for s in cfg.schedules]
    if cfg.adapt:
        best_tta = lambda s: max(metrics[f"acc_{m}_{s}"] for m in cfg.adapt)  # noqa: E731
        found += [checks.above(f"uat_beats_tta_{s}", metrics[f"acc_uat_{s}"] - best_tta(s), WIDE_MARGIN,
                               paper=PAPER[f"acc_uat_{s}"] - max(PAPER[f"acc_{m}_{s}"] for m in cfg.adapt),
                               claim=f"UAT beats test-time adaptation of the Vanilla-TF (TENT, CoTTA) ({s} goals)")
                  for s in cfg.schedules]
    on_par = float(np.mean([gap("uat", "adt", s) for s in cfg.schedules]))
    found.append(checks.at_least("uat_on_par_with_adt", on_par, ON_PAR,
                                 paper=float(np.mean([paper_gap("uat", "adt", s) for s in cfg.schedules])),
                                 claim="UAT is at least on par with A-DT (feedback concatenated to the input)"))
    rows = [(m, s) for m in cfg.rows for s in cfg.schedules]
    table = {"model": [m for m, _ in rows], "schedule": [s for _, s in rows],
             "accuracy": [metrics[f"acc_{m}_{s}"] for m, s in rows],
             "accuracy_std": [metrics[f"acc_{m}_{s}_std"] for m, s in rows],
             "accuracy_paper": [PAPER.get(f"acc_{m}_{s}", float("nan")) for m, s in rows],
             "efficiency": [metrics[f"eff_{m}_{s}"] for m, s in rows],
             "efficiency_std": [metrics[f"eff_{m}_{s}_std"] for m, s in rows]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: DarkroomConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``darkroom.csv`` (every model x schedule x seed) and ``darkroom.png`` (Table 1 A as bars)."""
    rows: dict[str, list] = {"model": [], "schedule": [], "seed": [], "accuracy": [], "efficiency": []}
    for model in cfg.rows:
        for i, sched in enumerate(cfg.schedules):
            for s in range(cfg.seeds):
                rows["model"].append(model)
                rows["schedule"].append(sched)
                rows["seed"].append(s)
                rows["accuracy"].append(float(arrays["accuracy"][model][i, s]))
                rows["efficiency"].append(float(arrays["efficiency"][model][i, s]))
    io.write_csv(out_dir / "darkroom.csv", rows)
    import matplotlib.pyplot as plt

    metrics = summary.metrics
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(cfg.rows)
    xs0 = np.arange(len(cfg.schedules))
    for j, model in enumerate(cfg.rows):
        xs = xs0 + (j - (len(cfg.rows) - 1) / 2) * width
        ax.bar(xs, [metrics[f"acc_{model}_{s}"] for s in cfg.schedules], width,
               yerr=[metrics[f"acc_{model}_{s}_std"] for s in cfg.schedules], label=model)
        ax.plot(xs, [PAPER[f"acc_{model}_{s}"] for s in cfg.schedules], "kx", ms=6,
                label="paper" if j == 0 else None)
    ax.set_xticks(xs0, cfg.schedules)
    ax.set_ylabel("per-step accuracy vs oracle")
    ax.set_ylim(0, 1)
    ax.legend(ncol=4, fontsize=7, loc="upper center")
    fig.tight_layout()
    io.save_figure(fig, out_dir / "darkroom.png")


STUDY = register(Study(
    name="uat.darkroom",
    summary="UAT vs VT / A-DT / DT-style / GTrXL on DarkRoom, three goal schedules (Table 1 A)",
    config_type=DarkroomConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds",
    quick_s=125,
))

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
the model ``models/<schedule>`` (``uat.mechanism`` plays the cyclic ones). A capacity control,
``vt_matched``, is Vanilla-TF with its feed-forward width raised until it has UAT's parameter count
(``uat_jax.cells.Size.matched``: d_ff 142 against 64 at the quick size, 28,833 parameters against UAT's
28,797; 260 at Table 3's size), one program over schedules x seeds. ``--quick`` (the
``uat_jax.cells.CPU`` size: d_model 32, 2 layers, batch 32, 200 epochs, T = 30, 3 seeds) trains UAT, VT,
A-DT and the matched VT, the models the checks compare, and adapts VT with TENT and CoTTA; DT-style and
GTrXL run at full size (Table 3, 3 seeds), or at the quick size with
``--set 'models=["uat", "vt", "adt", "vt_matched", "dt", "gtrxl"]'`` (their numbers there: the QUICK comment).

The three schedules are three tasks (our reading of C.1, ``uat_jax.schedules``): each
training cell follows one run of its schedule in episode order and is evaluated on the
episodes that follow, so a gradual run trains on the 10-18 cells of one drifting line,
an abrupt run on a new uniform goal every 6 episodes, a cyclic run on four waypoints.
``distinct_goals_train_<schedule>`` (seed mean) reports how many distinct goals the
training episodes visited, counted from the goals the training rollouts were played on.

UAT fed null feedback (``uat_null``: the same UAT trained and evaluated with every fed reward
zeroed, ``uat_jax.feedback``) is one more row of the family program on every schedule: the
negative control of every check, kept beside UAT and VT in ``models/<schedule>``.

Checks (interval claims over seeds, each the per-seed paired difference of two models trained
from the same key; ``experiments.checks``), and how each could fail:

* ``uat_beats_vt_<schedule>`` (UAT - VT > 0.2, one per schedule; paper +0.51, +0.47, +0.50):
  UAT must out-predict the observation-only VT by a wide margin. It fails if UAT does
  not learn to read the shifted (a, r) feedback (a broken shift, utility encoder or
  gate), or if the hidden goal is recoverable from the observations alone or from the
  schedule's few goals (VT can learn the four cyclic waypoints as a prior). Control:
  UAT fed null feedback against VT, which must not pass (else the gain is not the feedback's).
* ``uat_on_par_with_adt_<schedule>`` (UAT - A-DT > -0.03, one per schedule; paper +0.007,
  +0.001, +0.004: "UAT >= A-DT" on each): conditioning attention on the utility must be at
  least as good as concatenating the feedback to the input, up to a declared non-inferiority
  margin of 0.03 (the paper's differences are below 0.01, so a margin of 0 could only come
  out INCONCLUSIVE). It fails if the modulated attention trains worse than the plain
  input-level channel on that schedule. Control: UAT fed null feedback against A-DT.

* ``uat_beats_matched_vt_<schedule>`` (UAT - matched VT > 0.2, one per schedule; the paper has no such
  row; UAT has 1.42x its VT's parameters in the paper's Table 6, ours 1.48x at Table 3's size and 1.54x at the
  quick size): UAT's lead must not be its extra parameters. It fails
  if a Vanilla-TF as large as UAT reads the hidden goal from the observations as well as UAT does from
  the feedback. Control: UAT fed null feedback against the matched VT.

TENT and CoTTA are reported rows, not checks: at every size run here they equal VT to
about 0.002 (adaptation from the model's own predictions leaves it where it was, as in
the paper's Table 1), so a "UAT beats TTA" check would repeat ``uat_beats_vt_<schedule>``.

Judged quick run (stream 0, 3 seeds; run again when the matched VT joined, on an Intel Xeon beside another
job: the family program's numbers moved by float rounding from the first judged run's): 7 pass, 2 inconclusive.
UAT - VT +0.434 [0.240, 0.627] / +0.476 [0.344, 0.608] / +0.494 [0.428, 0.561] (gradual / abrupt / cyclic, PASS;
the null-feedback control -0.002 / +0.002 / +0.023, FAIL). UAT - A-DT +0.007 [-0.052, 0.065] (INCONCLUSIVE,
about 4 seeds), -0.058 [-0.098, -0.017] (INCONCLUSIVE, about 4 seeds: A-DT ahead on the abrupt schedule, as in
every run so far) and -0.002 [-0.016, 0.011] (PASS); control -0.43 / -0.53 / -0.47 (FAIL). UAT - matched VT
+0.436 [0.226, 0.647] / +0.481 [0.348, 0.614] / +0.500 [0.448, 0.553] (PASS; control +0.000 / +0.007 / +0.028,
FAIL): the matched VT (0.453 / 0.319 / 0.374) is no better than VT (0.456 / 0.324 / 0.380).
"""
from __future__ import annotations

import dataclasses
import functools

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

MATCHED = "vt_matched"  # Vanilla-TF widened to UAT's parameter count (uat_jax.cells.Size.matched)
MODELS = ("uat", "vt", "adt", "dt", "gtrxl", MATCHED)
CHECKED = ("uat", "vt", "adt")  # the models every run's checks compare (MATCHED adds its own check)
CONTROL = "uat_null"  # UAT trained and evaluated on null feedback: the checks' negative control
KEPT = ("uat", "vt", CONTROL)  # kept per schedule as models/<schedule> (uat.mechanism loads them)
ADAPTATION = tta.METHODS  # test-time adaptation of the trained VT
NULL_CONTROL = "UAT fed null feedback"

BEATS_VT = checks.Claim(
    "uat_beats_vt_<schedule>", "UAT beats the observation-only Vanilla-TF by a wide margin", ">", 0.2,
    control=f"{NULL_CONTROL}, against VT",
    fails_if="UAT does not read the shifted (a, r) feedback, or VT finds the hidden goal from the observations "
             "or from the schedule's few goals")
ON_PAR_ADT = checks.Claim(
    "uat_on_par_with_adt_<schedule>",
    "UAT is at least on par with A-DT (feedback concatenated to the input), up to 0.03 accuracy", ">", -0.03,
    control=f"{NULL_CONTROL}, against A-DT",
    fails_if="the utility-modulated attention trains worse than the input-level feedback channel on the schedule")
BEATS_MATCHED_VT = checks.Claim(
    "uat_beats_matched_vt_<schedule>",
    "UAT beats a Vanilla-TF given UAT's parameter count (a wider feed-forward block) by a wide margin", ">", 0.2,
    control=f"{NULL_CONTROL}, against the matched VT",
    fails_if="UAT's lead over VT is its extra parameters rather than the feedback its pathways read")
CLAIMS = (BEATS_VT, ON_PAR_ADT, BEATS_MATCHED_VT)


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
        check_models_and_adaptation(self, CHECKED, extra=(MATCHED,))
        if not self.schedules or not set(self.schedules) <= set(SCHEDULES) or len(set(self.schedules)) != len(self.schedules):
            raise ValueError(f"schedules must be distinct names from {SCHEDULES}, got {self.schedules}")

    @property
    def rows(self) -> tuple[str, ...]:
        """Every reported model: the trained ones, the null-feedback control, then the test-time adapted VTs."""
        return self.models + (CONTROL,) + self.adapt


FULL = DarkroomConfig()
# Quick size. cells.CPU (200 epochs) was screened on the SCREENING stream (stream=1, 2 seeds, one run per
# training cell, before and after commit 42a4f86's new random streams): UAT - VT +0.516 / +0.491 / +0.491 and
# +0.505 / +0.428 / +0.489 (gradual / abrupt / cyclic), UAT - A-DT -0.010 and -0.022 on average; TENT and CoTTA
# within 0.002 of VT. Those were means of 2 seeds against fixed margins (no interval); the 2-seed t interval is
# +-9 seed sd wide, so the checks now need more seeds. Re-screened for the interval checks (stream=1, with the
# null-feedback control row), preferring seeds over epochs: 4 seeds at 100 epochs (the same cost as 3 at 200
# with the control) gave UAT - VT +0.409 [0.337, 0.480] / +0.255 [0.073, 0.438] / +0.389 [0.323, 0.455] and
# UAT - A-DT -0.077 [-0.170, 0.016] / -0.195 [-0.370, -0.021] / -0.092 [-0.173, -0.010] (interval widths
# 0.14 / 0.37 / 0.13 and 0.19 / 0.35 / 0.16; UAT 0.75 / 0.61 / 0.78 against A-DT 0.83 / 0.80 / 0.87, the null
# control 0.33 / 0.35 / 0.41 at VT's level): at 100 epochs UAT is still learning where A-DT has converged, so the
# comparison would measure learning speed. The epochs stay at 200 and the seeds go to 3 (t interval +-2.5 sd):
# from the 200-epoch seed spread (sd 0.01-0.04 of UAT - VT) the UAT - VT checks decide; UAT - A-DT (mean near
# -0.02 against -0.03) is expected to stay INCONCLUSIVE at 3 seeds. The judged run (once, stream 0): see the
# module docstring.
# The matched VT (its check new), DT-style and GTrXL, screened once at this size (stream=1, beside another job):
# matched VT 0.341 / 0.349 / 0.382 (VT 0.349 / 0.333 / 0.372), UAT - matched VT +0.517 [0.445, 0.588] /
# +0.482 [0.440, 0.525] / +0.494 [0.464, 0.524] (PASS; control +0.008 / +0.016 / +0.025, FAIL); DT-style
# 0.349 / 0.354 / 0.405 (paper 0.658 / 0.738 / 0.791: at this size its three tokens per step learn nothing
# the observations do not show) and GTrXL 0.352 / 0.358 / 0.396 (paper 0.328 / 0.336 / 0.366). Programs:
# the family 198 s, the matched VT 36 s, DT-style 146 s, GTrXL 56 s (each plus compiling). The matched VT
# joins QUICK (its check); DT-style and GTrXL stay out of `make run`, whose budget their 200 s would break.
QUICK = DarkroomConfig(size=cells.CPU, seeds=3, models=CHECKED + (MATCHED,))


def configure(size: cells.Size, kind: str, variant: str | None = None, traced_variant: bool = False):
    """The training configuration of model ``kind`` at ``size`` (``MATCHED``: Vanilla-TF at ``size.matched()``)."""
    if kind == MATCHED:
        return size.matched().train_config("vt")
    return size.train_config(kind, variant, traced_variant)


def compute(cfg: DarkroomConfig, ctx: RunContext) -> dict:
    """``accuracy``/``efficiency``: {row: [schedules, seeds]} (``cfg.rows``: the null-feedback
    control ``uat_null`` too); ``distinct_goals`` [schedules, seeds] (goals visited in training;
    every model trains on the same runs); ``curves``: {"model/schedule": ...}."""
    n = len(cfg.schedules)
    runs = {m: [Task.make(s) for s in cfg.schedules] for m in cfg.models}
    runs["uat"] += [Task.make(s, "null") for s in cfg.schedules]  # the control: UAT's own tasks, rows n..2n
    labels = {m: [f"schedule {x}" for x in cfg.schedules] for m in cfg.models}
    labels["uat"] += [f"schedule {x}, null feedback" for x in cfg.schedules]
    grids = train_models(ctx, "darkroom", cfg.size, runs, labels, cfg.seeds, cfg.stream,
                         adapt={m: ADAPTATION[m](batch_size=cfg.adapt_batch) for m in cfg.adapt}, keep=("uat", "vt"),
                         configure=functools.partial(configure, cfg.size))
    both = grids.pop("uat")
    params = both.pop("params")
    grids["uat"] = {k: v[:n] for k, v in both.items()}
    grids[CONTROL] = {k: v[n:] for k, v in both.items()}
    grids["uat"]["params"] = jax.tree.map(lambda p: p[:n * cfg.seeds], params)
    grids[CONTROL]["params"] = jax.tree.map(lambda p: p[n * cfg.seeds:], params)
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
    """Seed mean/std of accuracy and efficiency per row and schedule; the Table 1 checks (paired over seeds,
    each beside the null-feedback control)."""
    metrics: dict[str, float] = {}
    for i, sched in enumerate(cfg.schedules):
        metrics.update(cells.mean_std(f"distinct_goals_train_{sched}", arrays["distinct_goals"][i]))
    for model in cfg.rows:
        for i, sched in enumerate(cfg.schedules):
            metrics.update(cells.mean_std(f"acc_{model}_{sched}", arrays["accuracy"][model][i]))
            metrics.update(cells.mean_std(f"eff_{model}_{sched}", arrays["efficiency"][model][i]))
    acc = arrays["accuracy"]
    paper_gap = lambda a, b, s: PAPER[f"acc_{a}_{s}"] - PAPER[f"acc_{b}_{s}"]  # noqa: E731
    found = []
    compared = ((BEATS_VT, "vt"), (ON_PAR_ADT, "adt")) + (((BEATS_MATCHED_VT, MATCHED),) if MATCHED in cfg.models else ())
    for claim, other in compared:
        for i, s in enumerate(cfg.schedules):
            judged = dataclasses.replace(claim, paper=paper_gap("uat", other, s) if other in PAPER_ACC else None)
            found.append(judged.judge(checks.paired(acc["uat"][i], acc[other][i]),
                                      control=checks.paired(acc[CONTROL][i], acc[other][i]), key=s))
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
        ax.plot(xs, [PAPER.get(f"acc_{model}_{s}", np.nan) for s in cfg.schedules], "kx", ms=6,
                label="paper" if j == 0 else None)
    ax.set_xticks(xs0, cfg.schedules)
    ax.set_ylabel("per-step accuracy vs oracle")
    ax.set_ylim(0, 1)
    ax.legend(ncol=4, fontsize=7, loc="upper center")
    fig.tight_layout()
    io.save_figure(fig, out_dir / "darkroom.png")


STUDY = register(Study(
    name="uat.darkroom",
    cost_fields=("size.epochs",),
    summary="UAT vs VT / A-DT / DT-style / GTrXL on DarkRoom, three goal schedules (Table 1 A)",
    config_type=DarkroomConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=205,
))

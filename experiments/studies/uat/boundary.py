"""Study ``uat.boundary``: the feedback-quality boundary on DarkRoom (section 6.3,
Appendix D.2, Figure 1 left) of "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910).

UAT is trained and evaluated on gradual DarkRoom with the fed rewards clean, with
Gaussian noise of scale ``sigma`` (and each of ``extra_sigmas``), null, shuffled within
the episode (causal reading, see ``uat_jax.feedback``) and sign-flipped; all conditions
are one vmapped program over conditions x seeds. Vanilla-TF never reads the fed
rewards, and the corruption draws its own keys, so its training and evaluation are
bitwise the same under every condition: it is run once, on clean rewards (one more row
of the same program, the switched UAT with both pathways off, ``uat_jax.model``), and
the gap of condition c is UAT(c) - VT seed by seed. ``--quick`` (``uat_jax.cells.CPU`` size,
4 seeds) keeps clean, sigma = 2, null, shuffle and sign flip; full adds sigma = 0.5, 1
and 5 (the paper's sweep) at Table 3 size.

``sigma`` is an array leaf of the program (``traced``): ``--sweep sigma=0.5,1,2`` trains
every noise level, and the sigma-free conditions once, in one vmapped program.

Checks (interval claims over seeds, each on per-seed paired differences of models trained
from the same key; ``experiments.checks``), and how each could fail (paper, section 6.3:
gap +0.52 clean, +0.18 at sigma = 2, +0.05 null, +0.02 shuffled; "inverting every reward
leaves UAT almost unchanged"):

* ``gap_clean_wide`` (UAT clean - VT > 0.2; paper +0.52): with clean feedback UAT leads VT
  widely; fails if UAT does not use the feedback (see ``uat.darkroom``). Control: UAT fed
  null feedback against VT.
* ``uat_above_vt_at_sigma_<sigma>`` (UAT at sigma - VT > 0.1, the band below which the null
  and shuffle checks call UAT "back to VT"; paper +0.18 at sigma = 2): under Gaussian
  reward noise UAT still extracts the goal from the averaged shaping rewards. Fails if
  UAT cannot integrate the noisy rewards at this size and budget, i.e. falls to VT.
  Control: UAT fed null feedback against VT.
* ``gap_null_small``, ``gap_shuffle_small`` (UAT null / shuffled - VT < 0.1; paper +0.05,
  +0.02): without informative rewards UAT falls back to about VT; fails if UAT's gain
  came from something other than the reward values (e.g. its own actions alone), or if
  the shuffle leaked the current reward. Control: the clean-feedback arm (UAT clean - VT),
  whose gap is wide, so "small" must fail on it.
* ``sign_flip_unchanged`` (UAT sign-flipped - UAT clean within 0 +- 0.05): a sign flip keeps
  all the information, and UAT is trained under the same flip, so it must learn as well;
  fails if training depended on the sign convention of the reward (e.g. a ReLU encoder
  that learns from positive rewards only). Control: UAT fed null feedback against UAT clean.

``gap_shrink_<sigma>`` (gap at sigma minus the clean gap; paper 0.18 - 0.52) is
reported, not checked: that noise costs information holds by construction.

History of ``uat_above_vt_at_sigma_2`` at 2 seeds and 200 epochs (before the checks were
intervals): on the screening seeds UAT trained on rewards with noise sigma = 2 (four times
the +-0.5 shaping term) ended near VT's accuracy (+0.013, +0.010 after new random streams;
+0.024 at 400 epochs, so the epoch budget was not what was missing); on the judged seeds
the mean moved between 0.086 and 0.120 with float rounding alone (seed sd near 0.1), i.e.
a mean of two seeds against a margin inside its noise. Our guess, untested here: the quick
episodes (T = 30, half of Table 3's 60) hold too few noisy rewards to average the noise
out; the full (Table 3) size tests the claim.

Judged quick run (stream 0, once, 4 seeds, after the 6-seed screening in the QUICK comment): clean +0.439
[0.345, 0.533] PASS; sigma = 2 +0.082 [-0.081, 0.246] INCONCLUSIVE (seed sd about 0.10; about 130 seeds would
decide it against 0.1, so no CPU size decides it; on the screening seeds it FAILS, +0.008 [-0.019, 0.034] at 6
seeds); null +0.017 and shuffle +0.010 PASS (< 0.1); sign flip - clean +0.010 [-0.005, 0.025] PASS. Every
control FAILS its claim.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import train_models
from uat_jax import cells
from uat_jax.schedules import SCHEDULES
from uat_jax.train import Task

PAPER = {"gap_clean": 0.52, "gap_gaussian_2": 0.18, "gap_null": 0.05, "gap_shuffle": 0.02}  # section 6.3
TRACED = ("sigma",)
SMALL_GAP = 0.1  # the band below which UAT counts as "back to VT"
NULL_VS_VT = "UAT fed null feedback, against VT"
CLEAN_VS_VT = "UAT fed clean feedback, against VT"

GAP_CLEAN = checks.Claim(
    "gap_clean_wide", "with clean feedback UAT leads Vanilla-TF by a wide margin", ">", 0.2, control=NULL_VS_VT,
    fails_if="UAT does not read the fed feedback", paper=PAPER["gap_clean"])
ABOVE_AT = checks.Claim(
    "uat_above_vt_at_sigma_<sigma>", "under Gaussian reward noise UAT stays above Vanilla-TF", ">", SMALL_GAP,
    control=NULL_VS_VT, fails_if="UAT cannot integrate the noisy rewards at this size and budget (falls to VT)")
NULL_SMALL = checks.Claim(
    "gap_null_small", "with null rewards UAT falls back to about Vanilla-TF", "<", SMALL_GAP, control=CLEAN_VS_VT,
    fails_if="UAT's gain comes from something other than the reward values (e.g. its own actions)",
    paper=PAPER["gap_null"])
SHUFFLE_SMALL = checks.Claim(
    "gap_shuffle_small", "with rewards shuffled within the episode UAT falls back to about Vanilla-TF", "<",
    SMALL_GAP, control=CLEAN_VS_VT, fails_if="the causal shuffle leaks the current reward",
    paper=PAPER["gap_shuffle"])
FLIP_SAME = checks.Claim(
    "sign_flip_unchanged", "inverting every reward leaves UAT almost unchanged", "within", 0.0, tol=0.05,
    control="UAT fed null feedback, against UAT clean",
    fails_if="training depends on the reward's sign convention (e.g. an encoder that learns from positive rewards)")
CLAIMS = (GAP_CLEAN, ABOVE_AT, NULL_SMALL, SHUFFLE_SMALL, FLIP_SAME)


def label(name: str, sigma: float = 0.0) -> str:
    """Condition name in metric keys: ``gaussian_2``, ``gaussian_0p5``; other corruptions by name."""
    return f"gaussian_{sigma:g}".replace(".", "p") if name == "gaussian" else name


@dataclasses.dataclass(frozen=True)
class BoundaryConfig:
    """Size, seeds, the schedule, and the Gaussian noise levels of the fed rewards."""

    size: cells.Size = cells.TABLE3
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    schedule: str = "gradual"
    sigma: float = 2.0  # the checked noise level (the paper's +0.18 is at sigma = 2)
    extra_sigmas: tuple[float, ...] = (0.5, 1.0, 5.0)  # further noise levels, reported and plotted

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        seeds.check_stream(self.stream)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0 (sigma = 0 is the clean condition), got {self.sigma}")
        if any(not s > 0 for s in self.extra_sigmas):
            raise ValueError(f"extra_sigmas must all be > 0, got {self.extra_sigmas}")

    def conditions(self) -> list[tuple[str, float]]:
        """(corruption, sigma) in row order: clean, Gaussian by sigma, null, shuffle, sign flip."""
        return _conditions(sorted({*self.extra_sigmas, self.sigma}))


def _conditions(sigmas) -> list[tuple[str, float]]:
    return [("clean", 0.0), *(("gaussian", float(s)) for s in sigmas), ("null", 0.0), ("shuffle", 0.0),
            ("sign_flip", 0.0)]


FULL = BoundaryConfig()
# Quick size (cells.CPU, 200 epochs) screened on the SCREENING stream (stream=1, 2 seeds): gap clean +0.504,
# sigma = 2 +0.013, null +0.017, shuffle +0.004, |flip - clean| 0.006; 400 epochs gave sigma = 2 +0.024, so
# epochs do not rescue it; after commit 42a4f86 (new random streams) sigma = 2 +0.010. Re-screened for the
# interval checks (stream=1, 6 seeds, 100 epochs): clean +0.410 [0.368, 0.453], sigma = 2 +0.008 [-0.019, 0.034]
# (FAIL, seed sd 0.023), null +0.002 [-0.017, 0.022], shuffle +0.004 [-0.013, 0.022], flip - clean -0.005
# [-0.052, 0.043] (INCONCLUSIVE against +-0.05, about 7 seeds); interval widths 0.085 / 0.052 / 0.040 / 0.034 /
# 0.094. Chosen: 200 epochs (the size ``uat.darkroom`` needs, see its QUICK comment) at 4 seeds, the
# issue's headline check (sigma = 2, 0.086-0.120 over 2 judged seeds with sd near 0.1) needing the most.
# Episode length (the paper's DarkRoom episodes are T = 60, cells.CPU's 30), screened on stream 1 at this size
# (4 seeds): sigma = 2 +0.023 [0.010, 0.035] at T = 30 and +0.048 [0.023, 0.072] at T = 60, both FAIL against
# 0.1 (clean +0.51 and +0.54; paper 0.18 and 0.52). T = 60 doubles the gap but not to the margin, at about
# twice the time (docs/performance.md), so the quick size keeps 30.
QUICK = BoundaryConfig(size=cells.CPU, seeds=4, extra_sigmas=())


def _curves(grid: dict, i: int) -> dict:
    """The training curves of task row ``i`` of a trained grid, [seeds, epochs] each."""
    return {"loss": grid["loss"][i], "train_accuracy": grid["train_accuracy"][i]}


def compute_sweep(cfg: BoundaryConfig, field: str, values: list, ctx: RunContext) -> list[dict]:
    """:func:`compute` at ``sigma`` = each value: UAT on the union of the conditions (each
    sigma-free condition once) and VT once, as one program; then each value's rows."""
    if field not in TRACED:
        raise ValueError(f"uat.boundary traces only {TRACED}, got {field!r}")
    points = [dataclasses.replace(cfg, sigma=float(v)) for v in values]
    union = _conditions(sorted({s for p in points for s in (*p.extra_sigmas, p.sigma)}))
    names = [label(*c) for c in union]
    runs = {"uat": [Task.make(cfg.schedule, *c) for c in union], "vt": [Task.make(cfg.schedule)]}
    labels = {"uat": [f"condition {x}" for x in names], "vt": ["condition clean"]}
    grids = train_models(ctx, "boundary", cfg.size, runs, labels, cfg.seeds, cfg.stream)
    uat, vt = grids["uat"], grids["vt"]
    out = []
    for p in points:
        rows = [names.index(label(*c)) for c in p.conditions()]
        curves = {f"uat/{names[i]}": _curves(uat, i) for i in rows}
        curves["vt/clean"] = _curves(vt, 0)
        out.append({"accuracy_uat": uat["accuracy"][rows], "accuracy_vt": vt["accuracy"][0], "curves": curves})
    return out


def compute(cfg: BoundaryConfig, ctx: RunContext) -> dict:
    """``accuracy_uat`` [conditions, seeds], ``accuracy_vt`` [seeds], ``curves``."""
    return compute_sweep(cfg, "sigma", [cfg.sigma], ctx)[0]


def summarize(cfg: BoundaryConfig, arrays: dict) -> Summary:
    """Per condition: UAT accuracy and the UAT - VT gap (seed mean/std); the section 6.3 checks."""
    names = [label(*c) for c in cfg.conditions()]
    acc_uat, acc_vt = np.asarray(arrays["accuracy_uat"]), np.asarray(arrays["accuracy_vt"])
    metrics = cells.mean_std("acc_vt", acc_vt)
    for i, name in enumerate(names):
        metrics.update(cells.mean_std(f"acc_uat_{name}", acc_uat[i]))
        metrics.update(cells.mean_std(f"gap_{name}", acc_uat[i] - acc_vt))
    g = lambda name: metrics[f"gap_{name}"]  # noqa: E731
    noisy = label("gaussian", cfg.sigma)
    key = noisy[len("gaussian_"):]
    metrics[f"gap_shrink_{key}"] = g(noisy) - g("clean")
    row = lambda name: acc_uat[names.index(name)]  # noqa: E731
    gap = lambda name: checks.paired(row(name), acc_vt)  # noqa: E731
    found = [
        GAP_CLEAN.judge(gap("clean"), control=gap("null")),
        dataclasses.replace(ABOVE_AT, paper=PAPER.get(f"gap_{noisy}")).judge(gap(noisy), control=gap("null"), key=key),
        NULL_SMALL.judge(gap("null"), control=gap("clean")),
        SHUFFLE_SMALL.judge(gap("shuffle"), control=gap("clean")),
        FLIP_SAME.judge(checks.paired(row("sign_flip"), row("clean")), control=checks.paired(row("null"), row("clean"))),
    ]
    table = {"condition": names, "acc_uat": [metrics[f"acc_uat_{n}"] for n in names],
             "acc_uat_std": [metrics[f"acc_uat_{n}_std"] for n in names],
             "gap": [g(n) for n in names], "gap_std": [metrics[f"gap_{n}_std"] for n in names],
             "gap_paper": [PAPER.get(f"gap_{n}", float("nan")) for n in names]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: BoundaryConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``boundary.csv`` (per condition) and ``boundary.png`` (the gap by condition, paper marked)."""
    table = summary.tables["table"]
    io.write_csv(out_dir / "boundary.csv", {k: table[k] for k in ("condition", "acc_uat", "acc_uat_std", "gap", "gap_std")})
    import matplotlib.pyplot as plt

    names = table["condition"]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.errorbar(xs, table["gap"], yerr=table["gap_std"], marker="o", label="ours")
    paper = np.asarray(table["gap_paper"], dtype=float)
    ax.plot(xs[np.isfinite(paper)], paper[np.isfinite(paper)], "kx", ms=7, label="paper")
    ax.set_xticks(xs, names, fontsize=7, rotation=20)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("accuracy gap UAT - VT")
    ax.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "boundary.png")


STUDY = register(Study(
    name="uat.boundary",
    cost_fields=("size.epochs",),
    summary="UAT - VT gap as the fed rewards degrade (noise, null, shuffle, sign flip)",
    config_type=BoundaryConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", traced=TRACED, compute_sweep=compute_sweep, claims=CLAIMS,
    quick_s=115,
))

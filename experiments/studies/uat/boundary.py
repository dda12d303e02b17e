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
2 seeds) keeps clean, sigma = 2, null, shuffle and sign flip; full adds sigma = 0.5, 1
and 5 (the paper's sweep) at Table 3 size.

``sigma`` is an array leaf of the program (``traced``): ``--sweep sigma=0.5,1,2`` trains
every noise level, and the sigma-free conditions once, in one vmapped program.

Checks, and how each could fail (paper, section 6.3: gap +0.52 clean, +0.18 at
sigma = 2, +0.05 null, +0.02 shuffled; "inverting every reward leaves UAT almost
unchanged"):

* ``gap_clean_wide`` (> 0.2; paper +0.52): with clean feedback UAT leads VT widely;
  fails if UAT does not use the feedback (see ``uat.darkroom``).
* ``uat_above_vt_at_sigma_<sigma>`` (gap at sigma > 0.1, the band below which the null
  and shuffle checks call UAT "back to VT"; paper +0.18 at sigma = 2): under Gaussian
  reward noise UAT still extracts the goal from the averaged shaping rewards. Fails if
  UAT cannot integrate the noisy rewards at this size and budget, i.e. falls to VT.
* ``gap_null_small``, ``gap_shuffle_small`` (< 0.1; paper +0.05, +0.02): without
  informative rewards UAT falls back to about VT; fails if UAT's gain came from
  something other than the reward values (e.g. its own actions alone), or if the
  shuffle leaked the current reward.
* ``sign_flip_unchanged`` (|UAT sign-flipped - UAT clean| <= 0.05): a sign flip keeps
  all the information, and UAT is trained under the same flip, so it must learn as well;
  fails if training depended on the sign convention of the reward (e.g. a ReLU encoder
  that learns from positive rewards only).

``gap_shrink_<sigma>`` (gap at sigma minus the clean gap; paper 0.18 - 0.52) is
reported, not checked: that noise costs information holds by construction.

At the quick size ``uat_above_vt_at_sigma_2`` is fragile. On the screening seeds UAT
trained on rewards with noise sigma = 2 (four times the +-0.5 shaping term) ended at
VT's accuracy: gap +0.013 at 200 epochs, +0.024 at 400 epochs (so the epoch budget is
not what is missing). On the judged seeds (one run of 200 epochs) it passed narrowly,
+0.120 +- 0.051 over 2 seeds (one seed below 0.1); the gradual runs there drift on
14 cells on average, against 18 on the screening seeds, and fewer goals help both models.
Since VT became a row of the UAT program (same computation, other float rounding) the
judged run gives VT 0.442 instead of 0.418 and the check FAILS, +0.096 +- 0.057; 0.442
is also what the old separate VT program gave on the same seeds and task in
``uat.darkroom`` (batch 6 there, 2 here), so the check sits inside the rounding noise of
training. With the rollout's random draws made before its time loop (new random streams) the judged
run gives +0.086 (FAIL) and the screening run +0.010.
Our guess, untested here: the quick episodes (T = 30, half of Table 3's 60) hold too
few noisy rewards to average the noise out; the full (Table 3) size tests the claim.
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
WIDE_GAP = 0.2
SMALL_GAP = 0.1
FLIP_TOL = 0.05


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
# Quick size (cells.CPU, 200 epochs) screened on the SCREENING stream (stream=1, 2 seeds):
# gap clean +0.504, sigma = 2 +0.013, null +0.017, shuffle +0.004, |flip - clean| 0.006,
# i.e. uat_above_vt_at_sigma_2 fails there. 400 epochs (same seeds, UAT at sigma = 2 and
# VT only) gave +0.024 (UAT 0.374, VT 0.350): more epochs do not rescue it, and a larger
# budget would exceed the suite's runtime, so the size is kept (see the module docstring).
# Re-screened after commit 42a4f86 (new random streams): sigma = 2 +0.010
# (FAIL), the other four pass; the judged run that followed: +0.086 (FAIL, UAT 0.513, VT 0.427).
QUICK = BoundaryConfig(size=cells.CPU, seeds=2, extra_sigmas=())


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
    metrics[f"gap_shrink_{noisy[len('gaussian_'):]}"] = g(noisy) - g("clean")
    found = [
        checks.above("gap_clean_wide", g("clean"), WIDE_GAP, paper=PAPER["gap_clean"],
                     claim="with clean feedback UAT leads Vanilla-TF by a wide margin"),
        checks.above(f"uat_above_vt_at_sigma_{noisy[len('gaussian_'):]}", g(noisy), SMALL_GAP,
                     paper=PAPER.get(f"gap_{noisy}"),
                     claim=f"under Gaussian reward noise (sigma = {cfg.sigma:g}) UAT stays above Vanilla-TF"),
        checks.below("gap_null_small", g("null"), SMALL_GAP, paper=PAPER["gap_null"],
                     claim="with null rewards UAT falls back to about Vanilla-TF"),
        checks.below("gap_shuffle_small", g("shuffle"), SMALL_GAP, paper=PAPER["gap_shuffle"]),
        checks.at_most("sign_flip_unchanged", abs(metrics["acc_uat_sign_flip"] - metrics["acc_uat_clean"]), FLIP_TOL),
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
    summary="UAT - VT gap as the fed rewards degrade (noise, null, shuffle, sign flip)",
    config_type=BoundaryConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", traced=TRACED, compute_sweep=compute_sweep,
    quick_s=80,
))

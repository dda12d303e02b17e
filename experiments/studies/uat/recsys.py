"""Study ``uat.recsys``: Table 1, Domain D and the Figure 1 delay / corruption boundary of
"Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential Decision
Making" (UAT, arXiv 2607.18910), Appendix C.1-C.3, D.2.

UAT and the baselines Vanilla-TF (VT), A-DT, DT-style and GTrXL are trained teacher-forced
on MovieLens genre-regime windows (T = 50) against the regime-aware expert's targets, with
the delayed reward r~_t = r_{t-d} as feedback (``uat_jax.recsys``; data, reward, expert,
delay, corruptions, candidates and metrics: ``uat_jax.recsys_data``; derivations in
``docs/uat.md``), and ranked leave-one-out against 99 sampled negatives: HR@10/20, NDCG@10/20.
SASRec (``uat_jax.sasrec``, Kang & McAuley, arXiv 1808.09781; the paper's Domain D baseline, HR@10
0.281) is trained on the logged successors with its own objective and ranked the same way: a reported
row, in no check (``--set sasrec=false`` drops it). So is BERT4Rec (``uat_jax.bert4rec``, Sun et al.,
arXiv 1904.06690; the paper's other Domain D baseline, HR@10 0.160): bidirectional self-attention trained
on the Cloze task over the same logged sequences, ranked at a [MASK] appended to the shifted test history
(``--set bert4rec=false`` drops it). The main setting is d = 1. The boundary sweep (D.2, Figure 1)
retrains UAT and VT at each delay of ``delays`` and, at d = 1, under each corruption of ``corruptions`` (null: zeros;
shuffled: a uniform past delayed reward; adversarial: -r~). UAT, VT and their boundary
conditions and A-DT are one vmapped program (VT is the switched UAT with both pathways off,
A-DT Vanilla-TF with the fed pair in its input, ``uat_jax.model``); DT-style and GTrXL one
program each; seed ``s`` of every
condition and model uses the same key. The dataset is one replicated argument of every
program (``sweep_map(shared=...)``).

Data: ``data_dir`` names a MovieLens folder as GroupLens ships it (ml-25m and ml-latest's
``ratings.csv``, ``movies.csv``; ml-1m's ``.dat`` files; ml-100k's ``u.data``, ``u.item``,
``u.genre``: ``recsys_data.LAYOUTS``), prepared with ``data``, the paper's filters by default; without
it the synthetic generator (``recsys_data.write_synthetic`` with ``synthetic``) writes the
two files into the run's folder (``synthetic/``) and the study reads them back through the
same reader. On synthetic data the paper's numbers are beside ours for orientation only:
the checks are the paper's comparisons.

Checks: interval claims over seeds, every arm paired by seed (seed ``s`` of every model and condition shares its
key), each with a negative control under which it must not hold (a control that passes makes the check NO POWER);
how each could fail:

* ``uat_beats_vt_hr10`` (UAT - VT HR@10 at d = 1 > 0.02; paper +0.045; control: UAT under the
  null corruption in UAT's place): the hidden genre regime is in the rewards only (the synthetic
  regimes are drawn independently of the log), so the observation-only VT can rank by popularity
  and the user's taste but not by the active genre. It fails if UAT does not learn to read the
  delayed (item, reward) pair; it has no power if UAT-null leads VT as far.
* ``uat_on_par_with_adt_hr10`` (UAT - A-DT HR@10 > -0.03; paper +0.004; control: UAT-null in
  UAT's place): attention conditioned on the utility is at least as good as the feedback
  concatenated to the input. It fails if the input-level channel learns the regime and the
  modulated attention does not; it has no power if a UAT without rewards is on par too.
* ``uat_gain_needs_feedback`` (the UAT - VT gap at d = 1 clean minus the gap under the null
  corruption > 0.02; paper: "near VT under null"; control: VT clean minus VT under null, which is
  feedback-blind and trained in the same program, so exactly 0): UAT's lead must come from the
  rewards, not from the extra capacity of its utility pathway, which still reads the delayed items
  when the rewards are zeroed. It fails if UAT gains as much with zero rewards.
* ``gap_shrinks_with_delay`` (full size: gap at d = 0 minus gap at the largest delay > 0; paper
  +0.054 at d = 0 against +0.014 at d = 5; control, in the tests only: a UAT reading no feedback,
  whose lead is the same at every delay): older feedback says less about the active regime
  (segments of >= 6 steps). It fails if the gap does not fall with the delay.

Quick size: see ``QUICK`` below (screened on stream 1, disjoint from the judged stream 0).

Table 5 on this domain: ``models`` may also name the Table 4 ablations of UAT (``uat_jax.config.ABLATIONS``);
they join the switched-family program as more members and are reported rows beside Table 5's values, in
no check. FULL trains all six; at the quick size, e.g. ``--set 'models=[..., "no_kv", "no_reward"]'``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import check_models, train_models
from uat_jax import bert4rec, cells, recsys, recsys_data, sasrec
from uat_jax.config import ABLATIONS

PAPER_TABLE1 = {"uat": (0.341, 0.155), "vt": (0.296, 0.135), "gtrxl": (0.311, 0.142), "dt": (0.339, 0.155),
                "adt": (0.337, 0.154), "sasrec": (0.281, 0.129),
                "bert4rec": (0.160, 0.073),  # Table 1, Domain D: HR@10, NDCG@10
                "no_action": (0.341, 0.154), "no_reward": (0.293, 0.134), "linear": (0.340, 0.155),
                "no_q": (0.339, 0.155), "no_kv": (0.294, 0.134), "no_bias": (0.336, 0.154)}  # Table 5 D
PAPER = {**{f"hr@10_{m}": v[0] for m, v in PAPER_TABLE1.items()},
         **{f"ndcg@10_{m}": v[1] for m, v in PAPER_TABLE1.items()},
         "gap_d0": 0.054, "gap_d5": 0.014}  # section 6.3, Figure 1: UAT - VT HR@10 by delay

MODELS = ("uat", "vt", "adt", "dt", "gtrxl")
CHECKED = ("uat", "vt", "adt")
FAMILY = ("uat", "vt")  # trained under every boundary condition
MAIN_DELAY = 1  # Table 3
CORRUPTIONS = tuple(c for c in recsys_data.CORRUPTIONS if c != "clean")
MARGIN = 0.02
ON_PAR = -0.03
METRICS = tuple(f"{m}@{k}" for m in ("hr", "ndcg") for k in recsys_data.KS)


CONTROL = "UAT under the null corruption (rewards zeroed) in UAT's place"
UAT_BEATS_VT_HR10 = checks.Claim(
    "uat_beats_vt_hr10", "UAT ranks the regime-aware target above the observation-only Vanilla-TF "
    "(HR@10, UAT - VT at d = 1, paired by seed)", ">", MARGIN, control=CONTROL,
    fails_if="UAT does not learn to read the delayed (item, reward) pair",
    paper=PAPER["hr@10_uat"] - PAPER["hr@10_vt"])
UAT_ON_PAR_WITH_ADT_HR10 = checks.Claim(
    "uat_on_par_with_adt_hr10", "UAT is at least on par with A-DT, the feedback concatenated to the input "
    "(HR@10, UAT - A-DT)", ">", ON_PAR, control=CONTROL,
    fails_if="the input-level channel learns the regime and the modulated attention does not",
    paper=PAPER["hr@10_uat"] - PAPER["hr@10_adt"])
UAT_GAIN_NEEDS_FEEDBACK = checks.Claim(
    "uat_gain_needs_feedback", "UAT's lead over VT comes from the rewards: it shrinks when they are zeroed "
    "(the UAT - VT gap clean minus the gap under the null corruption)", ">", MARGIN,
    control="VT, clean minus under the null corruption (feedback-blind: no gain possible)",
    fails_if="UAT gains as much with zero rewards (its utility pathway also reads the delayed items)")
GAP_SHRINKS_WITH_DELAY = checks.Claim(
    "gap_shrinks_with_delay", "UAT's lead over VT falls from d = 0 to the largest delay (older feedback)",
    ">", 0.0, control="UAT reading no feedback (in the tests: equal gaps at every delay)",
    fails_if="the gap does not fall with the delay, as when UAT reads no feedback (both gaps noise around a "
             "constant)", paper=PAPER["gap_d0"] - PAPER["gap_d5"])
CLAIMS = (UAT_BEATS_VT_HR10, UAT_ON_PAR_WITH_ADT_HR10, UAT_GAIN_NEEDS_FEEDBACK, GAP_SHRINKS_WITH_DELAY)


@dataclasses.dataclass(frozen=True)
class RecsysStudyConfig:
    """Which models, under which delays and corruptions, at which size, on which data."""

    size: cells.Size = recsys.TABLE3
    lr: float = 1e-3  # Table 3, Domain D
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    models: tuple[str, ...] = MODELS
    delays: tuple[int, ...] = recsys_data.DELAYS  # UAT and VT retrained at each (d = 1 is the main setting)
    corruptions: tuple[str, ...] = CORRUPTIONS  # UAT and VT retrained under each, at d = 1
    data_dir: str | None = None  # a MovieLens folder; None: synthetic files written to the run's folder
    data: recsys_data.RecsysConfig = recsys_data.RecsysConfig()
    synthetic: recsys_data.SyntheticConfig = recsys_data.SyntheticConfig()
    sasrec: bool = True  # also train SASRec (uat_jax.sasrec) on the logged successors, a reported baseline
    bert4rec: bool = True  # also train BERT4Rec (uat_jax.bert4rec), Cloze task on the logged items, a reported baseline

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        seeds.check_stream(self.stream)
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        check_models(self.models, CHECKED, extra=ABLATIONS)  # a kind, or a Table 4 ablation of UAT (Table 5 D)
        if (MAIN_DELAY not in self.delays or len(set(self.delays)) != len(self.delays)
                or not all(isinstance(d, int) and 0 <= d < self.size.horizon for d in self.delays)):
            raise ValueError(f"delays must be distinct integers in [0, size.horizon = {self.size.horizon}) including "
                             f"the main delay {MAIN_DELAY}, got {self.delays}")
        if not set(self.corruptions) <= set(CORRUPTIONS) or len(set(self.corruptions)) != len(self.corruptions):
            raise ValueError(f"corruptions must be distinct names from {CORRUPTIONS}, got {self.corruptions}")
        if self.data_dir is not None and not Path(self.data_dir).is_dir():
            raise ValueError(f"data_dir {self.data_dir!r} is not a folder (expected the files of a MovieLens release: "
                             + "; ".join(f"{k}: {', '.join(v)}" for k, v in recsys_data.LAYOUTS.items()) + ")")
        if self.size.horizon != self.data.horizon:
            raise ValueError(f"size.horizon ({self.size.horizon}) must equal data.horizon ({self.data.horizon}), "
                             "the window length T")

    @property
    def reported(self) -> tuple[str, ...]:
        """Every model with a row: ``models`` and, with ``sasrec`` / ``bert4rec``, SASRec and BERT4Rec (main
        condition only)."""
        return (*self.models, *(("sasrec",) if self.sasrec else ()), *(("bert4rec",) if self.bert4rec else ()))

    @property
    def conditions(self) -> tuple[tuple[int, str], ...]:
        """(delay, corruption) of every condition UAT and VT train under; the main one first."""
        return ((MAIN_DELAY, "clean"), *((d, "clean") for d in self.delays if d != MAIN_DELAY),
                *((MAIN_DELAY, c) for c in self.corruptions))


def condition_name(delay: int, corruption: str) -> str:
    """``d1`` (clean at delay 1), ``d1_null``, ..."""
    return f"d{delay}" if corruption == "clean" else f"d{delay}_{corruption}"


FULL = RecsysStudyConfig(models=(*MODELS, *ABLATIONS))  # Table 1 D and Table 5 D: the ablations join the family
# Quick size, chosen on the SCREENING stream (stream=1, 2 seeds) before any judged run. The synthetic
# catalogue is smaller and denser than the default (220 items after filters lowered to 53 interactions per
# user, T + 3, and 20 ratings per item; 282 users), so each item is seen often enough at a CPU budget.
# Screened with UAT, VT and UAT under null rewards (d = 1, d_model 32, 2 layers): on the default catalogue
# (450 items after the paper's filters) 300 epochs of B = 32 learned nothing (HR@10 0.18-0.20 for all); on
# the 220-item catalogue, 1,000 epochs of B = 32: lr 2e-3 UAT 0.314 / VT 0.264 / UAT-null 0.328; lr 5e-3 UAT 0.362 / VT 0.229 /
# UAT-null 0.337; lr 2e-3 with EMA decay 0.7 (not Table 3's 0.95, not kept) UAT 0.341 / VT 0.264 / UAT-null
# 0.305. The kept size (B = 16, 600 epochs, lr 5e-3, Table 3's EMA 0.95), screened through this study:
# UAT 0.317, UAT-null 0.298, VT 0.270, A-DT 0.254: uat_beats_vt_hr10 +0.048 and uat_on_par_with_adt_hr10
# +0.064 pass, uat_gain_needs_feedback +0.0195 fails narrowly. So at this size most of UAT's lead over VT
# does not come from the rewards (its utility pathway also reads the delayed items), the reading the
# null check exists to catch. The delay sweep runs at full size only (delays = (1,) here).
# The judged run that followed (stream 0): UAT 0.296 +- 0.037, UAT-null 0.293, VT 0.195, A-DT 0.270 (HR@10):
# uat_beats_vt_hr10 +0.101 and uat_on_par_with_adt_hr10 +0.027 pass; uat_gain_needs_feedback +0.0035 FAILS.
# SASRec joined afterwards (not screened: a reported row at the study's lr 5e-3); the programs' shared dataset
# argument gained the logged successors, and the judged run then gave UAT 0.300, UAT-null 0.255, VT 0.220,
# A-DT 0.287: all three pass (null check +0.044), so that verdict is within float-rounding noise at this size.
# SASRec 0.131 (chance 0.10; it is trained on the log, ranked on the expert's item).
# Per-seed intervals and controls (issue "Verdicts with power"), 4 seeds (2 gave t intervals 12.7 standard errors
# wide), screened on stream 1 (paired by seed, 95% t): UAT - VT HR@10 +0.055 [+0.007, +0.103] INCONCLUSIVE (about
# 5 seeds; control UAT-null - VT +0.059, also inconclusive: UAT-null leads VT as far as UAT does); UAT - A-DT
# +0.028 [-0.030, +0.087] INCONCLUSIVE (about 5; control +0.033); the null-reward gain -0.004 [-0.055, +0.046]
# INCONCLUSIVE (about 7; control VT clean - VT null exactly 0, FAIL). The float-rounding swing of that gain
# (+0.0035 to +0.044 between two judged runs of 2 seeds) is inside this interval. Judged once (stream 0, 4 seeds):
# UAT - VT +0.059 [+0.030, +0.089] PASS (control UAT-null - VT +0.055, INCONCLUSIVE: not decisive either way);
# UAT - A-DT +0.019 [-0.058, +0.095] INCONCLUSIVE (about 5 seeds); null-reward gain +0.004 [-0.049, +0.058]
# INCONCLUSIVE (about 19 seeds; control exactly 0, FAIL). 416 s beside other work (a load of 3-5 on 2 cores).
# BERT4Rec joined afterwards at SASRec's size (the same epochs, batch, width and lr; mask_prob 0.2, not tuned),
# screened on stream 1 (4 seeds): HR@10 0.137 +- 0.012, NDCG@10 0.069 (SASRec 0.130 / 0.069; chance 0.10); its Cloze
# loss falls from 5.39 (log V) to 4.89 over the 600 epochs, still falling. It adds 29 s to the quick wall (360 against
# 331 s, compiling 60 against 42 s, at a load of about 3 on 2 cores).
QUICK = RecsysStudyConfig(
    size=cells.Size(d_model=32, n_heads=4, d_ff=64, n_layers=2, horizon=50, batch_size=16, epochs=600,
                    eval_episodes=1, ema_decay=0.95, dropout=0.1),
    lr=5e-3, seeds=4, models=CHECKED, delays=(1,), corruptions=("null",),
    data=recsys_data.RecsysConfig(min_user_interactions=53, min_item_ratings=20),
    synthetic=recsys_data.SyntheticConfig(n_items=220, min_len=60, max_len=100, light_len=(20, 52)))


def load_data(cfg: RecsysStudyConfig, out_dir: Path) -> recsys_data.RecsysData:
    """The user's MovieLens folder, or the synthetic files written to ``out_dir/synthetic``."""
    folder = cfg.data_dir
    if folder is None:
        folder = Path(out_dir) / "synthetic"
        recsys_data.write_synthetic(folder, cfg.synthetic)
    return recsys_data.load(folder, cfg.data)


def compute(cfg: RecsysStudyConfig, ctx: RunContext) -> dict:
    """``metrics``: {model: {metric: [conditions, seeds]}} (the baselines: the main condition
    only); ``curves``: {"model/condition": ...}; ``dataset``: its sizes."""
    data = load_data(cfg, ctx.out_dir)

    def configure(kind, variant=None, traced_variant=False):
        return dataclasses.replace(recsys.train_config(cfg.size, data.n_items, kind, variant, traced_variant),
                                   lr=cfg.lr)

    conditions = {m: cfg.conditions if m in FAMILY else cfg.conditions[:1] for m in cfg.models}
    runs = {m: [recsys.RecsysTask.make(d, c) for d, c in conditions[m]] for m in cfg.models}
    labels = {m: [condition_name(*c) for c in conditions[m]] for m in cfg.models}
    arrays = recsys.data_arrays(data)
    grids = train_models(ctx, "recsys", cfg.size, runs, labels, cfg.seeds, cfg.stream,
                         env=arrays, configure=configure, make_cell=recsys.make_cell)
    # the sequence recommenders: one program over seeds each; [1 condition, seeds] like the other baselines
    for name, module in (("sasrec", sasrec), ("bert4rec", bert4rec)):
        if name not in cfg.reported:
            continue
        out = seeds.train_grid(ctx, f"recsys_{name}", module.make_cell(configure("vt")),
                               {"key": seeds.seed_keys(cfg.seeds, cfg.stream)}, labels=[condition_name(MAIN_DELAY, "clean")],
                               num_seeds=cfg.seeds, loss_of=lambda o: o["loss"], shared=arrays)
        grids[name] = {k: np.asarray(v)[None] for k, v in out.items()}
        labels[name] = [condition_name(MAIN_DELAY, "clean")]
    out: dict = {"metrics": {}, "curves": {},
                 "dataset": {"users": np.asarray(data.train.items.shape[0]), "items": np.asarray(data.n_items)}}
    for model, grid in grids.items():
        out["metrics"][model] = {k: grid[k] for k in METRICS}
        for i, name in enumerate(labels[model]):
            out["curves"][f"{model}/{name}"] = {k: grid[k][i] for k in ("loss", "train_accuracy") if k in grid}
    return out


def summarize(cfg: RecsysStudyConfig, arrays: dict) -> Summary:
    """Seed mean/std of every metric per model and condition; the Table 1 D and Figure 1 checks."""
    metrics: dict[str, float] = {"users": float(arrays["dataset"]["users"]), "items": float(arrays["dataset"]["items"])}
    rows = []
    for model in cfg.reported:
        conds = cfg.conditions if model in FAMILY else cfg.conditions[:1]
        for i, cond in enumerate(conds):
            suffix = model if i == 0 else f"{model}_{condition_name(*cond)}"
            for k in METRICS:
                metrics.update(cells.mean_std(f"{k}_{suffix}", arrays["metrics"][model][k][i]))
            rows.append((model, condition_name(*cond), suffix))
    found = judge(cfg, arrays["metrics"], metrics)
    table = {"model": [m for m, _, _ in rows], "condition": [c for _, c, _ in rows],
             **{k: [metrics[f"{k}_{s}"] for _, _, s in rows] for k in METRICS},
             **{f"{k}_std": [metrics[f"{k}_{s}_std"] for _, _, s in rows] for k in METRICS},
             "hr@10_paper": [PAPER.get(f"hr@10_{m}", float("nan")) if c == f"d{MAIN_DELAY}" else float("nan")
                             for m, c, _ in rows]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def judge(cfg: RecsysStudyConfig, out: dict, metrics: dict[str, float]) -> list[checks.Check]:
    """The Table 1 D and Figure 1 checks on per-seed HR@10 (``out``: {model: {metric: [conditions, seeds]}}),
    paired by seed (every model and condition of seed ``s`` shares its key); adds the delay gaps to ``metrics``."""
    hr = {(m, condition_name(*c)): np.asarray(out[m]["hr@10"][i], np.float64)
          for m in cfg.models for i, c in enumerate(cfg.conditions if m in FAMILY else cfg.conditions[:1])}
    main = condition_name(MAIN_DELAY, "clean")
    gap = lambda cond: checks.paired(hr["uat", cond], hr["vt", cond])  # noqa: E731
    null = condition_name(MAIN_DELAY, "null") if "null" in cfg.corruptions else None
    found = [UAT_BEATS_VT_HR10.judge(gap(main), checks.paired(hr["uat", null], hr["vt", main]) if null else None),
             UAT_ON_PAR_WITH_ADT_HR10.judge(checks.paired(hr["uat", main], hr["adt", main]),
                                            checks.paired(hr["uat", null], hr["adt", main]) if null else None)]
    if null:
        found.append(UAT_GAIN_NEEDS_FEEDBACK.judge(gap(main) - gap(null), checks.paired(hr["vt", main],
                                                                                        hr["vt", null])))
    longest = max(cfg.delays)
    if 0 in cfg.delays and longest > MAIN_DELAY:
        metrics["gap_d0"], metrics[f"gap_d{longest}"] = float(gap("d0").mean()), float(gap(f"d{longest}").mean())
        found.append(GAP_SHRINKS_WITH_DELAY.judge(gap("d0") - gap(f"d{longest}")))
    return found


def write(cfg: RecsysStudyConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``recsys.csv`` (every model x condition x seed) and ``recsys.png`` (Table 1 D bars; UAT and VT
    HR@10 by condition)."""
    rows: dict[str, list] = {"model": [], "condition": [], "seed": [], **{k: [] for k in METRICS}}
    for model in cfg.reported:
        conds = cfg.conditions if model in FAMILY else cfg.conditions[:1]
        for i, cond in enumerate(conds):
            for s in range(cfg.seeds):
                rows["model"].append(model)
                rows["condition"].append(condition_name(*cond))
                rows["seed"].append(s)
                for k in METRICS:
                    rows[k].append(float(arrays["metrics"][model][k][i, s]))
    io.write_csv(out_dir / "recsys.csv", rows)
    import matplotlib.pyplot as plt

    m = summary.metrics
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    xs = np.arange(len(cfg.reported))
    for j, k in enumerate(("hr@10", "ndcg@10")):
        left.bar(xs + (j - 0.5) * 0.4, [m[f"{k}_{x}"] for x in cfg.reported], 0.4,
                 yerr=[m[f"{k}_{x}_std"] for x in cfg.reported], label=k)
        left.plot(xs + (j - 0.5) * 0.4, [PAPER.get(f"{k}_{x}", np.nan) for x in cfg.reported], "kx",
                  label="paper" if j == 0 else None)
    left.set_xticks(xs, cfg.reported)
    left.set_title(f"d = {MAIN_DELAY}, clean", fontsize=8)
    left.legend(fontsize=7)
    names = [condition_name(*c) for c in cfg.conditions]
    xs = np.arange(len(names))
    for model in FAMILY:
        keys = [f"hr@10_{model}" + ("" if i == 0 else f"_{n}") for i, n in enumerate(names)]
        right.errorbar(xs, [m[k] for k in keys], yerr=[m[f"{k}_std"] for k in keys], marker="o", ls="", label=model)
    right.set_xticks(xs, names, fontsize=7, rotation=20)
    right.set_ylabel("HR@10")
    right.set_title("boundary conditions (delay d, corruption)", fontsize=8)
    right.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "recsys.png")


STUDY = register(Study(
    name="uat.recsys",
    cost_fields=("size.epochs",),
    summary="UAT vs VT / A-DT / DT-style / GTrXL on delayed-feedback recommendation, delay and corruption sweep "
            "(Table 1 D, Figure 1)",
    config_type=RecsysStudyConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=240,
))

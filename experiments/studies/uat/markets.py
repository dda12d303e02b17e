"""Study ``uat.markets``: Table 1, Domain C (cross-market portfolio allocation) and the Figure 3
(right) regime gate of "Breaking Feedback-Blindness: Utility-Augmented Transformer for
Sequential Decision Making" (UAT, arXiv 2607.18910), Appendix C.1-C.3 and D.

One shared checkpoint per seed and model is trained on the pooled training windows of every
market (B windows of each per epoch), rollout-then-optimize against the privileged expert's
allocation with L_KL, and evaluated per market on its held-out windows: each window's last
allocation earns the next day's return, giving one return per test date, from which the
annualised Sharpe ratio and CAGR follow (``uat_jax.markets``; data: ``uat_jax.markets_data``;
derivations in ``docs/uat.md`` §16 and §20). UAT and Vanilla-TF (VT, the switched UAT with both
pathways off), A-DT (VT with the fed pair in its input) and UAT and VT fed null rewards are one
vmapped program; DT-style and GTrXL one program each; seed ``s`` of every model uses the same key. The data are one replicated argument
of every program (``sweep_map(shared=...)``).

Data: ``data_dir`` names a folder of market sub-folders of daily OHLCV CSVs (Yahoo or AkShare
layout; docs/uat.md §16); without it the synthetic regime-switching generator writes three
markets (``SYNTHETIC``: DJIA-, HSI- and CSI 300-sized, the last in the AkShare layout) into the
run's folder (``synthetic/``), read back through the same reader. On synthetic data the paper's
Sharpe ratios are beside ours for orientation only: the checks are the paper's comparisons.

Checks: interval claims over seeds (each seed's value averaged over markets and test windows), every arm paired
by seed, each with a negative control under which it must not hold (a control that passes makes the check NO
POWER); how each could fail:

* ``uat_beats_vt_sharpe`` (UAT - VT annualised Sharpe, averaged over markets, > 0; paper +0.035 /
  +0.311 / +0.090; control: UAT fed null returns in UAT's place): the synthetic market's regime
  sets the drift, so the allocation that tracks the expert depends on it; feedback (the realised
  portfolio return) carries the regime, the observation-only VT sees it only through the
  indicators. It fails if UAT does not turn the fed returns into better allocations, or if the
  test period's noise swamps the difference.
* ``uat_beats_adt_sharpe`` (UAT - A-DT annualised Sharpe, averaged over markets, > 0; paper +0.022 /
  +0.271 / +0.101; control: UAT fed null returns in UAT's place): conditioning attention on the fed
  returns must allocate better than concatenating the same (allocation, return) pair to the input.
  It fails if A-DT's input-level channel does as well, or if the test period's noise swamps the
  difference. Made when A-DT is among ``models`` (the quick and full sizes).
* ``uat_beats_vt_kl`` (VT's mean test KL to the expert minus UAT's > 0; control: UAT-null in UAT's
  place): the same claim on the training objective, out of sample, with far less noise than a
  Sharpe ratio of a few hundred daily returns. It fails if UAT fits the expert no better than VT
  on unseen dates.
* ``uat_gain_needs_feedback`` (UAT-null's test KL minus UAT's > 0, i.e. VT's lead taken clean minus
  under null returns; control: the same for VT, clean minus fed null returns, trained in the same
  program: feedback-blind, so exactly 0): UAT's lead must come from the fed returns, not from the
  capacity of its utility pathway, which still reads the fed allocations when the returns are
  zeroed. It fails if UAT fed zeros fits the expert as well.

* ``gate_follows_paper_regime_order`` (Figure 3 right; per seed, the Spearman rank correlation of UAT's
  regime gate, averaged per post-hoc regime of the test windows' last days, with the paper's order on
  HSI, shock > bear > bull > chop, > 0; control: the same seeds' gates with the windows' regime labels
  permuted at random). The gate is read before its tanh, ``||W ubar_{T-1}||``: the tanh saturates, so
  ``||rho||`` sits at its maximum sqrt(d_model) on about 70% of the test windows whatever the regime
  (``gate_saturated_fraction``; ``docs/uat.md`` §20, "The regime gate saturates"), and only the
  pre-activation still varies. It fails if the gate does not separate the regimes in the paper's order.

Reported, not checked: the saturated gate ||rho_{T-1}||_2 per regime beside its pre-activation
(post-hoc and, on synthetic data, the generator's regimes), the Sharpe ratio and CAGR of every model
per market, and of two references: the equal-weight portfolio and the constant allocation
(:func:`constant_allocation`). Departure: the paper trains a separate HSI-only UAT for its gate figure;
here the pooled model's gates are read on every market's test windows, with no further training.

Quick size: see ``QUICK`` below (screened on stream 1, disjoint from the judged stream 0).

Table 5 on this domain: ``models`` may also name the Table 4 ablations of UAT (``uat_jax.config.ABLATIONS``);
they join the switched-family program as more members and are reported rows beside Table 5's values, in
no check. FULL trains all six; at the quick size, e.g. ``--set 'models=[..., "no_kv", "no_reward"]'``.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import check_models, train_models
from uat_jax import cells, markets, markets_data
from uat_jax.config import ABLATIONS

MARKETS = ("DJIA", "HSI", "CSI300")
PAPER_TABLE1 = {"uat": (1.071, 0.554, 0.473), "vt": (1.036, 0.243, 0.383), "gtrxl": (1.030, 0.290, 0.463),
                "dt": (1.052, 0.494, 0.382), "adt": (1.049, 0.283, 0.372),  # Table 1, Domain C: Sharpe
                "no_action": (1.062, 0.339, 0.407), "no_reward": (1.045, 0.272, 0.396), "linear": (1.038, 0.327, 0.417),
                "no_q": (1.024, 0.251, 0.400), "no_kv": (0.972, 0.487, 0.367), "no_bias": (1.070, 0.462, 0.417)}  # Table 5 C
PAPER = {f"sharpe_{m}_{market}": v for m, row in PAPER_TABLE1.items() for market, v in zip(MARKETS, row)}
PAPER.update({f"sharpe_{m}": float(np.mean(row)) for m, row in PAPER_TABLE1.items()})

MODELS = ("uat", "vt", "adt", "dt", "gtrxl")
CHECKED = ("uat", "vt")
NULL = "uat_null"  # UAT trained and evaluated with the fed returns zeroed
SYNTHETIC = (("DJIA", 30, "yahoo"), ("HSI", 45, "yahoo"), ("CSI300", 30, "akshare"))
"""The synthetic markets (name, assets, layout): the sizes of Table 2."""


NULL_VT = "vt_null"  # VT trained and evaluated with the fed returns zeroed: the feedback-blind control
CONTROL = "UAT fed null returns (uat_null) in UAT's place"
UAT_BEATS_VT_SHARPE = checks.Claim(
    "uat_beats_vt_sharpe", "UAT's annualised Sharpe ratio, averaged over the markets, is above VT's "
    "(UAT - VT, paired by seed)", ">", 0.0, control=CONTROL,
    fails_if="UAT does not turn the fed returns into better allocations, or the test period's noise swamps "
             "the difference", paper=PAPER["sharpe_uat"] - PAPER["sharpe_vt"])
UAT_BEATS_ADT_SHARPE = checks.Claim(
    "uat_beats_adt_sharpe", "UAT's annualised Sharpe ratio, averaged over the markets, is above A-DT's, which reads "
    "the same fed pair concatenated to its input (UAT - A-DT, paired by seed)", ">", 0.0, control=CONTROL,
    fails_if="the input-level channel turns the fed returns into allocations as well as the modulated attention, "
             "or the test period's noise swamps the difference", paper=PAPER["sharpe_uat"] - PAPER["sharpe_adt"])
UAT_BEATS_VT_KL = checks.Claim(
    "uat_beats_vt_kl", "UAT tracks the privileged expert's allocation more closely than VT on test dates "
    "(VT's mean test KL - UAT's)", ">", 0.0, control=CONTROL, fails_if="UAT fits the expert no better than VT "
                                                                        "on unseen dates")
UAT_GAIN_NEEDS_FEEDBACK = checks.Claim(
    "uat_gain_needs_feedback", "UAT's lead over VT comes from the fed returns: UAT fed null returns fits the "
    "expert worse (its test KL - UAT's)", ">", 0.0,
    control="VT, clean minus fed null returns (feedback-blind: no gain possible)",
    fails_if="UAT fed zeros is as far ahead of VT (the lead is the utility pathway's capacity)")
PAPER_GATE_ORDER = ("shock", "bear", "bull", "chop")  # Figure 3 right (HSI): the gate's norm, largest first
GATE_ORDER = checks.Claim(
    "gate_follows_paper_regime_order", "UAT's regime gate, read before its tanh (||W ubar|| on each test window's "
    "last day; the tanh saturates, see the module docstring), is largest in the regimes the paper's Figure 3 puts "
    "first: per seed, the Spearman rank correlation of its mean per post-hoc regime with the paper's order (shock "
    "> bear > bull > chop), above 0", ">", 0.0,
    control="the same seeds' gates with the windows' regime labels permuted at random (one permutation per seed)",
    fails_if="the gate does not separate the regimes in the paper's order: it reads the fed returns for something "
             "other than the regime, or its scale follows the market rather than the regime", paper=1.0)
CLAIMS = (UAT_BEATS_VT_SHARPE, UAT_BEATS_ADT_SHARPE, UAT_BEATS_VT_KL, UAT_GAIN_NEEDS_FEEDBACK, GATE_ORDER)
GATE_CONTROL_SEED = 0  # seed of the regime-label permutations of GATE_ORDER's control


@dataclasses.dataclass(frozen=True)
class MarketsStudyConfig:
    """Which models at which size, on which data."""

    size: cells.Size = markets.TABLE3
    lr: float = 2e-3  # Table 3, Domain C
    ue_lr: float = 2e-2  # Table 3's "UE & regime lr": the utility encoder's and the regime readout W_rho's rate
    expert_temperature: float = 0.01
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    models: tuple[str, ...] = MODELS
    null_rewards: bool = True  # also train UAT and VT fed null rewards (the checks' controls)
    data_dir: str | None = None  # a folder of market folders; None: synthetic files written to the run's folder
    max_gap_days: int = markets_data.MAX_GAP_DAYS  # most consecutive trading days one ticker may miss (data error beyond)
    synthetic_days: int = 3000  # trading days of each synthetic market (before holidays and warm-up)
    synthetic_seed: int = 0  # market i is simulated with seed synthetic_seed + i
    eval_batch: int = 128  # test windows rolled out at once (memory only)

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        seeds.check_stream(self.stream)
        for name in ("lr", "ue_lr", "expert_temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        check_models(self.models, CHECKED, extra=ABLATIONS)  # a kind, or a Table 4 ablation of UAT (Table 5 C)
        if self.data_dir is not None and not Path(self.data_dir).is_dir():
            raise ValueError(f"data_dir {self.data_dir!r} is not a folder (expected one sub-folder of OHLCV CSVs "
                             "per market, e.g. data_dir/DJIA/AAPL.csv)")
        if not (isinstance(self.synthetic_days, int) and self.synthetic_days >= 4 * self.size.horizon + 200):
            raise ValueError(f"synthetic_days must be an integer >= 4 size.horizon + 200 = {4 * self.size.horizon + 200} "
                             f"(a test split of at least one window after the indicators' warm-up), "
                             f"got {self.synthetic_days!r}")
        if not (isinstance(self.eval_batch, int) and self.eval_batch >= 1):
            raise ValueError(f"eval_batch must be an integer >= 1, got {self.eval_batch!r}")
        if not (isinstance(self.max_gap_days, int) and self.max_gap_days >= 0):
            raise ValueError(f"max_gap_days must be an integer >= 0, got {self.max_gap_days!r}")

    @property
    def runs(self) -> tuple[str, ...]:
        """Every trained model: ``models`` and, with ``null_rewards``, UAT and VT fed null rewards."""
        return (*self.models, *([NULL, NULL_VT] if self.null_rewards else []))


FULL = MarketsStudyConfig(models=(*MODELS, *ABLATIONS))  # Table 1 C and Table 5 C: the ablations join the family
# Quick size, chosen on the SCREENING stream (stream=1, 2 seeds) before the judged run: three synthetic
# markets of 1,500 days, windows of T = 30 (not Table 3's 60), d_model 32, 2 layers, B = 16 per market.
# At 300 epochs the training KL kept falling (0.54) while the test KL rose to 0.84: the models memorised the
# training days' next-day noise. 100 epochs gave test KL 0.72 (UAT, VT, UAT-null within 0.003 of each other)
# and 150 gave 0.74. Across the three budgets the checks' values changed sign (uat_beats_vt_sharpe +0.010,
# -0.021, -0.013; uat_beats_vt_kl +0.004, +0.002, -0.002; uat_gain_needs_feedback +0.004, -0.001, +0.001):
# every model sits near the no-history constant allocation, and the synthetic regimes give a model little to
# learn (docs/uat.md §20: knowing the true regime lowers the expert KL by at most 0.02). Kept: 100 epochs, the
# cheapest. The judged run that followed (stream 0), 1 of 3 within this noise: uat_beats_vt_sharpe -0.011
# FAILS, uat_beats_vt_kl +0.005 passes (UAT 0.7206, VT 0.7257; the constant allocation 0.683),
# uat_gain_needs_feedback -0.002 FAILS (UAT fed null returns 0.7186).
# Per-seed intervals and controls (issue "Verdicts with power"): VT fed null returns joined the family program (the
# null-returns claim's control) and 4 seeds (2 gave t intervals 12.7 standard errors wide), screened on stream 1
# (paired by seed, 95% t): UAT - VT Sharpe -0.018 [-0.026, -0.009] FAIL (control UAT-null - VT -0.015); VT - UAT
# test KL +0.0026 [-0.0006, +0.0057] INCONCLUSIVE (about 5 seeds would decide it, but its control UAT-null is
# +0.0030 ahead of VT too: a pass would be NO POWER); UAT-null - UAT KL -0.0004 [-0.0014, +0.0006] INCONCLUSIVE
# (about 10 seeds; control VT-null - VT exactly 0). Kept at 4 seeds for time: the KL differences are a few
# thousandths of a KL near 0.72 and their deciding seed counts (5-10) exceed what the quick budget allows.
# Judged once (stream 0, 4 seeds): Sharpe -0.006 [-0.014, +0.002] INCONCLUSIVE (control -0.008 FAIL); KL +0.0039
# [-0.0001, +0.0079] INCONCLUSIVE (control UAT-null +0.0050 PASS: a pass would be NO POWER); null-returns gain
# -0.0011 [-0.0038, +0.0016] INCONCLUSIVE (about 10 seeds; control exactly 0, FAIL). FULL (3 seeds) cannot
# decide them either.
# The gate-order check joined later, on the same size (no size was screened for it): on the screening stream the
# per-seed correlation was -0.40 [-1.67, 0.87] INCONCLUSIVE (control +0.25, INCONCLUSIVE; pre-activation norm per
# post-hoc regime: chop 176, bull 151, shock 149, bear 138); judged once (stream 0): -0.70 [-1.02, -0.38] FAIL
# (control -0.10, INCONCLUSIVE; chop 121, bull 103, shock 102, bear 92): the gate is largest in the calm,
# directionless regime, nearly the reverse of the paper's order. The other three checks' values did not move.
# A-DT joined the family program later for its check (uat_beats_adt_sharpe), at the same size (none screened for it):
# screening stream -0.017 [-0.022, -0.013] FAIL (control UAT-null -0.015, FAIL); judged once (stream 0): -0.006
# [-0.018, +0.006] INCONCLUSIVE (about 6 seeds; control -0.006, FAIL), A-DT's Sharpe as near the constant
# allocation's as UAT's and VT's. The wider program moved the other checks by float rounding only: Sharpe -0.007
# [-0.015, +0.000], KL +0.0038 [-0.0001, +0.0077], the null-returns gain -0.0012 (all INCONCLUSIVE as before); the
# gate's -0.70 unchanged. 157 s beside another job (about 60 s alone before).
# The gate's saturation screened against its rate (stream 1, this size): at ue_lr 2e-3 (the base rate instead of
# Table 3's 2e-2) no window is saturated (0.00 against 0.60), yet the order stays reversed, -0.65 [-1.13, -0.17]
# (chop 6.95 > bull 6.03 > shock 5.99 > bear 5.56, pre-activation norms). Table 3's rate kept (docs/uat.md §20).
# Table 5 C at this size (stream 1, the six ablations in the family program, 210 s beside nothing else): mean Sharpe
# UAT -0.370, no-action -0.362, no-reward -0.367, linear -0.370, no-Q -0.350, no-KV -0.360, no-bias -0.360 (seed sd
# 0.012-0.023; VT and A-DT -0.353), test KL 0.7205-0.7289: the synthetic markets' test period falls, and no variant
# is told from another (paper: UAT 0.699, no-KV 0.609 on average). UAT's numbers equal the run without them.
QUICK = MarketsStudyConfig(
    size=cells.Size(d_model=32, n_heads=4, d_ff=64, n_layers=2, horizon=30, batch_size=16, epochs=100,
                    eval_episodes=1, d_u=16, ema_decay=0.9, dropout=0.05),
    lr=2e-3, seeds=4, models=(*CHECKED, "adt"), synthetic_days=1500)


def load_markets(cfg: MarketsStudyConfig, out_dir: Path) -> tuple[tuple[markets_data.Market, ...], dict]:
    """The user's markets, or the synthetic ones written to ``out_dir/synthetic``; and, for
    synthetic markets, the generator's true regime codes on each market's calendar."""
    folder, truth = cfg.data_dir, {}
    if folder is None:
        folder = Path(out_dir) / "synthetic"
        sims = {}
        for i, (name, n, layout) in enumerate(SYNTHETIC):
            spec = markets_data.SyntheticSpec(n_assets=n, n_days=cfg.synthetic_days, seed=cfg.synthetic_seed + i)
            sims[name] = markets_data.simulate_market(spec, layout)
            markets_data.write_market(sims[name], folder / name, layout)
    loaded = markets_data.prepare_markets(folder, window=cfg.size.horizon, max_gap_days=cfg.max_gap_days)
    if cfg.data_dir is None:
        truth = {m.name: sims[m.name].regimes_on(m.dates) for m in loaded}
    return loaded, truth


def configure(cfg: MarketsStudyConfig, kind: str, variant: str | None = None,
              traced_variant: bool = False) -> markets.MarketsTrainConfig:
    """The training configuration of model ``kind`` (``markets.train_config``) with the study's rates,
    expert temperature and evaluation batch."""
    base = markets.train_config(cfg.size, markets_data.N_MAX, kind, variant, traced_variant)
    return dataclasses.replace(base, lr=cfg.lr, ue_lr=cfg.ue_lr, expert_temperature=cfg.expert_temperature,
                               eval_batch=cfg.eval_batch)


def compute(cfg: MarketsStudyConfig, ctx: RunContext) -> dict:
    """``windows``: {model: {"return", "kl", "gate_norm": [seeds, W]}} over every test window of
    every market (market-major); ``curves``: {model: {"loss": [seeds, epochs]}}; ``market``: each
    window's market index, ``posthoc``/``truth``: each window's regime label on its last day
    (post-hoc rule; the generator's, synthetic data only; -1: none); ``equal_weight``: [W] the
    equal-weight portfolio's return on each window's last day; ``constant``: {"return", "kl": [W]}
    of :func:`constant_allocation`; ``names``: the markets."""
    loaded, truth = load_markets(cfg, ctx.out_dir)
    data = markets.data_arrays(loaded, cfg.size.horizon)

    runs = {m: [markets.MarketsTask.make()] for m in cfg.models}
    labels = {m: ["pooled"] for m in cfg.models}
    if cfg.null_rewards:  # a second task of UAT and of VT, in the family program
        for m in ("uat", "vt"):
            runs[m] = [markets.MarketsTask.make(), markets.MarketsTask.make("null")]
            labels[m] = ["pooled", "null"]
    grids = train_models(ctx, "markets", cfg.size, runs, labels, cfg.seeds, cfg.stream,
                         env=data, configure=functools.partial(configure, cfg), make_cell=markets.make_cell)
    out: dict = {"windows": {}, "curves": {}}
    for model, grid in grids.items():
        for i, label in enumerate(labels[model]):
            name = model if label == "pooled" else {"uat": NULL, "vt": NULL_VT}[model]
            out["windows"][name] = {k: grid[k][i] for k in ("return", "kl", "gate_norm", "gate_pre")}
            out["curves"][name] = {"loss": grid["loss"][i]}
    last = lambda m: m.test.last_day_index  # noqa: E731
    out["market"] = data["test_market"]
    out["posthoc"] = np.concatenate([markets_data.posthoc_regimes(m.close)[last(m)] for m in loaded])
    out["truth"] = (np.concatenate([truth[m.name][last(m)] for m in loaded]) if truth
                    else np.full(len(out["market"]), -1))
    out["equal_weight"] = np.concatenate([m.test.last_returns[:, m.mask].mean(-1) for m in loaded])
    constant = [constant_allocation(m, cfg.expert_temperature) for m in loaded]
    out["constant"] = {k: np.concatenate([c[k] for c in constant]) for k in ("return", "kl")}
    out["names"] = np.array([m.name for m in loaded])
    out["dropped_days"] = np.array([m.dropped_days for m in loaded])  # trading days alignment dropped (max_gap_days)
    return out


def constant_allocation(market: markets_data.Market, temperature: float) -> dict:
    """The reference that knows no history: the mean of the expert's allocations over the market's
    training days, held on every test day. Per test window: ``kl`` the mean KL of the expert to it
    over the window's steps (the models' test KL), ``return`` its return on the window's last day."""
    expert = lambda r: markets.expert_allocation(jnp.asarray(r), jnp.asarray(market.mask), temperature)  # noqa: E731
    q = expert(market.train.returns).mean(0)
    kl = markets.kl_to_expert(expert(market.test.window_returns()), jnp.log(q), jnp.asarray(market.mask))
    return {"kl": np.asarray(kl.mean(-1)), "return": np.asarray(markets.portfolio_return(q, market.test.last_returns))}


def per_market(values: np.ndarray, market: np.ndarray, n: int, stat) -> np.ndarray:
    """``stat`` of each market's windows: [..., W] -> [..., n]."""
    return np.stack([np.apply_along_axis(stat, -1, values[..., market == i]) for i in range(n)], -1)


def summarize(cfg: MarketsStudyConfig, arrays: dict) -> Summary:
    """Per model and market: Sharpe and CAGR (seed mean/std), test KL; the regime gate per
    post-hoc regime; the Table 1 C checks."""
    names = [str(x) for x in arrays["names"]]
    market = np.asarray(arrays["market"])
    n = len(names)
    metrics: dict[str, float] = {}
    rows, per_seed = [], {}
    for model in cfg.runs:
        w = arrays["windows"][model]
        sharpe = per_market(np.asarray(w["return"]), market, n, markets.sharpe)  # [seeds, n]
        growth = per_market(np.asarray(w["return"]), market, n, markets.cagr)
        per_seed[model] = {"sharpe": sharpe.mean(-1), "kl": np.asarray(w["kl"], np.float64).mean(-1)}
        metrics.update(cells.mean_std(f"sharpe_{model}", per_seed[model]["sharpe"]))
        metrics.update(cells.mean_std(f"kl_{model}", per_seed[model]["kl"]))
        for j, name in enumerate(names):
            metrics.update(cells.mean_std(f"sharpe_{model}_{name}", sharpe[:, j]))
            metrics.update(cells.mean_std(f"cagr_{model}_{name}", growth[:, j]))
            rows.append((model, name))
    for j, name in enumerate(names):
        metrics[f"dropped_days_{name}"] = float(np.asarray(arrays["dropped_days"])[j])
        ew, const = np.asarray(arrays["equal_weight"])[market == j], np.asarray(arrays["constant"]["return"])[market == j]
        metrics[f"sharpe_equal_weight_{name}"] = markets.sharpe(ew)
        metrics[f"cagr_equal_weight_{name}"] = markets.cagr(ew)
        metrics[f"sharpe_constant_{name}"] = markets.sharpe(const)
    metrics["kl_constant"] = float(np.mean(arrays["constant"]["kl"]))
    uat = arrays["windows"]["uat"]
    for source in ("posthoc", "truth"):
        labels = np.asarray(arrays[source])
        for k, regime in enumerate(markets_data.REGIMES):
            if np.any(labels == k):
                for stat in ("gate_norm", "gate_pre"):
                    metrics[f"{stat}_uat_{source}_{regime}"] = float(np.asarray(uat[stat])[:, labels == k].mean())
    gate_max = np.sqrt(cfg.size.d_model)  # every entry of rho at +-1
    metrics["gate_saturated_fraction"] = float(np.mean(np.asarray(uat["gate_norm"]) >= 0.99 * gate_max))
    found = judge(cfg, per_seed) + [gate_order_check(np.asarray(uat["gate_pre"]), np.asarray(arrays["posthoc"]))]
    table = {"model": [m for m, _ in rows], "market": [x for _, x in rows],
             "sharpe": [metrics[f"sharpe_{m}_{x}"] for m, x in rows],
             "sharpe_std": [metrics[f"sharpe_{m}_{x}_std"] for m, x in rows],
             "cagr": [metrics[f"cagr_{m}_{x}"] for m, x in rows],
             "sharpe_paper": [PAPER.get(f"sharpe_{m}_{x}", float("nan")) for m, x in rows]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def regime_order_correlation(gate: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per seed, the Spearman correlation of the mean of ``gate [seeds, W]`` per regime label (``labels [W]``,
    indices into ``markets_data.REGIMES``; regimes without a window left out) with :data:`PAPER_GATE_ORDER`."""
    present = [r for r in PAPER_GATE_ORDER if np.any(labels == markets_data.REGIMES.index(r))]
    paper_rank = -np.arange(len(present), dtype=float)  # the paper's first regime ranks highest
    means = np.stack([gate[:, labels == markets_data.REGIMES.index(r)].mean(axis=1) for r in present], axis=1)
    ranks = np.argsort(np.argsort(means, axis=1), axis=1).astype(float)  # the means are continuous: no ties
    paper = np.argsort(np.argsort(paper_rank)).astype(float)
    return np.array([np.corrcoef(r, paper)[0, 1] for r in ranks])


def gate_order_check(gate: np.ndarray, labels: np.ndarray) -> checks.Check:
    """:data:`GATE_ORDER` on the pre-activation gates ``[seeds, W]``; the control permutes the labels per seed."""
    rng = np.random.default_rng(GATE_CONTROL_SEED)
    shuffled = np.array([regime_order_correlation(gate[s:s + 1], rng.permutation(labels))[0]
                         for s in range(gate.shape[0])])
    return GATE_ORDER.judge(regime_order_correlation(gate, labels), control=shuffled)


def judge(cfg: MarketsStudyConfig, per_seed: dict) -> list[checks.Check]:
    """The checks on per-seed values ``per_seed`` ({model: {"sharpe", "kl": [seeds]}}), paired by seed (every
    model of seed ``s`` shares its key); the controls need ``null_rewards`` (else they run only in the tests)."""
    sharpe = lambda a, b: checks.paired(per_seed[a]["sharpe"], per_seed[b]["sharpe"])  # noqa: E731
    kl_gain = lambda a, b: checks.paired(per_seed[b]["kl"], per_seed[a]["kl"])  # noqa: E731  b's KL - a's
    null = cfg.null_rewards
    found = [UAT_BEATS_VT_SHARPE.judge(sharpe("uat", "vt"), sharpe(NULL, "vt") if null else None)]
    if "adt" in cfg.models:
        found.append(UAT_BEATS_ADT_SHARPE.judge(sharpe("uat", "adt"), sharpe(NULL, "adt") if null else None))
    found.append(UAT_BEATS_VT_KL.judge(kl_gain("uat", "vt"), kl_gain(NULL, "vt") if null else None))
    if null:
        found.append(UAT_GAIN_NEEDS_FEEDBACK.judge(kl_gain("uat", NULL), kl_gain("vt", NULL_VT)))
    return found


def write(cfg: MarketsStudyConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``markets.csv`` (Sharpe, CAGR and test KL per model x market x seed), ``gates.csv`` (UAT's
    mean gate norm per market x regime x seed) and ``markets.png`` (Sharpe per market and model
    with the paper's; UAT's gate norm per post-hoc regime)."""
    names = [str(x) for x in arrays["names"]]
    market = np.asarray(arrays["market"])
    rows: dict[str, list] = {"model": [], "market": [], "seed": [], "sharpe": [], "cagr": [], "kl": []}
    for model in cfg.runs:
        w = arrays["windows"][model]
        for j, name in enumerate(names):
            sel = market == j
            for s in range(cfg.seeds):
                r = np.asarray(w["return"])[s, sel]
                rows["model"].append(model)
                rows["market"].append(name)
                rows["seed"].append(s)
                rows["sharpe"].append(markets.sharpe(r))
                rows["cagr"].append(markets.cagr(r))
                rows["kl"].append(float(np.asarray(w["kl"])[s, sel].mean()))
    io.write_csv(out_dir / "markets.csv", rows)
    gate = np.asarray(arrays["windows"]["uat"]["gate_norm"])
    gate_pre = np.asarray(arrays["windows"]["uat"]["gate_pre"])
    labels = np.asarray(arrays["posthoc"])
    grows: dict[str, list] = {"market": [], "regime": [], "seed": [], "gate_norm": [], "gate_pre": [], "windows": []}
    for j, name in enumerate(names):
        for k, regime in enumerate(markets_data.REGIMES):
            sel = (market == j) & (labels == k)
            for s in range(cfg.seeds):
                grows["market"].append(name)
                grows["regime"].append(regime)
                grows["seed"].append(s)
                grows["gate_norm"].append(float(gate[s, sel].mean()) if sel.any() else float("nan"))
                grows["gate_pre"].append(float(gate_pre[s, sel].mean()) if sel.any() else float("nan"))
                grows["windows"].append(int(sel.sum()))
    io.write_csv(out_dir / "gates.csv", grows)
    import matplotlib.pyplot as plt

    m = summary.metrics
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = np.arange(len(names))
    width = 0.8 / len(cfg.runs)
    for i, model in enumerate(cfg.runs):
        off = xs + (i - (len(cfg.runs) - 1) / 2) * width
        left.bar(off, [m[f"sharpe_{model}_{x}"] for x in names], width,
                 yerr=[m[f"sharpe_{model}_{x}_std"] for x in names], label=model)
        left.plot(off, [PAPER.get(f"sharpe_{model}_{x}", np.nan) for x in names], "kx",
                  label="paper" if i == 0 else None)
    left.plot(xs - 0.45, [m[f"sharpe_equal_weight_{x}"] for x in names], "k>", label="equal weight")
    left.plot(xs + 0.45, [m[f"sharpe_constant_{x}"] for x in names], "r<", label="constant allocation")
    left.set_xticks(xs, names)
    left.set_ylabel("annualised Sharpe (test)")
    left.legend(fontsize=7)
    for j, name in enumerate(names):
        vals = [gate[:, (market == j) & (labels == k)].mean() if np.any((market == j) & (labels == k)) else np.nan
                for k in range(len(markets_data.REGIMES))]
        right.plot(markets_data.REGIMES, vals, marker="o", label=name)
    right.axhline(np.sqrt(cfg.size.d_model), color="k", ls=":", label="maximum (every gate at +-1)")
    right.set_ylabel("UAT ||rho_{T-1}||_2 (test windows)")
    right.set_title("regime gate per post-hoc regime of the window's last day", fontsize=8)
    right.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "markets.png")


STUDY = register(Study(
    name="uat.markets",
    cost_fields=("size.epochs",),
    summary="UAT vs VT / A-DT / DT-style / GTrXL on cross-market portfolio allocation, regime gate "
            "(Table 1 C, Figure 3 right)",
    config_type=MarketsStudyConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=110,
))

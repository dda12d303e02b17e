"""Study ``pmd.stress``: are the learned actor's and critic's errors uniformly small? (the learned stress screen)

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for Closed-Loop Control"
(arXiv 2609.30500), EvoRobust companion, sections 10 and 15 ("archived learned stress screen": 512 examples per
condition from 8 generated MDPs at eta = 0.8; actor row-L1 mean and max, critic TD error mean and max).

Models: the label-free actors ``pmd.learned_actor`` keeps (``models/actor``) and the critics ``pmd.learned_critic``
keeps (``models/critic``), loaded when they were trained as this config's ``models`` says
(``training.KeptModels``; the presets match those studies' presets), else the same runs are trained here
(``training.reuse_or_train``; ``table.csv`` names the origin). The paper screened one checkpoint; we screen
``actor_runs`` actors and ``critic_runs`` critics and report the median over runs of each per-run number.

Inputs, per condition (``training.CONDITIONS``: the four task families of ``pmd_jax.tasks`` other than
near-deterministic with the prior's full entropy band, and the ``iid`` family with low- and high-entropy priors):
``per_mdp`` policies on each of ``n_mdps`` MDPs of the ``test`` key stream, all at ``eta``. Per input the actor's
row-L1 to PMD (every state's row); the critic reads the input's ``Q`` and a balanced packet of 6 draws per pair
drawn under the policy the actor returned (critic run ``c`` after actor run ``c mod actor_runs``), scored against
fresh 6-sample TD targets under the returned policy (ours) and, as the archived screen did, under ideal PMD (a
policy the critic was not shown), and against the exact one-step target ``F^{pi_new} Q``
(:func:`pmd_jax.audit.critic_errors`). Maxima are over the evaluated sample, not population suprema.

Checks, and how each could fail:

* ``low-entropy errors are not uniformly small`` (max row-L1 over 10 times the mean at low entropy; paper 1.977
  against 0.059): an actor whose errors are spread evenly over inputs has a max within a few means.
* ``reward x2 row error above iid``: doubling the rewards doubles every ``|Q|`` beyond the training range; an
  actor that learned the PMD map for any scale (or a screen whose inputs do not differ) does not get worse.
* ``reward x2 critic TD error above iid`` (returned-policy scoring): the same for the critic's regression.
* ``ideal-PMD scoring within 10% of returned-policy scoring (iid)``: the archived screen's targets follow ideal
  PMD rather than the policy the critic evaluated; with an actor close to PMD the two agree (the paper's audit:
  0.155 against 0.154); an actor far from PMD on iid inputs separates them.

Quick sizes are the upstream studies' (screened there on stream 1); this screen's own sizes are the paper's.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.pmd import training

CONDITIONS = tuple(training.CONDITIONS)
PAPER_TABLE = {  # condition: (row-L1 mean, row-L1 max, TD mean, TD max), TD against ideal-PMD targets
    "iid": (0.0273, 0.1676, 0.1355, 0.7845), "reward_x2": (0.0512, 1.2619, 0.3199, 1.9377),
    "bimodal_rewards": (0.0395, 0.5325, 0.2532, 1.2943), "sparse_transitions": (0.0250, 0.1671, 0.1652, 1.7184),
    "low_entropy": (0.0590, 1.9773, 0.1623, 2.3521), "high_entropy": (0.0244, 0.0579, 0.0875, 0.4811),
}
PAPER = {f"{m}_{c}": v[i] for c, v in PAPER_TABLE.items()
         for i, m in enumerate(("row_l1_mean", "row_l1_max", "td_mean_ideal_scoring", "td_max_ideal_scoring"))}
SCORINGS = {"sampled_returned": "", "sampled_ideal": "_ideal_scoring", "exact_returned": "_exact"}


@dataclasses.dataclass(frozen=True)
class StressConfig:
    models: training.KeptModels = training.KeptModels()
    conditions: tuple[str, ...] = CONDITIONS
    n_mdps: int = 8
    per_mdp: int = 64
    eta: float = 0.8
    target_samples: int = 6
    eval_seed: int = 21

    def __post_init__(self):
        training.check_screen(self, ("iid",))
        if self.target_samples < 1:
            raise ValueError(f"target_samples must be >= 1, got {self.target_samples}")


# The actor and critic presets are pmd.learned_actor's and pmd.learned_critic's QUICK ones, so `run all --quick`
# loads their kept models instead of training again.
QUICK = StressConfig(models=training.QUICK_MODELS)
FULL = StressConfig()


def compute(cfg: StressConfig, ctx: RunContext) -> dict:
    found, x, pi_new, critic = training.screen(cfg.models, ctx, cfg, cfg.target_samples)
    return {"row_l1": np.abs(pi_new - training.ideal_policies(x)[None]).sum(-1), "critic": critic,
            "origin": found["origin"], "models": found}


def summarize(cfg: StressConfig, arrays: dict) -> Summary:
    row = np.asarray(arrays["row_l1"])  # [actor runs, C, N, S]
    metrics, table = {}, {"condition": list(cfg.conditions)}
    for name in ("row_l1_mean", "row_l1_max", "td_mean", "td_max", "td_mean_ideal_scoring", "td_max_ideal_scoring",
                 "td_mean_exact", "td_max_exact"):
        table[name] = []
    for i, cond in enumerate(cfg.conditions):
        values = {"row_l1_mean": row[:, i].mean(axis=(1, 2)), "row_l1_max": row[:, i].max(axis=(1, 2))}
        for scoring, suffix in SCORINGS.items():
            err = np.asarray(arrays["critic"][scoring])[:, i]  # [critic runs, N, S, A]
            values[f"td_mean{suffix}"] = err.mean(axis=(1, 2, 3))
            values[f"td_max{suffix}"] = err.max(axis=(1, 2, 3))
        for name, per_run in values.items():
            metrics[f"{name}_{cond}"] = float(np.median(per_run))
            table[name].append(metrics[f"{name}_{cond}"])
    for j, name in enumerate(("paper_row_l1_mean", "paper_row_l1_max", "paper_td_mean_ideal_scoring",
                              "paper_td_max_ideal_scoring")):
        table[name] = [PAPER_TABLE[c][j] for c in cfg.conditions]
    metrics["runs_actor"], metrics["runs_critic"] = float(row.shape[0]), float(arrays["critic"]["exact_returned"].shape[0])
    found = []
    if "low_entropy" in cfg.conditions:
        ratio = metrics["row_l1_max_low_entropy"] / metrics["row_l1_mean_low_entropy"]
        metrics["row_l1_max_over_mean_low_entropy"] = ratio
        found.append(checks.above("low-entropy errors are not uniformly small (max row-L1 > 10 x mean)", ratio, 10.0,
                                  paper=PAPER["row_l1_max_low_entropy"] / PAPER["row_l1_mean_low_entropy"],
                                  claim="on low-entropy inputs the mean row error is 0.059 but the largest is 1.977"))
    if "reward_x2" in cfg.conditions:
        found += [
            checks.above("reward x2 row error above iid", metrics["row_l1_mean_reward_x2"], metrics["row_l1_mean_iid"],
                         paper=PAPER["row_l1_mean_reward_x2"], claim="row-L1 mean 0.0512 at reward scale x2, 0.0273 iid"),
            checks.above("reward x2 critic TD error above iid (returned-policy targets)", metrics["td_mean_reward_x2"],
                         metrics["td_mean_iid"], paper=PAPER["td_mean_ideal_scoring_reward_x2"],
                         claim="critic TD error mean 0.320 at reward scale x2, 0.136 iid"),
        ]
    gap = abs(metrics["td_mean_ideal_scoring_iid"] - metrics["td_mean_iid"]) / metrics["td_mean_iid"]
    metrics["td_scoring_relative_gap_iid"] = gap
    found.append(checks.at_most("ideal-PMD scoring within 10% of returned-policy scoring (iid)", gap, 0.1,
                                claim="scored under the returned policy instead of ideal PMD: 0.154 against 0.155"))
    origin = arrays["origin"]
    return Summary(metrics=metrics, checks=found,
                   tables={"table": table, "models": {"role": list(origin), "origin": list(origin.values())}})


def write(cfg: StressConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``stress.npz`` (per-input errors), the models if trained here, and ``stress.png``."""
    io.save_npz(out_dir / "stress.npz", row_l1=arrays["row_l1"], conditions=np.array(cfg.conditions),
                **{f"td_{k}": v for k, v in arrays["critic"].items()})
    training.keep_trained(cfg.models, arrays["models"], out_dir)
    import matplotlib.pyplot as plt

    t = summary.tables["table"]
    y = np.arange(len(cfg.conditions))[::-1]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, (ours, paper, label) in zip(axes, (
            (("row_l1_mean", "row_l1_max"), ("paper_row_l1_mean", "paper_row_l1_max"), "actor row-L1 to PMD"),
            (("td_mean", "td_max"), ("paper_td_mean_ideal_scoring", "paper_td_max_ideal_scoring"),
             "critic |TD error| (ours: returned-policy targets)"))):
        ax.barh(y + 0.2, t[ours[1]], 0.4, color="tab:blue", alpha=0.35, label="ours, max")
        ax.barh(y + 0.2, t[ours[0]], 0.4, color="tab:blue", label="ours, mean")
        ax.barh(y - 0.2, t[paper[1]], 0.4, color="0.6", alpha=0.45, label="paper (archived), max")
        ax.barh(y - 0.2, t[paper[0]], 0.4, color="0.4", label="paper (archived), mean")
        ax.set_xscale("log")
        ax.set_xlabel(label + " (log)")
    axes[0].set_yticks(y, cfg.conditions)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Learned stress screen: {cfg.n_mdps * cfg.per_mdp} inputs per condition, eta = {cfg.eta:g}", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "stress.png")


STUDY = register(Study(
    name="pmd.stress",
    summary="PolicyAttention learned stress screen: actor row-L1 and critic TD error per input condition",
    config_type=StressConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, after=("pmd.learned_actor", "pmd.learned_critic"),
))

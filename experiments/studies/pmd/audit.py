"""Study ``pmd.audit``: is a large row error a value loss? (the matched audit, Figure 8)

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for Closed-Loop Control"
(arXiv 2609.30500), EvoRobust companion, section 10, Figure 8 and the "matched audit on a retrained checkpoint"
table of section 15 (512 inputs per condition; at low entropy 79 of 512 inputs have negative implemented gain,
the rank correlation between the largest row error and the value shortfall is 0.12, and the 5% of inputs with the
largest row error do better than PMD by 0.170 on average).

Models: as ``pmd.stress`` (the label-free actors of ``pmd.learned_actor`` and the critics of
``pmd.learned_critic``, loaded when trained with this config, else trained here; ``models.csv`` names the origin).
Medians over runs of every per-run number; Figure 8 and ``audit.npz`` show actor run 0.

Per input (``per_mdp`` policies on each of ``n_mdps`` test MDPs per condition, at ``eta``) the actor is run on
every state and :func:`pmd_jax.audit.audit_call` solves exact values for the returned policy and for ideal PMD:
the ideal and implemented gains (uniform-state means of ``V - V^pi``), the largest row error (max over states of
the row-L1 to PMD) and the value shortfall ``gain_ideal - gain_implemented``. The critic reads ``Q^pi`` and a
balanced 6-sample packet under the returned policy; its error is against the exact ``F^{pi_new} Q^pi``: mean over
pairs and inputs, and "per-input max" read as the largest per-input mean over pairs.

Checks, and how each could fail:

* ``implemented gain below ideal on average (every condition)``: an actor whose errors cost nothing, or that
  overshoots PMD in the improving direction, gains as much or more.
* ``low entropy loses value more often than iid`` (share of negative implemented gains; paper 15.4% against 0%):
  an actor whose failures are not concentrated on near-deterministic priors has equal shares.
* ``largest row error and value shortfall weakly rank-correlated (low entropy)`` (Spearman rho below 0.5; paper
  0.12): if large row errors were value losses, the correlation would be high.
* ``the 5% largest row errors gain more than PMD (low entropy)`` (paper +0.170): if the largest errors were the
  harmful ones, their mean gain over PMD would be negative.

Not reproduced here: "using a learned instead of an oracle critic in the next actor call changes value by
-0.007" (a second actor call per input; not built).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from scipy import stats

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.pmd import training
from pmd_jax import audit

CONDITIONS = ("iid", "reward_x2", "low_entropy", "high_entropy")
PAPER_TABLE = {  # condition: row-L1 mean, max, ideal gain, implemented gain, negative share, critic mean, per-input max
    "iid": (0.028, 0.344, 0.719, 0.709, 0.0, 0.152, 0.336),
    "reward_x2": (0.052, 1.271, 1.648, 1.593, 0.0, 0.302, 0.717),
    "low_entropy": (0.076, 1.992, 0.158, 0.144, 0.154, 0.154, 0.373),
    "high_entropy": (0.022, 0.085, 0.672, 0.654, 0.0, 0.103, 0.251),
}
COLUMNS = ("row_l1_mean", "row_l1_max", "gain_ideal", "gain_implemented", "negative_share", "critic_error_mean",
           "critic_error_per_input_max")
PAPER = {f"{name}_{c}": v[i] for c, v in PAPER_TABLE.items() for i, name in enumerate(COLUMNS)}
PAPER.update({"spearman_row_error_shortfall_low_entropy": 0.12, "top5_gain_over_pmd_low_entropy": 0.170,
              "negative_count_low_entropy": 79.0})


@dataclasses.dataclass(frozen=True)
class AuditConfig:
    models: training.KeptModels = training.KeptModels()
    conditions: tuple[str, ...] = CONDITIONS
    n_mdps: int = 8
    per_mdp: int = 64
    eta: float = 0.8
    top_fraction: float = 0.05
    eval_seed: int = 31

    def __post_init__(self):
        training.check_screen(self, ("iid", "low_entropy"))
        if not 0.0 < self.top_fraction <= 1.0 or self.top_fraction * self.n_mdps * self.per_mdp < 1:
            raise ValueError(f"top_fraction must lie in (0, 1] and select at least one input, got {self.top_fraction}")


# pmd.learned_actor's and pmd.learned_critic's QUICK presets (so `run all --quick` loads their kept models).
QUICK = AuditConfig(models=training.QUICK_MODELS)
FULL = AuditConfig()


def compute(cfg: AuditConfig, ctx: RunContext) -> dict:
    models_found, x, pi_new, critic = training.screen(cfg.models, ctx, cfg, cfg.models.critic.target_samples)
    with jax.enable_x64(True):
        x64 = jax.tree.map(lambda a: np.asarray(a, np.float64) if np.issubdtype(a.dtype, np.floating) else a, x)
        per_input = jax.vmap(jax.vmap(audit.audit_call))  # over conditions and inputs
        found = jax.jit(jax.vmap(per_input, in_axes=(None, None, None, None, 0)))(x64.mdp, x64.pi, x64.Q, x64.eta, pi_new)
    return {**{k: np.asarray(v) for k, v in dataclasses.asdict(found).items()},
            "row_l1": np.abs(pi_new - training.ideal_policies(x)[None]).sum(-1), "critic_error": critic["exact_returned"],
            "origin": models_found["origin"], "models": models_found}


def per_run(cfg: AuditConfig, arrays: dict, i: int) -> dict[str, np.ndarray]:
    """Condition ``i``'s numbers per actor run ``[runs]`` (critic numbers per critic run)."""
    gi, gm = np.asarray(arrays["gain_ideal"])[:, i], np.asarray(arrays["gain_implemented"])[:, i]  # [runs, N]
    row = np.asarray(arrays["row_l1"])[:, i]  # [runs, N, S]
    crit = np.asarray(arrays["critic_error"])[:, i].mean(axis=(2, 3))  # [critic runs, N]
    out = {"row_l1_mean": row.mean(axis=(1, 2)), "row_l1_max": row.max(axis=(1, 2)), "gain_ideal": gi.mean(1),
           "gain_implemented": gm.mean(1), "negative_share": (gm < 0).mean(1), "negative_count": (gm < 0).sum(1),
           "negative_gain_mean": np.array([r[r < 0].mean() if (r < 0).any() else 0.0 for r in gm]),
           "critic_error_mean": crit.mean(1), "critic_error_per_input_max": crit.max(1)}
    err = np.asarray(arrays["max_row_error"])[:, i]
    k = max(1, int(round(cfg.top_fraction * err.shape[1])))
    top = np.argsort(-err, axis=1)[:, :k]
    out["top5_gain_over_pmd"] = np.take_along_axis(gm - gi, top, 1).mean(1)
    out["spearman_row_error_shortfall"] = np.array([stats.spearmanr(e, s).statistic for e, s in zip(err, gi - gm)])
    return out


def summarize(cfg: AuditConfig, arrays: dict) -> Summary:
    metrics, table = {}, {"condition": list(cfg.conditions)}
    for i, cond in enumerate(cfg.conditions):
        for name, values in per_run(cfg, arrays, i).items():
            metrics[f"{name}_{cond}"] = float(np.median(values))
            table.setdefault(name, []).append(metrics[f"{name}_{cond}"])
    for j, name in enumerate(COLUMNS):
        table[f"paper_{name}"] = [PAPER_TABLE[c][j] for c in cfg.conditions]
    metrics["min_gain_ideal"] = float(np.min(arrays["gain_ideal"]))
    below = [metrics[f"gain_ideal_{c}"] - metrics[f"gain_implemented_{c}"] for c in cfg.conditions]
    metrics["min_mean_shortfall"] = float(min(below))
    found = [
        checks.above("implemented gain below ideal on average (every condition)", metrics["min_mean_shortfall"], 0.0,
                     claim="ideal gain above implemented in every condition (0.719 / 0.709 iid, 0.158 / 0.144 low)"),
        checks.above("low entropy loses value more often than iid", metrics["negative_share_low_entropy"],
                     metrics["negative_share_iid"], paper=PAPER["negative_share_low_entropy"],
                     claim="15.4% of low-entropy inputs (79 of 512) have negative implemented gain, 0% iid"),
        checks.below("largest row error and value shortfall weakly rank-correlated (low entropy)",
                     metrics["spearman_row_error_shortfall_low_entropy"], 0.5,
                     paper=PAPER["spearman_row_error_shortfall_low_entropy"],
                     claim="large row error and value loss do not line up: rank correlation 0.12"),
        checks.above("the 5% largest row errors gain more than PMD (low entropy)",
                     metrics["top5_gain_over_pmd_low_entropy"], 0.0, paper=PAPER["top5_gain_over_pmd_low_entropy"],
                     claim="the 5% of inputs with the largest row error do better than PMD by 0.170 on average"),
    ]
    origin = arrays["origin"]
    return Summary(metrics=metrics, checks=found,
                   tables={"table": table, "models": {"role": list(origin), "origin": list(origin.values())}})


def write(cfg: AuditConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``audit.npz`` (every run's per-input numbers), the models if trained here, and ``audit.png`` (Figure 8)."""
    io.save_npz(out_dir / "audit.npz", conditions=np.array(cfg.conditions), row_l1=arrays["row_l1"],
                critic_error=arrays["critic_error"],
                **{k: arrays[k] for k in ("gain_ideal", "gain_implemented", "max_row_error")})
    training.keep_trained(cfg.models, arrays["models"], out_dir)
    import matplotlib.pyplot as plt

    i = cfg.conditions.index("low_entropy")
    err = np.asarray(arrays["max_row_error"])[0, i]
    gi, gm = np.asarray(arrays["gain_ideal"])[0, i], np.asarray(arrays["gain_implemented"])[0, i]
    neg = gm < 0
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    ax.scatter(err[~neg], (gm - gi)[~neg], s=9, color="tab:blue", alpha=0.6, label="other inputs")
    ax.scatter(err[neg], (gm - gi)[neg], s=12, color="#c98b00", label=f"implemented gain below zero ({neg.sum()} of {len(gm)})")
    ax.axhline(0, color="0.6", lw=0.8)
    m = summary.metrics
    ax.set_title(f"Low-entropy inputs, actor run 0: Spearman {m['spearman_row_error_shortfall_low_entropy']:.2f} "
                 f"(paper 0.12)\nmedian over runs; top 5% row error gain over PMD {m['top5_gain_over_pmd_low_entropy']:+.3f} "
                 f"(paper +0.170)", fontsize=9)
    ax.set_xlabel("row error to PMD (max over states, 0 to 2)")
    ax.set_ylabel("implemented minus ideal PMD value gain")
    ax.legend(fontsize=8)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "audit.png")


STUDY = register(Study(
    name="pmd.audit",
    summary="PolicyAttention matched audit: exact values of the learned actor's returned policy against PMD (Figure 8)",
    config_type=AuditConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, after=("pmd.learned_actor", "pmd.learned_critic"),
))

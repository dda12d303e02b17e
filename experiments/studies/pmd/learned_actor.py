"""Study ``pmd.learned_actor``: does an ordinary pre-LN Transformer trained without PMD labels
learn the PMD map? (one-step correspondence and fitted step).

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), sections 6, 9 and 11, Figure 6 and the
"held-out actor correspondence" table of section 15.

Every run trains a :class:`pmd_jax.learned.LearnedActor` (pre-LN causal Transformer,
``config.train.model``) on generated MDPs (S = 4, A = 3, gamma = 0.8, family ``iid`` of
:mod:`pmd_jax.tasks`, a fixed pool from the ``train`` key stream): ``seeds`` runs with the
label-free KL-proximal objective and ``supervised_seeds`` (the first of the same seeds) with
the supervised cross-entropy to PMD (reported beside the fitted step, not checked), all in
one vmapped program, chunked and checkpointed. The trained actors are kept in
``models/actor`` (run ``i``: label-free for ``i < seeds``, supervised after), for other
studies to load.

Held-out evaluation, on the ``test`` key stream's MDPs (disjoint from training): task
cells = policy-entropy bands (``entropies``, ranges of the prior's inverse temperature,
``pmd_jax.tasks.POLICY_ENTROPY``) x supplied steps (``etas``), one input per test MDP
per cell. Our cells are 3 x 5 = 15; the paper reports 18 task cells but does not define
them. ``heldout.npz`` holds every input and the label-free run 0's outputs (plus every
run's): ``log_pi, Q, R, eta, entropy [N], pi_learned [N, S, A], pi_learned_runs [runs, N, S, A],
supervised [runs]``, so anyone can recompute the distances.

Reported: mean row-L1 (sum_a |.|, averaged over states, inputs and label-free runs) from
the actor to each of the five fixed rules of :mod:`pmd_jax.rules` (our readings of the
paper's names are there), mean KL(actor || PMD), the same for the supervised runs, the
fitted step against the supplied step with its least-squares slope per objective, and the
label-free actors' row-L1 to PMD on the four further families (``transfer_families``).
The fitted step of a run at one supplied step is pooled as the paper refits it from the
outputs: the one step whose PMD update matches all of the run's outputs at that step
(:func:`pmd_jax.rules.fitted_step` over every input and row; ``fitted_step_pooled``). A
robust variant is reported beside it (``training.fitted_step_median``: per input the
moment-matching step, then the median over inputs; ``fitted_slope_<objective>``): at the
quick size the two slopes agree to 0.004 (screening 0.928 pooled against 0.925), so the
missing shrinkage is not the fit's.

Checks (declared claims, judged per label-free seed with a 95% t interval), and how each could fail:

* ``pmd_closest_of_five_rules``: per seed, the row-L1 to the next-closest of the other four
  rules minus the row-L1 to PMD, above 0. An actor that learned a different update (an
  additive step, ignoring its prior, or not updating) is closer to that rule; an
  undertrained actor stays near its initialisation, which is none of them.
* ``fitted_slope_shrinks_as_paper``: per seed, the least-squares slope of the fitted step on
  the supplied step within 0.1285 of the paper's 0.743, half the way to no shrinkage
  (slope 1, exact PMD) and far from ignoring the step (slope 0). An actor that follows
  ``eta`` exactly fails above, one that ignores it fails below; so does one that shrinks
  less or more than the paper's.

Negative control of both: the same seeds' untrained actors (their initial parameters) on
the same inputs (slope near 0, closest to the reward-only rule). The exact-PMD arm
(slope 1) fails the shrinkage claim in the study's tests.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.seeds import JUDGED, check_stream, seed_keys
from experiments.studies.pmd import training
from pmd_jax import rules, tasks
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

PAPER = {
    "row_l1_pmd": 0.0357, "row_l1_additive_projected": 0.112, "row_l1_prior": 0.239, "row_l1_boltzmann_q": 0.606,
    "row_l1_reward_only": 0.607, "kl_to_pmd": 0.0022, "fitted_slope_label_free": 0.743,
    "fitted_slope_supervised": 0.885, "fitted_step_at_0.8_lo_label_free": 0.755, "fitted_step_at_0.8_hi_label_free": 0.810,
}
OBJECTIVES = ("label_free", "supervised")
UNTRAINED = "the same seeds' untrained actors (initial parameters) on the same inputs"
PMD_CLOSEST = checks.Claim(
    "pmd_closest_of_five_rules",
    "the label-free actor is closer to PMD than to any other fixed rule (held-out row-L1, next-closest minus PMD)",
    ">", 0.0, unit="seed", control=UNTRAINED,
    fails_if="the actor learned another update (additive, prior, Boltzmann, reward-only) or stays near its initialisation")
SHRINKAGE_TOL = (1.0 - PAPER["fitted_slope_label_free"]) / 2  # half the way from the paper's slope to no shrinkage
SHRINKAGE = checks.Claim(
    "fitted_slope_shrinks_as_paper",
    "the label-free actor's fitted step follows the supplied step shrunk towards the middle of the training range, "
    "with the paper's slope 0.743", "within", PAPER["fitted_slope_label_free"], tol=SHRINKAGE_TOL, unit="seed",
    control=UNTRAINED, paper=PAPER["fitted_slope_label_free"],
    fails_if="the actor follows eta exactly (slope 1, as exact PMD) or ignores it (slope 0), or shrinks it less or "
             "more than the paper's")


@dataclasses.dataclass(frozen=True)
class LearnedActorConfig:
    train: TrainConfig = TrainConfig()
    seeds: int = 15  # label-free runs (paper: 15 runs per objective)
    supervised_seeds: int = 15
    stream: int = JUDGED
    chunks: int = 8
    etas: tuple[float, ...] = (0.4, 0.6, 0.8, 1.0, 1.2)  # supplied steps of the held-out cells
    entropies: tuple[str, ...] = ("low", "any", "high")  # prior bands of the held-out cells
    n_test_mdps: int = 64
    transfer_families: tuple[str, ...] = tasks.FAMILIES[1:]
    eval_seed: int = 7  # PRNG seed of the held-out policies

    def __post_init__(self):
        check_stream(self.stream)
        if self.seeds < 1 or self.supervised_seeds < 1 or self.n_test_mdps < 1 or self.chunks < 1:
            raise ValueError(f"seeds, supervised_seeds, n_test_mdps and chunks must be >= 1, got {self.seeds}, "
                             f"{self.supervised_seeds}, {self.n_test_mdps}, {self.chunks}")
        if self.train.num_steps % self.chunks:
            raise ValueError(f"chunks={self.chunks} must divide train.num_steps={self.train.num_steps}")
        lo, hi = tasks.ETA_RANGE
        if len(self.etas) < 2 or not all(lo <= e <= hi for e in self.etas):
            raise ValueError(f"etas must hold at least 2 steps inside the training range {tasks.ETA_RANGE}, got {self.etas}")
        for name, values, allowed in (("entropies", self.entropies, tuple(tasks.POLICY_ENTROPY)),
                                      ("transfer_families", self.transfer_families, tasks.FAMILIES)):
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {values}")


# Sizes from a prototype (2 runs from seeds outside both streams, scored on 64 test MDPs: d_model 64 / 32 at 800
# steps, row-L1 to PMD 0.014 / 0.025),
# then screened on stream 1 (3 seeds): row-L1 to PMD 0.023, next closest (additive) 0.043, fitted slope 0.94.
# Seeds screened on stream 1 (8 label-free seeds, judged on their first n): per-seed slope sd 0.035, so 3 seeds left
# the shrinkage claim INCONCLUSIVE (interval 0.84-1.03); 4 gave 0.87-0.99, 5 gave 0.88-0.97 (width 0.08), both clear
# of the paper's band 0.615-0.872; PMD's lead 0.0195 (interval width 0.0016 at 5), untrained control lead -0.28,
# slope -0.08. Supervised runs are reported, not checked: 2 of them.
# The shrinkage check then moved from the per-input median fit to the paper's pooled fit (issue 43), size unchanged:
# screening (stream 1, 5 seeds) pooled slope 0.928, median 0.925, the check FAIL either way; judged once (stream 0):
# pooled 0.940 [0.901, 0.978] FAIL (median 0.943; untrained control -0.09, FAIL).
QUICK = LearnedActorConfig(train=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=800, warmup=80),
                           seeds=5, supervised_seeds=2, chunks=4, n_test_mdps=32)
FULL = LearnedActorConfig(train=TrainConfig(num_steps=12_800, warmup=400))


def evaluate(cfg: LearnedActorConfig, params) -> dict:
    """Held-out inputs and every run's outputs, the rules' outputs, fitted steps and transfer distances."""
    actor = cfg.train.actor()
    blocks = [training.heldout_inputs("iid", "test", cfg.n_test_mdps, e, cfg.etas, cfg.eval_seed) for e in cfg.entropies]
    x = jax.tree.map(lambda *a: np.concatenate(a), *blocks)
    n_cell = len(cfg.etas) * cfg.n_test_mdps

    @jax.jit
    def outputs(params, x):
        per_run = jax.vmap(lambda p: jax.vmap(lambda pi, Q, e: actor.log_policy(p, pi, Q, e))(x.pi, x.Q, x.eta))
        return per_run(params)

    log_out = np.asarray(outputs(params, x), np.float64)  # [runs, N, S, A]
    rule_out = np.asarray(jax.jit(jax.vmap(rules.apply_rules))(x.pi, x.Q, x.mdp.R, x.eta), np.float64)  # [N, 5, S, A]
    eta_idx = np.tile(np.repeat(np.arange(len(cfg.etas)), cfg.n_test_mdps), len(cfg.entropies))

    by_eta = np.stack([np.flatnonzero(eta_idx == j) for j in range(len(cfg.etas))])  # [etas, inputs per step]
    fit_args = (np.exp(log_out)[:, by_eta], np.asarray(x.pi)[by_eta], np.asarray(x.Q)[by_eta])
    fit, pooled = (np.asarray(jax.jit(jax.vmap(jax.vmap(f), in_axes=(0, None, None)))(*fit_args))  # [runs, etas]
                   for f in (training.fitted_step_median, rules.fitted_step))
    transfer = {}
    label_free = jax.tree.map(lambda a: a[: cfg.seeds], params)
    for fam in cfg.transfer_families:
        xf = training.heldout_inputs(fam, "test", cfg.n_test_mdps, "any", cfg.etas, cfg.eval_seed)
        out = np.exp(np.asarray(outputs(label_free, xf), np.float64))
        pmd = np.asarray(jax.vmap(rules.apply_rules)(xf.pi, xf.Q, xf.mdp.R, xf.eta))[:, 0]
        transfer[fam] = np.abs(out - pmd[None]).sum(-1).mean(axis=(1, 2))  # [label-free runs]
    return {"log_pi": np.log(np.asarray(x.pi, np.float64)), "Q": np.asarray(x.Q, np.float64),
            "R": np.asarray(x.mdp.R, np.float64), "eta": np.asarray(x.eta, np.float64),
            "entropy": np.repeat(np.arange(len(cfg.entropies)), n_cell), "log_pi_learned": log_out,
            "rules": rule_out, "fitted_step": fit, "fitted_step_pooled": pooled, "transfer_row_l1": transfer}


def compute(cfg: LearnedActorConfig, ctx: RunContext) -> dict:
    keys = np.concatenate([seed_keys(cfg.seeds, cfg.stream), seed_keys(cfg.supervised_seeds, cfg.stream)])
    supervised = np.repeat([0.0, 1.0], [cfg.seeds, cfg.supervised_seeds])  # the same first seeds under both objectives
    params, curves = training.train_runs(ctx, "actor", cfg.train, "actor", keys, supervised, cfg.chunks)
    loss = curves["loss"]
    untrained = training.initial_params(cfg.train, "actor", keys[: cfg.seeds])
    heldout = evaluate(cfg, jax.tree.map(lambda a, b: np.concatenate([a, b]), params, untrained))
    trained = len(supervised)
    per_run = ("log_pi_learned", "fitted_step", "fitted_step_pooled")
    heldout["untrained"] = {k: heldout[k][trained:] for k in per_run}
    heldout.update({k: heldout[k][:trained] for k in per_run})
    return {"params": params, "supervised": supervised, "heldout": heldout,
            "curves": {obj: {"loss": loss[supervised == float(i)]} for i, obj in enumerate(OBJECTIVES)}}


def rule_distances(log_pi: np.ndarray, rule_out: np.ndarray) -> np.ndarray:
    """Mean row-L1 ``[runs, rules]`` from each run's outputs ``log_pi [runs, N, S, A]`` to each rule's ``[N, rules, S, A]``."""
    return np.abs(np.exp(log_pi)[:, :, None] - rule_out[None]).sum(-1).mean(axis=(1, 3))


def pmd_lead(dist: np.ndarray) -> np.ndarray:
    """Per run, the row-L1 to the closest rule other than PMD minus the row-L1 to PMD (``dist [runs, rules]``)."""
    j = rules.RULES.index("pmd")
    return np.delete(dist, j, axis=1).min(axis=1) - dist[:, j]


def slopes(fit: np.ndarray, etas) -> np.ndarray:
    """Per run the least-squares slope of the fitted step ``fit [runs, etas]`` on the supplied step."""
    x = np.asarray(etas, np.float64) - np.mean(etas)
    return (fit - fit.mean(axis=1, keepdims=True)) @ x / (x @ x)


def summarize(cfg: LearnedActorConfig, arrays: dict) -> Summary:
    h = arrays["heldout"]
    sup = np.asarray(arrays["supervised"]) > 0.5
    pi_out = np.exp(h["log_pi_learned"])  # [runs, N, S, A]
    dist = rule_distances(h["log_pi_learned"], h["rules"])  # [runs, rules]
    pmd = h["rules"][:, 0]
    kl = np.sum(pi_out * (h["log_pi_learned"] - np.log(np.maximum(pmd, 1e-300))[None]), -1).mean(axis=(1, 2))
    etas = np.asarray(cfg.etas)
    metrics, table = {}, {"rule": list(rules.RULES)}
    for obj, rows in (("label_free", ~sup), ("supervised", sup)):
        table[f"row_l1_{obj}"] = dist[rows].mean(0).tolist()
        for j, rule in enumerate(rules.RULES):
            metrics[f"row_l1_{rule}" if obj == "label_free" else f"row_l1_{rule}_supervised"] = float(dist[rows, j].mean())
        metrics["kl_to_pmd" if obj == "label_free" else "kl_to_pmd_supervised"] = float(kl[rows].mean())
        fit = h["fitted_step"][rows]  # [runs, etas]
        metrics[f"fitted_slope_{obj}"] = float(slopes(fit, etas).mean())
        metrics[f"fitted_slope_pooled_{obj}"] = float(slopes(h["fitted_step_pooled"][rows], etas).mean())
        metrics[f"fitted_step_pooled_max_{obj}"] = float(h["fitted_step_pooled"][rows].max())  # 10: the bracket's end
        at = np.flatnonzero(np.isclose(etas, 0.8))
        if at.size:
            metrics[f"fitted_step_at_0.8_lo_{obj}"] = float(fit[:, at[0]].min())
            metrics[f"fitted_step_at_0.8_hi_{obj}"] = float(fit[:, at[0]].max())
    table["paper_label_free"] = [PAPER[f"row_l1_{r}"] for r in rules.RULES]
    for e_i, band in enumerate(cfg.entropies):
        rows = h["entropy"] == e_i
        metrics[f"row_l1_pmd_{band}_entropy"] = float(np.abs(pi_out[~sup][:, rows] - pmd[rows][None]).sum(-1).mean())
        metrics[f"row_l1_pmd_max_{band}_entropy"] = float(np.abs(pi_out[~sup][:, rows] - pmd[rows][None]).sum(-1).max())
    for fam, d in h["transfer_row_l1"].items():
        metrics[f"row_l1_pmd_{fam}"] = float(np.mean(d))
    label_free = dist[~sup].mean(0)
    others = [j for j in range(len(rules.RULES)) if rules.RULES[j] != "pmd"]
    nearest = others[int(np.argmin(label_free[others]))]
    metrics["row_l1_next_closest"] = float(label_free[nearest])
    untrained = rule_distances(h["untrained"]["log_pi_learned"], h["rules"])
    metrics["row_l1_pmd_untrained"] = float(untrained[:, 0].mean())
    metrics["fitted_slope_untrained"] = float(slopes(h["untrained"]["fitted_step"], etas).mean())
    found = [PMD_CLOSEST.judge(pmd_lead(dist[~sup]), control=pmd_lead(untrained)),
             SHRINKAGE.judge(slopes(h["fitted_step_pooled"][~sup], etas),
                             control=slopes(h["untrained"]["fitted_step_pooled"], etas))]
    fits = {"eta": etas.tolist()}
    for obj, rows in (("label_free", ~sup), ("supervised", sup)):
        fits[f"fitted_pooled_mean_{obj}"] = h["fitted_step_pooled"][rows].mean(0).tolist()
        fits[f"fitted_mean_{obj}"] = h["fitted_step"][rows].mean(0).tolist()
        fits[f"fitted_min_{obj}"] = h["fitted_step"][rows].min(0).tolist()
        fits[f"fitted_max_{obj}"] = h["fitted_step"][rows].max(0).tolist()
    return Summary(metrics=metrics, checks=found, tables={"table": table, "fitted_step": fits})


def write(cfg: LearnedActorConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``heldout.npz``, the kept actors ``models/actor`` and ``correspondence.png`` (Figure 6)."""
    h, sup = arrays["heldout"], np.asarray(arrays["supervised"])
    pi_runs = np.exp(h["log_pi_learned"])
    io.save_npz(out_dir / "heldout.npz", log_pi=h["log_pi"], Q=h["Q"], R=h["R"], eta=h["eta"], entropy=h["entropy"],
                entropy_names=np.array(cfg.entropies), pi_learned=pi_runs[0], pi_learned_runs=pi_runs, supervised=sup)
    training.keep(out_dir, "actor", cfg.train, "actor", arrays["params"],
                  {"supervised": sup.tolist(), "stream": cfg.stream, "seeds": cfg.seeds,
                   "train": dataclasses.asdict(cfg.train)})
    import matplotlib.pyplot as plt

    t, f = summary.tables["table"], summary.tables["fitted_step"]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2))
    y = np.arange(len(rules.RULES))[::-1]
    ax0.barh(y + 0.2, t["row_l1_label_free"], 0.4, label="ours, no PMD labels")
    ax0.barh(y - 0.2, t["paper_label_free"], 0.4, color="0.7", label="paper")
    ax0.set_yticks(y, rules.RULES)
    ax0.set_xlabel("mean held-out row-L1 from the learned actor to the rule")
    ax0.legend(fontsize=8)
    for obj, color in (("label_free", "tab:blue"), ("supervised", "tab:orange")):
        ax1.errorbar(f["eta"], f[f"fitted_mean_{obj}"],
                     yerr=[np.subtract(f[f"fitted_mean_{obj}"], f[f"fitted_min_{obj}"]),
                           np.subtract(f[f"fitted_max_{obj}"], f[f"fitted_mean_{obj}"])],
                     marker="o", capsize=3, color=color,
                     label=f"{obj.replace('_', ' ')} (slope {summary.metrics[f'fitted_slope_{obj}']:.3f}; "
                           f"paper {PAPER[f'fitted_slope_{obj}']})")
    ax1.plot(f["eta"], f["eta"], "k:", lw=1, label="fitted = supplied")
    ax1.set_xlabel("step size supplied, eta")
    ax1.set_ylabel("fitted step (mean, min-max over seeds)")
    ax1.legend(fontsize=8)
    fig.suptitle("One-step correspondence of the learned pre-LN actor (held-out test MDPs)", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "correspondence.png")


STUDY = register(Study(
    name="pmd.learned_actor",
    cost_fields=("train.num_steps", "train.warmup"),
    summary="PolicyAttention learned pre-LN actor: row-L1 to five fixed rules, fitted step (Figure 6)",
    config_type=LearnedActorConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=(PMD_CLOSEST, SHRINKAGE),
    quick_s=60,
))

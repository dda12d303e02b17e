"""Study ``pmd.repeated_control``: does a learned actor stay useful when its own outputs become
its next inputs? (Figure 7)

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), sections 9 and 11, Figure 7 and the
"repeated-control loss ratios" table of section 15 (5 separately trained actors,
51,200 steps each, seeds 12100-12104; 64 held-out MDPs; 20 rounds; exact one-step critic).

``runs`` label-free actors (:class:`pmd_jax.learned.LearnedActor`, KL-proximal objective,
``iid`` training pool) train as one vmapped program. The learned critic
(:class:`pmd_jax.learned.LearnedCritic`) is run 0 of ``pmd.learned_critic``'s critics, loaded
from that study's kept model when its training config and stream match (``run all`` runs
it first; the two presets' critic configs are equal), otherwise trained here the same way
(``training.reuse_or_train``; ``models.csv`` names the origin). Both are kept
(``models/actor``, ``models/critic``). Each actor's fitted step ``eta_hat`` is measured
at the supplied ``eta = 0.8`` on ``n_val_mdps`` inputs of the ``val`` key stream
(``training.fitted_step_median``), so the reference never sees the test MDPs.

Closed loop (:func:`pmd_jax.loop.closed_loop`, one program over runs x families x MDPs):
from the uniform policy and ``Q_0 = 0``, ``rounds`` rounds of actor call at ``eta`` then
the exact one-step critic ``Q_{k+1} = F^{pi_{k+1}} Q_k``. The reference is exact PMD at
the actor's ``eta_hat`` with the same critic. The loss after round ``k`` is the
normalised returned-policy loss ``||Q* - Q^{pi_k}|| / ||Q* - Q^{pi_0}||`` (sup norms) on
each of ``n_mdps`` MDPs of the ``test`` stream of ``iid`` and of the four further
families (the same checkpoints, no retraining). Then on ``iid`` the learned critic
replaces the exact one, reading ``6`` fresh samples per pair drawn under the returned
policy. ``control.csv`` (``run, family, mdp, round, loss_learned, loss_reference``) and
``control_learned_critic.csv`` hold every loss.

Reported per run: the ratio of median losses at the last round (learned over
reference), their cross-run median, and the paired difference ``loss_learned -
loss_reference`` at the last round with a 95% hierarchical bootstrap (runs resampled,
then MDPs within each run); the same on each further family and for the learned critic.

Checks (declared claims, one per family, judged per run (seed) with a 95% t interval), and how each could fail:

* ``ratio_within_band_iid``: the run's ratio (median last-round loss over the reference's)
  below the band 1.5, as a mean over runs. An actor whose errors compound when it reads
  its own outputs (leaving its training range of log-probabilities, or stalling as its
  policy sharpens) loses more than 1.5 times the reference.
* ``ratio_within_band_FAMILY``, one per further family: the same checkpoints on a family
  they were not trained on; an actor that learned the training family rather than the PMD
  map fails there, and so does one whose inputs leave its training range (``reward_x2``
  doubles every ``|Q|``: values up to 10 where training saw at most 5). The families are the
  project's (``pmd_jax.tasks``): the paper's four further families are unnamed ("four
  declared environment families of the same shape", cross-run medians 0.927, 1.004, 1.014,
  0.997), so no number of the paper stands beside one of ours.
  Beside ``iid``, the paper's number is the mean of its five run ratios.

Negative control of every check: the same seeds' untrained actors (their initial
parameters) in the same loop, against the same reference; an actor that has not learned
the update must leave the band.

The learned critic in the loop is reported, not checked: the paper gives only its paired
difference to the reference (0.000518 [0.000008, 0.002155]), a size, not a claim that
could fail; ours is ``diff_median_learned_critic`` with its interval, and the per-run
ratios are in ``table.csv``.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.seeds import JUDGED, check_stream, seed_keys
from experiments.studies.pmd import training
from pmd_jax import tasks
from pmd_jax.loop import closed_loop, exact_critic, learned_balanced_critic
from pmd_jax.mdp import loss_normaliser, policy_loss, uniform_policy
from pmd_jax.pmd import pmd_step
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

PAPER = {
    "ratio_run_1": 0.978, "ratio_run_2": 1.396, "ratio_run_3": 1.237, "ratio_run_4": 0.918, "ratio_run_5": 1.052,
    "ratio_median": 1.052, "ratio_max": 1.396, "diff_median": 0.000177, "diff_lo": -0.000137, "diff_hi": 0.000748,
    "diff_median_learned_critic": 0.000518, "diff_lo_learned_critic": 0.000008, "diff_hi_learned_critic": 0.002155,
}
# The paper's four further families are "declared environment families of the same shape" with cross-run medians
# 0.927, 1.004, 1.014 and 0.997; it does not name them, so the project's four (pmd_jax.tasks.FAMILIES) are reported
# without a paper column: a number of the paper beside one of ours would attribute it to a family of our choosing.
BAND = 1.5  # registered before the paper's runs
PAPER_RUN_MEAN = float(np.mean([PAPER[f"ratio_run_{r}"] for r in range(1, 6)]))
RATIO_CLAIMS = {fam: checks.Claim(
    f"ratio_within_band_{fam}",
    f"the learned actor's median last-round loss on {fam} is within {BAND}x exact PMD's at its fitted step"
    + ("" if fam == tasks.FAMILIES[0] else " (a family it was not trained on)"),
    "<", BAND, unit="seed", control="the same seeds' untrained actors (initial parameters) in the same loop",
    fails_if="the actor's errors compound when it reads its own outputs, or it learned the training family "
             "rather than the PMD map, or its inputs leave its training range",
    paper=PAPER_RUN_MEAN if fam == tasks.FAMILIES[0] else None) for fam in tasks.FAMILIES}


@dataclasses.dataclass(frozen=True)
class RepeatedControlConfig:
    actor: TrainConfig = TrainConfig(num_steps=51_200, warmup=1_000)
    critic: TrainConfig = TrainConfig(model=ModelConfig(num_layers=3), num_steps=12_800, warmup=400, batch_size=32)
    runs: int = 5
    stream: int = JUDGED
    chunks: int = 16
    eta: float = 0.8
    rounds: int = 20
    n_mdps: int = 64
    n_val_mdps: int = 64
    families: tuple[str, ...] = tasks.FAMILIES  # the first is the training family
    samples_per_pair: int = 6  # the learned critic's packet in the loop
    n_bootstrap: int = 10_000
    bootstrap_seed: int = 0
    loop_seed: int = 3

    def __post_init__(self):
        check_stream(self.stream)
        for name in ("runs", "chunks", "rounds", "n_mdps", "n_val_mdps", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("actor", "critic"):
            if getattr(self, name).num_steps % self.chunks:
                raise ValueError(f"chunks={self.chunks} must divide {name}.num_steps={getattr(self, name).num_steps}")
        lo, hi = tasks.ETA_RANGE
        if not lo <= self.eta <= hi:
            raise ValueError(f"eta must lie in the actor's training range {tasks.ETA_RANGE}, got {self.eta}")
        if not self.families or self.families[0] != self.actor.family or any(f not in tasks.FAMILIES for f in self.families):
            raise ValueError(f"families must start with the training family {self.actor.family!r} and lie in "
                             f"{tasks.FAMILIES}, got {self.families}")
        if self.critic.samples_per_pair != self.samples_per_pair:
            raise ValueError(f"samples_per_pair={self.samples_per_pair} must equal critic.samples_per_pair="
                             f"{self.critic.samples_per_pair} (the critic's packet size)")


# Screened on stream 1 (3 runs; the ratio at round 20, max over runs): d_model 32, batch 64, 800 steps: iid 2.95;
# 3,200 steps: iid 1.30 (2 runs); d_model 64, 3,200 steps: iid 1.13, bimodal 1.11 (2 runs, 2.5x the time);
# d_model 64, batch 32, 2,400 steps: iid 1.48, bimodal 1.85; chosen: d_model 32, batch 32, lr 2e-3, 3,200 steps:
# iid 1.23, bimodal 1.61, sparse 1.43, near-deterministic 1.11, reward_x2 134 (out of range, see the docstring).
# The run count (3) was not re-screened for the per-run intervals of the declared claims (no time on two shared
# cores); the judged run's n_needed, where a family is INCONCLUSIVE, says how many runs would decide it.
QUICK = RepeatedControlConfig(
    actor=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=3_200, warmup=100, batch_size=32,
                      lr=2e-3),
    critic=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=1_500, warmup=100, batch_size=16),
    runs=3, chunks=4, n_mdps=32, n_val_mdps=32, n_bootstrap=2_000)
FULL = RepeatedControlConfig()


def _losses(mdp, policies, Q_star, loss0):
    return jax.vmap(lambda pi: policy_loss(mdp, Q_star, pi))(policies) / loss0


def control(cfg: RepeatedControlConfig, actor_params, eta_hat, critic_params, untrained_params) -> dict:
    """Loss curves ``[runs, families, mdps, rounds]`` (learned, untrained, reference) and ``[runs, mdps, rounds]``
    with the learned critic, as one program."""
    actor, critic = cfg.actor.actor(), cfg.critic.critic()
    S, A = cfg.actor.num_states, cfg.actor.num_actions
    mdps = [tasks.split_mdps(f, "test", cfg.n_mdps, cfg.actor.data_seed) for f in cfg.families]
    mdps = jax.tree.map(lambda *a: np.stack(a), *mdps)  # [families, mdps, ...]
    keys = jax.random.split(jax.random.key(cfg.loop_seed), cfg.n_mdps)
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))

    def one_mdp(params, params0, eta_ref, mdp, key):
        Q_star, loss0 = loss_normaliser(mdp)
        exact = exact_critic(mdp)
        run = lambda act, crit, eta: _losses(  # noqa: E731
            mdp, closed_loop(key, mdp, act, crit, pi0, Q0, 0, eta, cfg.rounds).policies, Q_star, loss0)
        played = [run(lambda pi, Q, eta, p=p: actor.policy(p, pi, Q, eta), exact, cfg.eta) for p in (params, params0)]
        return (*played, run(pmd_step, exact, eta_ref))

    def with_learned_critic(params, mdp, key):
        Q_star, loss0 = loss_normaliser(mdp)

        crit = learned_balanced_critic(critic, critic_params, mdp, cfg.samples_per_pair)

        act = lambda pi, Q, eta: actor.policy(params, pi, Q, eta)  # noqa: E731
        return _losses(mdp, closed_loop(key, mdp, act, crit, pi0, Q0, 0, cfg.eta, cfg.rounds).policies, Q_star, loss0)

    @jax.jit
    def program(actor_params, untrained_params, eta_hat, mdps, keys):
        per_mdp = jax.vmap(one_mdp, in_axes=(None, None, None, 0, 0))
        per_family = jax.vmap(per_mdp, in_axes=(None, None, None, 0, None))
        learned_loss, untrained_loss, ref_loss = jax.vmap(per_family, in_axes=(0, 0, 0, None, None))(
            actor_params, untrained_params, eta_hat, mdps, keys)
        iid = jax.tree.map(lambda x: x[0], mdps)
        lc = jax.vmap(jax.vmap(with_learned_critic, in_axes=(None, 0, 0)), in_axes=(0, None, None))(
            actor_params, iid, keys)
        return {"learned": learned_loss, "untrained": untrained_loss, "reference": ref_loss, "learned_critic": lc}

    out = program(actor_params, untrained_params, eta_hat, mdps, keys)
    return jax.tree.map(lambda a: np.asarray(a, np.float64), out)


def compute(cfg: RepeatedControlConfig, ctx: RunContext) -> dict:
    keys = seed_keys(cfg.runs, cfg.stream)
    actor_params, actor_curves = training.train_runs(ctx, "actor", cfg.actor, "actor", keys, np.zeros(cfg.runs),
                                                     cfg.chunks)
    critic_params, critic_origin = training.reuse_or_train(ctx, "pmd.learned_critic", "critic", cfg.critic, "critic", 1,
                                                           cfg.stream, cfg.chunks)
    actor = cfg.actor.actor()
    val = training.heldout_inputs(cfg.actor.family, "val", cfg.n_val_mdps, "any", (cfg.eta,), cfg.loop_seed,
                                  cfg.actor.data_seed)
    outs = jax.jit(jax.vmap(lambda p: jax.vmap(lambda pi, Q, e: actor.policy(p, pi, Q, e))(val.pi, val.Q, val.eta)))
    eta_hat = np.asarray(jax.jit(jax.vmap(training.fitted_step_median, in_axes=(0, None, None)))(
        outs(actor_params), val.pi, val.Q))
    critic_one = jax.tree.map(lambda a: a[0], critic_params)
    return {"actor_params": actor_params, "critic_params": critic_params, "eta_hat": eta_hat,
            "losses": control(cfg, actor_params, eta_hat, critic_one, training.initial_params(cfg.actor, "actor", keys)),
            "critic_origin": critic_origin,
            "curves": {"actor": actor_curves}}


def hierarchical_bootstrap(diff: np.ndarray, n: int, seed: int, ci: float = 0.95) -> tuple[float, float, float]:
    """Median of ``diff [runs, mdps]`` and a percentile interval: resample runs, then MDPs within each run."""
    rng = np.random.default_rng(seed)
    runs, mdps = diff.shape
    r = rng.integers(0, runs, size=(n, runs))
    i = rng.integers(0, mdps, size=(n, runs, mdps))
    meds = np.median(diff[r[:, :, None], i].reshape(n, -1), axis=1)
    return float(np.median(diff)), float(np.quantile(meds, (1 - ci) / 2)), float(np.quantile(meds, (1 + ci) / 2))


def ratios(learned_loss: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per run the ratio of median last-round losses, ``[runs]`` from ``[runs, mdps, rounds]``."""
    return np.median(learned_loss[..., -1], axis=1) / np.median(reference[..., -1], axis=1)


def summarize(cfg: RepeatedControlConfig, arrays: dict) -> Summary:
    L = arrays["losses"]
    m = {f"eta_hat_run_{r + 1}": float(e) for r, e in enumerate(arrays["eta_hat"])}
    table = {"family": [], "critic": [], "ratio_median": [], "ratio_min": [], "ratio_max": [], "diff_median": [],
             "diff_lo": [], "diff_hi": []}

    def report(name: str, critic: str, learned_loss, reference, suffix: str):
        rat = ratios(learned_loss, reference)
        med, lo, hi = hierarchical_bootstrap(learned_loss[..., -1] - reference[..., -1], cfg.n_bootstrap,
                                             cfg.bootstrap_seed)
        for k, v in (("family", name), ("critic", critic), ("ratio_median", float(np.median(rat))),
                     ("ratio_min", float(rat.min())), ("ratio_max", float(rat.max())), ("diff_median", med),
                     ("diff_lo", lo), ("diff_hi", hi)):
            table[k].append(v)
        m.update({f"ratio_median{suffix}": float(np.median(rat)), f"ratio_max{suffix}": float(rat.max()),
                  f"diff_median{suffix}": med, f"diff_lo{suffix}": lo, f"diff_hi{suffix}": hi})
        return rat

    rat = report(cfg.families[0], "exact", L["learned"][:, 0], L["reference"][:, 0], "")
    m.update({f"ratio_run_{r + 1}": float(v) for r, v in enumerate(rat)})
    m["loss_median_last_round_learned"] = float(np.median(L["learned"][:, 0, :, -1]))
    m["loss_median_last_round_reference"] = float(np.median(L["reference"][:, 0, :, -1]))
    further = {f: report(f, "exact", L["learned"][:, j], L["reference"][:, j], f"_{f}")
               for j, f in enumerate(cfg.families) if j > 0}
    report(cfg.families[0], "learned", L["learned_critic"], L["reference"][:, 0], "_learned_critic")
    lc_diff = L["learned_critic"][..., -1] - L["learned"][:, 0, :, -1]
    m["learned_vs_exact_critic_diff_median"] = float(np.median(lc_diff))
    found = []
    for j, fam in enumerate(cfg.families):
        control_ratio = ratios(L["untrained"][:, j], L["reference"][:, j])
        m[f"ratio_mean_untrained_{fam}"] = float(control_ratio.mean())
        found.append(RATIO_CLAIMS[fam].judge(rat if j == 0 else further[fam], control=control_ratio))
    return Summary(metrics=m, checks=found, tables={"table": table, "models": {
        "role": ["actor", "critic"], "origin": ["trained here", arrays["critic_origin"]]}})


def write(cfg: RepeatedControlConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``control.csv``, ``control_learned_critic.csv``, the kept models and ``repeated_control.png`` (Figure 7)."""
    L = arrays["losses"]
    runs, fams, n, T = L["learned"].shape
    grid = np.meshgrid(np.arange(runs), np.arange(fams), np.arange(n), np.arange(T), indexing="ij")
    io.write_csv(out_dir / "control.csv", {
        "run": grid[0].reshape(-1), "family": np.asarray(cfg.families)[grid[1].reshape(-1)],
        "mdp": grid[2].reshape(-1), "round": grid[3].reshape(-1) + 1,
        "loss_learned": L["learned"].reshape(-1), "loss_reference": L["reference"].reshape(-1)})
    g = np.meshgrid(np.arange(runs), np.arange(n), np.arange(T), indexing="ij")
    io.write_csv(out_dir / "control_learned_critic.csv", {
        "run": g[0].reshape(-1), "mdp": g[1].reshape(-1), "round": g[2].reshape(-1) + 1,
        "loss_learned_critic": L["learned_critic"].reshape(-1), "loss_reference": L["reference"][:, 0].reshape(-1)})
    info = {"stream": cfg.stream, "eta_hat": arrays["eta_hat"].tolist()}
    training.keep(out_dir, "actor", cfg.actor, "actor", arrays["actor_params"],
                  {**info, "supervised": [0.0] * cfg.runs, "train": dataclasses.asdict(cfg.actor)})
    training.keep(out_dir, "critic", cfg.critic, "critic", arrays["critic_params"],
                  {**info, "train": dataclasses.asdict(cfg.critic)})
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    rounds = np.arange(1, T + 1)
    for r in range(runs):
        ax0.plot(rounds, np.median(L["learned"][r, 0], axis=0), color="teal", alpha=0.8,
                 label="learned actor" if r == 0 else None)
        ax0.plot(rounds, np.median(L["reference"][r, 0], axis=0), "k--", alpha=0.6,
                 label="exact PMD at the fitted step" if r == 0 else None)
    ax0.set_yscale("log")
    ax0.set_xlabel("round")
    ax0.set_ylabel(f"median normalised loss over {n} held-out MDPs")
    ax0.legend(fontsize=8)
    ratio = [summary.metrics[f"ratio_run_{r + 1}"] for r in range(runs)]
    ax1.barh(np.arange(runs)[::-1] + 0.2, ratio, 0.4, color="teal", label="ours")
    paper = [PAPER[f"ratio_run_{r + 1}"] for r in range(min(runs, 5))]
    ax1.barh(np.arange(runs)[::-1][: len(paper)] - 0.2, paper, 0.4, color="0.7", label="paper")
    ax1.axvline(BAND, color="tab:red", ls=":", label=f"registered band {BAND}")
    ax1.set_yticks(np.arange(runs)[::-1], [f"run {r + 1}" for r in range(runs)])
    ax1.set_xlabel(f"ratio to the reference at round {T}")
    ax1.legend(fontsize=8)
    fig.suptitle(f"Repeated control by {runs} learned actors ({cfg.families[0]}, exact one-step critic)", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "repeated_control.png")


STUDY = register(Study(
    name="pmd.repeated_control",
    cost_fields=("actor.num_steps", "actor.warmup", "critic.num_steps", "critic.warmup", "n_bootstrap"),
    summary="PolicyAttention learned actors in a 20-round closed loop vs exact PMD at their fitted step (Figure 7)",
    config_type=RepeatedControlConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="runs", after=("pmd.learned_critic",), claims=tuple(RATIO_CLAIMS.values()),
    quick_s=65,
))

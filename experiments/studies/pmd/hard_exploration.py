"""Study ``pmd.hard_exploration``: where do the coverage oracle and the on-policy stream part ways?

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), section 11 ("What the evidence does not show"):

    "The coverage study is one forgiving family. Its dense random transitions mix quickly [...] Hard-exploration
    MDPs are untested, and the reading that loss comes from overwriting unvisited pairs is an interpretation."

and the open questions' "Learning without the oracle" ("how the critic treats pairs it has not seen").

The decoder's closed loop of ``pmd.coverage`` (its program, with its arms at budget m = 6 and the exact backup,
:data:`ARMS`; eta 0.8, margins 16, T = 20 rounds from the uniform policy and Q_0 = 0) runs on three sets of ``n_mdps`` MDPs of the same
size (S states, A = 3, gamma = 0.8), all in one compiled program:

* ``lock``: combination locks (:class:`pmd_jax.mdp.CombinationLockFamily`, ours: ``docs/pmd.md`` section 12): a
  chain whose secret action per state opens the next state, every other action resetting the chain; only the last
  state's secret action pays (reward 1), with a small ``slip`` to a uniformly drawn state. Under the uniform
  policy the stream reaches state ``s`` about ``3^-s`` as often as state 0, while a balanced packet holds ``m``
  draws of every pair, the paying one included, every round;
* ``dense`` and ``dense_b``: two independent draws of ``pmd.coverage``'s dense family at the same size
  (``P(.|s,a) ~ Dirichlet(1)``, ``R ~ U[-1, 1]``), where the coverage study found the stream's loss to come from
  overwriting unvisited pairs.

Every set draws its MDPs and its loops' sampling keys from its own fold of ``mdp_seed`` and ``loop_seed``.

Checks (interval claims, 95% t intervals; the unit is the MDP, or the pair (lock ``i``, dense MDP ``i``) of two
independent draws, whose differences are independent with the mean of the difference of the two families' means),
and how each could fail:

* ``carry_q_loses_on_lock`` (per lock, paired loss carry-Q minus balanced at m = 6, above 0; control: the same on
  the dense family, where ``pmd.coverage`` finds the patch brings the stream back to the oracle): if the stream
  reached the paying pair often enough, keeping the old Q on unvisited pairs would suffice on locks too. The patch
  keeps ``Q_0 = 0`` on a pair the stream has never visited, so a lock whose paying pair the stream misses keeps
  looking worthless: coverage, not overwriting, is what the lock takes.
* ``lock_gap_exceeds_dense_gap`` (per pair, on-policy-minus-balanced loss at m = 6 on lock ``i`` minus the same on
  dense MDP ``i``, above 0; control: ``dense_b`` MDP ``i`` against dense MDP ``i``, no family difference): the
  oracle's advantage over the stream grows when the family is hard to explore; a decoder whose stream loss came
  from something else than coverage (or a lock the stream explores easily) gives no larger gap.

Reported beside them (metrics and ``table.csv``, per family and arm): median losses with bootstrap intervals, the
paired differences to balanced, unvisited pairs and the smallest count per round, the critic's error; the
exploring stream's gap on locks (``diff_median_exploring_m6_lock``: does epsilon-exploration close it?).

Quick size: see ``QUICK`` below (screened on another draw, ``mdp_seed`` 2027 and ``loop_seed`` 2). Judged once
on the study's draw (``mdp_seed`` 2026, ``loop_seed`` 1), 64 MDPs per set: carry-Q minus balanced on locks +0.0078
[0.0038, 0.0117] PASS (control, dense: +0.0011, INCONCLUSIVE); lock gap minus dense gap +0.0086 [0.0013, 0.0160]
PASS (control, second dense draw: -0.0039, INCONCLUSIVE). Median losses, locks / dense: balanced 0.049 / 0.013,
on-policy 0.082 / 0.034, carry-Q 0.055 / 0.013, exploring 0.060 / 0.018, exact backup 0.049 / 0.012. On locks the
loop itself is slow (the exact backup's loss after 20 rounds is 0.049): the reward has to travel down the chain.
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from experiments import checks, io, sweep
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.pmd import coverage
from pmd_jax.mdp import CombinationLockFamily, RandomMDPFamily
from pmd_jax.sampling import ARM_NAMES, Arm

SETS = ("lock", "dense", "dense_b")  # the MDP sets, in the program's item order
# pmd.coverage's arms at m = 6 and the exact backup (its m = 24 arms cost most of its program; no check reads them)
ARMS = tuple((a, m) for a, m in coverage.ARMS if m in (0, 6))
LABELS = tuple(coverage.arm_label(a, m) for a, m in ARMS)

CARRY_LOSES = checks.Claim(
    "carry_q_loses_on_lock", "on combination locks, keeping the old Q on unvisited pairs does not bring the on-policy "
    "stream back to the balanced oracle's loss (per-lock paired loss, carry-Q minus balanced at m = 6, above 0)",
    ">", 0.0, unit="MDP", control="the same difference on dense random MDPs of the same size (pmd.coverage's family)",
    fails_if="the stream reaches the paying pair often enough for the carried Q to learn it: the lock is not hard "
             "to explore for the stream")
GAP_LARGER = checks.Claim(
    "lock_gap_exceeds_dense_gap", "the on-policy stream's loss over the balanced oracle's (m = 6) is larger on "
    "combination locks than on dense random MDPs (lock i minus dense MDP i, independent draws)", ">", 0.0,
    unit="MDP pair", control="a second draw of dense MDPs against the first (no family difference)",
    fails_if="the stream's loss does not come from coverage, or the lock is as easy to explore as a dense MDP")


@dataclasses.dataclass(frozen=True)
class HardExplorationConfig:
    """The sizes of ``pmd.coverage`` (section 6) on locks of ``num_states`` states."""

    num_states: int = 4
    num_actions: int = 3
    gamma: float = 0.8
    slip: float = 0.05  # probability that a transition goes to a uniformly drawn state
    eta: float = 0.8
    rounds: int = 20
    kappa: float = 16.0
    nu: float = 16.0
    explore_eps: float = 0.2
    n_mdps: int = 64  # per set
    mdp_seed: int = 2026
    loop_seed: int = 1
    chunk_size: int = 8
    n_bootstrap: int = 10_000
    bootstrap_seed: int = 0

    def __post_init__(self):
        if self.num_states < 2:
            raise ValueError(f"num_states must be >= 2 (a lock needs a state to open), got {self.num_states}")
        if not 0.0 <= self.slip < 1.0:
            raise ValueError(f"slip must lie in [0, 1), got {self.slip}")
        self.coverage()  # the loop's own fields, validated by pmd.coverage's config

    def coverage(self) -> coverage.CoverageConfig:
        """The loop's config (every field but the family's); ``r_max = 1`` bounds both families' rewards."""
        return coverage.CoverageConfig(
            num_states=self.num_states, num_actions=self.num_actions, gamma=self.gamma, eta=self.eta,
            rounds=self.rounds, kappa=self.kappa, nu=self.nu, r_max=1.0, explore_eps=self.explore_eps,
            n_mdps=self.n_mdps, mdp_seed=self.mdp_seed, loop_seed=self.loop_seed, chunk_size=self.chunk_size,
            n_bootstrap=self.n_bootstrap, bootstrap_seed=self.bootstrap_seed)

    def family(self, name: str):
        if name == "lock":
            return CombinationLockFamily(gamma=self.gamma, slip=self.slip, num_states=self.num_states,
                                         num_actions=self.num_actions)
        return RandomMDPFamily(gamma=self.gamma, r_max=1.0, concentration=1.0, num_states=self.num_states,
                               num_actions=self.num_actions)


# Screened on another draw (mdp_seed 2027, loop_seed 2), S = 4, 64 MDPs per set, first with pmd.coverage's ten
# arms (215 s beside three other runs, 47 s compiling), then with the m = 6 arms and the exact backup alone (the
# same records for those arms; 21 s): carry-Q minus balanced on locks +0.0086 [0.0037, 0.0135] PASS (control:
# -0.0004, INCONCLUSIVE), lock gap minus dense gap +0.0166 [0.0092, 0.0240] PASS (control: +0.0062, INCONCLUSIVE).
# Locks of S = 4 (pmd.coverage's size, so the family is the only change) were kept: both half-widths are well
# inside the means at 64 MDPs per set; larger locks were not tried (their packets grow with S).
QUICK = HardExplorationConfig()
FULL = HardExplorationConfig()


def mdp_items(cfg: HardExplorationConfig) -> dict[str, np.ndarray]:
    """The sweep inputs of every set (:data:`SETS`, ``n_mdps`` each, in that order), as ``coverage.mdp_items``."""
    items = []
    for i, name in enumerate(SETS):
        mdp_key = jax.random.fold_in(jax.random.key(cfg.mdp_seed), i)
        mdps = jax.vmap(cfg.family(name).sample)(jax.random.split(mdp_key, cfg.n_mdps))
        keys = jax.random.split(jax.random.fold_in(jax.random.key(cfg.loop_seed), i), cfg.n_mdps)
        items.append({"P": np.asarray(mdps.P, np.float32), "R": np.asarray(mdps.R, np.float32),
                      "key": np.asarray(jax.random.key_data(keys)),
                      **{k: np.full(cfg.n_mdps, getattr(cfg, k), np.float32) for k in coverage.TRACED}})
    return {k: np.concatenate([it[k] for it in items]) for k in items[0]}


def compute(cfg: HardExplorationConfig, ctx: RunContext) -> dict:
    """``{"records": {set: {name: [n_mdps, arms]}}, "P", "R"}``: every set's loops in one program."""
    items = mdp_items(cfg)
    result = sweep.sweep_map(coverage.runner_on_raw_keys(cfg.coverage(), ARMS), items, chunk_size=cfg.chunk_size,
                             checkpoint=ctx.checkpoint("ckpt"), desc=f"{ctx.study} MDPs")
    ctx.record_compile(result.compile_s)
    n = cfg.n_mdps
    records = {name: {k: np.asarray(v, np.float64)[i * n:(i + 1) * n] for k, v in result.outputs.items()}
               for i, name in enumerate(SETS)}
    return {"records": records, "P": items["P"], "R": items["R"]}


def judge(records: dict) -> list:
    """The two interval checks from every set's per-MDP records ``[n_mdps, arms]``."""
    col = {lab: j for j, lab in enumerate(LABELS)}
    loss = {name: records[name]["loss"] for name in SETS}
    carry = {name: checks.paired(loss[name][:, col["on_policy_carry_m6"]], loss[name][:, col["balanced_m6"]])
             for name in SETS}
    gap = {name: checks.paired(loss[name][:, col["on_policy_m6"]], loss[name][:, col["balanced_m6"]]) for name in SETS}
    return [
        CARRY_LOSES.judge(carry["lock"], control=carry["dense"]),
        GAP_LARGER.judge(checks.paired(gap["lock"], gap["dense"]), control=checks.paired(gap["dense_b"], gap["dense"])),
    ]


def summarize(cfg: HardExplorationConfig, arrays: dict) -> Summary:
    """Per family and arm (``table.csv``): median loss and paired difference to balanced with bootstrap intervals,
    unvisited pairs, smallest count and critic error; the checks."""
    records = arrays["records"]
    table = {k: [] for k in ("family", "arm", "m", "loss_median", "loss_lo", "loss_hi", "diff_median", "diff_lo",
                             "diff_hi", "unvisited", "min_count", "critic_error")}
    metrics = {}
    for name in SETS[:2]:  # dense_b is the control's second draw: in the records, not the table
        out = records[name]
        for j, (arm, m) in enumerate(ARMS):
            label = LABELS[j]
            base = LABELS.index(coverage.arm_label(Arm.BALANCED, m if m else 6))
            med, lo, hi = coverage.bootstrap_median(out["loss"][:, j], cfg.n_bootstrap, cfg.bootstrap_seed)
            dmed, dlo, dhi = (coverage.bootstrap_median(out["loss"][:, j] - out["loss"][:, base], cfg.n_bootstrap,
                                                        cfg.bootstrap_seed) if base != j else (np.nan,) * 3)
            sampled = arm != Arm.EXACT_BACKUP
            row = {"family": name, "arm": ARM_NAMES[arm], "m": m if sampled else "",
                   "loss_median": med, "loss_lo": lo, "loss_hi": hi, "diff_median": dmed, "diff_lo": dlo,
                   "diff_hi": dhi,
                   "unvisited": float(out["unvisited"][:, j].mean()) if sampled else np.nan,
                   "min_count": float(out["min_count"][:, j].mean()) if sampled else np.nan,
                   "critic_error": float(out["critic_error"][:, j].mean())}
            for k, v in row.items():
                table[k].append(v)
            for k in ("loss_median", "diff_median", "unvisited", "critic_error"):
                if not (isinstance(row[k], float) and np.isnan(row[k])):
                    metrics[f"{k}_{label}_{name}"] = row[k]
    return Summary(metrics=metrics, checks=judge(records), tables={"table": table})


def write(cfg: HardExplorationConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``losses.csv`` (every set, MDP and arm), ``mdps.npz`` and ``hard_exploration.png``."""
    records, n = arrays["records"], cfg.n_mdps
    k = len(ARMS)
    io.write_csv(out_dir / "losses.csv", {
        "family": np.repeat(SETS, n * k), "mdp": np.tile(np.repeat(np.arange(n), k), len(SETS)),
        "arm": [ARM_NAMES[a] for _ in range(len(SETS) * n) for a, _ in ARMS],
        "m": [m if a != Arm.EXACT_BACKUP else "" for _ in range(len(SETS) * n) for a, m in ARMS],
        "loss": np.concatenate([records[name]["loss"].reshape(-1) for name in SETS]),
        "unvisited": np.concatenate([records[name]["unvisited"].reshape(-1) for name in SETS]),
    })
    io.save_npz(out_dir / "mdps.npz", P=arrays["P"], R=arrays["R"], sets=np.repeat(SETS, n))
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), sharex=True)
    rng = np.random.default_rng(0)
    for ax, name in zip(axes, SETS[:2]):
        loss = records[name]["loss"]
        for j in range(len(LABELS)):
            y = len(LABELS) - 1 - j
            ax.scatter(np.maximum(loss[:, j], 1e-4), y + rng.uniform(-0.18, 0.18, n), s=8, alpha=0.45,
                       color="tab:red" if name == "lock" else "tab:blue")
            ax.plot(np.median(loss[:, j]), y, "D", color="tab:orange", ms=7, mec="k")
        ax.set_yticks(range(len(LABELS)), LABELS[::-1])
        ax.set_xscale("log")
        ax.set_title(f"{'combination locks' if name == 'lock' else 'dense random MDPs'} ({n}; diamond: median)",
                     fontsize=10)
        ax.set_xlabel("normalized returned-policy loss (log scale, floored at 1e-4)")
    fig.suptitle(f"The same decoder loop on a hard-exploration family and on pmd.coverage's (S = {cfg.num_states})",
                 fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "hard_exploration.png")


STUDY = register(Study(
    name="pmd.hard_exploration",
    summary="PolicyAttention decoder loop on combination locks against dense MDPs: where coverage and the stream part",
    config_type=HardExplorationConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    seeds_field=None, claims=(CARRY_LOSES, GAP_LARGER),
    quick_s=25,
))

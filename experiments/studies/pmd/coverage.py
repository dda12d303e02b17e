"""Study ``pmd.coverage``: the decoder's closed loop with the coverage oracle relaxed.

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), section 8 and Figure 5, the bound of section
13, and the coverage table of section 15.

64 random MDPs (S = 4, A = 3, gamma = 0.8) drawn once from a fixed seed; per MDP every
sampling arm and budget (:data:`ARMS`) runs T = 20 rounds of actor call -> fresh packet
under the new policy -> critic call, all through the frozen decoder (eta = 0.8, all
margins 16), from the uniform policy and Q_0 = 0. The sweep axis is the MDPs; arms and
budgets are the runs of one closed loop (its critic groups them by packet size,
:func:`packet_slots`), so the whole table is one compiled program. ``--quick`` runs the
first 32 of the same 64 MDPs.

``eta`` and ``explore_eps`` are array leaves of the program (:data:`TRACED`): ``--sweep
eta=0.4,0.8,1.6`` runs every value on the same MDPs and sampling keys in one vmapped
program whose sweep axis is (value, MDP).

MDP family (ours; the paper does not give its own): ``P(.|s,a) ~ Dirichlet(1, ..., 1)``
(dense, every successor reachable, so the chain mixes quickly, as section 11 says of the
paper's family) and ``R(s,a) ~ U[-1, 1]`` (bounded, ``B_Q = 5``). Rewards are the
deterministic ``R(s,a)``: sampling noise comes from successors and successor actions.
Derivations the code relies on that the paper does not spell out: ``docs/pmd.md``.

Checks, and how each could fail (our MDP family differs from the paper's, so the
checks test the paper's qualitative claims, not its digits):

* ``on-policy worse than balanced at m = 6``: the paired bootstrap interval of the
  on-policy stream's loss minus the balanced oracle's must lie above 0; a critic that
  copes with unvisited pairs, or a family in which the stream covers every pair, puts 0
  inside the interval.
* ``the on-policy gap shrinks at m = 24``: the paired median difference at m = 24 must be
  below the one at m = 6; a gap that does not come from coverage would not shrink with a
  bigger budget.
* ``carry-Q brings the loss back near balanced``: |paired median difference| of the
  carry-Q stream under a third of the on-policy gap; if the loss came from something
  other than overwriting unvisited pairs, keeping their old Q would not remove it.
* ``exact backup near balanced`` (|paired median difference| <= 0.005): the balanced
  oracle's critic error must cost little against an exact backup.
* ``balanced loss is small at both budgets`` (median <= 0.02; paper 0.009): a decoder
  whose actor or critic leaks more (smaller margins, wrong weights) loses more.
* ``section-13 bound holds on every MDP for the oracle arms`` (0 violations): the bound
  evaluated on each run's realised zeta_k, delta_k and greedy defect must cover the
  measured loss of the balanced arms and the exact backup; a wrong recursion, a wrong
  B_Q or a residual measured against the wrong target can break it. The bound's slack is
  reported (``bound_slack_median_*``, ``bound_max_loss_over_bound_oracle_arms``): at this
  family the loss is a small fraction of the bound, so this check alone is weak.
* ``actor routing error within its section-13 envelope on every round``
  (max_k zeta_k / (2R/(1+R)) <= 1 over every MDP, arm and round): the routing error
  the loop measures (against an exact PMD step) must stay under the envelope that
  ``pmd_jax.bound`` computes from (S, eta, kappa, nu, B_Q) alone; a decoder that leaks
  more than the margins allow (a wrong state or role margin, a query token that is not
  suppressed), or an envelope that drops a term, fails it. The envelope is a worst
  case (it bounds every Q by B_Q): at these margins the realised error is ~1/700 of it,
  so only a decoder that leaks ~three orders more than the margins allow fails (a
  quarter of the state margin does, see the tests). The median ratio and the
  critic's per-round ratio to its envelope (``delta_over_envelope_max_balanced_*``,
  reported only: the sampling term dominates that envelope at these budgets) are metrics.
* ``section-13 sampling term at m = 6 / 24`` (8.74 / 4.37 to 2 decimals, the paper's
  values at alpha = 0.05): epsilon = B_Q sqrt(2 log(2 S A T / alpha) / m) with B_Q =
  r_max / (1 - gamma); a wrong B_Q, union-bound count S A T or budget changes it.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io, sweep
from experiments.registry import RunContext, Study, Summary, register
from pmd_jax import decoder
from pmd_jax.bound import critic_error_bound, critic_leak_bounds, returned_policy_bound, routing_error_bound, sampling_error
from pmd_jax.loop import closed_loop, grouped_decoder_critic
from pmd_jax.loop import packet_slots as loop_packet_slots
from pmd_jax.mdp import FiniteMDP, RandomMDPFamily, optimal_q, policy_evaluation, uniform_policy
from pmd_jax.sampling import ARM_NAMES, Arm

PAPER = {
    "sampling_term_m6": 8.74, "sampling_term_m24": 4.37,  # section 15: the worst-case sampling bound at alpha = 0.05
    "loss_median_balanced_m6": 0.009, "loss_median_uniform_pairs_m6": 0.010, "loss_median_on_policy_m6": 0.029,
    "loss_median_on_policy_carry_m6": 0.010, "loss_median_exploring_m6": 0.012, "loss_median_balanced_m24": 0.009,
    "loss_median_on_policy_m24": 0.016, "loss_median_on_policy_carry_m24": 0.010, "loss_median_exploring_m24": 0.009,
    "loss_median_exact_backup": 0.010,
    "diff_median_on_policy_m6": 0.018, "diff_lo_on_policy_m6": 0.014, "diff_hi_on_policy_m6": 0.022,
    "diff_median_on_policy_carry_m6": -0.001, "diff_median_on_policy_m24": 0.005,
    "unvisited_on_policy_m6": 3.86, "unvisited_on_policy_m24": 3.02, "unvisited_exploring_m6": 1.45,
    "min_count_balanced_m6": 6.0, "min_count_on_policy_m6": 0.20,
    "critic_error_balanced_m6": 0.214, "critic_error_on_policy_m6": 1.219, "critic_error_balanced_m24": 0.106,
    "critic_error_uniform_pairs_m6": 0.259, "critic_error_exploring_m6": 0.857, "critic_error_on_policy_m24": 1.134,
}
# The rows of the section-15 table: (sampling arm, budget m per pair); exact backup takes no samples.
ARMS = (
    (Arm.BALANCED, 6), (Arm.UNIFORM_PAIRS, 6), (Arm.ON_POLICY, 6), (Arm.ON_POLICY_CARRY, 6), (Arm.EXPLORING, 6),
    (Arm.BALANCED, 24), (Arm.ON_POLICY, 24), (Arm.ON_POLICY_CARRY, 24), (Arm.EXPLORING, 24),
    (Arm.EXACT_BACKUP, 0),
)
TRACED = ("eta", "explore_eps")  # array leaves of the program: a sweep over one is one vmapped program
ORACLE_ARMS = ("balanced_m6", "balanced_m24", "exact_backup")  # the arms that meet the section-13 hypotheses


@dataclasses.dataclass(frozen=True)
class CoverageConfig:
    """The protocol of section 8 (sizes of section 6); the arms are :data:`ARMS`."""

    num_states: int = 4
    num_actions: int = 3
    gamma: float = 0.8
    eta: float = 0.8  # the actor's step size, every round
    rounds: int = 20  # T
    kappa: float = 16.0  # state margin of the decoder
    nu: float = 16.0  # role margin of the decoder
    r_max: float = 1.0
    concentration: float = 1.0  # Dirichlet concentration of P(.|s,a)
    explore_eps: float = 0.2  # the exploring stream's probability of a uniform action
    n_mdps: int = 64
    mdp_seed: int = 2026  # PRNG seed of the MDP draw (the MDPs are fixed, not seeds)
    loop_seed: int = 1  # PRNG seed of the loops' sampling keys, one per MDP
    chunk_size: int = 8  # MDPs per device per step
    n_bootstrap: int = 10_000  # bootstrap resamples of the MDPs for the intervals
    bootstrap_seed: int = 0
    alpha: float = 0.05  # confidence of the section-13 sampling term

    def __post_init__(self):
        for name in ("num_states", "num_actions", "rounds", "n_mdps", "chunk_size", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("mdp_seed", "loop_seed", "bootstrap_seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {self.gamma}")
        for name in ("eta", "kappa", "nu", "r_max", "concentration"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha}")
        if not 0.0 <= self.explore_eps <= 1.0:
            raise ValueError(f"explore_eps must lie in [0, 1], got {self.explore_eps}")

    @property
    def q_bound(self) -> float:
        return self.r_max / (1 - self.gamma)

    @property
    def n_max(self) -> int:
        """The largest packet, ``S A max(m)`` transitions: the size in the critic's leak envelope."""
        return self.num_states * self.num_actions * max(m for _, m in ARMS)

    def family(self) -> RandomMDPFamily:
        return RandomMDPFamily(gamma=self.gamma, r_max=self.r_max, concentration=self.concentration,
                               num_states=self.num_states, num_actions=self.num_actions)


QUICK = CoverageConfig(n_mdps=32, chunk_size=4)
FULL = CoverageConfig()


def arm_label(arm: Arm, m: int) -> str:
    return ARM_NAMES[arm] if arm == Arm.EXACT_BACKUP else f"{ARM_NAMES[arm]}_m{m}"


LABELS = tuple(arm_label(a, m) for a, m in ARMS)


def packet_slots(cfg: CoverageConfig) -> tuple[int | None, ...]:
    """Per arm of :data:`ARMS`, the slots of its critic call: ``S A m``, ``None`` for the exact backup.

    Every packet is drawn at :attr:`CoverageConfig.n_max` slots (slots past ``S A m`` invalid),
    and the critic call is made on its ``S A m`` valid slots alone
    (:func:`pmd_jax.loop.grouped_decoder_critic`): the same output as the padded call, and the
    m = 6 arms attend over 96 tokens instead of 312.
    """
    return loop_packet_slots(decoder.Layout(cfg.num_states, cfg.num_actions), [a for a, _ in ARMS], [m for _, m in ARMS])


def make_mdp_runner(cfg: CoverageConfig):
    """``run(item) -> per-arm records`` for one MDP; the arms are the runs of one closed loop.

    ``item``: ``P``, ``R``, a typed ``key``, and the :data:`TRACED` values ``eta`` and
    ``explore_eps`` (scalars, so a sweep over them is a vmap over items). Every arm starts from
    the same state and uses the same round keys; the critic groups the arms by packet size
    (:func:`packet_slots`).
    """
    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)
    K = len(ARMS)
    budgets = jnp.array([m for _, m in ARMS])
    actor = jax.vmap(lambda pi, Q, eta: decoder.apply_actor(params, layout, pi, Q, eta), (0, 0, None))

    def run(item):
        eta, explore_eps = item["eta"], item["explore_eps"]
        mdp = FiniteMDP(P=item["P"], R=item["R"], gamma=jnp.asarray(cfg.gamma, item["R"].dtype))
        pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
        Q_star = optimal_q(mdp, tol=1e-6)
        loss0 = jnp.max(jnp.abs(Q_star - policy_evaluation(mdp, pi0)))
        k_loop, k_start = jax.random.split(item["key"])
        start = jax.random.randint(k_start, (), 0, S)

        zeta_envelope = routing_error_bound(S, eta, cfg.kappa, cfg.nu, cfg.q_bound)

        def delta_envelope(m):
            """Section 13's per-round critic envelope for a packet with at least ``m`` samples per pair
            (of ``n_max`` slots: the leak bound grows with the packet, so it covers the call on the valid ones)."""
            m_min = jnp.maximum(m, 1)
            lam1, lam2 = critic_leak_bounds(S, A, cfg.kappa, cfg.nu, cfg.n_max, m_min)
            eps = sampling_error(cfg.q_bound, S, A, cfg.rounds, cfg.alpha, m_min)
            return critic_error_bound(cfg.q_bound, cfg.gamma, lam1, lam2, eps)

        critic = grouped_decoder_critic(params, layout, mdp, [a for a, _ in ARMS], [m for _, m in ARMS], cfg.n_max, explore_eps)
        traces = closed_loop(k_loop, mdp, actor, critic, jnp.broadcast_to(pi0, (K, S, A)), jnp.broadcast_to(Q0, (K, S, A)),
                             jnp.full(K, start), eta, cfg.rounds, runs=True)

        def records(trace, m):
            loss = jnp.max(jnp.abs(Q_star - policy_evaluation(mdp, trace.policy)))
            b = returned_policy_bound(trace.zeta, trace.delta, trace.dbar, jnp.full(cfg.rounds, eta),
                                      cfg.gamma, cfg.q_bound, jnp.max(jnp.abs(Q_star)))
            return {
                "loss": loss / loss0, "loss_abs": loss, "bound": b.bound,
                "unvisited": jnp.mean(jnp.sum(trace.counts == 0, axis=(1, 2))),
                "min_count": jnp.mean(jnp.min(trace.counts, axis=(1, 2))),
                "critic_error": jnp.mean(trace.delta), "zeta": jnp.mean(trace.zeta),
                "zeta_over_envelope": jnp.max(trace.zeta) / zeta_envelope,
                "delta_over_envelope": jnp.max(trace.delta) / delta_envelope(m),
            }

        return jax.vmap(records)(traces, budgets)

    return run


def mdp_items(cfg: CoverageConfig) -> dict[str, np.ndarray]:
    """The sweep inputs: ``P [n, S, A, S]``, ``R [n, S, A]``, raw key data ``key [n, 2]``, ``eta`` and ``explore_eps [n]``."""
    mdps = jax.vmap(cfg.family().sample)(jax.random.split(jax.random.key(cfg.mdp_seed), cfg.n_mdps))
    keys = jax.random.key_data(jax.random.split(jax.random.key(cfg.loop_seed), cfg.n_mdps))
    return {"P": np.asarray(mdps.P), "R": np.asarray(mdps.R), "key": np.asarray(keys),
            **{k: np.full(cfg.n_mdps, getattr(cfg, k), np.float32) for k in TRACED}}


def runner_on_raw_keys(cfg: CoverageConfig):
    """:func:`make_mdp_runner` on items whose ``key`` is raw key data (the sweep's outputs are numeric)."""
    run = make_mdp_runner(cfg)
    return lambda item: run({**item, "key": jax.random.wrap_key_data(item["key"])})


def _program(cfg: CoverageConfig, items: dict, ctx: RunContext, name: str, **fp) -> dict[str, np.ndarray]:
    """Loop records ``{name: [items, arms]}`` (float64) of any number of (MDP, traced values) items."""
    result = sweep.sweep_map(runner_on_raw_keys(cfg), items, chunk_size=cfg.chunk_size,
                             checkpoint=ctx.checkpoint(name, **fp), desc=f"{ctx.study} MDPs")
    ctx.record_compile(result.compile_s)
    return {k: np.asarray(v, np.float64) for k, v in result.outputs.items()}


def sampling_terms(cfg: CoverageConfig) -> dict[str, np.ndarray]:
    """The section-13 worst-case sampling term ``epsilon`` at each budget m of :data:`ARMS` (``m{m}``)."""
    budgets = sorted({m for _, m in ARMS if m})
    return {f"m{m}": np.asarray(sampling_error(cfg.q_bound, cfg.num_states, cfg.num_actions, cfg.rounds, cfg.alpha, m))
            for m in budgets}


def compute(cfg: CoverageConfig, ctx: RunContext) -> dict:
    """``{"records": {name: [n_mdps, arms]}, "P", "R", "sampling_term": {m6, m24}}``: per-MDP, per-arm
    loop records, the MDPs and the section-13 sampling term at each budget."""
    items = mdp_items(cfg)
    return {"records": _program(cfg, items, ctx, "ckpt"), "P": items["P"], "R": items["R"],
            "sampling_term": sampling_terms(cfg)}


def compute_sweep(cfg: CoverageConfig, field: str, values: list, ctx: RunContext) -> list[dict]:
    """:func:`compute` at ``field`` (one of TRACED) = each value, as one vmapped program over (value, MDP).

    Every value runs on the same MDPs and the same sampling keys (a paired comparison).
    """
    items = mdp_items(cfg)
    stacked = {k: np.concatenate([v] * len(values)) for k, v in items.items()}
    stacked[field] = np.repeat(np.asarray(values, np.float32), cfg.n_mdps)
    records = _program(cfg, stacked, ctx, f"ckpt_{field}", field=field, values=[float(v) for v in values])
    n = cfg.n_mdps
    return [{"records": {k: v[i * n:(i + 1) * n] for k, v in records.items()}, "P": items["P"], "R": items["R"],
             "sampling_term": sampling_terms(dataclasses.replace(cfg, **{field: float(v)}))}
            for i, v in enumerate(values)]


def bootstrap_median(x: np.ndarray, n: int, seed: int, ci: float = 0.95) -> tuple[float, float, float]:
    """Median and percentile bootstrap interval over the first axis (resampling MDPs)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n, len(x)))
    meds = np.median(x[idx], axis=1)
    return float(np.median(x)), float(np.quantile(meds, (1 - ci) / 2)), float(np.quantile(meds, (1 + ci) / 2))


def summarize(cfg: CoverageConfig, arrays: dict) -> Summary:
    """The section-15 table, metrics and checks from per-MDP, per-arm records ``[n_mdps, arms]`` (numpy)."""
    out = arrays["records"]
    col = {lab: j for j, lab in enumerate(LABELS)}
    table = {k: [] for k in ("arm", "m", "unvisited", "min_count", "critic_error", "loss_median", "loss_lo", "loss_hi",
                             "diff_median", "diff_lo", "diff_hi", "bound_holds_frac", "bound_slack_median")}
    metrics = {}
    for j, (arm, m) in enumerate(ARMS):
        loss = out["loss"][:, j]
        med, lo, hi = bootstrap_median(loss, cfg.n_bootstrap, cfg.bootstrap_seed)
        base = col[arm_label(Arm.BALANCED, m if m else 6)]  # paired against balanced at the same budget
        dmed, dlo, dhi = (bootstrap_median(loss - out["loss"][:, base], cfg.n_bootstrap, cfg.bootstrap_seed)
                          if base != j else (np.nan, np.nan, np.nan))
        holds = out["loss_abs"][:, j] <= out["bound"][:, j]
        sampled = arm != Arm.EXACT_BACKUP
        row = {
            "arm": ARM_NAMES[arm], "m": m if sampled else "",
            "unvisited": float(out["unvisited"][:, j].mean()) if sampled else np.nan,
            "min_count": float(out["min_count"][:, j].mean()) if sampled else np.nan,
            "critic_error": float(out["critic_error"][:, j].mean()),
            "loss_median": med, "loss_lo": lo, "loss_hi": hi, "diff_median": dmed, "diff_lo": dlo, "diff_hi": dhi,
            "bound_holds_frac": float(holds.mean()),
            "bound_slack_median": float(np.median(out["bound"][:, j] - out["loss_abs"][:, j])),
        }
        for k, v in row.items():
            table[k].append(v)
        for k in ("loss_median", "loss_lo", "loss_hi", "diff_median", "diff_lo", "diff_hi", "critic_error",
                  "unvisited", "min_count", "bound_holds_frac", "bound_slack_median"):
            if not np.isnan(row[k]):
                metrics[f"{k}_{LABELS[j]}"] = row[k]
    bound_fail_oracle = sum(int(np.sum(out["loss_abs"][:, col[lab]] > out["bound"][:, col[lab]])) for lab in ORACLE_ARMS)
    metrics["bound_violations_oracle_arms"] = float(bound_fail_oracle)
    oracle = [col[lab] for lab in ORACLE_ARMS]
    with np.errstate(divide="ignore", invalid="ignore"):  # a zero bound gives an infinite ratio, honestly
        metrics["bound_max_loss_over_bound_oracle_arms"] = float(np.max(out["loss_abs"][:, oracle] / out["bound"][:, oracle]))
    metrics["zeta_over_envelope_max"] = float(np.max(out["zeta_over_envelope"]))
    metrics["zeta_over_envelope_median"] = float(np.median(out["zeta_over_envelope"]))
    for lab in ("balanced_m6", "balanced_m24"):
        metrics[f"delta_over_envelope_max_{lab}"] = float(np.max(out["delta_over_envelope"][:, col[lab]]))
    for name, value in arrays["sampling_term"].items():
        metrics[f"sampling_term_{name}"] = float(value)
    m = metrics
    balanced_worst = max(m["loss_median_balanced_m6"], m["loss_median_balanced_m24"])
    found = [
        checks.above("on-policy worse than balanced at m = 6: paired interval excludes 0", m["diff_lo_on_policy_m6"], 0.0,
                     paper=PAPER["diff_lo_on_policy_m6"],
                     claim="a single on-policy stream loses more than the balanced oracle at the same budget (m = 6)"),
        checks.below("the on-policy gap shrinks at m = 24", m["diff_median_on_policy_m24"], m["diff_median_on_policy_m6"],
                     paper=PAPER["diff_median_on_policy_m24"], claim="a larger budget (m = 24) shrinks the on-policy gap"),
        checks.below("carry-Q brings the loss back near balanced (m = 6)",
                     abs(m["diff_median_on_policy_carry_m6"]), m["diff_median_on_policy_m6"] / 3,
                     paper=abs(PAPER["diff_median_on_policy_carry_m6"]),
                     claim="keeping the old Q on unvisited pairs brings the loss back to the oracle level"),
        checks.at_most("exact backup near balanced (m = 6)", abs(m["diff_median_exact_backup"]), 0.005),
        checks.at_most("balanced loss is small at both budgets", balanced_worst, 0.02,
                       paper=max(PAPER["loss_median_balanced_m6"], PAPER["loss_median_balanced_m24"])),
        checks.equals("section-13 bound holds on every MDP for the oracle arms",
                      float(bound_fail_oracle), 0,
                      claim="the section-13 bound covers the returned policy's loss on every MDP where its hypotheses hold"),
        checks.at_most("actor routing error within its section-13 envelope on every round", m["zeta_over_envelope_max"],
                       1.0, claim="every actor call's routing error zeta_k stays below 2R/(1+R) (section 13)"),
        checks.close_to("section-13 sampling term at m = 6, alpha = 0.05", m["sampling_term_m6"],
                        PAPER["sampling_term_m6"], 0.005, paper=PAPER["sampling_term_m6"]),
        checks.close_to("section-13 sampling term at m = 24, alpha = 0.05", m["sampling_term_m24"],
                        PAPER["sampling_term_m24"], 0.005, paper=PAPER["sampling_term_m24"]),
    ]
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def write(cfg: CoverageConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``losses.csv`` (every MDP and arm), ``mdps.npz`` (P, R) and ``coverage.png`` (Figure 5)."""
    out, table = arrays["records"], summary.tables["table"]
    n = out["loss"].shape[0]
    io.write_csv(out_dir / "losses.csv", {
        "mdp": np.repeat(np.arange(n), len(ARMS)),
        "arm": [ARM_NAMES[a] for _ in range(n) for a, _ in ARMS],
        "m": [m if a != Arm.EXACT_BACKUP else "" for _ in range(n) for a, m in ARMS],
        "loss": out["loss"].reshape(-1),
    })
    io.save_npz(out_dir / "mdps.npz", P=arrays["P"], R=arrays["R"])
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    rng = np.random.default_rng(0)
    for j, lab in enumerate(LABELS):
        y = len(LABELS) - 1 - j
        ax.scatter(out["loss"][:, j], y + rng.uniform(-0.18, 0.18, n), s=8, alpha=0.45, color="tab:blue",
                   label="MDPs" if j == 0 else None)
        ax.plot([table["loss_lo"][j], table["loss_hi"][j]], [y, y], color="k", lw=2)
        ax.plot(table["loss_median"][j], y, "D", color="tab:orange", ms=7, mec="k", label="median, 95% interval" if j == 0 else None)
        if f"loss_median_{lab}" in PAPER:
            ax.plot(PAPER[f"loss_median_{lab}"], y, "x", color="k", ms=9, mew=2, label="paper median" if j == 0 else None)
    ax.set_yticks(range(len(LABELS)), LABELS[::-1])
    ax.set_xscale("log")
    ax.set_xlabel("normalized returned-policy loss ||Q* - Q^pi_T|| / ||Q* - Q^pi_0|| (log scale)")
    ax.set_title(f"Same budget, different coverage ({n} MDPs)\ndots: MDPs; diamond and bar: median and 95% "
                 "bootstrap interval; x: paper", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    io.save_figure(fig, out_dir / "coverage.png")


STUDY = register(Study(
    name="pmd.coverage",
    summary="PolicyAttention closed loop on 64 random MDPs: sampling arms x budgets, table of section 15",
    config_type=CoverageConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field=None, traced=TRACED, compute_sweep=compute_sweep,
))

"""Study ``pmd.coverage``: the decoder's closed loop with the coverage oracle relaxed (seed 001, sections 8, 13, 15).

64 random MDPs (S = 4, A = 3, gamma = 0.8) drawn once from a fixed seed; per MDP every
sampling arm and budget runs T = 20 rounds of actor call -> fresh packet under the new
policy -> critic call, all through the frozen decoder (eta = 0.8, all margins 16), from
the uniform policy and Q_0 = 0. The sweep axis is the MDPs; arms and budgets are an
inner vmap, so the whole table is one compiled program.

MDP family (ours; the paper's is not given): ``P(.|s,a) ~ Dirichlet(1, ..., 1)`` (dense,
every successor reachable, so the chain mixes quickly, as section 11 says of the
paper's family) and ``R(s,a) ~ U[-1, 1]`` (bounded, ``B_Q = 5``). Rewards are the
deterministic ``R(s,a)``: sampling noise comes from successors and successor actions.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import benchmark, io, sweep
from experiments.registry import Check, RunContext, StudyOutput, bench, study
from pmd_jax import decoder
from pmd_jax.bound import returned_policy_bound
from pmd_jax.loop import closed_loop, decoder_critic
from pmd_jax.mdp import FiniteMDP, RandomMDPFamily, optimal_q, policy_evaluation, uniform_policy
from pmd_jax.sampling import ARM_NAMES, Arm

ARMS = (
    (Arm.BALANCED, 6), (Arm.UNIFORM_PAIRS, 6), (Arm.ON_POLICY, 6), (Arm.ON_POLICY_CARRY, 6), (Arm.EXPLORING, 6),
    (Arm.BALANCED, 24), (Arm.ON_POLICY, 24), (Arm.ON_POLICY_CARRY, 24), (Arm.EXPLORING, 24),
    (Arm.EXACT_BACKUP, 0),
)
PAPER = {
    "loss_median_balanced_m6": 0.009, "loss_median_uniform_pairs_m6": 0.010, "loss_median_on_policy_m6": 0.029,
    "loss_median_on_policy_carry_m6": 0.010, "loss_median_exploring_m6": 0.012, "loss_median_balanced_m24": 0.009,
    "loss_median_on_policy_m24": 0.016, "loss_median_on_policy_carry_m24": 0.010, "loss_median_exploring_m24": 0.009,
    "loss_median_exact_backup": 0.010,
    "diff_median_on_policy_m6": 0.018, "diff_lo_on_policy_m6": 0.014, "diff_hi_on_policy_m6": 0.022,
    "diff_median_on_policy_m24": 0.005,
    "unvisited_on_policy_m6": 3.86, "unvisited_on_policy_m24": 3.02, "unvisited_exploring_m6": 1.45,
    "min_count_balanced_m6": 6.0, "min_count_on_policy_m6": 0.20,
    "critic_error_balanced_m6": 0.214, "critic_error_on_policy_m6": 1.219, "critic_error_balanced_m24": 0.106,
    "critic_error_uniform_pairs_m6": 0.259, "critic_error_exploring_m6": 0.857, "critic_error_on_policy_m24": 1.134,
}


@dataclasses.dataclass(frozen=True)
class CoverageConfig:
    num_states: int = 4
    num_actions: int = 3
    gamma: float = 0.8
    eta: float = 0.8
    rounds: int = 20
    kappa: float = 16.0
    nu: float = 16.0
    r_max: float = 1.0
    concentration: float = 1.0
    explore_eps: float = 0.2
    n_mdps: int = 64
    mdp_seed: int = 2026
    loop_seed: int = 1
    chunk_size: int = 8  # MDPs per device per step
    n_bootstrap: int = 10_000
    bootstrap_seed: int = 0

    def __post_init__(self):
        for name in ("num_states", "num_actions", "rounds", "n_mdps", "chunk_size", "n_bootstrap"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {self.gamma}")
        if self.eta <= 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        if self.kappa <= 0 or self.nu <= 0:
            raise ValueError(f"kappa and nu must be > 0, got {self.kappa}, {self.nu}")
        if not 0.0 <= self.explore_eps <= 1.0:
            raise ValueError(f"explore_eps must lie in [0, 1], got {self.explore_eps}")

    @property
    def q_bound(self) -> float:
        return self.r_max / (1 - self.gamma)

    @property
    def n_max(self) -> int:
        return self.num_states * self.num_actions * max(m for _, m in ARMS)

    def family(self) -> RandomMDPFamily:
        return RandomMDPFamily(gamma=self.gamma, r_max=self.r_max, concentration=self.concentration,
                               num_states=self.num_states, num_actions=self.num_actions)


def arm_label(arm: Arm, m: int) -> str:
    return ARM_NAMES[arm] if arm == Arm.EXACT_BACKUP else f"{ARM_NAMES[arm]}_m{m}"


def make_mdp_runner(cfg: CoverageConfig):
    """``run(item) -> per-arm records`` for one MDP (item: ``P``, ``R``, ``key``); arms vmapped inside."""
    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)
    arms = jnp.array([int(a) for a, _ in ARMS])
    budgets = jnp.array([m for _, m in ARMS])
    actor = lambda pi, Q, eta: decoder.apply_actor(params, layout, pi, Q, eta)

    def run(item):
        mdp = FiniteMDP(P=item["P"], R=item["R"], gamma=jnp.asarray(cfg.gamma, item["R"].dtype))
        pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
        Q_star = optimal_q(mdp, tol=1e-6)
        loss0 = jnp.max(jnp.abs(Q_star - policy_evaluation(mdp, pi0)))
        k_loop, k_start = jax.random.split(item["key"])
        start = jax.random.randint(k_start, (), 0, S)

        def one_arm(arm, m):
            critic = decoder_critic(params, layout, mdp, arm, m, cfg.n_max, cfg.explore_eps)
            trace = closed_loop(k_loop, mdp, actor, critic, pi0, Q0, start, cfg.eta, cfg.rounds)
            loss = jnp.max(jnp.abs(Q_star - policy_evaluation(mdp, trace.policy)))
            b = returned_policy_bound(trace.zeta, trace.delta, trace.dbar, jnp.full(cfg.rounds, cfg.eta),
                                      cfg.gamma, cfg.q_bound, jnp.max(jnp.abs(Q_star)))
            return {
                "loss": loss / loss0, "loss_abs": loss, "bound": b.bound,
                "unvisited": jnp.mean(jnp.sum(trace.counts == 0, axis=(1, 2))),
                "min_count": jnp.mean(jnp.min(trace.counts, axis=(1, 2))),
                "critic_error": jnp.mean(trace.delta), "zeta": jnp.mean(trace.zeta),
            }

        return jax.vmap(one_arm)(arms, budgets)

    return run


def bootstrap_median(x: np.ndarray, n: int, seed: int, ci: float = 0.95) -> tuple[float, float, float]:
    """Median and percentile bootstrap interval over the first axis (resampling MDPs)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n, len(x)))
    meds = np.median(x[idx], axis=1)
    return float(np.median(x)), float(np.quantile(meds, (1 - ci) / 2)), float(np.quantile(meds, (1 + ci) / 2))


def summarize(cfg: CoverageConfig, out: dict) -> tuple[dict, dict, list[Check]]:
    """The section-15 table, metrics and checks from per-MDP, per-arm records ``[n_mdps, arms]``."""
    labels = [arm_label(a, m) for a, m in ARMS]
    col = {lab: j for j, lab in enumerate(labels)}
    table = {k: [] for k in ("arm", "m", "unvisited", "min_count", "critic_error", "loss_median", "loss_lo", "loss_hi",
                             "diff_median", "diff_lo", "diff_hi", "bound_holds_frac", "bound_slack_median")}
    metrics = {}
    for j, (arm, m) in enumerate(ARMS):
        lab = labels[j]
        loss = out["loss"][:, j]
        med, lo, hi = bootstrap_median(loss, cfg.n_bootstrap, cfg.bootstrap_seed)
        base = col.get(arm_label(Arm.BALANCED, m if m else 6))
        dmed, dlo, dhi = (bootstrap_median(loss - out["loss"][:, base], cfg.n_bootstrap, cfg.bootstrap_seed)
                          if base is not None and base != j else (np.nan, np.nan, np.nan))
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
            if not (isinstance(row[k], float) and np.isnan(row[k])):
                metrics[f"{k}_{lab}"] = row[k]
    oracle = ("balanced_m6", "balanced_m24", "exact_backup")
    bound_fail_oracle = sum(int(np.sum(out["loss_abs"][:, col[l]] > out["bound"][:, col[l]])) for l in oracle)
    m = metrics
    checks = [
        Check("on-policy worse than balanced at m = 6: paired interval excludes 0", m["diff_lo_on_policy_m6"],
              "diff_lo > 0", m["diff_lo_on_policy_m6"] > 0),
        Check("the on-policy gap shrinks at m = 24", m["diff_median_on_policy_m24"],
              f"< diff at m = 6 ({m['diff_median_on_policy_m6']:.4f})", m["diff_median_on_policy_m24"] < m["diff_median_on_policy_m6"]),
        Check("carry-Q brings the loss back near balanced (m = 6)", abs(m["diff_median_on_policy_carry_m6"]),
              "|paired median diff| < 1/3 of on-policy's", abs(m["diff_median_on_policy_carry_m6"]) < m["diff_median_on_policy_m6"] / 3),
        Check("exact backup near balanced (m = 6)", abs(m["diff_median_exact_backup"]),
              "|paired median diff| <= 0.005", abs(m["diff_median_exact_backup"]) <= 0.005),
        Check("balanced loss is small at both budgets", max(m["loss_median_balanced_m6"], m["loss_median_balanced_m24"]),
              "median <= 0.02 (paper 0.009)", max(m["loss_median_balanced_m6"], m["loss_median_balanced_m24"]) <= 0.02),
        Check("section-13 bound holds on every MDP for the oracle arms", float(bound_fail_oracle),
              "== 0 violations (balanced m6, m24, exact backup)", bound_fail_oracle == 0),
    ]
    return table, metrics, checks


def _figure(cfg: CoverageConfig, out: dict, table: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [arm_label(a, m) for a, m in ARMS]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    rng = np.random.default_rng(0)
    for j, lab in enumerate(labels):
        y = len(labels) - 1 - j
        ax.scatter(out["loss"][:, j], y + rng.uniform(-0.18, 0.18, out["loss"].shape[0]), s=8, alpha=0.45, color="tab:blue")
        ax.plot([table["loss_lo"][j], table["loss_hi"][j]], [y, y], color="k", lw=2)
        ax.plot(table["loss_median"][j], y, "D", color="tab:orange", ms=7, mec="k")
    ax.set_yticks(range(len(labels)), labels[::-1])
    ax.set_xscale("log")
    ax.set_xlabel("normalized returned-policy loss ||Q* - Q^pi_T|| / ||Q* - Q^pi_0|| (log scale)")
    ax.set_title(f"Same budget, different coverage ({cfg.n_mdps} MDPs)\ndots: MDPs; diamond and bar: median and 95% bootstrap interval", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, path)


def _mdps(cfg: CoverageConfig):
    mdps = jax.vmap(cfg.family().sample)(jax.random.split(jax.random.key(cfg.mdp_seed), cfg.n_mdps))
    keys = jax.random.key_data(jax.random.split(jax.random.key(cfg.loop_seed), cfg.n_mdps))
    return {"P": np.asarray(mdps.P), "R": np.asarray(mdps.R), "key": np.asarray(keys)}


def _runner_on_raw_keys(cfg: CoverageConfig):
    run = make_mdp_runner(cfg)
    return lambda item: run({**item, "key": jax.random.wrap_key_data(item["key"])})


@study("pmd.coverage", "PolicyAttention closed loop on 64 random MDPs: sampling arms x budgets, table of section 15")
def run(ctx: RunContext) -> StudyOutput:
    cfg = CoverageConfig(n_mdps=32 if ctx.quick else 64, chunk_size=4 if ctx.quick else 8)
    items = _mdps(cfg)
    res = sweep.sweep_map(_runner_on_raw_keys(cfg), items, chunk_size=cfg.chunk_size, ckpt_dir=ctx.checkpoint_dir(),
                          fingerprint=dataclasses.asdict(cfg), resume=ctx.resume, desc="pmd.coverage MDPs")
    out = {k: np.asarray(v, np.float64) for k, v in res.outputs.items()}
    table, metrics, checks = summarize(cfg, out)
    io.write_csv(ctx.out_dir / "table.csv", table)
    labels = [(a, m) for a, m in ARMS]
    io.write_csv(ctx.out_dir / "losses.csv", {
        "mdp": np.repeat(np.arange(cfg.n_mdps), len(labels)),
        "arm": [ARM_NAMES[a] for _ in range(cfg.n_mdps) for a, _ in labels],
        "m": [m if a != Arm.EXACT_BACKUP else "" for _ in range(cfg.n_mdps) for a, m in labels],
        "loss": out["loss"].reshape(-1),
    })
    io.save_npz(ctx.out_dir / "mdps.npz", P=items["P"], R=items["R"])
    _figure(cfg, out, table, ctx.out_dir / "coverage.png")
    config = {**dataclasses.asdict(cfg), "arms": [arm_label(a, m) for a, m in ARMS], "n_max": cfg.n_max,
              "mdp_family": "P ~ Dirichlet(1), R ~ U[-r_max, r_max]"}
    return StudyOutput(config=config, metrics=metrics, checks=checks, paper=dict(PAPER), compile_s=res.compile_s)


@bench("pmd.coverage")
def run_bench(ctx: RunContext) -> dict:
    """The whole study as one program against a Python loop over MDPs and arms calling one jitted round."""
    cfg = CoverageConfig()
    items = _mdps(cfg)
    program = jax.vmap(_runner_on_raw_keys(cfg))
    t_vec = benchmark.time_call(program, {k: jnp.asarray(v) for k, v in items.items()}, repeats=2)

    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)

    @jax.jit
    def one_round(P, R, arm, m, key, pi, Q, stream):
        mdp = FiniteMDP(P=P, R=R, gamma=jnp.asarray(cfg.gamma, R.dtype))
        pi_hat = decoder.apply_actor(params, layout, pi, Q, cfg.eta)
        step = decoder_critic(params, layout, mdp, arm, m, cfg.n_max, cfg.explore_eps)(key, pi_hat, Q, stream)
        return pi_hat, step.Q_next, step.stream_state

    n_loop = 4  # MDPs timed in the loop; reported per MDP
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
    one_round(items["P"][0], items["R"][0], 0, 6, jax.random.key(0), pi0, Q0, 0)
    t0 = time.perf_counter()
    for i in range(n_loop):
        for arm, m in ARMS:
            pi, Q, stream = pi0, Q0, jnp.asarray(0)
            for k, key in enumerate(jax.random.split(jax.random.key(i), cfg.rounds)):
                pi, Q, stream = one_round(items["P"][i], items["R"][i], int(arm), m, key, pi, Q, stream)
            jax.block_until_ready(Q)
    loop_per_mdp = (time.perf_counter() - t0) / n_loop
    vec_per_mdp = t_vec["min_s"] / cfg.n_mdps
    return {"mdps": cfg.n_mdps, "arms": len(ARMS), "rounds": cfg.rounds, "program_compile_s": t_vec["compile_s"],
            "program_s": t_vec["min_s"], "program_per_mdp_s": vec_per_mdp, "loop_mdps_timed": n_loop,
            "loop_per_mdp_s": loop_per_mdp, "ratio_loop_vs_program": loop_per_mdp / vec_per_mdp}

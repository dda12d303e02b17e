"""Study ``pmd.closed_loop_audit``: do the learned actor and critic err more on the inputs their own closed loop
feeds them than on fixed inputs? (open question 2)

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), sections 11, 12 and 13. Section 11 ("What the evidence does not show"):
"No learned critic on trajectory data, and no learned closed-loop rollout with matched errors. Repeated control
uses an exact one-step critic; with the learned critic it still uses the balanced oracle." Section 12, open
question 2, "Closed-loop audits of learned models": "Measure a learned model's actor and critic errors against the
policy it actually executes, round after round, rather than on fixed inputs, so that the bound's residuals are
observed in the loop they describe." This study answers the second half of the limitation (a learned closed-loop
rollout with matched errors) with the balanced oracle kept; the first half (trajectory data) is open question 1.

Models: the ``runs`` label-free actors ``pmd.repeated_control`` keeps (``models/actor``) and run 0 of the critics
``pmd.learned_critic`` keeps (``models/critic``, the critic ``pmd.repeated_control`` runs in its learned-critic
loop), loaded by ``training.reuse_or_train`` when they were trained with this config's ``actor`` / ``critic`` on
``stream`` (the presets equal those studies' presets, so ``run all`` loads them), otherwise the same runs are
trained here and kept in this study's ``models/`` (``models.csv`` names the origin).

The loop (:func:`pmd_jax.loop.closed_loop`, exactly ``pmd.repeated_control``'s learned-critic loop: the same test
MDPs and round keys): from the uniform policy and ``Q_0 = 0``, ``rounds`` rounds of the learned actor at
``eta = 0.8`` on ``(pi_k, Q_k)``, then the learned critic on ``Q_k`` and a balanced packet of ``samples_per_pair``
fresh draws per pair under the policy it returned, on each of ``n_mdps`` MDPs of the ``iid`` test split, every
actor run; one jitted program over runs x MDPs. Recorded per round ``k`` (``residuals.csv``): the actor's residual
``zeta_k = max_s ||pi_hat_{k+1}(.|s) - PMD_eta(pi_k, Q_k)(.|s)||_1`` against ideal PMD on the loop's own inputs,
the critic's ``delta_k = ||Q_{k+1} - F^{pi_hat_{k+1}} Q_k||_inf`` against the exact backup of the policy the loop
executes, and the greedy defect ``Dbar_k``; per loop the returned policy's loss ``||Q* - Q^{pi_hat_T}||_inf``
(also normalised by the uniform policy's, as ``pmd.repeated_control`` reports it) and section 13's bound
(:func:`pmd_jax.bound.returned_policy_bound`) on the realised residuals, with ``B_Q = r_max / (1 - gamma) = 5``
and ``b_0 = ||Q*||_inf = ||Q* - Q_0||_inf`` (``loops.csv``).

The offline audit, on the same models and MDPs: two independent sets A and B (other keys, same distribution) of
``per_mdp`` inputs per MDP, drawn as the models were trained. Actor: a policy from the prior
(:func:`pmd_jax.tasks.sample_policy`, band ``any``), its exact ``Q^pi`` and ``eta = 0.8``
(:func:`pmd_jax.tasks.sample_actor_inputs`, as ``training.heldout_inputs`` draws the validation inputs); its
offline residual is the same ``zeta`` statistic on these inputs. Critic: memories, evaluation policy and balanced
packet of :func:`pmd_jax.train.critic_example` (the critic's training inputs); its offline residual is the same
``delta`` statistic against that policy's exact backup (``offline.csv``).

Checks (interval claims; the unit is the MDP: each MDP's value is averaged over the actor runs, rounds and inputs,
and loop and offline sets are paired per MDP; 95% t intervals), and how each could fail:

* ``actor_error_in_loop_exceeds_offline``: per MDP, ``log(mean in-loop zeta / mean offline zeta on set A)`` above
  0. Control: ``log(set B / set A)``, two draws of the same offline distribution, which must not pass. An actor
  whose loop keeps its inputs inside its training distribution (``Q_k`` close to ``Q^{pi_k}``, policies no sharper
  than the prior's) errs no more in the loop than offline, and fails.
* ``critic_error_in_loop_exceeds_offline``: the same for ``delta``, same control. A critic whose in-loop inputs
  (memories ``Q_k`` that are its own outputs, packets drawn under a policy that is greedy with respect to them)
  are no harder than its training inputs fails.

The bound is a test, not a check. Section 13's recursion (``docs/pmd.md`` section 4.5-4.6) holds for ANY
realised residual sequences once ``b_0 >= ||Q* - Q_0||`` (here with equality) and ``|Q_k| <= B_Q`` for
``k <= T - 1`` (the step lemma bounds ``<pi_hat - p, Q_k>`` by ``zeta_k B_Q``); nothing else of the critic enters
(``delta_k`` is measured, not bounded). Evaluated on the residuals the same loop realises, it can then fail only
through a bug (a residual measured against the wrong target, a wrong ``B_Q`` or ``b_0``, a shifted round index), so
``tests/experiments/test_study_pmd_closed_loop_audit.py`` tests it; the study reports its slack
(``bound_slack_median``, ``loss_over_bound_max``), the violations (``bound_violations``) and how often the
hypothesis the learned critic could break fails (``q_range_violations``: loops with some ``|Q_k| > B_Q``,
``k <= T - 1``; ``q_abs_max``).

Judged result (stream 0, QUICK: the 3 actors and the critic the upstream studies keep at QUICK, 32 MDPs, 8
offline inputs per MDP and set; judged once, after the screen above), 95% t intervals over MDPs:

* ``actor_error_in_loop_exceeds_offline`` FAIL: -0.393 [-0.518, -0.267]; control (B over A) +0.026 [-0.052,
  0.103] INCONCLUSIVE. The actor errs LESS in its own loop: in-loop residuals are 0.68 times the offline ones
  (geometric mean over MDPs; mean zeta 0.0092 in the loop against 0.0131 on set A and 0.0134 on set B; largest
  0.031 against 0.083), from 0.0077 at round 1 to 0.0069 at round 20.
* ``critic_error_in_loop_exceeds_offline`` PASS: +1.188 [1.068, 1.308]; control +0.105 [-0.017, 0.227]
  INCONCLUSIVE. The critic errs 3.3 times more in the loop (mean delta 0.51 against 0.16 on set A and 0.18 on set
  B): 0.069 at round 1 (``Q_0 = 0``), about 0.57 from round 8 on.
* The bound (the test above): no violation on the 96 loops; its slack is wide (median bound 31.8 against a median
  loss 0.033, normalised 0.0146; the largest loss over bound 0.018), and no loop's critic left [-5, 5] (largest
  ``|Q_k|`` 2.25), so the hypothesis held on every loop. The loop's loss stays small while its critic residual is
  0.5-0.6 per round: at these sizes the bound's residuals say little about the loss they bound.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.seeds import JUDGED, check_stream
from experiments.studies.pmd import training
from pmd_jax import tasks
from pmd_jax.bound import returned_policy_bound
from pmd_jax.loop import closed_loop, learned_balanced_critic, routing_residual
from pmd_jax.mdp import bellman_operator, loss_normaliser, policy_loss, uniform_policy
from pmd_jax.train import TrainConfig, critic_example
from pmd_jax.transformer import ModelConfig

FAMILY = "iid"  # the training family of both models, and the loop's
R_MAX = 1.0  # |R(s, a)| <= 1 on the iid family (pmd_jax.tasks), so B_Q = R_MAX / (1 - gamma)
SETS = ("A", "B")  # the two offline sets: A is the claims' reference, B only the controls'
CONTROL = "two independent offline sets of the same prior: log(mean on set B / mean on set A) per MDP"

ACTOR_IN_LOOP = checks.Claim(
    "actor_error_in_loop_exceeds_offline",
    "the learned actor errs more on the inputs its own closed loop feeds it than on fixed inputs from its training "
    "prior: per MDP, log(mean in-loop zeta_k / mean offline zeta on set A) above 0", ">", 0.0, unit="MDP",
    control=CONTROL,
    fails_if="the loop keeps the actor's inputs inside its training distribution (Q_k close to Q^pi_k, policies no "
             "sharper than the prior's), so it errs no more there than on fixed inputs")
CRITIC_IN_LOOP = checks.Claim(
    "critic_error_in_loop_exceeds_offline",
    "the learned critic errs more on the inputs its own closed loop feeds it than on inputs drawn as in its training: "
    "per MDP, log(mean in-loop delta_k / mean offline delta on set A) above 0", ">", 0.0, unit="MDP",
    control=CONTROL,
    fails_if="its in-loop inputs (memories that are its own outputs, packets under a policy greedy with respect to "
             "them) are no harder than its training inputs")


@dataclasses.dataclass(frozen=True)
class ClosedLoopAuditConfig:
    """``actor``: ``pmd.repeated_control``'s actor config; ``critic``: ``pmd.learned_critic``'s (FULL presets by
    default). The chunks apply only when a model is trained here."""

    actor: TrainConfig = TrainConfig(num_steps=51_200, warmup=1_000)
    critic: TrainConfig = TrainConfig(model=ModelConfig(num_layers=3), num_steps=12_800, warmup=400, batch_size=32)
    runs: int = 5  # actor runs (seeds)
    stream: int = JUDGED
    actor_chunks: int = 16
    critic_chunks: int = 8
    eta: float = 0.8
    rounds: int = 20
    n_mdps: int = 64
    per_mdp: int = 16  # offline inputs per MDP and set
    samples_per_pair: int = 6  # the learned critic's packet in the loop
    loop_seed: int = 3  # pmd.repeated_control's: the same round keys, so the loop is its learned-critic loop
    offline_seed: int = 47

    def __post_init__(self):
        check_stream(self.stream)
        for name in ("runs", "actor_chunks", "critic_chunks", "rounds", "n_mdps", "per_mdp"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for role in ("actor", "critic"):
            if getattr(self, role).num_steps % getattr(self, f"{role}_chunks"):
                raise ValueError(f"{role}_chunks={getattr(self, f'{role}_chunks')} must divide "
                                 f"{role}.num_steps={getattr(self, role).num_steps}")
            if getattr(self, role).family != FAMILY:
                raise ValueError(f"{role}.family must be {FAMILY!r} (the loop's family, whose |R| <= {R_MAX} gives "
                                 f"B_Q), got {getattr(self, role).family!r}")
        for name in ("num_states", "num_actions", "gamma", "data_seed"):
            if getattr(self.actor, name) != getattr(self.critic, name):
                raise ValueError(f"critic.{name}={getattr(self.critic, name)} must equal actor.{name}="
                                 f"{getattr(self.actor, name)} (one MDP family for both)")
        lo, hi = tasks.ETA_RANGE
        if not lo <= self.eta <= hi:
            raise ValueError(f"eta must lie in the actor's training range {tasks.ETA_RANGE}, got {self.eta}")
        if self.critic.samples_per_pair != self.samples_per_pair:
            raise ValueError(f"samples_per_pair={self.samples_per_pair} must equal critic.samples_per_pair="
                             f"{self.critic.samples_per_pair} (the critic's packet size)")

    @property
    def q_bound(self) -> float:
        """``B_Q = r_max / (1 - gamma)``."""
        return R_MAX / (1 - self.actor.gamma)


# Screened on stream 1 (the QUICK models pmd.learned_critic and pmd.repeated_control keep, trained on stream 1 into
# one folder; per-MDP log ratio, mean [95% t interval], the control's mean and verdict in parentheses; the study's
# wall s on the 2 shared cores at load 3-7, the whole process 4-5 s more):
#   n_mdps 32, per_mdp 8:  actor -0.318 [-0.466, -0.170] FAIL (+0.003 [-0.065, 0.072] INCONCLUSIVE); critic +1.198
#                          [1.089, 1.307] PASS (+0.102 [-0.011, 0.215] INCONCLUSIVE); 9.1 s
#   n_mdps 32, per_mdp 16: actor -0.285 [-0.451, -0.120] FAIL (+0.028); critic +1.136 [1.057, 1.215] PASS (+0.001); 9.7 s
#   n_mdps 16, per_mdp 8:  actor -0.355 [-0.548, -0.162] FAIL (+0.044); critic +1.160 [0.983, 1.337] PASS (+0.134); 17.4 s
#   n_mdps 64, per_mdp 8:  actor -0.228 [-0.325, -0.130] FAIL (+0.001); critic +1.159 [1.085, 1.232] PASS (+0.024); 22.4 s
# Chosen: 32 MDPs (half-widths 0.15 and 0.11, both claims decided; pmd.repeated_control's QUICK n_mdps, so the loop is
# exactly its learned-critic loop: the last-round losses agreed to 2e-7) and 8 inputs per MDP and set (16 did not
# narrow the claims' intervals: the spread between MDPs dominates). Runs are the upstream QUICK's 3 actors.
QUICK = ClosedLoopAuditConfig(
    actor=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=3_200, warmup=100, batch_size=32,
                      lr=2e-3),
    critic=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=1_500, warmup=100, batch_size=16),
    runs=3, actor_chunks=4, critic_chunks=3, n_mdps=32, per_mdp=8)
# FULL: the upstream studies' FULL models (5 actors), 64 MDPs, 16 inputs per MDP and set; not screened.
FULL = ClosedLoopAuditConfig()


def audit_mdps(cfg: ClosedLoopAuditConfig):
    """The ``n_mdps`` MDPs of the ``iid`` test split (``pmd.repeated_control``'s, MDP ``i`` the same for every n)."""
    a = cfg.actor
    return tasks.split_mdps(FAMILY, "test", cfg.n_mdps, a.data_seed, num_states=a.num_states,
                            num_actions=a.num_actions, gamma=a.gamma)


def offline_keys(cfg: ClosedLoopAuditConfig) -> dict[str, jax.Array]:
    """Typed keys ``[sets, n_mdps, per_mdp]`` of the offline inputs: ``actor`` and ``critic``, set ``j`` of
    :data:`SETS` folded into ``offline_seed``."""
    out = {"actor": [], "critic": []}
    for j in range(len(SETS)):
        k_actor, k_critic = jax.random.split(jax.random.fold_in(jax.random.key(cfg.offline_seed), j))
        for role, k in (("actor", k_actor), ("critic", k_critic)):
            out[role].append(jax.random.split(k, cfg.n_mdps * cfg.per_mdp).reshape(cfg.n_mdps, cfg.per_mdp))
    return {role: jnp.stack(v) for role, v in out.items()}


def evaluate(cfg: ClosedLoopAuditConfig, actor_params, critic_params, ctx: RunContext | None = None) -> dict:
    """The loop's and the offline audit's records, as one jitted program (numpy, float64; its compile time is
    recorded on ``ctx``).

    ``actor_params``: ``runs`` actors (leading run axis); ``critic_params``: one critic. Returns ``{"loop": ...,
    "offline": ...}``: ``loop`` holds ``zeta, delta, dbar [runs, mdps, T]``, ``policies`` (``pi_hat_{k+1}``) and
    ``values`` (``Q_{k+1}``) ``[runs, mdps, T, S, A]``, ``loss`` (normalised), ``loss_abs`` and ``bound
    [runs, mdps]``; ``offline`` holds ``zeta [runs, sets, mdps, per_mdp]`` and ``delta [sets, mdps, per_mdp]``.
    """
    actor, critic = cfg.actor.actor(), cfg.critic.critic()
    S, A = cfg.actor.num_states, cfg.actor.num_actions
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
    mdps = audit_mdps(cfg)
    loop_keys = jax.random.split(jax.random.key(cfg.loop_seed), cfg.n_mdps)
    keys = offline_keys(cfg)

    def one_loop(params, mdp, key):
        crit = learned_balanced_critic(critic, critic_params, mdp, cfg.samples_per_pair)

        act = lambda pi, Q, eta: actor.policy(params, pi, Q, eta)  # noqa: E731
        trace = closed_loop(key, mdp, act, crit, pi0, Q0, 0, cfg.eta, cfg.rounds)
        Q_star, loss0 = loss_normaliser(mdp)
        loss_abs = policy_loss(mdp, Q_star, trace.policy)
        b = returned_policy_bound(trace.zeta, trace.delta, trace.dbar, jnp.full(cfg.rounds, cfg.eta),
                                  cfg.actor.gamma, cfg.q_bound, jnp.max(jnp.abs(Q_star - Q0)))
        return {"zeta": trace.zeta, "delta": trace.delta, "dbar": trace.dbar, "policies": trace.policies,
                "values": trace.values, "loss": loss_abs / loss0, "loss_abs": loss_abs, "bound": b.bound}

    def actor_offline(params, key, mdp):
        x = tasks.sample_actor_inputs(key, mdp, "any", cfg.eta)
        return routing_residual(actor.policy(params, x.pi, x.Q, x.eta), x.pi, x.Q, x.eta)

    def critic_offline(key, mdp):
        Q, pi, packet, _ = critic_example(cfg.critic, key, mdp)
        return jnp.max(jnp.abs(critic.q_values(critic_params, Q, packet) - bellman_operator(mdp, pi, Q)))

    def per_input(fn, keys, mdps):
        """``fn(key, mdp)`` on every input of ``keys [sets, mdps, per_mdp]``, as one flat vmap (a nested one
        gives the model's tensors more axes than XLA's CPU fusions take: rank 8 is refused)."""
        shape = keys.shape
        tiled = jax.tree.map(lambda x: jnp.broadcast_to(x[None, :, None], shape + x.shape[1:]).reshape(
            (-1,) + x.shape[1:]), mdps)
        return jax.vmap(fn)(keys.reshape(-1), tiled).reshape(shape)

    @jax.jit
    def program(actor_params, mdps, loop_keys, actor_keys, critic_keys):
        loop = jax.vmap(jax.vmap(one_loop, in_axes=(None, 0, 0)), in_axes=(0, None, None))(actor_params, mdps,
                                                                                            loop_keys)
        zeta = jax.vmap(lambda p: per_input(lambda k, m: actor_offline(p, k, m), actor_keys, mdps))(actor_params)
        delta = per_input(critic_offline, critic_keys, mdps)
        return {"loop": loop, "offline": {"zeta": zeta, "delta": delta}}

    args = (actor_params, mdps, loop_keys, keys["actor"], keys["critic"])
    start = time.perf_counter()
    compiled = program.lower(*args).compile()
    if ctx is not None:
        ctx.record_compile(time.perf_counter() - start)
    return jax.tree.map(lambda a: np.asarray(a, np.float64), compiled(*args))


def compute(cfg: ClosedLoopAuditConfig, ctx: RunContext) -> dict:
    actor_params, actor_origin = training.reuse_or_train(ctx, "pmd.repeated_control", "actor", cfg.actor, "actor",
                                                         cfg.runs, cfg.stream, cfg.actor_chunks)
    critic_params, critic_origin = training.reuse_or_train(ctx, "pmd.learned_critic", "critic", cfg.critic, "critic",
                                                           1, cfg.stream, cfg.critic_chunks)
    critic_one = jax.tree.map(lambda a: a[0], critic_params)
    return {**evaluate(cfg, actor_params, critic_one, ctx), "actor_params": actor_params, "critic_params": critic_params,
            "origin": {"actor": actor_origin, "critic": critic_origin}}


def per_mdp(arrays: dict) -> dict[str, np.ndarray]:
    """Per MDP ``[mdps]``: the mean in-loop ``zeta`` and ``delta`` (over runs and rounds) and the offline means on
    each set (``zeta_A``, ..., over runs and inputs)."""
    loop, off = arrays["loop"], arrays["offline"]
    out = {"zeta_loop": loop["zeta"].mean(axis=(0, 2)), "delta_loop": loop["delta"].mean(axis=(0, 2))}
    for j, s in enumerate(SETS):
        out[f"zeta_{s}"] = off["zeta"][:, j].mean(axis=(0, 2))
        out[f"delta_{s}"] = off["delta"][j].mean(axis=1)
    return out


def log_ratios(arrays: dict) -> dict[str, np.ndarray]:
    """Per MDP, the claims' statistics ``{zeta, delta}`` (log in-loop over set A) and their controls
    ``{zeta_control, delta_control}`` (log set B over set A)."""
    m = per_mdp(arrays)
    out = {}
    for r in ("zeta", "delta"):
        out[r] = np.log(m[f"{r}_loop"] / m[f"{r}_A"])
        out[f"{r}_control"] = np.log(m[f"{r}_B"] / m[f"{r}_A"])
    return out


def report_rounds(T: int) -> tuple[int, ...]:
    """The rounds (1-based) the metrics name: first, middle and last."""
    return tuple(dict.fromkeys((1, (T + 1) // 2, T)))


def hypothesis_holds(cfg: ClosedLoopAuditConfig, values: np.ndarray) -> np.ndarray:
    """Per loop ``[runs, mdps]``: whether ``|Q_k| <= B_Q`` for every ``k <= T - 1`` (``Q_0 = 0``; ``Q_1..Q_{T-1}``
    are ``values[..., :T-1, :, :]``), the one hypothesis of the bound a learned critic can break."""
    T = values.shape[2]
    if T == 1:
        return np.ones(values.shape[:2], bool)
    return np.abs(values[:, :, : T - 1]).max(axis=(2, 3, 4)) <= cfg.q_bound


def summarize(cfg: ClosedLoopAuditConfig, arrays: dict) -> Summary:
    loop, off = arrays["loop"], arrays["offline"]
    T = loop["zeta"].shape[-1]
    m: dict[str, float] = {}
    table = {k: [] for k in ("round", "zeta_mean", "zeta_median", "zeta_max", "delta_mean", "delta_median",
                             "delta_max", "dbar_mean")}
    for k in range(T):
        row = {"round": k + 1, "dbar_mean": float(loop["dbar"][..., k].mean())}
        for r in ("zeta", "delta"):
            x = loop[r][..., k]
            row.update({f"{r}_mean": float(x.mean()), f"{r}_median": float(np.median(x)), f"{r}_max": float(x.max())})
        for key, v in row.items():
            table[key].append(v)
    for rnd in report_rounds(T):
        for r in ("zeta", "delta"):
            m[f"{r}_mean_round_{rnd}"] = table[f"{r}_mean"][rnd - 1]
            m[f"{r}_max_round_{rnd}"] = table[f"{r}_max"][rnd - 1]
        m[f"dbar_mean_round_{rnd}"] = table["dbar_mean"][rnd - 1]
    offline = {"set": list(SETS), **{f"{r}_{s}": [] for r in ("zeta", "delta") for s in ("mean", "median", "max")}}
    for r in ("zeta", "delta"):
        m[f"{r}_loop_mean"], m[f"{r}_loop_max"] = float(loop[r].mean()), float(loop[r].max())
        for j, s in enumerate(SETS):
            x = off[r][:, j] if r == "zeta" else off[r][j]
            offline[f"{r}_mean"].append(float(x.mean()))
            offline[f"{r}_median"].append(float(np.median(x)))
            offline[f"{r}_max"].append(float(x.max()))
            m[f"{r}_offline_mean_{s}"], m[f"{r}_offline_max_{s}"] = float(x.mean()), float(x.max())
        m[f"{r}_loop_over_offline_A"] = m[f"{r}_loop_mean"] / m[f"{r}_offline_mean_A"]
    stats = log_ratios(arrays)
    for r in ("zeta", "delta"):  # the geometric means over MDPs of the claims' ratios and of the controls'
        m[f"{r}_ratio_geomean"] = float(np.exp(stats[r].mean()))
        m[f"{r}_control_ratio_geomean"] = float(np.exp(stats[f"{r}_control"].mean()))
    holds = hypothesis_holds(cfg, loop["values"])
    over = loop["loss_abs"] > loop["bound"]
    m.update({
        "loss_median": float(np.median(loop["loss"])), "loss_abs_median": float(np.median(loop["loss_abs"])),
        "bound_median": float(np.median(loop["bound"])),
        "bound_slack_median": float(np.median(loop["bound"] - loop["loss_abs"])),
        "loss_over_bound_max": float(np.max(loop["loss_abs"] / loop["bound"])),
        "bound_violations": float(over.sum()), "bound_violations_within_hypothesis": float((over & holds).sum()),
        "q_range_violations": float((~holds).sum()), "q_abs_max": float(np.abs(loop["values"]).max()),
        "q_bound": cfg.q_bound,
    })
    found = [ACTOR_IN_LOOP.judge(stats["zeta"], control=stats["zeta_control"]),
             CRITIC_IN_LOOP.judge(stats["delta"], control=stats["delta_control"])]
    tables = {"table": table, "offline": offline}
    if "origin" in arrays:
        tables["models"] = {"role": list(arrays["origin"]), "origin": list(arrays["origin"].values())}
    return Summary(metrics=m, checks=found, tables=tables)


def write(cfg: ClosedLoopAuditConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``residuals.csv`` (every run, MDP and round), ``loops.csv`` (loss and bound per loop), ``trace.npz`` (every
    round's ``pi_hat_{k+1}`` and ``Q_{k+1}`` ``[runs, mdps, T, S, A]``, the MDPs' ``P`` and ``R``), ``offline.csv``
    (every offline input), the models if trained here and ``closed_loop_audit.png``."""
    loop, off = arrays["loop"], arrays["offline"]
    runs, n, T = loop["zeta"].shape
    g = np.meshgrid(np.arange(runs), np.arange(n), np.arange(T), indexing="ij")
    io.write_csv(out_dir / "residuals.csv", {
        "run": g[0].reshape(-1), "mdp": g[1].reshape(-1), "round": g[2].reshape(-1) + 1,
        **{r: loop[r].reshape(-1) for r in ("zeta", "delta", "dbar")}})
    g = np.meshgrid(np.arange(runs), np.arange(n), indexing="ij")
    holds = hypothesis_holds(cfg, loop["values"])
    io.write_csv(out_dir / "loops.csv", {
        "run": g[0].reshape(-1), "mdp": g[1].reshape(-1),
        **{k: loop[k].reshape(-1) for k in ("loss", "loss_abs", "bound")},
        "q_within_bound": holds.reshape(-1).astype(int)})
    mdps = audit_mdps(cfg)
    io.save_npz(out_dir / "trace.npz", policies=loop["policies"], values=loop["values"], P=np.asarray(mdps.P),
                R=np.asarray(mdps.R))
    sets, p = off["delta"].shape[0], off["delta"].shape[2]
    g = np.meshgrid(np.arange(runs), np.arange(sets), np.arange(n), np.arange(p), indexing="ij")
    io.write_csv(out_dir / "offline.csv", {
        "run": g[0].reshape(-1), "set": np.asarray(SETS)[g[1].reshape(-1)], "mdp": g[2].reshape(-1),
        "input": g[3].reshape(-1), "zeta": off["zeta"].reshape(-1),
        "delta_critic_run_0": np.broadcast_to(off["delta"], off["zeta"].shape).reshape(-1)})
    for role, tcfg in (("actor", cfg.actor), ("critic", cfg.critic)):
        if arrays.get("origin", {}).get(role, "").startswith("trained here"):
            params = arrays[f"{role}_params"]
            runs_kept = int(jax.tree.leaves(params)[0].shape[0])
            training.keep(out_dir, role, tcfg, role, params, {"stream": cfg.stream, "supervised": [0.0] * runs_kept,
                                                              "train": dataclasses.asdict(tcfg)})
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    rounds = np.arange(1, T + 1)
    names = {"zeta": "actor residual zeta_k (row-L1 to PMD, max over states)",
             "delta": "critic residual delta_k (sup error to F^pi_hat Q_k)"}
    for ax, r in zip(axes, ("zeta", "delta")):
        x = loop[r].reshape(-1, T)
        ax.plot(rounds, np.median(x, axis=0), color="teal", label="in the loop: median over runs x MDPs")
        ax.fill_between(rounds, np.quantile(x, 0.25, axis=0), np.quantile(x, 0.75, axis=0), color="teal", alpha=0.2,
                        label="in the loop: interquartile range")
        ax.plot(rounds, x.mean(axis=0), color="teal", ls=":", label="in the loop: mean")
        o = off[r][:, 0] if r == "zeta" else off[r][0]
        ax.axhline(np.median(o), color="k", ls="--", label="offline (set A): median")
        ax.axhline(o.mean(), color="k", ls=":", label="offline (set A): mean")
        ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_title(names[r], fontsize=9)
        ax.legend(fontsize=7)
    c = {ch.name: ch for ch in summary.checks}
    fig.suptitle(f"Learned actor and critic in their own loop vs on fixed inputs ({runs} actor runs x {n} MDPs); "
                 f"log ratio per MDP: actor {c[ACTOR_IN_LOOP.name].value:+.2f} ({c[ACTOR_IN_LOOP.name].verdict}), "
                 f"critic {c[CRITIC_IN_LOOP.name].value:+.2f} ({c[CRITIC_IN_LOOP.name].verdict})", fontsize=9)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "closed_loop_audit.png")


STUDY = register(Study(
    name="pmd.closed_loop_audit",
    cost_fields=("actor.num_steps", "actor.warmup", "critic.num_steps", "critic.warmup"),
    summary="PolicyAttention open question 2: learned actor and critic residuals in their own closed loop vs offline",
    config_type=ClosedLoopAuditConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    seeds_field="runs", after=("pmd.learned_critic", "pmd.repeated_control"), claims=(ACTOR_IN_LOOP, CRITIC_IN_LOOP),
    quick_s=20,
))

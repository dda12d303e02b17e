"""Study ``pmd.trajectory_critic``: the learned critic in the closed loop, fed one trajectory instead of the
coverage oracle (open question 1).

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500), section 11 ("A generative oracle, not trajectories";
"No learned critic on trajectory data") and open question 1 of section 12, which this study runs:

    "Learning without the oracle. Run a learned critic on ordinary trajectory data, where pairs go
    unvisited and samples depend on each other, and measure what happens to the returned policy. The
    coverage study suggests where to look: how the critic treats pairs it has not seen."

Critics: the ``runs`` learned critics of ``pmd.learned_critic`` (:class:`pmd_jax.learned.LearnedCritic`,
trained on balanced packets only), loaded from that study's kept model when its training config and
stream match (``run all`` runs it first; both presets' ``critic`` equal its presets' ``train``),
otherwise trained here the same way (``training.reuse_or_train``; ``models.csv`` names the origin).
The actor is exact PMD (``pmd_jax.pmd.pmd_step``) at ``eta = 0.8``: a learned actor would add its own
error to every round (``pmd.repeated_control`` measures it), so with the exact actor a change in the
returned policy is the critic's doing alone.

Closed loop (:func:`pmd_jax.loop.closed_loop`, one jitted program vmapped over critic runs and MDPs;
the rounds are a ``lax.scan``): on each of ``n_mdps`` MDPs of the training family's ``split`` stream
(``iid``, ``test``: the MDPs none of the critics trained on; the coverage study's family, Dirichlet(1)
transitions and ``R ~ U[-1, 1]``), from the uniform policy and ``Q_0 = 0``, ``rounds`` rounds of actor
call -> packet of ``S A m = 72`` transitions under the new policy (``m = 6``, the learned critic's packet
size) -> critic call. Every packet comes from one sampler, ``pmd_jax.sampling.sample_packet``, and every
arm of one MDP uses the same round keys and start state. The arms (:data:`ARMS`):

* ``balanced``: the learned critic on balanced packets (``Arm.BALANCED``: ``m`` draws per pair in
  pair-major slots, slot ``i`` holding pair ``i // m``; laid out exactly as
  ``pmd_jax.learned.balanced_transitions``, the packets the critic was trained on, which the tests
  check). The oracle.
* ``balanced_redraw``: the same on packets drawn with an independent key (``fold_in(key, 1)``): the same
  coverage, other samples. The negative control of the gap claim.
* ``stream``: the learned critic on the on-policy stream (``Arm.ON_POLICY``: one continuing trajectory
  under the round's policy, its state carried across rounds, transitions in time order; pairs go
  unvisited or repeat, and successive samples depend on each other).
* ``stream_carry``: the same stream, ``Q_k`` kept on the pairs the packet did not visit (the
  coverage study's carry-Q patch, applied outside the critic as ``loop.decoder_critic`` does for
  ``Arm.ON_POLICY_CARRY``).
* ``stream_pair_major`` (diagnostic, no claim): the stream's transitions stably sorted into pair-major
  order, the order the critic was trained on; the same transitions and counts, so a difference to
  ``stream`` comes from the order alone (the slots of a pair still differ from the training packets' when
  its count is not ``m``).
* ``sample_mean_balanced``, ``sample_mean_stream`` and ``sample_mean_stream_carry``: the exact decoder's
  critic (``loop.decoder_critic``, margins 16: the construction, a per-pair sample mean up to its leak) on
  the balanced packets, on the stream and on the stream with carry-Q: ``pmd.coverage``'s balanced,
  on-policy and carry-Q arms at m = 6, here on these MDPs and keys, so the construction's gaps stand
  beside the learned critic's.
* ``exact``: the exact backup ``F^{pi_hat} Q_k`` (``loop.exact_critic``), the reference.

The construction arms and the exact backup do not depend on the critic run: they run once per MDP.

Records per (run, MDP, arm) and round: the normalised loss of the round's policy
``||Q* - Q^{pi_k}||_inf / ||Q* - Q^{pi_0}||_inf`` (the returned policy's after the last round, as in
``pmd.coverage``), the critic's error ``|Q_{k+1} - F^{pi_hat_{k+1}} Q_k|`` (its max is the loop's
``delta_k``; its sums over the packet's visited and unvisited pairs, from the trace's visit counts),
the error that keeping ``Q_k`` would have had on the unvisited pairs, and the number of unvisited pairs.

The unit of every interval claim is the MDP: each MDP's value is averaged over the critic runs (its arms
share its round keys, so arm against arm is a per-MDP paired difference of last-round losses); 95% t
intervals (``experiments.checks``). Checks, and how each could fail:

* ``stream_worse_than_balanced`` (paired loss, ``stream`` minus ``balanced``, above 0; control:
  ``balanced_redraw`` minus ``balanced``, the same coverage and no gap): a critic that averages
  whatever transitions of a pair it is shown and handles an unvisited pair harmlessly, or a family in
  which the stream covers every pair, puts 0 inside the interval.
* ``carry_q_recovers_balanced`` (paired loss, ``stream_carry`` minus ``balanced``, within 0 +- 0.006,
  the tolerance of ``pmd.coverage``'s ``carry_q_near_balanced_m6``; control: ``stream`` minus
  ``balanced``): the coverage study's reading, that the loss comes from overwriting unvisited pairs,
  for the learned critic. It fails if the critic's loss on trajectories also comes from what it does
  with the pairs it did see (uneven counts, dependent samples, slot order it was not trained on).

Metrics beside them: every arm's mean and median last-round loss (``loss_mean_ARM``,
``loss_median_ARM``), the gaps' means (``gap_stream``, ``gap_stream_carry``, ``gap_stream_pair_major``,
per run ``gap_stream_run_R``; the construction's ``gap_sample_mean_stream`` and
``gap_sample_mean_stream_carry``, against ``sample_mean_balanced``; what the learned critic costs even with the
oracle, ``gap_balanced_minus_exact``), the critic's mean error on visited and unvisited pairs
(``critic_error_visited_ARM``, ``critic_error_unvisited_ARM``, pooled over pairs, rounds, MDPs and runs)
beside keeping ``Q_k`` there (``keep_error_unvisited_ARM``), and unvisited pairs per round.

Judged result (``run pmd.trajectory_critic --quick``, stream 0: the 4 critics kept by ``pmd.learned_critic
--quick``, loaded; 32 ``test`` MDPs; 24 s, 13 s of it compiling): ``stream_worse_than_balanced`` PASS, 0.131
[0.104, 0.158] (per critic 0.078 to 0.188; control, the redraw, -0.0002 [-0.0006, 0.0002], INCONCLUSIVE);
``carry_q_recovers_balanced`` FAIL, 0.076 [0.050, 0.102] against 0 +- 0.006 (control, the stream, 0.131: FAIL).
Mean last-round losses: learned critic on balanced packets 0.033, on the stream 0.164, with carry-Q 0.108, sorted
pair-major 0.130; exact backup 0.009; the decoder 0.010 (balanced), 0.034 (stream), 0.009 (carry-Q, gap -0.0003:
the coverage study's reading holds for the construction on these MDPs and keys). The stream leaves 3.2 of 12 pairs
unvisited per round; there the learned critic's mean error is 0.76, against 0.61 for keeping ``Q_k`` and 0.95 for
the decoder (which overwrites them with other pairs' values); on the pairs it visits, 0.26 (0.38 on balanced
packets, the decoder's 0.08 to 0.10). Reading: a learned critic trained on the oracle's packets returns a
markedly worse policy from one trajectory, and keeping ``Q_k`` on unvisited pairs removes only about two fifths of
the gap (sorting the same transitions into the training order, about a quarter). The rest is not identified here:
the mean per-pair error on visited pairs is no larger than on balanced packets, so it is not a plain error size.
The screening critics (stream 1, ``val`` MDPs) gave the same verdicts with a third of the gap (0.045), so its
size depends on the critic seeds.
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
from pmd_jax import decoder, tasks
from pmd_jax.loop import CriticStep, closed_loop, decoder_critic, exact_critic
from pmd_jax.mdp import FiniteMDP, bellman_operator, loss_normaliser, policy_loss, uniform_policy
from pmd_jax.pmd import pmd_step
from pmd_jax.sampling import Arm, sample_packet
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

PAPER: dict[str, float] = {}  # an open question: the paper has no number for it
# The learned critic's arms: (name, sampling arm, independent key, keep Q_k on unvisited pairs, pair-major order).
LEARNED_ARMS = (
    ("balanced", Arm.BALANCED, False, False, False),
    ("balanced_redraw", Arm.BALANCED, True, False, False),
    ("stream", Arm.ON_POLICY, False, False, False),
    ("stream_carry", Arm.ON_POLICY, False, True, False),
    ("stream_pair_major", Arm.ON_POLICY, False, False, True),
)
CONSTRUCTION_ARMS = ("sample_mean_balanced", "sample_mean_stream", "sample_mean_stream_carry", "exact")  # run once
ARMS = tuple(a[0] for a in LEARNED_ARMS) + CONSTRUCTION_ARMS
SAMPLED = ARMS[:-1]  # the arms that read a packet (visit counts mean something)
CARRY_TOL = 0.006  # pmd.coverage's carry_q_near_balanced_m6 tolerance (a third of the paper's on-policy gap)

STREAM_WORSE = checks.Claim(
    "stream_worse_than_balanced", "the learned critic fed one on-policy trajectory returns a worse policy than fed "
    "the balanced coverage oracle at the same budget (per-MDP paired last-round loss, stream minus balanced)",
    ">", 0.0, unit="MDP",
    control="the learned critic on independently redrawn balanced packets (same coverage) minus balanced",
    fails_if="the critic averages whatever transitions of a pair it sees and handles unvisited pairs harmlessly, "
             "or the stream covers every pair in this family")
CARRY_RECOVERS = checks.Claim(
    "carry_q_recovers_balanced", "keeping the old Q on pairs the trajectory did not visit brings the learned "
    f"critic's loss back to the oracle level (per-MDP paired difference within {CARRY_TOL}, pmd.coverage's "
    "carry-Q tolerance)", "within", 0.0, tol=CARRY_TOL, unit="MDP",
    control="the on-policy stream without carry-Q, minus balanced",
    fails_if="the critic's loss on trajectories also comes from the pairs it did see: uneven counts, dependent "
             "samples or a slot order it was not trained on")


@dataclasses.dataclass(frozen=True)
class TrajectoryCriticConfig:
    """The critics of ``pmd.learned_critic`` (``critic``, ``runs``, ``stream``) in the closed loop of the arms
    :data:`ARMS`; ``chunks`` applies only when the critics are trained here."""

    critic: TrainConfig = TrainConfig(model=ModelConfig(num_layers=3), num_steps=12_800, warmup=400, batch_size=32)
    runs: int = 5
    stream: int = JUDGED
    chunks: int = 8
    eta: float = 0.8  # the exact actor's step, every round
    rounds: int = 20  # T
    n_mdps: int = 64
    split: str = "test"  # the key stream of the MDPs (the critics trained on the train pool)
    kappa: float = 16.0  # state margin of the decoder's critic (the sample-mean arms)
    nu: float = 16.0  # role margin of the decoder's critic
    loop_seed: int = 7  # PRNG seed of the loops' round keys and start states, one per MDP

    def __post_init__(self):
        check_stream(self.stream)
        for name in ("runs", "chunks", "rounds", "n_mdps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.critic.num_steps % self.chunks:
            raise ValueError(f"chunks={self.chunks} must divide critic.num_steps={self.critic.num_steps}")
        for name in ("eta", "kappa", "nu"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.split not in tasks.SPLITS or self.split == "train":
            raise ValueError(f"split must be a held-out split ('val' or 'test'), got {self.split!r}")
        if self.loop_seed < 0:
            raise ValueError(f"loop_seed must be >= 0, got {self.loop_seed}")

    @property
    def packet_size(self) -> int:
        """``S A m``: the learned critic's fixed packet, every arm's budget."""
        c = self.critic
        return c.num_states * c.num_actions * c.samples_per_pair


# Screened on stream 1 (the critics of `pmd.learned_critic --quick --set stream=1`), the `val` MDPs and loop_seed 8,
# 4 critics; study wall on 2 cores at load ~5 (other jobs). 32 MDPs, 21.9 s (11.5 s compiling): gap 0.048 [0.035,
# 0.061] (half-width 0.013), carry-Q 0.032 [0.021, 0.044] (0.011), redraw control 0.0003 [-0.0001, 0.0007]. 64 MDPs,
# 33.7 s (13.1 s compiling): gap 0.045 [0.034, 0.056] (0.011), carry-Q 0.027 [0.018, 0.036] (0.009). Both claims
# are decided at 32 with room, so QUICK takes 32 (make run's budget); FULL keeps 64 (its larger critics unscreened).
QUICK = TrajectoryCriticConfig(
    critic=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=1_500, warmup=100, batch_size=16),
    runs=4, chunks=3, n_mdps=32)
FULL = TrajectoryCriticConfig()


def pair_major(tr, num_actions: int):
    """The packet's transitions stably sorted by pair ``s A + a`` (the order of the balanced packets)."""
    order = jnp.argsort(tr.s * num_actions + tr.a, stable=True)
    return jax.tree.map(lambda x: x[order], tr)


def learned_critic(cfg: TrajectoryCriticConfig, params, mdp: FiniteMDP):
    """The learned arms' critic for ``closed_loop(..., runs=True)``: run ``k`` is ``LEARNED_ARMS[k]``."""
    model = cfg.critic.critic()
    m, n, A = cfg.critic.samples_per_pair, cfg.packet_size, mdp.num_actions
    arm = jnp.asarray([a[1] for a in LEARNED_ARMS])
    redraw = [a[2] for a in LEARNED_ARMS]
    carry = jnp.asarray([a[3] for a in LEARNED_ARMS])[:, None, None]
    sort = jnp.asarray([a[4] for a in LEARNED_ARMS])

    def critic(key, pi_hat, Q, stream):
        keys = jnp.stack([jax.random.fold_in(key, 1) if r else key for r in redraw])
        packets = jax.vmap(lambda k, pi, a, st: sample_packet(k, mdp, pi, a, m, st, n))(keys, pi_hat, arm, stream)
        tr = packets.transitions
        tr = jax.tree.map(lambda s, x: jnp.where(sort.reshape((-1,) + (1,) * (x.ndim - 1)), s, x),
                          jax.vmap(lambda t: pair_major(t, A))(tr), tr)
        Q_net = jax.vmap(lambda q, t: model.q_values(params, q, t))(Q, tr)
        Q_next = jnp.where(carry & (packets.counts == 0), Q, Q_net)
        return CriticStep(Q_next, packets.counts, packets.stream_state)

    return critic


def construction_critic(cfg: TrajectoryCriticConfig, mdp: FiniteMDP):
    """The construction arms' critic for ``closed_loop(..., runs=True)``: run ``k`` is ``CONSTRUCTION_ARMS[k]``."""
    S, A = mdp.num_states, mdp.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.critic.gamma, cfg.kappa, cfg.nu, jnp.float32)
    m, n = cfg.critic.samples_per_pair, cfg.packet_size
    sampled = (Arm.BALANCED, Arm.ON_POLICY, Arm.ON_POLICY_CARRY)
    calls = tuple(decoder_critic(params, layout, mdp, arm, m, n) for arm in sampled) + (exact_critic(mdp),)

    def critic(key, pi_hat, Q, stream):
        outs = [call(key, pi_hat[k], Q[k], stream[k]) for k, call in enumerate(calls)]
        return jax.tree.map(lambda *x: jnp.stack(x), *outs)

    return critic


def make_mdp_runner(cfg: TrajectoryCriticConfig):
    """``run(params [runs, ...], mdp, key) -> (learned traces [runs, arms], construction traces [arms])``
    (:class:`pmd_jax.loop.LoopTrace`): every arm of one MDP on the same round keys and start state."""
    S, A = cfg.critic.num_states, cfg.critic.num_actions
    actor = jax.vmap(pmd_step, (0, 0, None))
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))

    def run(params, mdp, key):
        k_loop, k_start = jax.random.split(key)
        start = jax.random.randint(k_start, (), 0, S)

        def loop(critic, K):
            return closed_loop(k_loop, mdp, actor, critic, jnp.broadcast_to(pi0, (K, S, A)),
                               jnp.broadcast_to(Q0, (K, S, A)), jnp.full(K, start), cfg.eta, cfg.rounds, runs=True)

        learned = jax.vmap(lambda p: loop(learned_critic(cfg, p, mdp), len(LEARNED_ARMS)))(params)
        construction = loop(construction_critic(cfg, mdp), len(CONSTRUCTION_ARMS))
        return learned, construction

    return run


def trace_records(mdp: FiniteMDP, trace, Q0, Q_star, loss0) -> dict:
    """Per-round records ``[T]`` of one arm's trace (module docstring)."""
    loss = jax.vmap(lambda pi: policy_loss(mdp, Q_star, pi))(trace.policies) / loss0
    Q_prev = jnp.concatenate([Q0[None], trace.values[:-1]])
    target = jax.vmap(lambda pi, q: bellman_operator(mdp, pi, q))(trace.policies, Q_prev)
    err = jnp.abs(trace.values - target)
    unvisited = trace.counts == 0
    return {
        "loss": loss, "delta": trace.delta,
        "err_visited": jnp.sum(jnp.where(unvisited, 0.0, err), axis=(1, 2)),
        "err_unvisited": jnp.sum(jnp.where(unvisited, err, 0.0), axis=(1, 2)),
        "keep_err_unvisited": jnp.sum(jnp.where(unvisited, jnp.abs(Q_prev - target), 0.0), axis=(1, 2)),
        "unvisited": jnp.sum(unvisited, axis=(1, 2)).astype(loss.dtype),
    }


def loops(cfg: TrajectoryCriticConfig, params, ctx: RunContext | None = None) -> dict:
    """``{"learned": {name: [runs, mdps, arms, T]}, "construction": {name: [mdps, arms, T]}}`` (float64): every
    arm's per-round records on every MDP, as one program."""
    c = cfg.critic
    mdps = tasks.split_mdps(c.family, cfg.split, cfg.n_mdps, c.data_seed, num_states=c.num_states,
                            num_actions=c.num_actions, gamma=c.gamma)
    keys = jax.random.split(jax.random.key(cfg.loop_seed), cfg.n_mdps)
    run = make_mdp_runner(cfg)
    Q0 = jnp.zeros((cfg.critic.num_states, cfg.critic.num_actions))

    @jax.jit
    def program(params, mdps, keys):
        def one(mdp, key):
            learned, construction = run(params, mdp, key)
            Q_star, loss0 = loss_normaliser(mdp)
            rec = lambda tr: trace_records(mdp, tr, Q0, Q_star, loss0)  # noqa: E731
            return jax.vmap(jax.vmap(rec))(learned), jax.vmap(rec)(construction)

        learned, construction = jax.vmap(one)(mdps, keys)
        return {"learned": jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), learned), "construction": construction}

    start = time.perf_counter()
    compiled = program.lower(params, mdps, keys).compile()
    if ctx is not None:
        ctx.record_compile(time.perf_counter() - start)
    return jax.tree.map(lambda a: np.asarray(a, np.float64), compiled(params, mdps, keys))


def compute(cfg: TrajectoryCriticConfig, ctx: RunContext) -> dict:
    params, origin = training.reuse_or_train(ctx, "pmd.learned_critic", "critic", cfg.critic, "critic", cfg.runs,
                                             cfg.stream, cfg.chunks)
    return {"records": loops(cfg, params, ctx), "critic_origin": origin}


def per_arm(records: dict, name: str) -> np.ndarray:
    """``[mdps, arms, T]`` of record ``name``: the learned arms averaged over the critic runs, then the
    construction arms."""
    return np.concatenate([records["learned"][name].mean(axis=0), records["construction"][name]], axis=1)


def pooled(records: dict, name: str, pairs: int, over: str) -> np.ndarray:
    """Per arm, the record ``name`` (a sum over pairs) summed over runs, MDPs and rounds, over the number of
    ``over`` (``"unvisited"`` or ``"visited"``) pairs in them: a mean per pair."""
    out = []
    for part, axes in (("learned", (0, 1, 3)), ("construction", (0, 2))):
        unv = records[part]["unvisited"]
        entries = unv.size // unv.shape[-2]  # (runs x) MDPs x rounds per arm
        count = unv.sum(axis=axes) if over == "unvisited" else pairs * entries - unv.sum(axis=axes)
        with np.errstate(divide="ignore", invalid="ignore"):  # no unvisited pair at all: nan, not reported
            out.append(records[part][name].sum(axis=axes) / count)
    return np.concatenate(out)


def summarize(cfg: TrajectoryCriticConfig, arrays: dict) -> Summary:
    rec = arrays["records"]
    loss = per_arm(rec, "loss")[..., -1]  # [mdps, arms]: the returned policy's loss, per MDP
    L = {a: loss[:, j] for j, a in enumerate(ARMS)}
    pairs = cfg.critic.num_states * cfg.critic.num_actions
    err_vis = pooled(rec, "err_visited", pairs, "visited")
    err_unv = pooled(rec, "err_unvisited", pairs, "unvisited")
    keep_unv = pooled(rec, "keep_err_unvisited", pairs, "unvisited")
    delta = per_arm(rec, "delta").mean(axis=(0, 2))
    unvisited = per_arm(rec, "unvisited").mean(axis=(0, 2))
    # each arm's gap is to the oracle of its own critic: the learned arms' and the exact backup's to the learned
    # critic on balanced packets, the decoder's stream to the decoder on balanced packets
    baseline = {a: "balanced" for a, *_ in LEARNED_ARMS} | {a: "sample_mean_balanced" for a in CONSTRUCTION_ARMS[:3]}
    baseline["exact"] = "balanced"
    m: dict[str, float] = {}
    table = {k: [] for k in ("arm", "critic", "loss_mean", "loss_median", "gap_mean", "gap_baseline", "critic_error",
                             "error_visited", "error_unvisited", "keep_error_unvisited", "unvisited_per_round")}
    for j, a in enumerate(ARMS):
        gap = float(np.mean(L[a] - L[baseline[a]])) if baseline[a] != a else np.nan
        sampled = a in SAMPLED
        row = {"arm": a, "critic": "learned" if j < len(LEARNED_ARMS) else "exact" if a == "exact" else "decoder",
               "loss_mean": float(L[a].mean()), "loss_median": float(np.median(L[a])), "gap_mean": gap,
               "gap_baseline": baseline[a] if baseline[a] != a else "", "critic_error": float(delta[j]),
               "error_visited": float(err_vis[j]) if sampled else np.nan,
               "error_unvisited": float(err_unv[j]) if sampled else np.nan,
               "keep_error_unvisited": float(keep_unv[j]) if sampled else np.nan,
               "unvisited_per_round": float(unvisited[j]) if sampled else np.nan}
        for k, v in row.items():
            table[k].append(v)
        m[f"loss_mean_{a}"], m[f"loss_median_{a}"] = row["loss_mean"], row["loss_median"]
        m[f"critic_error_{a}"] = row["critic_error"]
        if sampled:
            m[f"unvisited_per_round_{a}"] = row["unvisited_per_round"]
            m[f"critic_error_visited_{a}"] = row["error_visited"]
            if np.isfinite(row["error_unvisited"]):
                m[f"critic_error_unvisited_{a}"] = row["error_unvisited"]
                m[f"keep_error_unvisited_{a}"] = row["keep_error_unvisited"]
    for a in ("stream", "stream_carry", "stream_pair_major", "balanced_redraw"):
        m[f"gap_{a}"] = float(np.mean(L[a] - L["balanced"]))
    for a in ("sample_mean_stream", "sample_mean_stream_carry"):
        m[f"gap_{a}"] = float(np.mean(L[a] - L["sample_mean_balanced"]))
    m["gap_balanced_minus_exact"] = float(np.mean(L["balanced"] - L["exact"]))  # the learned critic's cost
    runs_loss = rec["learned"]["loss"][..., -1]  # [runs, mdps, arms]
    for r in range(runs_loss.shape[0]):
        m[f"gap_stream_run_{r + 1}"] = float(np.mean(runs_loss[r, :, ARMS.index("stream")]
                                                     - runs_loss[r, :, ARMS.index("balanced")]))
    return Summary(metrics=m, checks=judge(L), tables={"table": table, "models": {
        "role": ["critic"], "origin": [arrays["critic_origin"]]}})


def judge(L: dict) -> list:
    """The two interval claims from per-MDP last-round losses ``{arm: [mdps]}``, each beside its control."""
    gap = checks.paired(L["stream"], L["balanced"])
    return [
        STREAM_WORSE.judge(gap, control=checks.paired(L["balanced_redraw"], L["balanced"])),
        CARRY_RECOVERS.judge(checks.paired(L["stream_carry"], L["balanced"]), control=gap),
    ]


def write(cfg: TrajectoryCriticConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``losses.csv`` (every MDP and arm: last-round loss averaged over runs, and per run), ``rounds.csv`` (per arm
    and round: median loss over MDPs, mean critic error, unvisited pairs) and ``trajectory_critic.png``."""
    rec = arrays["records"]
    loss = per_arm(rec, "loss")  # [mdps, arms, T]
    n, K, T = loss.shape
    runs_loss = rec["learned"]["loss"][..., -1]  # [runs, mdps, learned arms]
    R = runs_loss.shape[0]
    cols = {"mdp": np.repeat(np.arange(n), K), "arm": [a for _ in range(n) for a in ARMS],
            "loss": loss[..., -1].reshape(-1)}
    for r in range(R):  # the construction arms do not depend on the critic run: the same value in every column
        per_run = np.concatenate([runs_loss[r], rec["construction"]["loss"][..., -1]], axis=1)
        cols[f"loss_run_{r + 1}"] = per_run.reshape(-1)
    io.write_csv(out_dir / "losses.csv", cols)
    delta, unvisited = per_arm(rec, "delta"), per_arm(rec, "unvisited")
    io.write_csv(out_dir / "rounds.csv", {
        "arm": [a for a in ARMS for _ in range(T)], "round": np.tile(np.arange(1, T + 1), K),
        "loss_median": np.median(loss, axis=0).reshape(-1), "loss_mean": loss.mean(axis=0).reshape(-1),
        "critic_error": delta.mean(axis=0).reshape(-1), "unvisited": unvisited.mean(axis=0).reshape(-1)})
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    rng = np.random.default_rng(0)
    colors = {a: f"C{j}" for j, a in enumerate(ARMS)}
    for j, a in enumerate(ARMS):
        y = K - 1 - j
        ax0.scatter(loss[:, j, -1], y + rng.uniform(-0.18, 0.18, n), s=8, alpha=0.45, color=colors[a])
        ax0.plot(np.mean(loss[:, j, -1]), y, "D", color="k", ms=6, label="mean over MDPs" if j == 0 else None)
        ax0.plot(np.median(loss[:, j, -1]), y, "|", color="k", ms=14, mew=2, label="median" if j == 0 else None)
        ax1.plot(np.arange(1, T + 1), np.median(loss[:, j], axis=0), color=colors[a], label=a,
                 ls="-" if j < len(LEARNED_ARMS) else "--")
    ax0.set_yticks(range(K), ARMS[::-1])
    ax0.set_xscale("log")
    ax0.set_xlabel(f"normalised loss of the returned policy after {T} rounds\n(log scale; per MDP, mean over {R} "
                   "critics)")
    ax0.legend(fontsize=7, loc="lower right")
    ax1.set_yscale("log")
    ax1.set_xlabel("round")
    ax1.set_ylabel(f"median normalised loss over {n} MDPs")
    ax1.legend(fontsize=7)
    fig.suptitle(f"A learned critic fed one trajectory instead of the coverage oracle ({n} held-out MDPs, exact "
                 f"PMD actor at eta = {cfg.eta})", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "trajectory_critic.png")


STUDY = register(Study(
    name="pmd.trajectory_critic",
    cost_fields=("critic.num_steps", "critic.warmup", "n_mdps"),
    summary="PolicyAttention learned critic in the closed loop on one on-policy trajectory vs the coverage oracle "
            "(open question 1)",
    config_type=TrajectoryCriticConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="runs", after=("pmd.learned_critic",), claims=(STREAM_WORSE, CARRY_RECOVERS),
    quick_s=25,
))

"""The causal actor-environment-critic loop (PolicyAttention, arXiv 2609.30500, sections 2, 8 and 13).

Per round ``k``: the actor maps ``(pi_k, Q_k, eta)`` to ``pi_hat_{k+1}``; only then does the
environment draw a packet under ``pi_hat_{k+1}``, and the critic maps ``Q_k`` and the
packet to ``Q_{k+1}``. The loop records the realised residuals of the returned-policy
bound (``zeta_k`` against ideal PMD, ``delta_k`` against the exact
``F^{pi_hat_{k+1}} Q_k``, the greedy defect ``Dbar_k``) and the packet's visit counts.
Rounds run as ``lax.scan``; one ``jax.vmap`` runs many MDPs, arms and budgets, or
``closed_loop(..., runs=True)`` advances several runs of one MDP together, so that
:func:`grouped_decoder_critic` can make each run's critic call on its valid slots alone.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from pmd_jax import decoder
from pmd_jax.bound import greedy_defect
from pmd_jax.learned import balanced_transitions
from pmd_jax.mdp import FiniteMDP, bellman_operator
from pmd_jax.pmd import pmd_step
from pmd_jax.sampling import Arm, sample_packet

# actor(pi, Q, eta) -> pi_hat;  critic(key, pi_hat, Q, stream_state) -> CriticStep
Actor = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


@struct.dataclass
class CriticStep:
    """A critic call's output ``Q_next [S, A]``, the packet's visit counts and the stream state."""

    Q_next: jax.Array
    counts: jax.Array
    stream_state: jax.Array


@struct.dataclass
class LoopTrace:
    """Per-round records (``[T]``, counts ``[T, S, A]``), every round's policy ``pi_hat_{k+1}``
    (``policies [T, S, A]``), every round's critic output ``Q_{k+1}`` (``values [T, S, A]``) and the
    returned policy ``pi_hat_T``."""

    zeta: jax.Array
    delta: jax.Array
    dbar: jax.Array
    counts: jax.Array
    policies: jax.Array
    policy: jax.Array
    values: jax.Array


def exact_critic(mdp: FiniteMDP):
    """The exact one-step backup ``Q_{k+1} = F^{pi_hat_{k+1}} Q_k`` (no samples)."""
    S, A = mdp.num_states, mdp.num_actions
    return lambda key, pi_hat, Q, stream: CriticStep(bellman_operator(mdp, pi_hat, Q), jnp.zeros((S, A), jnp.int32), stream)


def learned_balanced_critic(critic, params, mdp: FiniteMDP, m: int):
    """A learned critic (:class:`pmd_jax.learned.LearnedCritic` ``critic`` with ``params``) reading a balanced
    packet of ``m`` fresh draws per pair under ``pi_hat_{k+1}`` (``learned.balanced_transitions``, the packets it
    was trained on); it reports no visit counts (every pair has ``m``)."""
    S, A = mdp.num_states, mdp.num_actions

    def step(key, pi_hat, Q, stream):
        packet = balanced_transitions(key, mdp, pi_hat, m)
        return CriticStep(critic.q_values(params, Q, packet), jnp.zeros((S, A), jnp.int32), stream)

    return step


def decoder_critic(params, layout: decoder.Layout, mdp: FiniteMDP, arm, m, n_max: int, explore_eps=0.2,
                   slots: int | None = None):
    """The decoder's critic call on a packet drawn by ``arm`` (see :mod:`pmd_jax.sampling`).

    ``on_policy_carry`` keeps ``Q_k`` on pairs the packet did not visit; ``exact_backup``
    returns ``F^{pi_hat} Q_k``. ``arm`` and ``m`` may be traced. ``slots`` (static, at least
    ``S A m``): make the decoder call on the packet's first ``slots`` slots only, which hold
    every valid one (the same output up to summation order, see :func:`grouped_decoder_critic`).
    """

    def critic(key, pi_hat, Q, stream):
        packet = sample_packet(key, mdp, pi_hat, arm, m, stream, n_max, explore_eps)
        transitions = packet.transitions if slots is None else jax.tree.map(lambda x: x[:slots], packet.transitions)
        Q_dec = decoder.apply_critic(params, layout, Q, transitions)
        Q_dec = jnp.where((arm == Arm.ON_POLICY_CARRY) & (packet.counts == 0), Q, Q_dec)
        Q_next = jnp.where(arm == Arm.EXACT_BACKUP, bellman_operator(mdp, pi_hat, Q), Q_dec)
        return CriticStep(Q_next, packet.counts, packet.stream_state)

    return critic


def packet_slots(layout: decoder.Layout, arms: Sequence[int], budgets: Sequence[int]) -> tuple[int | None, ...]:
    """Per run, the slots a critic call needs: ``S A m`` (the valid ones), ``None`` for the exact backup."""
    return tuple(None if arm == Arm.EXACT_BACKUP else layout.S * layout.A * int(m) for arm, m in zip(arms, budgets))


def grouped_decoder_critic(params, layout: decoder.Layout, mdp: FiniteMDP, arms: Sequence[int], budgets: Sequence[int],
                           n_max: int, explore_eps=0.2):
    """:func:`decoder_critic` for ``K`` runs at once (``closed_loop(..., runs=True)``): run ``k`` uses
    ``arms[k]`` at budget ``budgets[k]`` (static), every state with a leading ``K`` axis.

    Every sampled run draws its packet of ``n_max`` slots exactly as :func:`decoder_critic` does
    (one vmapped :func:`~pmd_jax.sampling.sample_packet`); the decoder's critic call is then made
    on the packet's first :func:`packet_slots` slots, which are exactly its valid ones, one vmapped
    call per packet size, and exact-backup runs make no decoder call and draw nothing. The result
    equals :func:`decoder_critic`'s up to floating-point summation order: a masked slot's key has
    softmax weight exactly 0 and is no key of any other token (docs/pmd.md section 2.9), so
    removing it changes no attention row that is read.
    """
    slots = packet_slots(layout, arms, budgets)
    if any(n is not None and n > n_max for n in slots):
        raise ValueError(f"budgets need up to {max(n for n in slots if n is not None)} slots, above n_max={n_max}")
    sampled = np.array([k for k, n in enumerate(slots) if n is not None], int)
    groups = [(n, np.array([k for k, nk in enumerate(slots) if nk == n])) for n in dict.fromkeys(slots) if n is not None]
    position = {int(k): j for j, k in enumerate(sampled)}  # run -> index among the sampled runs
    arm_v, m_v = jnp.asarray(np.asarray(arms)[sampled]), jnp.asarray(np.asarray(budgets)[sampled])
    is_carry = jnp.asarray(np.asarray(arms) == Arm.ON_POLICY_CARRY)[:, None, None]
    call = jax.vmap(lambda Q, tr: decoder.apply_critic(params, layout, Q, tr))

    def critic(key, pi_hat, Q, stream):
        draw = lambda pi, arm, m, st: sample_packet(key, mdp, pi, arm, m, st, n_max, explore_eps)
        packets = jax.vmap(draw)(pi_hat[sampled], arm_v, m_v, stream[sampled])
        Q_next = jax.vmap(lambda pi, Q: bellman_operator(mdp, pi, Q))(pi_hat, Q)  # kept on the exact-backup runs
        for n, runs in groups:
            at = np.array([position[int(k)] for k in runs])
            Q_next = Q_next.at[runs].set(call(Q[runs], jax.tree.map(lambda x: x[at, :n], packets.transitions)))  # noqa: B023
        counts = jnp.zeros(Q.shape, jnp.int32).at[sampled].set(packets.counts)
        Q_next = jnp.where(is_carry & (counts == 0), Q, Q_next)
        return CriticStep(Q_next, counts, stream.at[sampled].set(packets.stream_state))

    return critic


def routing_residual(pi_hat, pi, Q, eta):
    """``zeta = max_s ||pi_hat(.|s) - PMD_eta(pi, Q)(.|s)||_1``: an actor call's residual against the exact PMD step."""
    return jnp.max(jnp.sum(jnp.abs(pi_hat - pmd_step(pi, Q, eta)), axis=-1))


def _residuals(mdp: FiniteMDP, eta, pi, Q, pi_hat, Q_next):
    """``zeta_k`` (against the exact PMD step), ``delta_k`` (against ``F^{pi_hat} Q_k``) and ``Dbar_k``."""
    zeta = routing_residual(pi_hat, pi, Q, eta)
    dbar = greedy_defect(mdp, pi, Q)
    delta = jnp.max(jnp.abs(Q_next - bellman_operator(mdp, pi_hat, Q)))
    return zeta, delta, dbar


def closed_loop(key, mdp: FiniteMDP, actor: Actor, critic, pi0, Q0, stream0, eta, rounds: int, runs: bool = False) -> LoopTrace:
    """Run ``rounds`` rounds from ``(pi0, Q0)`` and stream state ``stream0`` with step ``eta``.

    ``runs=True``: ``pi0, Q0 [K, S, A]`` and ``stream0 [K]`` are ``K`` runs on the same MDP and
    round keys, advanced together: ``actor`` and ``critic`` take and return every run at once
    (leading ``K`` axis; e.g. ``jax.vmap(actor)`` and :func:`grouped_decoder_critic`), and every
    field of the trace gets a leading ``K`` axis. Each run's trace is the one ``runs=False`` gives
    it with the per-run actor and critic.
    """
    residuals = lambda pi, Q, pi_hat, Q_next: _residuals(mdp, eta, pi, Q, pi_hat, Q_next)
    if runs:
        residuals = jax.vmap(residuals)

    def round_(carry, key_k):
        pi, Q, stream = carry
        pi_hat = actor(pi, Q, eta)
        out = critic(key_k, pi_hat, Q, stream)
        zeta, delta, dbar = residuals(pi, Q, pi_hat, out.Q_next)
        return (pi_hat, out.Q_next, out.stream_state), (zeta, delta, dbar, out.counts, pi_hat, out.Q_next)

    (pi_T, _, _), records = jax.lax.scan(round_, (pi0, Q0, jnp.asarray(stream0)), jax.random.split(key, rounds))
    if runs:  # rounds first from the scan; runs first in the trace
        records = jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), records)
    zeta, delta, dbar, counts, policies, values = records
    return LoopTrace(zeta=zeta, delta=delta, dbar=dbar, counts=counts, policies=policies, policy=pi_T, values=values)

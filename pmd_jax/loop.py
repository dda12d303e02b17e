"""The causal actor-environment-critic loop (PolicyAttention, arXiv 2609.30500, sections 2, 8 and 13).

Per round ``k``: the actor maps ``(pi_k, Q_k, eta)`` to ``pi_hat_{k+1}``; only then does the
environment draw a packet under ``pi_hat_{k+1}``, and the critic maps ``Q_k`` and the
packet to ``Q_{k+1}``. The loop records the realised residuals of the returned-policy
bound (``zeta_k`` against ideal PMD, ``delta_k`` against the exact
``F^{pi_hat_{k+1}} Q_k``, the greedy defect ``Dbar_k``) and the packet's visit counts.
Rounds run as ``lax.scan``; one ``jax.vmap`` runs many MDPs, arms and budgets.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax import decoder
from pmd_jax.bound import greedy_defect
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
    (``policies [T, S, A]``) and the returned policy ``pi_hat_T``."""

    zeta: jax.Array
    delta: jax.Array
    dbar: jax.Array
    counts: jax.Array
    policies: jax.Array
    policy: jax.Array


def exact_critic(mdp: FiniteMDP):
    """The exact one-step backup ``Q_{k+1} = F^{pi_hat_{k+1}} Q_k`` (no samples)."""
    S, A = mdp.num_states, mdp.num_actions
    return lambda key, pi_hat, Q, stream: CriticStep(bellman_operator(mdp, pi_hat, Q), jnp.zeros((S, A), jnp.int32), stream)


def decoder_critic(params, layout: decoder.Layout, mdp: FiniteMDP, arm, m, n_max: int, explore_eps=0.2):
    """The decoder's critic call on a packet drawn by ``arm`` (see :mod:`pmd_jax.sampling`).

    ``on_policy_carry`` keeps ``Q_k`` on pairs the packet did not visit; ``exact_backup``
    returns ``F^{pi_hat} Q_k``. ``arm`` and ``m`` may be traced.
    """

    def critic(key, pi_hat, Q, stream):
        packet = sample_packet(key, mdp, pi_hat, arm, m, stream, n_max, explore_eps)
        Q_dec = decoder.apply_critic(params, layout, Q, packet.transitions)
        Q_dec = jnp.where((arm == Arm.ON_POLICY_CARRY) & (packet.counts == 0), Q, Q_dec)
        Q_next = jnp.where(arm == Arm.EXACT_BACKUP, bellman_operator(mdp, pi_hat, Q), Q_dec)
        return CriticStep(Q_next, packet.counts, packet.stream_state)

    return critic


def closed_loop(key, mdp: FiniteMDP, actor: Actor, critic, pi0, Q0, stream0, eta, rounds: int) -> LoopTrace:
    """Run ``rounds`` rounds from ``(pi0, Q0)`` and stream state ``stream0`` with step ``eta``."""

    def round_(carry, key_k):
        pi, Q, stream = carry
        pi_hat = actor(pi, Q, eta)
        zeta = jnp.max(jnp.sum(jnp.abs(pi_hat - pmd_step(pi, Q, eta)), axis=-1))
        dbar = greedy_defect(mdp, pi, Q)
        out = critic(key_k, pi_hat, Q, stream)
        delta = jnp.max(jnp.abs(out.Q_next - bellman_operator(mdp, pi_hat, Q)))
        return (pi_hat, out.Q_next, out.stream_state), (zeta, delta, dbar, out.counts, pi_hat)

    (pi_T, _, _), (zeta, delta, dbar, counts, policies) = jax.lax.scan(
        round_, (pi0, Q0, jnp.asarray(stream0)), jax.random.split(key, rounds)
    )
    return LoopTrace(zeta=zeta, delta=delta, dbar=dbar, counts=counts, policies=policies, policy=pi_T)

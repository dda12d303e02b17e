"""The matched audit of one actor call: what the returned policy is worth, beside ideal PMD
(PolicyAttention, arXiv 2609.30500, EvoRobust companion, section 10 and the "matched audit" table of section 15).

For an input ``(mdp, pi, Q = Q^pi, eta)`` and the policy ``pi_new`` an actor returns, the audit solves exact
values (:func:`pmd_jax.mdp.policy_evaluation`) for ``pi_new`` and for ideal PMD ``p* = softmax(log pi + eta Q)``
on the same input:

* gain (the table's "gains are uniform-state means of V - V^pi under exact evaluation"):
  ``G(pi_new) = (1/S) sum_s [V^{pi_new}(s) - V^pi(s)]``; the ideal gain ``G(p*)`` is never negative (PMD is a
  policy improvement step: ``V^{p*} >= V^pi`` state by state, ``docs/pmd.md`` section 11);
* the largest row error ``max_s ||pi_new(.|s) - p*(.|s)||_1`` (in ``[0, 2]``);
* the critic's error (:func:`critic_errors`) for a critic given the memories ``Q`` and a balanced packet drawn
  under the returned policy ``pi_new`` (what the loop hands it after this actor call), scored three ways: against
  the exact one-step target of the returned policy ``F^{pi_new} Q`` (:func:`pmd_jax.mdp.bellman_operator`; the
  audit's "critic error"), against fresh ``m``-sample TD targets drawn under ``pi_new``, and against fresh
  ``m``-sample TD targets drawn under ideal PMD ``p*`` (the archived stress screen's scoring, which evaluates a
  policy the critic was not shown).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax.learned import balanced_transitions, td_targets
from pmd_jax.mdp import FiniteMDP, bellman_operator, policy_evaluation, state_values
from pmd_jax.pmd import pmd_step


def value_gain(mdp: FiniteMDP, pi: jax.Array, pi_new: jax.Array) -> jax.Array:
    """``(1/S) sum_s [V^{pi_new}(s) - V^pi(s)]`` by two exact policy evaluations."""
    v = lambda p: state_values(p, policy_evaluation(mdp, p))  # noqa: E731
    return jnp.mean(v(pi_new) - v(pi))


@struct.dataclass
class Audit:
    """One input's audit (scalars): ideal and implemented gains and the largest row error."""

    gain_ideal: jax.Array
    gain_implemented: jax.Array
    max_row_error: jax.Array


def audit_call(mdp: FiniteMDP, pi: jax.Array, Q: jax.Array, eta, pi_new: jax.Array) -> Audit:
    """The audit of ``pi_new`` returned on input ``(mdp, pi, Q, eta)`` (module docstring). vmappable."""
    ideal = pmd_step(pi, Q, eta)
    return Audit(gain_ideal=value_gain(mdp, pi, ideal), gain_implemented=value_gain(mdp, pi, pi_new),
                 max_row_error=jnp.max(jnp.sum(jnp.abs(pi_new - ideal), axis=-1)))


def critic_errors(critic_fn, key: jax.Array, mdp: FiniteMDP, Q: jax.Array, pi_new: jax.Array, ideal: jax.Array,
                  packet_samples: int, target_samples: int) -> dict[str, jax.Array]:
    """``|Q_next - target|`` ``[S, A]`` per scoring, for ``Q_next = critic_fn(Q, packet)`` with a balanced packet of
    ``packet_samples`` draws per pair under ``pi_new`` (module docstring). Keys: ``"exact_returned"``
    (``F^{pi_new} Q``), ``"sampled_returned"`` and ``"sampled_ideal"`` (``target_samples`` fresh draws per pair
    under ``pi_new`` and under ``ideal``)."""
    k_packet, k_returned, k_ideal = jax.random.split(key, 3)
    pred = critic_fn(Q, balanced_transitions(k_packet, mdp, pi_new, packet_samples))

    def sampled(k, policy):
        return td_targets(balanced_transitions(k, mdp, policy, target_samples), Q, mdp.gamma, target_samples)

    return {"exact_returned": jnp.abs(pred - bellman_operator(mdp, pi_new, Q)),
            "sampled_returned": jnp.abs(pred - sampled(k_returned, pi_new)),
            "sampled_ideal": jnp.abs(pred - sampled(k_ideal, ideal))}

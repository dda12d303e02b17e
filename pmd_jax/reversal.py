"""The two-state reversal family (PolicyAttention, arXiv 2609.30500, sections 3, 7 and 14).

States ``s-`` (index 0) and ``s+`` (index 1) loop on themselves with action rewards
``(-c, 0)`` and ``(c, 0)``. From the uniform prior and its exact ``Q^pi`` one actor call
of the frozen decoder gives ``pi_hat``; the study compares the value gain at ``s-``,
``Delta V(s-) = V^{pi_hat}(s-) - V^{pi}(s-)``, with ideal PMD's. Two independent routes:

* :func:`decoder_cell`: the decoder's own forward map (:func:`pmd_jax.decoder.actor_call`)
  and exact policy evaluation by linear solve;
* :func:`closed_form_cell`: the partition sums of section 14 written out by hand, with
  ``V^pi(s-+) = -+c / (2 (1 - gamma))`` and the self-loop gain
  ``Delta V(s-) = c (1/2 - pi_hat(a_1|s-)) / (1 - gamma)``.

Section 14's laws: ``Z_wrong / Z_intended = exp(-kappa + eta c / (1 - gamma))`` at ``s-``,
``sgn Delta V(s-) = sgn[(1 - gamma) kappa - eta c]`` without the mask, and
``Delta V_impl = Delta V_PMD - c zeta / (2 (1 - gamma))``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax import decoder
from pmd_jax.mdp import policy_evaluation, state_values, two_state_family, uniform_policy
from pmd_jax.pmd import pmd_step


@struct.dataclass
class ReversalCell:
    """One grid cell's outcome (scalars): the gains at ``s-`` and the row error there.

    ``row_error`` is ``||pi_hat(.|s-) - PMD(.|s-)||_1``, the error of the row whose gain
    is reported; it equals the routing error ``zeta`` (max over both rows) whenever the
    wrong-state group is visible. With the mask both rows' errors are ~1e-12 and the
    ``s+`` row can be the larger; the identity of section 14 is about the ``s-`` row.
    """

    gain_ideal: jax.Array
    gain_implemented: jax.Array
    row_error: jax.Array


def decoder_cell(eta, kappa, masked, c, gamma, nu) -> ReversalCell:
    """One cell through the decoder's forward map (jittable and vmappable in every argument)."""
    mdp = two_state_family(c, gamma)
    dtype = mdp.R.dtype
    pi = uniform_policy(2, 2, dtype)
    Q = policy_evaluation(mdp, pi)
    params = decoder.construct_params(2, 2, gamma, kappa, nu, dtype)
    pi_hat = decoder.apply_actor(params, decoder.Layout(2, 2), pi, Q, eta, state_local=masked)
    p = pmd_step(pi, Q, eta)
    V = state_values(pi, Q)
    gain = lambda new: state_values(new, policy_evaluation(mdp, new))[0] - V[0]
    row_error = jnp.sum(jnp.abs(pi_hat[0] - p[0]))
    return ReversalCell(gain_ideal=gain(p), gain_implemented=gain(pi_hat), row_error=row_error)


def closed_form_cell(eta, kappa, masked, c, gamma, nu) -> ReversalCell:
    """The same cell from section 14's partition sums, without tokens, weights or solves."""
    eta, kappa, c, gamma, nu = (jnp.asarray(x, jnp.result_type(float)) for x in (eta, kappa, c, gamma, nu))
    V_minus, V_plus = -c / (2 * (1 - gamma)), c / (2 * (1 - gamma))
    Q = jnp.stack([jnp.stack([-c + gamma * V_minus, gamma * V_minus]), jnp.stack([c + gamma * V_plus, gamma * V_plus])])
    keep_other = 1.0 - jnp.asarray(masked, Q.dtype)

    def row(s):
        other = 1 - s
        w_own = 0.5 * jnp.exp(kappa + eta * Q[s])  # [2] intended group
        w_other = keep_other * 0.5 * jnp.exp(eta * Q[other])  # [2] wrong-state group
        z_query = (s + 1) * jnp.exp(-nu)  # queries 0..s are visible, each with uniform value
        total = w_own.sum() + w_other.sum() + z_query
        return (w_own + w_other + 0.5 * z_query) / total

    pi_hat = jnp.stack([row(0), row(1)])
    p_minus_a1 = jax.nn.sigmoid(-eta * c)  # PMD at s-: the better action a_2 gets sigma(eta c)
    p = jnp.stack([jnp.stack([p_minus_a1, 1 - p_minus_a1]), jnp.stack([1 - p_minus_a1, p_minus_a1])])
    row_error = jnp.sum(jnp.abs(pi_hat[0] - p[0]))
    gain = lambda prob_a1: c * (0.5 - prob_a1) / (1 - gamma)
    return ReversalCell(gain_ideal=gain(p_minus_a1), gain_implemented=gain(pi_hat[0, 0]), row_error=row_error)


def reversal_threshold(kappa, c, gamma):
    """The step at which the unmasked gain changes sign: ``eta = (1 - gamma) kappa / c``."""
    return (1 - gamma) * kappa / c

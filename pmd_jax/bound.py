"""Error envelopes and the returned-policy bound (PolicyAttention, arXiv 2609.30500, section 13).

Notation: ``B_Q = R_max / (1 - gamma)``; ``zeta_k`` is the actor's routing error
``max_s ||pi_hat_{k+1}(.|s) - PMD(pi_k, Q_k)(.|s)||_1``; ``delta_k`` the critic error
``||Q_{k+1} - F^{pi_hat_{k+1}} Q_k||_inf``.

Readings of the paper (it states these terms without derivations; ``docs/pmd.md`` section 4
derives them):

* Routing envelope. In the actor row of query ``s`` the intended group has partition
  function ``Z_int = e^kappa sum_a pi(a|s) e^{eta Q(s,a)} >= e^{kappa - eta B_Q}``; each of
  the ``S - 1`` wrong-state groups has ``Z <= e^{eta B_Q}``, and each of at most ``S`` query
  tokens has weight ``e^{-nu}``. So the leaked-to-intended ratio is at most
  ``R = (S-1) e^{-kappa + 2 eta B_Q} + S e^{-(kappa+nu) + eta B_Q}``, and since
  ``pi_hat - p = L (u - p) / (Z_int + L)`` for the leaked mass ``L`` with some distribution
  ``u``, ``zeta <= 2R / (1 + R)``.
* Critic leakage. A transition's lookup row gives weight ``e^{2 kappa}`` to the memory of
  ``(s', a')``, ``e^kappa`` to the ``S + A - 2`` memories sharing one index, ``1`` to the
  ``(S-1)(A-1)`` others and ``e^{-nu}`` to each of at most ``n`` transitions, so its leaked
  mass is ``lambda_1 <= [(S+A-2) e^kappa + (S-1)(A-1) + n e^{-nu}] e^{-2 kappa}``. An
  evaluation query with at least ``m_min`` matching transitions leaks
  ``lambda_2 <= [n e^kappa + 2 S A e^{-nu}] / (m_min e^{2 kappa})``. Values are bounded by
  ``B_Q``, hence ``delta <= 2 B_Q (gamma lambda_1 + lambda_2) + epsilon``.
* Sampling term (Hoeffding and a union bound over ``S A T`` pair-rounds):
  ``epsilon = B_Q sqrt(2 log(2 S A T / alpha) / m_min)``.
* Greedy-defect recursion. ``D_k(s) = -log pi_k(G_k(s)|s)`` with the greedy set
  ``G_k(s) = argmax_a Q_k(s, a)`` (ties kept, within ``tie_tol``),
  ``Dbar_k = max_{s,a} E_{S'~P(.|s,a)} D_k(S')``, ``h_k = Dbar_k / eta_k + B_Q zeta_k``,
  ``b_{k+1} = gamma b_k + delta_k + gamma h_k`` from ``b_0 >= ||Q* - Q_0||``, and
  ``||Q* - Q^{pi_hat_T}|| <= gamma / (1 - gamma) (2 b_{T-1} + h_{T-1})``.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax.mdp import FiniteMDP


def routing_ratio_bound(num_states: int, eta, kappa, nu, q_bound):
    """``R = (S-1) e^{-kappa + 2 eta B_Q} + S e^{-(kappa+nu) + eta B_Q}``."""
    S = num_states
    return (S - 1) * jnp.exp(-kappa + 2 * eta * q_bound) + S * jnp.exp(-(kappa + nu) + eta * q_bound)


def routing_error_bound(num_states: int, eta, kappa, nu, q_bound):
    """The envelope ``zeta <= 2R / (1 + R)``."""
    R = routing_ratio_bound(num_states, eta, kappa, nu, q_bound)
    return 2 * R / (1 + R)


def critic_leak_bounds(num_states: int, num_actions: int, kappa, nu, n_transitions: int, m_min):
    """Upper bounds ``(lambda_1, lambda_2)`` on the lookup and averaging leaked masses."""
    S, A, n = num_states, num_actions, n_transitions
    lam1 = ((S + A - 2) * jnp.exp(kappa) + (S - 1) * (A - 1) + n * jnp.exp(-nu)) * jnp.exp(-2 * kappa)
    lam2 = (n * jnp.exp(kappa) + 2 * S * A * jnp.exp(-nu)) / (m_min * jnp.exp(2 * kappa))
    return lam1, lam2


def sampling_error(q_bound, num_states: int, num_actions: int, rounds: int, alpha, m_min):
    """``epsilon = B_Q sqrt(2 log(2 S A T / alpha) / m_min)``."""
    return q_bound * jnp.sqrt(2 * jnp.log(2 * num_states * num_actions * rounds / alpha) / m_min)


def critic_error_bound(q_bound, gamma, lam1, lam2, epsilon=0.0):
    """``delta <= 2 B_Q (gamma lambda_1 + lambda_2) + epsilon``."""
    return 2 * q_bound * (gamma * lam1 + lam2) + epsilon


def greedy_defect(mdp: FiniteMDP, pi: jax.Array, Q: jax.Array, tie_tol: float = 1e-12) -> jax.Array:
    """``Dbar = max_{s,a} E_{S'~P(.|s,a)} [-log pi(G(S')|S')]``, greedy sets within ``tie_tol``."""
    chex.assert_equal_shape([pi, Q])
    greedy = Q >= Q.max(axis=-1, keepdims=True) - tie_tol
    D = -jnp.log(jnp.sum(jnp.where(greedy, pi, 0.0), axis=-1))
    return jnp.max(jnp.einsum("xay,y->xa", mdp.P, D))


@struct.dataclass
class ReturnedPolicyBound:
    """The recursion's sequences, each ``[T]``, and the final bound (scalar)."""

    b: jax.Array  # b_0 .. b_{T-1}
    h: jax.Array  # h_0 .. h_{T-1}
    bound: jax.Array


def returned_policy_bound(zeta, delta, dbar, eta, gamma, q_bound, b0) -> ReturnedPolicyBound:
    """Section 13's bound on ``||Q* - Q^{pi_hat_T}||_inf`` from realised residuals.

    ``zeta, delta, dbar, eta``: ``[T]`` (round ``k = 0..T-1``). ``delta_{T-1}`` does not
    enter: the returned policy is formed before the last backup.
    """
    zeta, delta, dbar, eta = (jnp.asarray(x) for x in (zeta, delta, dbar, eta))
    chex.assert_equal_shape([zeta, delta, dbar, eta])
    h = dbar / eta + q_bound * zeta

    def step(b, inputs):
        d, hk = inputs
        return gamma * b + d + gamma * hk, b

    _, b = jax.lax.scan(step, jnp.asarray(b0, h.dtype), (delta, h))
    bound = gamma / (1 - gamma) * (2 * b[-1] + h[-1])
    return ReturnedPolicyBound(b=b, h=h, bound=bound)

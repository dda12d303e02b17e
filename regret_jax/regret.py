"""External and swap regret on the simplex: Eqs. (4), (5), (7), (8) of the paper.

All functions take one sequence (policies [T, d], losses [T, d]); batch with ``jax.vmap``.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def cumulative_regret(policies: jax.Array, losses: jax.Array) -> jax.Array:
    """Reg(t) = sum_{s<=t} <pi_s, l_s> - min_a L_{t,a} for t = 1..T (Eq. (4) at every t, docs/regret.md §8.1)."""
    chex.assert_equal_shape([policies, losses])
    learner = jnp.cumsum(jnp.sum(policies * losses, axis=-1))
    return learner - jnp.min(jnp.cumsum(losses, axis=0), axis=-1)


def external_regret(policies: jax.Array, losses: jax.Array) -> jax.Array:
    """Eq. (4): sum_t <l_t, pi_t> - min_a L_{T,a} (the comparator over the simplex is a vertex)."""
    chex.assert_equal_shape([policies, losses])
    return jnp.sum(policies * losses) - jnp.min(jnp.sum(losses, axis=0))


def swap_regret(policies: jax.Array, losses: jax.Array) -> jax.Array:
    """Eq. (5), last form: sum_a max_b sum_t pi_t(a) (l_t(a) - l_t(b)).

    The maximum over swap maps phi decouples per played action a because the objective
    is linear in each row of the row-stochastic M (docs/regret.md §3.2).
    """
    chex.assert_equal_shape([policies, losses])
    played = jnp.sum(policies * losses, axis=0)  # [a]: sum_t pi_t(a) l_t(a)
    deviated = policies.T @ losses  # [a, b]: sum_t pi_t(a) l_t(b)
    return jnp.sum(played - jnp.min(deviated, axis=1))


def head_regrets(x: jax.Array, q: jax.Array, losses: jax.Array) -> jax.Array:
    """Eq. (7): R_j = sum_t x_t[j] <q_{j,t}, l_t> - min_a sum_t x_t[j] l_t[a], for j = 1..d.

    ``x`` [T, d] are the played fixed points, ``q`` [T, d, d] the head policies with
    ``q[t, j]`` = q_{j,t}, ``losses`` [T, d].  Copy j of Blum-Mansour sees x_t[j] l_t.
    Eq. (8): sum_j R_j equals :func:`swap_regret` whenever Q_t x_t = x_t.
    """
    chex.assert_equal_shape([x, losses])
    chex.assert_shape(q, (x.shape[0], x.shape[1], x.shape[1]))
    learner = jnp.einsum("tj,tja,ta->j", x, q, losses)
    comparator = jnp.min(x.T @ losses, axis=1)
    return learner - comparator

"""The five fixed rules a learned actor is compared with, and the fitted step (PolicyAttention, arXiv 2609.30500,
section 9, Figure 6).

The paper names the rules and gives only PMD's formula; the other readings are ours (``docs/pmd.md`` section 7).
Row by row, for a prior ``pi``, action values ``Q``, rewards ``R`` and a step ``eta``:

* ``"pmd"`` -- ``softmax(log pi + eta Q)`` (:func:`pmd_jax.pmd.pmd_step`);
* ``"additive_projected"`` -- the additive (first-order) form of the PMD update, projected onto the simplex:
  ``Proj(pi + eta pi (Q - V))`` with ``V = sum_a pi Q`` (``pi e^{eta Q} / Z = pi (1 + eta (Q - V)) + O(eta^2)``;
  the step sums to zero, and the Euclidean projection :func:`project_simplex` clips the rows it makes negative);
* ``"prior"`` -- ``pi`` (no update);
* ``"boltzmann_q"`` -- ``softmax(eta Q)`` (ignores the prior);
* ``"reward_only"`` -- ``softmax(eta R)`` (Boltzmann over the one-step reward; ignores prior and future).

:func:`fitted_step` refits the step an actor effectively takes (Figure 6, right) as the ``eta`` whose PMD output is
KL-closest to the actor's, by moment matching (``docs/pmd.md`` section 7); :func:`fitted_slope` regresses it on the
supplied step.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from pmd_jax.pmd import pmd_step

RULES = ("pmd", "additive_projected", "prior", "boltzmann_q", "reward_only")


def project_simplex(v: jax.Array) -> jax.Array:
    """Euclidean projection of each last-axis vector of ``v`` onto the probability simplex.

    The sort-based algorithm of Duchi, Shalev-Shwartz, Singer and Chandra (2008): with ``u`` sorted decreasingly,
    ``rho = max{k : u_k - (sum_{j<=k} u_j - 1)/k > 0}``, ``tau = (sum_{j<=rho} u_j - 1)/rho`` and the projection is
    ``max(v - tau, 0)``.
    """
    u = -jnp.sort(-v, axis=-1)
    css = jnp.cumsum(u, axis=-1)
    k = jnp.arange(1, v.shape[-1] + 1, dtype=v.dtype)
    rho = jnp.sum(u - (css - 1.0) / k > 0, axis=-1, keepdims=True)
    tau = (jnp.take_along_axis(css, rho - 1, axis=-1) - 1.0) / rho.astype(v.dtype)
    return jnp.maximum(v - tau, 0.0)


def apply_rules(pi: jax.Array, Q: jax.Array, R: jax.Array, eta) -> jax.Array:
    """The outputs of the five rules, stacked in the order of ``RULES``: ``[len(RULES), S, A]``."""
    return jnp.stack([
        pmd_step(pi, Q, eta),
        project_simplex(pi + eta * pi * (Q - jnp.sum(pi * Q, axis=-1, keepdims=True))),
        pi,
        jax.nn.softmax(eta * Q, axis=-1),
        jax.nn.softmax(eta * R, axis=-1),
    ])


def row_l1(p: jax.Array, q: jax.Array) -> jax.Array:
    """``sum_a |p(a|s) - q(a|s)|`` per row (last axis)."""
    return jnp.sum(jnp.abs(p - q), axis=-1)


def fitted_step(pi_out: jax.Array, pi: jax.Array, Q: jax.Array, lo=0.0, hi=10.0, iters: int = 60) -> jax.Array:
    """The step ``eta_hat`` in ``[lo, hi]`` minimising ``sum_rows KL(pi_out || softmax(log pi + eta Q))``.

    Pooled over every leading axis and row. The objective is convex in ``eta`` and stationary where
    ``sum_rows E_{softmax(log pi + eta Q)}[Q] = sum_rows E_{pi_out}[Q]``; the left side is nondecreasing in ``eta``
    (its derivative is the summed variance of ``Q``), so ``iters`` bisection steps find the root, clipped to
    ``[lo, hi]`` (``docs/pmd.md`` section 7).
    """
    target = jnp.sum(pi_out * Q)

    def excess(eta):
        return jnp.sum(pmd_step(pi, Q, eta) * Q) - target

    def body(_, bracket):
        a, b = bracket
        mid = 0.5 * (a + b)
        below = excess(mid) < 0
        return jnp.where(below, mid, a), jnp.where(below, b, mid)

    bracket = (jnp.asarray(lo, Q.dtype), jnp.asarray(hi, Q.dtype))
    a, b = jax.lax.fori_loop(0, iters, body, bracket)
    return 0.5 * (a + b)


def fitted_slope(eta_given: jax.Array, eta_fitted: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Ordinary least squares ``eta_fitted ~ slope * eta_given + intercept``; returns ``(slope, intercept)``."""
    x, y = jnp.asarray(eta_given), jnp.asarray(eta_fitted)
    if x.ndim != 1 or x.shape != y.shape or x.shape[0] < 2:
        raise ValueError(f"eta_given and eta_fitted must be 1-D of one length >= 2, got {x.shape} and {y.shape}")
    dx, dy = x - x.mean(), y - y.mean()
    slope = jnp.sum(dx * dy) / jnp.sum(dx * dx)
    return slope, y.mean() - slope * x.mean()

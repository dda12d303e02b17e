"""The fixed-point layer of Eq. (9): x = FixedPoint(Q), Q x = x, 1^T x = 1 (docs/regret.md §10.2).

Forward: normalised power iteration x <- Qx / 1^T Q x from x = 1/d.  For a strictly
positive Q this converges geometrically to the Perron vector (Dobrushin rate at most
1 - d min Q_ij); the normalisation makes the map well defined for any positive Q and
equals plain power iteration on column-stochastic Q.

Backward (implicit differentiation; docs/regret.md §10.2 and 13.8).  Differentiating Q x = lambda x,
1^T x = 1 at lambda = 1 with left eigenvector 1^T gives d lambda = 1^T dQ x and

    (I - Q + x 1^T) dx = (I - x 1^T) dQ x,

where I - Q + x 1^T is invertible for primitive column-stochastic Q.  On the simplex
tangent space (1^T dQ = 0, e.g. Q built from softmax columns) this reduces to the formula of
docs/regret.md §10.2, dx = (I - Q + x 1^T)^{-1} dQ x.  The vector-Jacobian product is
Q_bar = mu x^T with mu = (I - 1 x^T) (I - Q + x 1^T)^{-T} x_bar.
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp


def _power_step(Q: jax.Array, x: jax.Array) -> jax.Array:
    y = Q @ x
    return y / jnp.sum(y)


def power_iteration(Q: jax.Array, num_iters: int) -> jax.Array:
    """``num_iters`` normalised power-iteration steps from the uniform vector (differentiable by unrolling)."""
    chex.assert_rank(Q, 2)
    chex.assert_axis_dimension(Q, 0, Q.shape[1])
    x0 = jnp.full(Q.shape[0], 1.0 / Q.shape[0], Q.dtype)
    return jax.lax.fori_loop(0, num_iters, lambda _, x: _power_step(Q, x), x0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def fixed_point(Q: jax.Array, tol: float | None = None, max_iters: int = 1000) -> jax.Array:
    """Stationary distribution of a strictly positive column-stochastic Q [d, d], Eq. (9).

    Iterates until ||x_{m+1} - x_m||_1 < tol or ``max_iters``; ``tol=None`` means
    8 d eps of Q's dtype (rounding level).  Gradients by implicit differentiation
    (module docstring), not by unrolling.
    """
    chex.assert_rank(Q, 2)
    chex.assert_axis_dimension(Q, 0, Q.shape[1])
    x0 = jnp.full(Q.shape[0], 1.0 / Q.shape[0], Q.dtype)
    threshold = 8 * Q.shape[0] * jnp.finfo(Q.dtype).eps if tol is None else tol

    def cond(carry):
        i, _, gap = carry
        return (i < max_iters) & (gap >= threshold)

    def body(carry):
        i, x, _ = carry
        y = _power_step(Q, x)
        return i + 1, y, jnp.sum(jnp.abs(y - x))

    _, x, _ = jax.lax.while_loop(cond, body, (0, x0, jnp.array(jnp.inf, Q.dtype)))
    return x


def _fixed_point_fwd(Q, tol, max_iters):
    x = fixed_point(Q, tol, max_iters)
    return x, (Q, x)


def _fixed_point_bwd(tol, max_iters, residuals, x_bar):
    Q, x = residuals
    ones = jnp.ones_like(x)
    A = jnp.eye(x.shape[0], dtype=Q.dtype) - Q + jnp.outer(x, ones)
    lam = jnp.linalg.solve(A.T, x_bar)
    mu = lam - ones * (x @ lam)
    return (jnp.outer(mu, x),)


fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd)

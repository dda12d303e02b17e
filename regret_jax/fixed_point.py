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

Convergence.  :func:`fixed_point` returns only x (its callers' contract); a stopped-at-
``max_iters`` iterate is not a fixed point, so :func:`fixed_point_with_residual` returns a
:class:`FixedPointResult` with the last step ||x_{m+1} - x_m||_1, the number of steps and a
``converged`` flag that callers can check (jittable: a flag, not an exception).
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
from flax import struct


def _power_step(Q: jax.Array, x: jax.Array) -> jax.Array:
    y = Q @ x
    return y / jnp.sum(y)


def power_iteration(Q: jax.Array, num_iters: int) -> jax.Array:
    """``num_iters`` normalised power-iteration steps from the uniform vector (differentiable by unrolling)."""
    chex.assert_rank(Q, 2)
    chex.assert_axis_dimension(Q, 0, Q.shape[1])
    x0 = jnp.full(Q.shape[0], 1.0 / Q.shape[0], Q.dtype)
    return jax.lax.fori_loop(0, num_iters, lambda _, x: _power_step(Q, x), x0)


@struct.dataclass
class FixedPointResult:
    """Output of :func:`fixed_point_with_residual`; check ``converged`` before trusting ``x``."""

    x: jax.Array  # [d] last iterate (differentiable by implicit differentiation)
    residual: jax.Array  # ||x_{m+1} - x_m||_1 of the last power step (inf if no step was taken)
    num_iters: jax.Array  # power steps taken
    converged: jax.Array  # residual < tolerance (False when max_iters stopped the loop)


def _threshold(Q: jax.Array, tol: float | None):
    return 8 * Q.shape[0] * jnp.finfo(Q.dtype).eps if tol is None else tol


def _iterate(Q: jax.Array, tol: float | None, max_iters: int):
    """Power iteration until the L1 step is below tolerance or ``max_iters``: (x, residual, num_iters)."""
    chex.assert_rank(Q, 2)
    chex.assert_axis_dimension(Q, 0, Q.shape[1])
    x0 = jnp.full(Q.shape[0], 1.0 / Q.shape[0], Q.dtype)
    threshold = _threshold(Q, tol)

    def cond(carry):
        i, _, gap = carry
        return (i < max_iters) & (gap >= threshold)

    def body(carry):
        i, x, _ = carry
        y = _power_step(Q, x)
        return i + 1, y, jnp.sum(jnp.abs(y - x))

    i, x, gap = jax.lax.while_loop(cond, body, (0, x0, jnp.array(jnp.inf, Q.dtype)))
    return x, gap, i


def fixed_point_with_residual(Q: jax.Array, tol: float | None = None, max_iters: int = 1000) -> FixedPointResult:
    """:func:`fixed_point` plus its convergence report (``residual``, ``num_iters``, ``converged``).

    Same iteration, tolerance and implicit gradient for ``x`` as :func:`fixed_point`;
    ``converged`` is False when the loop stopped at ``max_iters`` with the step still at or
    above tolerance (e.g. a slowly mixing or periodic Q), in which case ``x`` is not a fixed point.
    """
    x, gap, i = _iterate_vjp(Q, tol, max_iters)
    return FixedPointResult(x=x, residual=gap, num_iters=i, converged=gap < _threshold(Q, tol))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def fixed_point(Q: jax.Array, tol: float | None = None, max_iters: int = 1000) -> jax.Array:
    """Stationary distribution of a strictly positive column-stochastic Q [d, d], Eq. (9).

    Iterates until ||x_{m+1} - x_m||_1 < tol or ``max_iters``; ``tol=None`` means
    8 d eps of Q's dtype (rounding level).  Gradients by implicit differentiation
    (module docstring), not by unrolling.  Returns x only, without saying whether the
    loop converged; use :func:`fixed_point_with_residual` to check.
    """
    return _iterate(Q, tol, max_iters)[0]


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


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _iterate_vjp(Q, tol, max_iters):
    return _iterate(Q, tol, max_iters)


def _iterate_fwd(Q, tol, max_iters):
    out = _iterate(Q, tol, max_iters)
    return out, (Q, out[0])


def _iterate_bwd(tol, max_iters, residuals, cotangents):
    # residual and num_iters are reports, not differentiated (zero cotangent through them)
    return _fixed_point_bwd(tol, max_iters, residuals, cotangents[0])


_iterate_vjp.defvjp(_iterate_fwd, _iterate_bwd)

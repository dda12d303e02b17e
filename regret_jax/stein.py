"""The Stein form of F'(eta) (paper Eq. (12)) and the pathwise F''(eta) (Proposition 1), docs/regret.md §5.4, §5.6.

Along the ray V = -eta P the policy is pi_t = softmax(-eta L_{t-1}), J_t = diag(pi_t) - pi_t pi_t^T,
and F(eta) = E[R(eta)^2] (Eq. (23), :func:`regret_jax.ray_regret`). Stein's lemma on l_t given
l_{1:t-1} gives Eq. (12),

    F'(eta) = 2 (T1 - T2),  T1 = -sum_t E[L_{t-1}^T J_t pi_t] >= 0,  T2 = -sum_t E[L_{t-1}^T J_t e_{a*}],

with a* = argmin_a L_{T,a}: T1 is the learner-response term, T2 the comparator term. Per sequence,
with g_t = J_t L_{t-1} = pi_t * (L_{t-1} - pi_t . L_{t-1}) (J_t is symmetric),

    t1 = -sum_t pi_t . g_t,        t2 = -(sum_t g_t)_{a*},

so one scan carries the d-vector sum_t g_t per eta and reads it at a* once L_T is known.
E[t1] = T1 and E[t2] = T2, so 2 (t1 - t2) is an unbiased per-sequence sample of F'; it is a
different estimator from the pathwise sample 2 R R' of Eq. (24): the two agree in expectation
only. t1 >= 0 for every sequence at eta >= 0: -pi . g = -Cov_{a~pi}(pi_a, L_a), and pi_a decreases
in L_a (Chebyshev's sum inequality). At eta = 0, pi = 1/d and t1 = -(1/d^2) sum_a (L_a - mean L) = 0.

Second derivative (docs/regret.md §5.6): F''(eta) = 2 E[R'(eta)^2 + R(eta) R''(eta)], with R' of
Eq. (24) and R'' = dR'/deta by forward-mode autodiff of the per-sequence ray regret
(:func:`ray_curvature`). F''(eta*) > 0 at the root eta* of F' makes eta* a strict local minimiser
of F along the ray (Proposition 1).
"""
from __future__ import annotations

from typing import Callable

import chex
import jax
import jax.numpy as jnp

from regret_jax.regret_loss import flat_normal
from regret_jax.stationarity import ray_regret


def stein_terms(losses: jax.Array, etas: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-sequence samples (t1 [E], t2 [E]) of the Eq. (12) terms for one sequence [T, d] and a grid of etas [E].

    A ``lax.scan`` over rounds carries L_{t-1}, the running t1 and the d-vector sum_t J_t L_{t-1}
    per eta (memory O(E d)); a* = argmin_a L_{T,a} indexes that sum at the end.
    2 (t1 - t2) is an unbiased sample of F'(eta) (module docstring).
    """
    chex.assert_rank(losses, 2)
    chex.assert_rank(etas, 1)
    E, d = etas.shape[0], losses.shape[1]

    def round_(carry, loss):
        cum, t1, jac_sum = carry
        pi = jax.nn.softmax(-etas[:, None] * cum, axis=-1)  # [E, d]
        g = pi * (cum - jnp.sum(pi * cum, axis=-1, keepdims=True))  # J_t L_{t-1}, [E, d]
        return (cum + loss, t1 - jnp.sum(pi * g, axis=-1), jac_sum + g), None

    init = (jnp.zeros(d, losses.dtype), jnp.zeros(E, losses.dtype), jnp.zeros((E, d), losses.dtype))
    (cum, t1, jac_sum), _ = jax.lax.scan(round_, init, losses)
    return t1, -jac_sum[:, jnp.argmin(cum)]


def ray_curvature(losses: jax.Array, etas: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(R, R', R'') [E] for one sequence [T, d]: R(eta) of Eq. (23) and its first two derivatives in eta.

    R and R' are :func:`regret_jax.ray_regret` (R' the closed form (24)); R'' is the tangent of R'
    under ``jax.jvp`` (forward-mode autodiff through the same scan). The etas are independent,
    so a tangent of ones gives every eta's own derivative. 2 (R'^2 + R R'') is a per-sequence
    sample of F''(eta) (docs/regret.md §5.6).
    """
    chex.assert_rank(etas, 1)
    (R, dR), (_, d2R) = jax.jvp(lambda e: ray_regret(losses, e), (etas,), (jnp.ones_like(etas),))
    return R, dR, d2R


def stein_sample(d: int, T: int, etas) -> Callable[[jax.Array], dict[str, jax.Array]]:
    """``fn(key_data [2]) -> {R, dR, d2R, t1, t2}`` (each [E]) for one N(0, I_d) sequence of length T.

    ``R, dR, d2R``: :func:`ray_curvature` (the pathwise F' sample is 2 R dR, Eq. (24), and the F''
    sample 2 (dR^2 + R d2R)); ``t1, t2``: :func:`stein_terms` (the Stein F' sample 2 (t1 - t2)).
    Every eta sees the same sequence, the one :func:`regret_jax.ray_sample` draws from the key.
    """
    etas = jnp.asarray(etas, jnp.float32)

    def one_sequence(key_data):
        # drawn flat: the same numbers as shape (T, d), and XLA compiles the flat draw much faster
        losses = flat_normal(jax.random.wrap_key_data(key_data), (T, d))
        R, dR, d2R = ray_curvature(losses, etas)
        t1, t2 = stein_terms(losses, etas)
        return {"R": R, "dR": dR, "d2R": d2R, "t1": t1, "t2": t2}

    return one_sequence

"""Entropic FTRL (smoothed fictitious play / Hedge), the target of Theorem 1 (docs/regret.md §2.3)."""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def ftrl_policies(losses: jax.Array, eta) -> jax.Array:
    """pi_t = softmax(-eta L_{t-1}), t = 1..T, with L_0 = 0 (Eq. (23), docs/regret.md §5.2); losses [T, d] -> [T, d].

    This is entropy-regularised FTRL with learning rate eta, written directly from the
    cumulative losses (independent of the attention code).
    """
    chex.assert_rank(losses, 2)
    before = jnp.cumsum(losses, axis=0) - losses  # L_{t-1}
    return jax.nn.softmax(-eta * before, axis=-1)


def policy_mse(policies: jax.Array, losses: jax.Array, eta) -> jax.Array:
    """Mean over (sequence, round, action) of (pi_t - softmax(-eta L_{t-1}))^2 (docs/regret.md §7.2).

    Reading: averaged over actions (divided by d) and including t = 1; neither choice
    moves the argmin in eta.  ``policies`` and ``losses`` are [N, T, d].
    """
    chex.assert_equal_shape([policies, losses])
    return jnp.mean((policies - jax.vmap(ftrl_policies, in_axes=(0, None))(losses, eta)) ** 2)


def fit_eta(policies: jax.Array, losses: jax.Array, etas: jax.Array, num_golden: int = 40) -> jax.Array:
    """eta_hat = argmin_eta policy_mse (docs/regret.md §7.2): best point of the grid ``etas``, then golden section.

    The golden-section search runs on the bracket formed by the grid neighbours of the
    best grid point, so it assumes the MSE is unimodal there.
    """
    chex.assert_rank(etas, 1)
    mse = jax.vmap(lambda e: policy_mse(policies, losses, e))(etas)
    i = jnp.argmin(mse)
    lo, hi = etas[jnp.maximum(i - 1, 0)], etas[jnp.minimum(i + 1, etas.shape[0] - 1)]
    ratio = (jnp.sqrt(5.0) - 1) / 2

    def shrink(_, bracket):
        a, b = bracket
        c, e = b - ratio * (b - a), a + ratio * (b - a)
        left = policy_mse(policies, losses, c) < policy_mse(policies, losses, e)
        return jnp.where(left, a, c), jnp.where(left, e, b)

    a, b = jax.lax.fori_loop(0, num_golden, shrink, (lo, hi))
    return (a + b) / 2

"""Regret losses: Eq. (6) with f(x) = x^2 on N(0, I_d) losses, and the swap loss Eq. (10) in its two readings.

Surrogate (docs/regret.md §4.3-4.4): f(x) = x^2.  The identity surrogate is degenerate under
N(0, I_d): for any predictable policy E<pi_t, l_t> = 0, so E[Regret] = sqrt(T) mu_d does
not depend on the parameters (Proposition 5).  No smooth-max over several sequences is
used (N = 1 in Park et al.'s notation, docs/regret.md §4.1).
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from regret_jax.learners import run_online, swap_learner
from regret_jax.regret import external_regret, head_regrets


def flat_normal(key: jax.Array, shape: tuple[int, ...], dtype=float) -> jax.Array:
    """``jax.random.normal(key, shape, dtype)``, the same numbers (tested), drawn as one flat vector and reshaped.

    XLA compiles a multi-axis draw several times slower than the flat one (e.g. 6.7 s against
    0.6 s for a vmapped [25, 10] draw on 2 loaded CPU cores), and every study draws its sequences so.
    """
    size = 1
    for n in shape:
        size *= int(n)
    return jax.random.normal(key, (size,), dtype).reshape(shape)


def sample_losses(key: jax.Array, batch: int, T: int, d: int, mean: jax.Array | None = None) -> jax.Array:
    """Draw ``batch`` sequences l_t ~ N(mean, I_d) i.i.d. over t (docs/regret.md §4.2); returns [batch, T, d].

    ``mean`` [batch, d] gives each sequence its own bias (biased-Gaussian evaluation of
    docs/regret.md §8.1); ``None`` is the training law N(0, I_d).
    """
    noise = flat_normal(key, (batch, T, d))
    if mean is None:
        return noise
    chex.assert_shape(mean, (batch, d))
    return noise + mean[:, None, :]


def squared_regret_loss(policies: jax.Array, losses: jax.Array) -> jax.Array:
    """Monte-Carlo Eq. (6): mean over the batch of Regret(pi, l)^2 (Eq. (4)); inputs [B, T, d]."""
    chex.assert_equal_shape([policies, losses])
    chex.assert_rank(losses, 3)
    return jnp.mean(jax.vmap(external_regret)(policies, losses) ** 2)


def swap_regrets(head_policies: jax.Array, blocks: jax.Array) -> jax.Array:
    """sum_j R_j per sequence [B], R_j the Eq. (4) regret of head j on block j; Eq. (10) is the
    batch mean of its square (``regret_jax.train``).

    ``head_policies`` [B, T, d, d] with ``[..., t, j, :]`` = q_{j,t}; ``blocks`` [B, T, d, d]
    with ``[..., t, j, :]`` = l_t^{(j)}, the j-th Gaussian block of z_t = (l^{(1)},...,l^{(d)}).
    Reading (docs/regret.md §10.3): training uses independent full-scale blocks; the fixed point
    does not enter the objective.
    """
    chex.assert_equal_shape([head_policies, blocks])
    chex.assert_rank(blocks, 4)
    return jnp.sum(jax.vmap(jax.vmap(external_regret, in_axes=(1, 1)))(head_policies, blocks), axis=-1)


def own_play_regrets(head_params: dict, losses: jax.Array) -> tuple[jax.Array, jax.Array]:
    """sum_j R_j (Eq. (7)) of the d-head model's own Blum-Mansour play on one sequence ``losses`` [T, d], and the
    number of played fixed points that did not converge; Eq. (10) is the batch mean of the first's square.

    Own-play reading (docs/regret.md §10.8): every head sees the one sequence l_1..l_T through the tokens
    z_s = x_s (x) l_s (``swap_learner`` at c_d = 1), x_t = FixedPoint(Q_t); R_j weights head j's losses by
    x_t[j].  Gradients reach the heads through their softmaxes and through every x_t (the implicit VJP of
    ``fixed_point``), both in R_j and in the later tokens.  By Eq. (8) the sum is SwapReg(x_{1:T}; l_{1:T}).
    """
    play = run_online(swap_learner(head_params, 1.0), losses)
    q = jax.nn.softmax(play.states.logits, axis=-1)  # [T, d, d], q[t, j] = q_{j,t}
    return jnp.sum(head_regrets(play.policies, q, losses)), play.final_state.nonconverged

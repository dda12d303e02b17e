"""Parameter-level match of a trained reduced model with the stationary configurations (docs/regret.md §7.4, 10.7).

Two symmetries of Eq. (2) (docs/regret.md §2.2) make the raw parameters (V, k, v, b) of a trained
head incomparable with ``ftrl_params`` / ``bm_params``; the comparison is made on invariants.

* Shift: softmax(u + c 1) = softmax(u), so only P u_t matters (P = I - 11^T/d), and
  V -> V + 1 w^T, v -> v + s 1 change no policy.
* Scale: (V, v, k, b) -> (V/c, v/c, c k, c b) leaves every token's contribution
  (V z + v)(b + k^T z) unchanged.

The invariants W = b P V (effective value matrix, d x n), kappa = k / b (key per unit score)
and omega = b P v (effective value bias) are unchanged by both, and for b != 0 they fix the
policies: with L_t = sum_{i<=t} z_i, S_t = sum_{i<=t} z_i z_i^T,

    P u_t = W L_t + W S_t kappa + omega (t + kappa^T L_t)         (value, key and bias terms).

At the Theorem-1 configuration W = -eta P, kappa = 0, omega = 0; at the Theorem-2 one head j has
W_j = e_j^T (x) (-eta P): diagonal block -eta P, off-diagonal blocks 0.  The best ray fit of a
square W is eta = -<W, P>_F / (d - 1) (least squares, ||P||_F^2 = tr P = d - 1).
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from regret_jax.attention import _zero_sum_projector


def invariants(params: dict) -> dict:
    """(W, kappa, omega) = (b P V, k / b, b P v) of one head's reduced parameters (needs b != 0)."""
    d = params["V"].shape[0]
    proj = _zero_sum_projector(d)
    b = params["b"]
    return {"W": b * proj @ params["V"], "kappa": params["k"] / b, "omega": b * proj @ params["v"]}


def ray_fit(W: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Best fit W ~ -eta P of a square W [d, d]: (eta, ||W + eta P||_F / ||W||_F), the second in [0, 1]."""
    chex.assert_rank(W, 2)
    chex.assert_axis_dimension(W, 0, W.shape[1])
    d = W.shape[0]
    proj = _zero_sum_projector(d)
    eta = -jnp.sum(W * proj) / (d - 1)
    return eta, jnp.linalg.norm(W + eta * proj) / jnp.linalg.norm(W)


def ray_distance(W: jax.Array, eta) -> jax.Array:
    """||W + eta P||_F / ||eta P||_F: distance of a square W from the ray point -eta P, relative to it."""
    chex.assert_rank(W, 2)
    d = W.shape[0]
    return jnp.linalg.norm(W + eta * _zero_sum_projector(d)) / (jnp.abs(eta) * jnp.sqrt(d - 1.0))


def logit_terms(inv: dict, z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Value, key and bias terms [T, d] of P u_{t-1}, t = 1..T (causal: sums over i < t) for tokens z [T, n]."""
    chex.assert_rank(z, 2)
    W, kappa, omega = inv["W"], inv["kappa"], inv["omega"]

    def before(x):  # exclusive running sum over rounds
        return jnp.cumsum(x, axis=0) - x

    L = before(z)
    value = L @ W.T
    key = before(z * (z @ kappa)[:, None]) @ W.T  # W S_{t-1} kappa
    t = jnp.arange(z.shape[0], dtype=z.dtype)  # t - 1 tokens seen
    bias = (t + L @ kappa)[:, None] * omega
    return value, key, bias


def term_ratios(inv: dict, z: jax.Array) -> dict:
    """RMS of the key and bias terms over sequences z [N, T, n], rounds and actions, relative to the value term's."""
    value, key, bias = jax.vmap(logit_terms, in_axes=(None, 0))(inv, z)

    def rms(x):
        return jnp.sqrt(jnp.mean(x**2))

    return {"key": rms(key) / rms(value), "bias": rms(bias) / rms(value)}


def head_blocks(W: jax.Array) -> jax.Array:
    """Blocks of one head's value matrix W [d, d*d]: [k, d, d] with [k] = W[:, k d:(k + 1) d] (input block k)."""
    d = W.shape[0]
    chex.assert_shape(W, (d, d * d))
    return jnp.swapaxes(W.reshape(d, d, d), 0, 1)


def swap_head_match(heads: dict) -> dict:
    """Per head j of stacked d-head parameters (layout of ``bm_params``): the diagonal block W_jj against -eta P.

    Returns arrays [d]: ``eta`` (ray fit of W_jj), ``offray`` (its relative distance to that fit, ray_fit)
    and ``offdiag`` = ||(W_jk)_{k != j}||_F / ||W_jj||_F.
    """
    W = jax.vmap(invariants)(heads)["W"]  # [d heads, d, d*d]
    d = W.shape[1]
    blocks = jax.vmap(head_blocks)(W)  # [j, k, d, d]
    diag = blocks[jnp.arange(d), jnp.arange(d)]  # [j, d, d]
    eta, offray = jax.vmap(ray_fit)(diag)
    off = jnp.sqrt(jnp.sum(blocks**2, axis=(1, 2, 3)) - jnp.sum(diag**2, axis=(1, 2)))
    return {"eta": eta, "offray": offray, "offdiag": off / jnp.linalg.norm(diag, axis=(1, 2))}

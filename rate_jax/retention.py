"""The MRV retention bound, its assumptions, and how to measure them.

Paper: "Recurrent Action Transformer with Memory" (arXiv 2306.09459), retention
theorem of the Memory Retention Valve: one MRV update satisfies
||M_{n+1} - M_n||_F <= sqrt(2 (1 - alpha/m)) ||M_n||_F. The paper sketches the proof
(rows sum to one, pigeonhole, angle inequality of unit vectors). Written out, with
m_i the rows of M_n, v_j the m value rows and A the attention (m x m):

Assumptions.
  (A1) unit rows: ||m_i|| = ||v_j|| = 1 for all i, j;
  (A2) A is row-stochastic (softmax rows: A_ij >= 0, sum_j A_ij = 1);
  (A3) alpha-alignment: for every i there is j(i) with A_{i j(i)} >= 1/m and
       <m_i, v_{j(i)}> >= alpha (alpha in [0, 1]). By pigeonhole, a row of A has an
       entry >= 1/m, so (A3) holds e.g. when each row's largest weight falls on a
       key within angle arccos(alpha) of m_i;
  (A4) no anti-alignment: <m_i, v_j> >= 0 for all i, j;
  (A5) the update is M_{n+1} = A V (value rows taken as they are; the projections
       W_V, W_M are absorbed into v_j or are the identity).

Derivation. Row i: u_i = sum_j A_ij v_j has ||u_i|| <= 1 (convex combination of unit
vectors, A1-A2), and <m_i, u_i> = sum_j A_ij <m_i, v_j> >= A_{i j(i)} alpha >= alpha/m
(A3-A4). Hence ||u_i - m_i||^2 = ||u_i||^2 + 1 - 2<m_i, u_i> <= 2 - 2 alpha/m.
Summing over the m rows and using ||M_n||_F^2 = m (A1):
||M_{n+1} - M_n||_F^2 <= m (2 - 2 alpha/m) = 2 (1 - alpha/m) ||M_n||_F^2.

Each assumption is needed: :func:`counterexample` gives instances where the bound
fails once (A1), (A3) or (A4) is dropped.

A trained MRV (``rate_jax.mrv.MRV``: H heads, affine W_V and W_M) is again one convex
combination (:func:`mrv_convex_form`): each head's attention rows sum to one, so
M_{n+1} = sum_h sum_j A^h_ij (v^h_j W_M^h) + b_M = sum_{h,j} (A^h_ij / H) vt_{hj} with
vt_{hj} = H v^h_j W_M^h + b_M, W_M^h the rows of W_M acting on head h's slice. The
assumptions are then tested on the H*m effective value rows vt, m replaced by H*m.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def retention_bound(alpha, m) -> jax.Array:
    """sqrt(2 (1 - alpha/m)), the factor in front of ||M_n||_F."""
    return jnp.sqrt(2.0 * (1.0 - jnp.asarray(alpha) / m))


def mrv_update(attention: jax.Array, values: jax.Array) -> jax.Array:
    """(A5): M_{n+1} = A V, attention [..., m, m], values [..., m, d]."""
    return attention @ values


def normalize_rows(x: jax.Array) -> jax.Array:
    """Rows scaled to unit l2 norm (A1)."""
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def cosines(memory: jax.Array, values: jax.Array) -> jax.Array:
    """cos(m_i, v_j) [..., m, m]."""
    return normalize_rows(memory) @ jnp.swapaxes(normalize_rows(values), -1, -2)


def alignment_alpha(memory: jax.Array, values: jax.Array, attention: jax.Array) -> jax.Array:
    """The largest alpha for which (A3) holds: min_i max_{j: A_ij >= 1/m} cos(m_i, v_j) [...]."""
    m = attention.shape[-1]
    cos = cosines(memory, values)
    eligible = attention >= 1.0 / m - 1e-7
    return jnp.min(jnp.max(jnp.where(eligible, cos, -jnp.inf), axis=-1), axis=-1)


def no_anti_alignment(memory: jax.Array, values: jax.Array) -> jax.Array:
    """(A4): all cos(m_i, v_j) >= 0 [...] (bool)."""
    return jnp.all(cosines(memory, values) >= 0.0, axis=(-1, -2))


def retention_ratio(memory: jax.Array, updated: jax.Array) -> jax.Array:
    """||M_{n+1} - M_n||_F / ||M_n||_F [...]."""
    diff = jnp.linalg.norm(updated - memory, axis=(-1, -2))
    return diff / jnp.linalg.norm(memory, axis=(-1, -2))


def mrv_convex_form(mrv_params: dict, new: jax.Array, attention: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The MRV update as one convex combination: (weights [..., m, H*m], effective values [..., H*m, d]).

    ``mrv_params``: the parameters of one ``MRV`` (``w_v``, ``w_m``); ``new`` [..., m, d]:
    the written memory after the activation (the MRV's keys and values); ``attention``
    [..., H, m, m] as the MRV returns it. ``weights @ values`` is the MRV's output, row
    (h, j) of the values is vt_{hj} = H v^h_j W_M^h + b_M and its weight A^h_ij / H.
    """
    h, m = attention.shape[-3], attention.shape[-1]
    d = new.shape[-1]
    v = new @ mrv_params["w_v"]["kernel"] + mrv_params["w_v"]["bias"]
    v = v.reshape(v.shape[:-1] + (h, d // h))  # [..., m, H, d/H]
    w_m = mrv_params["w_m"]["kernel"].reshape(h, d // h, -1)  # W_M^h: the rows acting on head h
    values = h * jnp.einsum("...jhk,hkd->...hjd", v, w_m) + mrv_params["w_m"]["bias"]  # [..., H, m, d]
    values = values.reshape(values.shape[:-3] + (h * m, values.shape[-1]))
    weights = jnp.moveaxis(attention, -3, -2).reshape(attention.shape[:-3] + (m, h * m)) / h
    return weights, values


def cue_separation(memory: jax.Array, mirrored: jax.Array) -> jax.Array:
    """||M - M'||_F / mean(||M||_F, ||M'||_F) [...]: how far apart two memories [..., m, d] are,
    e.g. those of a trajectory and of its mirror (the other cue), relative to their size."""
    diff = jnp.linalg.norm(memory - mirrored, axis=(-1, -2))
    return diff / (0.5 * (jnp.linalg.norm(memory, axis=(-1, -2)) + jnp.linalg.norm(mirrored, axis=(-1, -2))))


def sample_instances(key: jax.Array, num: int, m: int, d: int, alpha: float):
    """Random instances meeting (A1)-(A5) for the given alpha.

    Values are unit vectors in the positive orthant (so all cosines are >= 0, A4);
    for each i, m_i is a unit vector at angle arccos(alpha') <= arccos(alpha) from the
    value row j(i) that receives the largest softmax weight of row i (A3).
    Returns (memory [num, m, d], values [num, m, d], attention [num, m, m]).
    """
    k_v, k_s, k_dir, k_cos = jax.random.split(key, 4)
    values = normalize_rows(jnp.abs(jax.random.normal(k_v, (num, m, d))))
    attention = jax.nn.softmax(2.0 * jax.random.normal(k_s, (num, m, m)), axis=-1)
    target = jnp.take_along_axis(values, jnp.argmax(attention, -1)[..., None], axis=1)  # [num, m, d]
    raw = jax.random.normal(k_dir, (num, m, d))
    ortho = normalize_rows(raw - jnp.sum(raw * target, -1, keepdims=True) * target)
    cos = jax.random.uniform(k_cos, (num, m, 1), minval=alpha, maxval=1.0)
    memory = cos * target + jnp.sqrt(1.0 - cos ** 2) * ortho  # unit, cos(m_i, target) = cos
    # fold into the positive orthant: all cosines become >= 0 (A4), and since the
    # target is non-negative, |x| . t >= x . t, so cos(m_i, target) stays >= alpha (A3)
    memory = normalize_rows(jnp.abs(memory))  # renormalise against float32 cancellation
    return memory, values, attention


def counterexample(which: str):
    """A tiny instance violating the bound when one assumption is dropped.

    ``which``: "A4" (anti-aligned values), "A3" (aligned key has weight < 1/m),
    "A1" (values not unit). Returns (memory, values, attention, alpha), m = 3, d = 2.
    """
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    memory = np.stack([e1, e1, e1])
    third = np.full((3, 3), 1.0 / 3.0)
    if which == "A4":  # one aligned value, two opposite ones, uniform weights
        values = np.stack([e1, -e1, -e1])
        return memory, values, third, 1.0
    if which == "A3":  # aligned value exists but gets almost no weight
        values = np.stack([e1, e2, e2])
        attention = np.tile(np.array([0.0, 0.5, 0.5]), (3, 1))
        return memory, values, attention, 1.0
    if which == "A1":  # aligned values three times too long
        values = np.stack([3 * e1, 3 * e1, 3 * e1])
        return memory, values, third, 1.0
    raise ValueError(f"which must be one of 'A1', 'A3', 'A4', got {which!r}")

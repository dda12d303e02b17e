"""Transformer-XL relative multi-head attention, the attention of every RATE layer.

RATE's decoder layers are Transformer-XL layers (seed ``003``, "关键设计 2"; authors'
``RelPartialLearnableMultiHeadAttn``): the score of query i and key j is

    s_ij = [(q_i + u) . k_j + (q_i + v) . W_r p(d_ij)] / sqrt(d_head),

with u = ``r_w_bias``, v = ``r_r_bias`` shared by all layers, p(d) the sinusoid of the
relative distance d_ij = (i + cache_len) - j, keys and values computed from
[cache ; x] (the cache enters without gradient, see ``model.py``) and queries from x.

Reading of an ambiguous passage: the authors obtain the distance term with the
``_rel_shift`` trick, which leaves unspecified values where d_ij < 0 (only memory
tokens that see later memory tokens of their own block). Here d_ij is used as is;
the sinusoid of a negative distance is well defined.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def sinusoid(positions: jax.Array, dim: int) -> jax.Array:
    """Transformer-XL position embedding p(d) = [sin(d w), cos(d w)], w_k = 10000^(-2k/dim)."""
    inv_freq = 1.0 / (10000.0 ** (np.arange(0.0, dim, 2.0) / dim))
    angles = positions[..., None] * inv_freq
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


def relative_distances(num_queries: int, cache_len: int) -> np.ndarray:
    """d_ij = (i + cache_len) - j for queries i < Q and keys j < cache_len + Q, ``[Q, cache_len + Q]``."""
    i = np.arange(num_queries)[:, None] + cache_len
    j = np.arange(cache_len + num_queries)[None, :]
    return (i - j).astype(np.float32)


class RelativeMultiHeadAttention(nn.Module):
    """Masked relative attention of one layer; returns the attention output (no residual).

    Inputs: x [B, Q, d], cache [B, C, d] (C may be 0), mask [B or 1, Q, C + Q] (bool),
    r_w_bias and r_r_bias [H, d_head].
    """

    n_head: int
    d_head: int
    d_model: int
    dropatt: float = 0.0

    @nn.compact
    def __call__(self, x, cache, mask, r_w_bias, r_r_bias, deterministic: bool = True):
        b, q_len, _ = x.shape
        c_len = cache.shape[1]
        h, dh = self.n_head, self.d_head
        full = jnp.concatenate([cache, x], axis=1)
        qkv = nn.Dense(3 * h * dh, use_bias=False, name="qkv")(full)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        q = q[:, c_len:].reshape(b, q_len, h, dh)
        k = k.reshape(b, c_len + q_len, h, dh)
        v = v.reshape(b, c_len + q_len, h, dh)
        rel = sinusoid(jnp.asarray(relative_distances(q_len, c_len)), self.d_model)  # [Q, K, d]
        r = nn.Dense(h * dh, use_bias=False, name="r_net")(rel).reshape(q_len, c_len + q_len, h, dh)
        content = jnp.einsum("bihd,bjhd->bhij", q + r_w_bias, k)
        position = jnp.einsum("bihd,ijhd->bhij", q + r_r_bias, r)
        scores = (content + position) / np.sqrt(dh)
        scores = jnp.where(mask[:, None], scores, -1e30)
        probs = jax.nn.softmax(scores, axis=-1)
        probs = nn.Dropout(self.dropatt)(probs, deterministic=deterministic)
        out = jnp.einsum("bhij,bjhd->bihd", probs, v).reshape(b, q_len, h * dh)
        return nn.Dense(self.d_model, use_bias=False, name="o_net")(out)

"""Transformer-XL relative multi-head attention, the attention of every RATE layer.

RATE's decoder layers are Transformer-XL layers (the RATE paper, "Recurrent Action
Transformer with Memory" (arXiv 2306.09459), method: hidden-state caching; authors'
``RelPartialLearnableMultiHeadAttn``): the score of query i and key j is

    s_ij = [(q_i + u) . k_j + (q_i + v) . W_r p(d_ij)] / sqrt(d_head),

with u = ``r_w_bias``, v = ``r_r_bias`` shared by all layers, p(d) the sinusoid of the
relative distance d_ij = (i + cache_len) - j, keys and values computed from
[cache ; x] (the cache enters without gradient, see ``model.py``) and queries from x.

W_r p(d) is computed once per distinct distance (Q + K - 1 of them, not Q*K) and
gathered to the pairs; the products run with heads first ([H, B, Q, K] scores), which
on a CPU is about twice as fast as Transformer-XL's shift trick or per-pair einsums
(measured, ``bench rate.tmaze``). The authors' ``_rel_shift`` leaves unspecified values
where d_ij < 0 (only memory tokens that see later memory tokens of their own block);
here every d_ij, negative ones included, gets the sinusoid of its own distance.

Two savings, both exact (``tests/rate_jax/test_rate_attention.py``):

* query blocks (``blocks``, static, from :func:`rate_jax.masks.query_blocks`): the
  queries are split into row blocks and each block is scored only against the leading
  keys some of its rows may attend to. Under RATE's causal mask the later keys are
  masked in every row of an early block, so their softmax weight is exactly 0; with 3
  blocks about 1/3 of the score work is skipped;
* :func:`attention_core` has its own backward pass that keeps only the attention
  weights P of a block (plus the small q, k, v, r), where automatic differentiation keeps
  every [H, B, Q, K] intermediate (scores, masked scores, softmax, its normaliser).
  Backward: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(d_head), then
  the products of dS with k, q + u, r and q + v.

:meth:`RelativeMultiHeadAttention.decode` is the incremental form used at inference:
keys and values of earlier positions are kept in buffers and only the new queries are
computed (``evaluate.py``).
"""
from __future__ import annotations

import functools

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
    return i - j


def masked_softmax(scores, mask, scale):
    """softmax over the last (key) axis of scale * scores where ``mask`` (broadcast), weight 0 elsewhere."""
    return jax.nn.softmax(jnp.where(mask, scores * scale, -1e30), axis=-1)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7,))
def attention_core(qu, qv, k, r, v, mask, keep, scale):
    """softmax(mask(scale (qu k + qv r))) v, with a backward pass that keeps only the weights.

    Layouts (each a plain batched matrix product): qu = q + u [H, B, Q, dh]; qv = q + v
    [H, Q, B, dh] (queries first: its products run per query); k [H, B, dh, K]; r [H, Q, dh, K]
    (W_r p(d_ij) of every pair); v [H, B, K, dh]; mask (bool) broadcastable to [H, B, Q, K];
    keep None or the dropout multipliers [H, B, Q, K] (0 or 1 / (1 - rate)) applied to the
    weights; scale = 1 / sqrt(dh). Returns [H, B, Q, dh].
    """
    return _core_fwd(qu, qv, k, r, v, mask, keep, scale)[0]


def _core_fwd(qu, qv, k, r, v, mask, keep, scale):
    p = masked_softmax(qu @ k + jnp.swapaxes(qv @ r, 1, 2), mask, scale)
    return (p if keep is None else p * keep) @ v, (qu, qv, k, r, v, p, keep)


def _core_bwd(scale, res, g):
    qu, qv, k, r, v, p, keep = res
    t = lambda x: jnp.swapaxes(x, -1, -2)  # noqa: E731
    dv = t(p if keep is None else p * keep) @ g
    dp = g @ t(v)
    if keep is not None:
        dp = dp * keep
    ds = p * (dp - jnp.sum(p * dp, axis=-1, keepdims=True)) * scale  # softmax backward; 0 where masked
    ds_q = jnp.swapaxes(ds, 1, 2)  # [H, Q, B, K] for the per-query position products
    return ds @ t(k), ds_q @ t(r), t(qu) @ ds, t(qv) @ ds_q, dv, None, None


attention_core.defvjp(_core_fwd, _core_bwd)


class RelativeMultiHeadAttention(nn.Module):
    """Masked relative attention of one layer; returns the attention output (no residual).

    ``__call__``: x [B, Q, d], cache [B, C, d] (C may be 0), mask [B or 1, Q, C + Q] (bool),
    r_w_bias and r_r_bias [H, d_head]. ``decode``: the same scores for a few new queries
    against key/value buffers (see its docstring).
    """

    n_head: int
    d_head: int
    d_model: int
    dropatt: float = 0.0

    def setup(self):
        width = self.n_head * self.d_head
        self.qkv = nn.Dense(3 * width, use_bias=False)
        self.r_net = nn.Dense(width, use_bias=False)
        self.o_net = nn.Dense(self.d_model, use_bias=False)

    def _split_heads(self, x):
        return x.reshape(x.shape[:-1] + (self.n_head, self.d_head))

    def _project(self, x):
        """q, k, v [B, T, H, d_head] of the inputs x [B, T, d]."""
        return tuple(self._split_heads(y) for y in jnp.split(self.qkv(x), 3, axis=-1))

    def key_values(self, x):
        """Keys [B, H, d_head, T] and values [B, H, T, d_head] of inputs x [B, T, d], the
        layouts of the decode buffers (plain batched matrix products, no transposed copies)."""
        _, k, v = self._project(x)
        return jnp.transpose(k, (0, 2, 3, 1)), jnp.swapaxes(v, 1, 2)

    def _output(self, out):
        """Output projection of the heads' outputs [B, Q, H, d_head]."""
        return self.o_net(out.reshape(out.shape[:2] + (-1,)))

    def __call__(self, x, cache, mask, r_w_bias, r_r_bias, deterministic: bool = True, blocks=None):
        """``blocks``: static (lo, hi, num_keys) query blocks (module docstring); None: one block of every key."""
        q_len, c_len = x.shape[1], cache.shape[1]
        num_keys = c_len + q_len
        blocks = ((0, q_len, num_keys),) if blocks is None else blocks
        q, k, v = self._project(jnp.concatenate([cache, x], axis=1))
        q = jnp.transpose(q[:, c_len:], (2, 0, 1, 3))  # [H, B, Q, dh]: heads first, plain batched products
        qu, qv = q + r_w_bias[:, None, None], jnp.swapaxes(q + r_r_bias[:, None, None], 1, 2)
        k, v = jnp.transpose(k, (2, 0, 3, 1)), jnp.transpose(v, (2, 0, 1, 3))  # [H, B, dh, K], [H, B, K, dh]
        distances = np.arange(num_keys - 1, -q_len, -1)  # every d_ij once, descending
        r = self._split_heads(self.r_net(sinusoid(jnp.asarray(distances, jnp.float32), self.d_model)))  # [L, H, dh]
        index = (num_keys - 1) - relative_distances(q_len, c_len)  # row of d_ij in r
        rate = 0.0 if deterministic else self.dropatt
        outs = []
        for lo, hi, nk in blocks:
            keep = None
            if rate > 0:
                shape = (self.n_head, x.shape[0], hi - lo, nk)
                keep = jax.random.bernoulli(self.make_rng("dropout"), 1.0 - rate, shape) / (1.0 - rate)
            outs.append(attention_core(qu[:, :, lo:hi], qv[:, lo:hi], k[..., :nk],
                                       jnp.transpose(r[index[lo:hi, :nk]], (2, 0, 3, 1)), v[:, :, :nk],
                                       mask[None, :, lo:hi, :nk], keep, 1.0 / np.sqrt(self.d_head)))
        return self._output(jnp.transpose(jnp.concatenate(outs, axis=2), (1, 2, 0, 3)))

    def decode(self, x, keys, values, start, mask, r_w_bias, r_r_bias):
        """Incremental attention for n new queries at key positions start .. start + n - 1.

        x [B, n, d] new inputs; keys [B, H, d_head, K] and values [B, H, K, d_head], buffers
        over the first K key positions (cache first); mask [B or 1, n, K]. The new keys and values are written
        into the buffers at their positions before attending, so a new query sees the new
        keys its mask allows. Deterministic (inference). Returns (output [B, n, d], keys,
        values). Equals the rows start .. start + n - 1 of ``__call__`` when the buffers
        hold the keys and values of every position those rows may attend to.

        Each step reads the buffers once per product, so its cost is their memory traffic
        (the evaluator keeps them only as long as needed, ``model.step_groups``); the layouts
        make both products plain batched matrix products (on a CPU several times faster than
        einsums over [B, K, H, d_head] buffers, measured).
        """
        q, k, v = self._project(x)  # [B, n, H, d_head]
        keys = jax.lax.dynamic_update_slice_in_dim(keys, jnp.transpose(k, (0, 2, 3, 1)), start, axis=3)
        values = jax.lax.dynamic_update_slice_in_dim(values, jnp.swapaxes(v, 1, 2), start, axis=2)
        n, num_keys = x.shape[1], keys.shape[3]
        distances = (start + jnp.arange(n))[:, None] - jnp.arange(num_keys)[None, :]
        r = self._split_heads(self.r_net(sinusoid(distances.astype(jnp.float32), self.d_model)))  # [n, K, H, dh]
        content = jnp.swapaxes(q + r_w_bias, 1, 2) @ keys  # [B, H, n, K]
        position = jnp.transpose(jnp.transpose(q + r_r_bias, (2, 1, 0, 3)) @ jnp.transpose(r, (2, 0, 3, 1)),
                                 (2, 0, 1, 3))  # [H, n, B, dh] @ [H, n, dh, K] -> [B, H, n, K]
        out = masked_softmax(content + position, mask[:, None], 1.0 / np.sqrt(self.d_head)) @ values
        return self._output(jnp.swapaxes(out, 1, 2)), keys, values

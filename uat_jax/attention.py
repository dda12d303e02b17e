"""Feedback-conditioned causal attention (UAT paper, section 4.2, Eqs. 14-16).

Per layer l and head h, with x the layer input (after the pre-attention LayerNorm):

    q_t = (W_Q + diag(rho_t) W_Q^(u)) x_t + U_Q rho_t          (14)
    k_j = (W_K + diag(g_j)   W_K^(u)) x_j + U_K g_j            (15)
    v_j = (W_V + diag(g_j)   W_V^(u)) x_j + U_V g_j            (16)

W_Q, W_K, W_V are the base projections (with the usual bias), W^(u) ~ N(0, 0.1^2) and
U = 0 at initialisation (section 4.3); g_j = tanh(W_s u_j) is read out here, per layer,
from the utility u_j; rho_t is shared by all layers and passed in. With every switch off
the module is the standard multi-head causal attention of Vanilla-TF, so the baselines
share this code. Scores are scaled by 1/sqrt(d_m).

Keys and values live in a KVCache of the full context N, written at the chunk's
global positions: one call with the whole sequence is the parallel forward pass, calls
with one step each are causal step-by-step inference, and the two agree.

GTrXL's Transformer-XL memory (``memory`` given; see ``uat_jax.gtrxl``): positions fall
in segments of S = ``gtrxl_mem_len`` tokens, and a query of segment n attends only to the
keys of segments n - 1 (the memory) and n (causally). Memory keys and values are computed
from ``memory`` = LN(StopGrad(layer input)), so in the parallel pass no gradient reaches a
previous segment's hidden states, while the projections and the LN still get gradient
through the memory, as in segment-by-segment Transformer-XL training. The forward values
equal those of the current keys; the cache holds them for the whole episode, and with the
parameters fixed (a rollout) caching the keys of a hidden state is caching the state.
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from uat_jax.config import ModelConfig
from uat_jax.utility import GateReadout


@struct.dataclass
class KVCache:
    """Keys and values of the full context N, position last: the layout the score and mixing
    products read, so a decoding step transposes nothing."""

    keys: jax.Array  # [H, d_m, N]
    values: jax.Array  # [H, d_m, N]


def empty_kv(cfg: ModelConfig) -> KVCache:
    shape = (cfg.n_heads, cfg.d_head, cfg.context)
    return KVCache(keys=jnp.zeros(shape), values=jnp.zeros(shape))


def _write(buffer: jax.Array, chunk: jax.Array, start: jax.Array) -> jax.Array:
    """buffer [H, d_m, N] with positions start .. start + n - 1 replaced by chunk [n, H, d_m].

    A select rather than ``dynamic_update_slice``: its batching rule is a scatter under vmap, and
    even with the start unbatched (a rollout) it ran slower on CPU, measured on the uat.sepsis
    rollout. A chunk covering the whole context is returned as is."""
    chunk = jnp.moveaxis(chunk, 0, -1).astype(buffer.dtype)
    n, N = chunk.shape[-1], buffer.shape[-1]
    if n == N:
        return chunk
    rel = jnp.arange(N) - start
    inside = (rel >= 0) & (rel < n)
    return jnp.where(inside, chunk[..., jnp.clip(rel, 0, n - 1)], buffer)


class FeedbackAttention(nn.Module):
    """Utility-affine multi-head causal attention; switches from ``cfg`` (Table 4)."""

    cfg: ModelConfig

    def _modulated(self, name: str, x: jax.Array, base: jax.Array, gate: jax.Array,
                   bias_scale: jax.Array | None) -> jax.Array:
        """base + diag(gate) W^(u) x + U gate, per head (one of Eqs. 14-16); the U gate
        term times ``bias_scale`` when given (the traced no-bias switch)."""
        cfg = self.cfg
        w_u = self.param(f"W{name}_u", nn.initializers.normal(cfg.w_u_init_std),
                         (cfg.n_heads, cfg.d_head, cfg.d_model))
        out = base + gate * jnp.einsum("nd,hmd->nhm", x, w_u)
        if cfg.utility_bias:
            u_bias = self.param(f"U{name}", nn.initializers.zeros,
                                (cfg.n_heads, cfg.d_head, cfg.d_head))
            term = jnp.einsum("nhk,hmk->nhm", gate, u_bias)
            out = out + (term if bias_scale is None else term * bias_scale)
        return out

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array, rho: jax.Array | None,
                 u: jax.Array | None, cache: KVCache,
                 memory: jax.Array | None = None,
                 bias_scale: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
        """x [n, d] at global token positions [n] (contiguous); rho [n, H, d_m] or None;
        u [n, d_u] or None; ``memory`` [n, d] (GTrXL: x recomputed from stop-gradient
        inputs) or None; ``bias_scale`` [] (traced no-bias switch) or None; returns
        (output [n, d], updated cache)."""
        cfg = self.cfg
        chex.assert_shape(x, (positions.shape[0], cfg.d_model))
        self.sow("intermediates", "attn_input", x)
        w_q, w_k, w_v = (nn.DenseGeneral((cfg.n_heads, cfg.d_head), name=name)
                         for name in ("W_Q", "W_K", "W_V"))
        q, k, v = w_q(x), w_k(x), w_v(x)
        if rho is not None:
            q = self._modulated("_Q", x, q, rho, bias_scale)
        if u is not None:
            g = GateReadout(cfg.n_heads, cfg.d_head, name="local_gate")(u)
            k = self._modulated("_K", x, k, g, bias_scale)
            v = self._modulated("_V", x, v, g, bias_scale)
        keys, values = _write(cache.keys, k, positions[0]), _write(cache.values, v, positions[0])
        score = lambda ks: jnp.einsum("nhm,hmk->hnk", q, ks) / jnp.sqrt(cfg.d_head).astype(q.dtype)  # noqa: E731
        logits = score(keys)
        key_pos = jnp.arange(cfg.context)
        mask = key_pos[None, :] <= positions[:, None]
        if memory is not None:
            seg_q, seg_k = positions // cfg.gtrxl_mem_len, key_pos // cfg.gtrxl_mem_len
            current = seg_k[None, :] == seg_q[:, None]  # [n, N]: the query's own segment
            mask = mask & (seg_k[None, :] >= seg_q[:, None] - 1)
            mem_keys = _write(cache.keys, w_k(memory), positions[0])
            mem_values = _write(cache.values, w_v(memory), positions[0])
            logits = jnp.where(current[None], logits, score(mem_keys))
        logits = jnp.where(mask[None], logits, jnp.finfo(logits.dtype).min)
        self.sow("intermediates", "attn_logits", logits)
        weights = jax.nn.softmax(logits, axis=-1)
        if memory is None:
            out = jnp.einsum("hnk,hmk->nhm", weights, values)
        else:
            out = (jnp.einsum("hnk,hmk->nhm", jnp.where(current[None], weights, 0.0), values)
                   + jnp.einsum("hnk,hmk->nhm", jnp.where(current[None], 0.0, weights), mem_values))
        out = nn.DenseGeneral(cfg.d_model, axis=(-2, -1), name="W_O")(out)
        return out, KVCache(keys=keys, values=values)

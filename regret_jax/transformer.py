"""Deeper causal softmax Transformers for the regret objective (paper section 3.3, docs/regret.md §8).

Surviving facts: 2- and 4-layer causal softmax Transformers with 4 heads per layer,
trained on the same Gaussian squared-regret objective.  Everything else is an
engineer's choice (docs/regret.md §8.2): GPT-style pre-LayerNorm blocks, a linear embedding of
l_t plus a learned start token and learned positional embeddings, a linear read-out to
d logits and a softmax.  Input to position t (0-based) is the start token for t = 0 and
l_t otherwise, so with the causal mask output t is pi_{t+1} and sees only l_1..l_t.

``zero_readout = True`` (engineer's choice, docs/regret.md §8.2) initialises the read-out kernel
(and, as always, its bias) at zero: every policy of the untrained model is exactly
uniform, including pi_1 = 1/d, the first play that the permutation symmetry of N(0, I_d)
singles out for a learner that has seen nothing (R^2 is convex in pi_1), and training
starts from "play uniformly" instead of from random logits.  The default keeps flax's random read-out.
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp


class _Block(nn.Module):
    num_heads: int
    d_model: int
    mlp_ratio: int = 4

    @nn.compact
    def __call__(self, h: jax.Array, mask: jax.Array) -> jax.Array:
        a = nn.MultiHeadDotProductAttention(num_heads=self.num_heads, qkv_features=self.d_model)(
            nn.LayerNorm()(h), mask=mask
        )
        h = h + a
        m = nn.Dense(self.mlp_ratio * self.d_model)(nn.LayerNorm()(h))
        return h + nn.Dense(self.d_model)(nn.gelu(m))


class CausalTransformer(nn.Module):
    """losses [T, d] -> policies [T, d], pi_t depending on l_1..l_{t-1} only (T <= max_len)."""

    d: int
    num_layers: int = 2
    num_heads: int = 4
    d_model: int = 32
    max_len: int = 256
    zero_readout: bool = False  # zero-initialised read-out: uniform policies at init

    @nn.compact
    def __call__(self, losses: jax.Array) -> jax.Array:
        chex.assert_shape(losses, (None, self.d))
        T = losses.shape[0]
        if T > self.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len={self.max_len}")
        start = self.param("start", nn.initializers.normal(0.02), (1, self.d_model))
        tokens = jnp.concatenate([start, nn.Dense(self.d_model, name="embed")(losses[:-1])], axis=0)
        pos = self.param("pos", nn.initializers.normal(0.02), (self.max_len, self.d_model))
        h = tokens + pos[:T]
        mask = nn.make_causal_mask(jnp.ones(T))  # [1, T, T]
        for _ in range(self.num_layers):
            h = _Block(self.num_heads, self.d_model)(h, mask)
        init = nn.initializers.zeros if self.zero_readout else nn.linear.default_kernel_init
        logits = nn.Dense(self.d, kernel_init=init, name="readout")(nn.LayerNorm()(h))
        return jax.nn.softmax(logits, axis=-1)

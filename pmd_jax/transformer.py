"""An ordinary pre-LN causal Transformer for the learned actor and critic (PolicyAttention,
arXiv 2609.30500, sections 6 and 9: "ordinary pre-LN Transformers trained on generated MDPs").

Unlike the frozen decoder (:mod:`pmd_jax.decoder`) this model is trained, has layer
normalisation and knows nothing of PMD: GPT-style blocks ``h <- h + Attn(LN(h))``,
``h <- h + MLP(LN(h))`` (GELU, ``mlp_ratio`` times wider), a linear embedding of the
token features plus learned positions, a final LayerNorm and a linear read-out. The
attention mask is causal: token ``t`` sees tokens ``0..t``, so every packet puts its
memories before the tokens that read them. Two optional arguments add no parameters and,
when not given, leave the model exactly as above: an extra boolean mask ``[..., T, T]``
(``mask[..., i, j]``: token ``i`` may attend to token ``j``), and-ed with the causal one,
and ``positions [T]`` (integer rows of the position table, default ``0..T-1``), so several
queries can share one memory prefix at the same position (:mod:`pmd_jax.visibility`).

:class:`ModelConfig` is the architecture; :meth:`ModelConfig.architecture` (with the
token width and output width of the role the model plays) is what a kept checkpoint
records, so a checkpoint of a different architecture is refused by name
(``experiments.models``).
"""
from __future__ import annotations

import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes of the pre-LN Transformer (the same kind for actor and critic)."""

    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    mlp_ratio: int = 4

    def __post_init__(self):
        for name in ("d_model", "num_layers", "num_heads", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")


class _Block(nn.Module):
    config: ModelConfig

    @nn.compact
    def __call__(self, h: jax.Array, mask: jax.Array) -> jax.Array:
        c = self.config
        h = h + nn.MultiHeadDotProductAttention(num_heads=c.num_heads, qkv_features=c.d_model)(nn.LayerNorm()(h), mask=mask)
        m = nn.gelu(nn.Dense(c.mlp_ratio * c.d_model)(nn.LayerNorm()(h)))
        return h + nn.Dense(c.d_model)(m)


class PreLNTransformer(nn.Module):
    """tokens ``[..., T, F]`` -> outputs ``[..., T, out_dim]``, output ``t`` a function of tokens ``0..t``.

    ``mask`` (optional, boolean ``[..., T, T]`` with the tokens' leading axes): an extra
    attention mask, and-ed with the causal mask in every layer; ``positions`` (optional, static
    integers ``[T]`` in ``[0, max_len)``): the position of each token (module docstring).
    """

    config: ModelConfig
    out_dim: int
    max_len: int

    @nn.compact
    def __call__(self, tokens: jax.Array, mask: jax.Array | None = None,
                 positions: jax.Array | None = None) -> jax.Array:
        chex.assert_rank(tokens, {2, 3})
        T = tokens.shape[-2]
        if positions is None and T > self.max_len:
            raise ValueError(f"packet length {T} exceeds the model's max_len={self.max_len}")
        if positions is not None:
            positions = np.asarray(positions)  # static: the packet layout, not data
            if positions.shape != (T,) or not np.issubdtype(positions.dtype, np.integer):
                raise ValueError(f"positions: must be {T} integers (one per token), got {positions.dtype} "
                                 f"{positions.shape}")
            if positions.min() < 0 or positions.max() >= self.max_len:
                raise ValueError(f"positions: must lie in [0, max_len={self.max_len}), got {positions.min()}.."
                                 f"{positions.max()}")
        pos = self.param("pos", nn.initializers.normal(0.02), (self.max_len, self.config.d_model))
        pos = pos[:T] if positions is None else pos[positions]
        h = nn.Dense(self.config.d_model, name="embed")(tokens) + pos
        causal = nn.make_causal_mask(jnp.ones(tokens.shape[:-1]))
        if mask is None:
            mask = causal
        else:
            if mask.shape != tokens.shape[:-1] + (T,):
                raise ValueError(f"mask: shape must be {tokens.shape[:-1] + (T,)} (the tokens' [..., T, T]), "
                                 f"got {mask.shape}")
            mask = nn.combine_masks(causal, mask[..., None, :, :])
        for _ in range(self.config.num_layers):
            h = _Block(self.config)(h, mask)
        return nn.Dense(self.out_dim, name="readout")(nn.LayerNorm()(h))


def architecture(config: ModelConfig, role: str, token_width: int, out_dim: int, max_len: int) -> dict:
    """What identifies a trained model's parameter shapes and meaning (recorded with every kept checkpoint)."""
    return {"role": role, **dataclasses.asdict(config), "token_width": token_width, "out_dim": out_dim,
            "max_len": max_len}

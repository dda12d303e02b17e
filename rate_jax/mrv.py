"""The Memory Retention Valve, MRV(M_n, M_{n+1}) = FFN(MultiHead(Q=M_n, K=M_{n+1}, V=M_{n+1})).

Paper: "Recurrent Action Transformer with Memory" (arXiv 2306.09459), method: Memory
Retention Valve. The old memory M_n queries the freshly written memory, and the
learnable weights are W_Q, W_K, W_V and W_M. Reading of the formula, from the authors'
``mha_mem_to_mem``: the "FFN" is the output projection W_M (one affine map, with bias),
the attention is unmasked over the m write tokens with ``n_head_ca`` heads of width
d/n_head_ca, and the activation ``mrv_act`` is applied to the write outputs before they
enter as keys and values.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

_ACTIVATIONS = {
    "relu": jax.nn.relu,
    "leaky_relu": jax.nn.leaky_relu,
    "elu": jax.nn.elu,
    "tanh": jnp.tanh,
    "none": lambda x: x,
}


def mrv_activation(name: str):
    """The activation the authors call ``mrv_act`` (applied to write outputs before the MRV)."""
    return _ACTIVATIONS[name]


class MRV(nn.Module):
    """Cross-attention of old memory over new memory. ``__call__(old [B,m,d], new [B,m,d])``.

    Returns ``(M_{n+1} [B, m, d], attention [B, H, m, m])``; ``new`` is taken after the
    activation (the caller applies :func:`mrv_activation`).
    """

    num_heads: int
    d_model: int

    @nn.compact
    def __call__(self, old, new):
        b, m, d = old.shape
        h = self.num_heads
        depth = d // h
        q = nn.Dense(d, name="w_q")(old).reshape(b, m, h, depth)
        k = nn.Dense(d, name="w_k")(new).reshape(b, new.shape[1], h, depth)
        v = nn.Dense(d, name="w_v")(new).reshape(b, new.shape[1], h, depth)
        attn = jax.nn.softmax(jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(depth), axis=-1)
        out = jnp.einsum("bhij,bjhd->bihd", attn, v).reshape(b, m, d)
        return nn.Dense(d, name="w_m")(out), attn

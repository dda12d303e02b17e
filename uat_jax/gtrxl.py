"""GTrXL (Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning",
arXiv 1910.06764; reference [39] of the UAT paper): the gate and the parameter reading.

A GTrXL layer l, on the layer input E (one row per step) and the memory M^(l-1) (the layer
inputs of the previous segment), is the Transformer-XL layer with identity-map reordering
and gating (Parisotto et al., section 3):

    Y = MHA(LN([StopGrad(M^(l-1)); E]))            (queries: the rows of E, causal)
    E' = g(E, ReLU(Y))                              (gated attention residual)
    E'' = E' + ReLU(FFN(LN(E')))                    (reordered FFN residual)

The memory part (segments of ``gtrxl_mem_len`` steps, each attending to itself and the
previous segment; StopGrad on the memory) lives in ``attention.FeedbackAttention`` and
``model.Block``; positions are the learned absolute step positions shared by every kind
(our reading: an episode has T <= ``horizon`` steps, so absolute positions exist and
Transformer-XL's relative encoding, needed when positions restart every segment, is not).

**Reading of the gate from the parameter count of Table 6** (UAT paper, Appendix D.3):
GTrXL 146,884 - Vanilla-TF 109,828 = 37,056 = L (3 d^2 + d) exactly at L = 3, d = 64: the
paper's GTrXL adds three d x d matrices and one d-vector per layer to the Vanilla-TF.
Parisotto's GRU-type gate (r, z and h each with a W on y and a U on x) has six d x d
matrices, and on both residuals 12 d^2 + 2 d per layer (253,381 parameters here, +73 %
over 146,884; one such gate per layer: 179,461, +22 %). The GRU-type gate with the reset
fixed at r = 0 (W_r, U_r, U_g drop out), on the attention residual, is that count:

    z = sigmoid(W_z y + U_z x + b_z - b_g),   h = tanh(W_g y),   g(x, y) = (1 - z) * x + z * h,

with the learned bias b_z (0 at initialisation) and the fixed b_g = ``bias`` (2 by
default), so that z starts near 0 and the layer near the identity (Parisotto's gate
initialisation). At Table 3 sizes our GTrXL has 105,541 + 3 (3 * 64^2 + 64) = 142,597
parameters (-2.9 % from 146,884); see ``docs/uat.md`` section 6.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class GRUGate(nn.Module):
    """g(x, y) above for x, y [..., d]: parameters W_z, U_z, b_z, W_g (3 d^2 + d)."""

    bias: float = 2.0

    @nn.compact
    def __call__(self, x: jax.Array, y: jax.Array) -> jax.Array:
        d = x.shape[-1]
        lin = lambda name, use_bias=False: nn.Dense(d, use_bias=use_bias, name=name)  # noqa: E731
        z = jax.nn.sigmoid(lin("W_z", use_bias=True)(y) + lin("U_z")(x) - self.bias)
        h = jnp.tanh(lin("W_g")(y))
        return (1.0 - z) * x + z * h

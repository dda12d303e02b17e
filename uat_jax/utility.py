"""Utility encoder, gate readouts and regime state (UAT paper, section 4.1, Table 3).

u_j = E(f_a(a_{j-1}), r_{j-1}) in R^{d_u}. The displayed form of E was lost from the
seed; reading of section 4.1 / Table 3 ("two-layer MLP", "UE hidden dim" 32, ReLU cited
there): E(z) = W_2 relu(W_1 z + b_1) + b_2 on z = [f_a(a); r] in R^{d_act + 1}, with
f_a a learned table of n_actions rows of width d_act, applied to the one-hot action,
so the zero pair at j = 1 (NO_ACTION) gives f_a = 0. The Table 4 "linear" variant is
u = W z (no bias, as written there). "no-action" feeds f_a = 0, "no-reward" feeds r = 0.

Gates: g_j^(l,h) = tanh(W_s^(l,h) u_j) and rho_t^(h) = tanh(W_rho^(h) ubar_t), both
bias-free readouts in [-1, 1]^{d_m}, initialised to zero (section 4.3). Regime state:
ubar_t = lambda ubar_{t-1} + (1 - lambda) u_t with ubar_0 = 0 (section 4.1).

``Switches`` are the Table 4 switches of a ``traced_variant`` model as traced 0/1
multipliers: the encoder then holds both the MLP and the linear map, multiplies f_a(a)
and r by their switches and selects the map; a switch of 1 multiplies by exactly 1.0
and a switch of 0 gives exactly the zero input the static switch feeds.
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from flax import struct

from uat_jax.config import SWITCHES, ModelConfig, switch_table
from uat_jax.feedback import action_vector


@struct.dataclass
class Switches:
    """One row of ``config.switch_table``, each field a [] float32 in {0, 1}."""

    use_action: jax.Array
    use_reward: jax.Array
    linear: jax.Array
    modulate_q: jax.Array
    modulate_kv: jax.Array
    utility_bias: jax.Array
    input_feedback: jax.Array

    @classmethod
    def of(cls, variant: jax.Array) -> Switches:
        """The switches of member ``variant`` (int index into ``config.SWITCHED``, traceable)."""
        row = jnp.asarray(switch_table())[variant]
        return cls(**{name: row[i] for i, name in enumerate(SWITCHES)})


def switched(switches: Switches | None, name: str, y: jax.Array) -> jax.Array:
    """``y`` times switch ``name`` of ``switches``; ``y`` itself for a static model (None)."""
    return y if switches is None else y * getattr(switches, name)


class UtilityEncoder(nn.Module):
    """E(f_a(a_{j-1}), r_{j-1}) of section 4.1 with the Table 4 encoder switches."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, prev_action: jax.Array, prev_reward: jax.Array,
                 switches: Switches | None = None) -> jax.Array:
        """u [n, d_u] from prev_action [n] int or [n, n_actions] allocation (``feedback.action_vector``)
        and prev_reward [n]; ``switches`` exactly when ``cfg.traced_variant``."""
        cfg = self.cfg
        chex.assert_rank(prev_reward, 1)
        chex.assert_equal_shape_prefix([prev_action, prev_reward], 1)
        if cfg.use_action:
            table = self.param("action_embedding", nn.initializers.normal(1.0),
                               (cfg.n_actions, cfg.d_act))
            f_a = switched(switches, "use_action", action_vector(prev_action, cfg.n_actions) @ table)
        else:
            f_a = jnp.zeros(prev_reward.shape + (cfg.d_act,))
        r = prev_reward if cfg.use_reward else jnp.zeros_like(prev_reward)
        r = switched(switches, "use_reward", r)
        z = jnp.concatenate([f_a, r[:, None].astype(f_a.dtype)], axis=-1)
        linear = lambda: nn.Dense(cfg.d_u, use_bias=False, name="linear")(z)  # noqa: E731
        if cfg.encoder == "linear":
            return linear()
        hidden = nn.relu(nn.Dense(cfg.ue_hidden, name="hidden")(z))
        mlp = nn.Dense(cfg.d_u, name="out")(hidden)
        return mlp if switches is None else jnp.where(switches.linear > 0, linear(), mlp)


class GateReadout(nn.Module):
    """tanh(W u) per head: [n, d_u] -> [n, H, d_m]; W is bias-free and starts at 0. The pre-activation W u
    is sown as ``intermediates/pre_activation`` (read by ``model.regime_gates``)."""

    n_heads: int
    d_head: int

    @nn.compact
    def __call__(self, u: jax.Array) -> jax.Array:
        w = self.param("W", nn.initializers.zeros, (self.n_heads, self.d_head, u.shape[-1]))
        pre = jnp.einsum("nk,hmk->nhm", u, w)
        self.sow("intermediates", "pre_activation", pre)
        return jnp.tanh(pre)


def regime_state(u: jax.Array, ubar_prev: jax.Array, decay: float) -> jax.Array:
    """ubar_j = decay * ubar_{j-1} + (1 - decay) u_j for the rows of u [n, d_u],
    starting from ubar_prev [d_u]; returns all ubar_j [n, d_u]."""
    chex.assert_rank(u, 2)

    def body(prev, u_j):
        cur = decay * prev + (1.0 - decay) * u_j
        return cur, cur

    return jax.lax.scan(body, ubar_prev, u)[1]

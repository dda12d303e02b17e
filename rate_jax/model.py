"""RATE: the Recurrent Action Transformer with memory, one segment at a time.

Seed ``003``, "整体框架" and Algorithm 1 (as summarised there): modality encoders turn
(R_t, o_t, a_t) into three tokens; a segment S_n of K steps (3K tokens) is processed
as concat(M_n, S_n, M_n) under the mask of :mod:`rate_jax.masks`, with a
Transformer-XL cache of earlier hidden states as extra keys and values (no gradient);
the outputs of the suffix memory tokens, passed through the MRV when it is on, are
M_{n+1}; action logits are read at the observation tokens. M_0 is a learned
parameter drawn from N(0, 1) at initialisation.

Readings, all following the authors' PyTorch code (CognitiveAISystems/RATE):
* encoders for T-Maze: R -> Linear(1, d), o -> Linear(obs_dim, d),
  a -> tanh(Embedding(num_actions + 1, d)) where index ``num_actions`` is the padding
  action (unknown or absent); the head is Linear(d, num_actions) without bias;
* post-LayerNorm Transformer-XL layers, x <- LN(x + Attn(x)), then, when
  ``d_inner > 0``, x <- LN(x + FFN(x)). The authors' layer adds the residual twice
  (LN(2x + Attn(x))), which equals LN(x + Attn(x)/2); the factor is absorbed by
  the attention's output projection, so it is not reproduced;
* the cache of layer l holds the last ``mem_len`` inputs of layer l (memory tokens
  included), as the authors' ``_update_mems``; entries not yet filled are masked;
* the authors initialise all m rows of M_0 with one shared N(0, 1) draw; here each
  row is an independent N(0, 1) draw, as the seed states.
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from rate_jax.attention import RelativeMultiHeadAttention
from rate_jax.config import ModelConfig
from rate_jax.masks import segment_mask
from rate_jax.mrv import MRV, mrv_activation


@struct.dataclass
class Segment:
    """One segment of K steps for a batch B.

    obs [B, K, obs_dim]; actions [B, K] int; rtg [B, K]; action_known [B, K] (1 where
    the action token carries a real action, else the padding action is embedded).
    """

    obs: jax.Array
    actions: jax.Array
    rtg: jax.Array
    action_known: jax.Array


@struct.dataclass
class Carry:
    """What flows from one segment to the next.

    memory [B, m, d] (M_n); cache [n_layer, B, mem_len, d]; cache_valid [B, mem_len].
    """

    memory: jax.Array
    cache: jax.Array
    cache_valid: jax.Array


@struct.dataclass
class SegmentOutput:
    """logits [B, K, A] at observation tokens; carry for segment n+1; write [B, m, d]
    (raw suffix outputs, before activation and MRV); mrv_attention [B, H_ca, m, m]
    (H_ca = 0 without MRV)."""

    logits: jax.Array
    carry: Carry
    write: jax.Array
    mrv_attention: jax.Array


class DecoderLayer(nn.Module):
    """One post-LN Transformer-XL layer: x <- LN(x + Attn(x; cache)), x <- LN(x + FFN(x))."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, cache, mask, r_w_bias, r_r_bias, deterministic: bool):
        c = self.config
        attn = RelativeMultiHeadAttention(c.n_head, c.d_head, c.d_model, c.dropatt, name="attn")(
            x, cache, mask, r_w_bias, r_r_bias, deterministic)
        x = nn.LayerNorm(name="ln_attn")(x + nn.Dropout(c.dropout)(attn, deterministic=deterministic))
        if c.d_inner > 0:
            f = nn.relu(nn.Dense(c.d_inner, name="ff_in")(x))
            f = nn.Dropout(c.dropout)(f, deterministic=deterministic)
            f = nn.Dropout(c.dropout)(nn.Dense(c.d_model, name="ff_out")(f), deterministic=deterministic)
            x = nn.LayerNorm(name="ln_ff")(x + f)
        return x


class RATE(nn.Module):
    """The RATE family (RATE, DT, RMT, TrXL, ablations) as one module; see ``config.variant``.

    ``__call__(segment, carry, deterministic)`` processes one segment and returns a
    :class:`SegmentOutput`; ``initial_carry(batch_size)`` gives M_0 and an empty cache.
    ``model.init(key, segment)`` creates every parameter.
    """

    config: ModelConfig

    def setup(self):
        c = self.config
        self.embed_rtg = nn.Dense(c.d_model)
        self.embed_obs = nn.Dense(c.d_model)
        self.embed_act = nn.Embed(c.num_actions + 1, c.d_model)
        self.layers = [DecoderLayer(c) for _ in range(c.n_layer)]
        self.head = nn.Dense(c.num_actions, use_bias=False)
        self.r_w_bias = self.param("r_w_bias", nn.initializers.xavier_uniform(), (c.n_head, c.d_head))
        self.r_r_bias = self.param("r_r_bias", nn.initializers.xavier_uniform(), (c.n_head, c.d_head))
        if c.num_mem_tokens > 0:
            self.mem_init = self.param("mem_init", nn.initializers.normal(1.0), (c.num_mem_tokens, c.d_model))
        if c.n_head_ca > 0:
            self.mrv = MRV(c.n_head_ca, c.d_model)
        self.drop = nn.Dropout(c.dropout)

    def initial_carry(self, batch_size: int) -> Carry:
        """M_0 broadcast over the batch and an empty (all-invalid) cache."""
        c = self.config
        if c.num_mem_tokens > 0:
            memory = jnp.broadcast_to(self.mem_init, (batch_size, c.num_mem_tokens, c.d_model))
        else:
            memory = jnp.zeros((batch_size, 0, c.d_model))
        return Carry(memory=memory,
                     cache=jnp.zeros((c.n_layer, batch_size, c.mem_len, c.d_model)),
                     cache_valid=jnp.zeros((batch_size, c.mem_len), dtype=bool))

    def embed(self, segment: Segment) -> jax.Array:
        """Interleaved tokens [B, 3K, d]: (R_t, o_t, a_t) for t = 0..K-1."""
        c = self.config
        act = jnp.where(segment.action_known > 0, segment.actions, c.num_actions).astype(jnp.int32)
        tokens = jnp.stack([self.embed_rtg(segment.rtg[..., None]), self.embed_obs(segment.obs),
                            jnp.tanh(self.embed_act(act))], axis=2)
        b, k = segment.rtg.shape
        return tokens.reshape(b, 3 * k, c.d_model)

    def __call__(self, segment: Segment, carry: Carry | None = None, deterministic: bool = True) -> SegmentOutput:
        """Process one segment; ``carry=None`` starts from :meth:`initial_carry` (M_0, empty cache)."""
        c = self.config
        b = segment.rtg.shape[0]
        if carry is None:
            carry = self.initial_carry(b)
        m, k_steps = c.num_mem_tokens, c.segment_len
        chex.assert_shape(segment.obs, (b, k_steps, c.obs_dim))
        chex.assert_shape([segment.actions, segment.rtg, segment.action_known], (b, k_steps))
        chex.assert_shape(carry.memory, (b, m, c.d_model))
        chex.assert_shape(carry.cache, (c.n_layer, b, c.mem_len, c.d_model))

        x = jnp.concatenate([carry.memory, self.embed(segment), carry.memory], axis=1)
        x = self.drop(x, deterministic=deterministic)
        q_len = x.shape[1]
        static = jnp.asarray(segment_mask(3 * k_steps, m, c.mem_len, c.read_mem_from_cache))
        key_valid = jnp.concatenate([carry.cache_valid, jnp.ones((b, q_len), dtype=bool)], axis=1)
        mask = static[None] & key_valid[:, None, :]

        new_cache = []
        for layer, cache in zip(self.layers, carry.cache):
            if c.mem_len:  # the cache of layer l keeps the last mem_len inputs of layer l
                new_cache.append(jnp.concatenate([cache, jax.lax.stop_gradient(x)], axis=1)[:, -c.mem_len:])
            else:
                new_cache.append(cache)
            x = layer(x, cache, mask, self.r_w_bias, self.r_r_bias, deterministic)
        cache_valid = key_valid[:, -c.mem_len:] if c.mem_len else carry.cache_valid

        logits = self.head(x[:, m + 1:m + 3 * k_steps:3])
        write = x[:, q_len - m:]
        if c.n_head_ca > 0:
            memory, attn = self.mrv(carry.memory, mrv_activation(c.mrv_act)(write))
        else:
            memory, attn = write, jnp.zeros((b, 0, m, m))
        new_carry = Carry(memory=memory, cache=jnp.stack(new_cache), cache_valid=cache_valid)
        return SegmentOutput(logits=logits, carry=new_carry, write=write, mrv_attention=attn)


def split_segments(tree, segment_len: int):
    """[B, N*K, ...] leaves -> [N, B, K, ...] (segment axis first, for ``lax.scan``)."""

    def split(x):
        b, t = x.shape[:2]
        if t % segment_len:
            raise ValueError(f"trajectory length {t} is not a multiple of segment_len={segment_len}")
        x = x.reshape((b, t // segment_len, segment_len) + x.shape[2:])
        return jnp.swapaxes(x, 0, 1)

    return jax.tree.map(split, tree)


def unroll(model: RATE, params, segments: Segment, carry: Carry, key=None, detach_memory: bool = False):
    """Segment recurrence as ``lax.scan`` (seed, Algorithm 1): M_{n+1}, cache_{n+1} from segment n.

    ``segments`` has leaves [N, B, K, ...]. With ``key`` given, dropout is on (training).
    ``detach_memory`` stops the gradient through M_n between segments (the authors'
    per-segment training); the cache never carries gradient. Returns the stacked
    :class:`SegmentOutput` (leading axis N; ``carry`` holds M_{n+1} for each n).
    """
    num = jax.tree.leaves(segments)[0].shape[0]
    keys = jax.random.split(key, num) if key is not None else jnp.zeros((num, 2), jnp.uint32)

    def body(carry, inputs):
        seg, k = inputs
        if detach_memory:
            carry = carry.replace(memory=jax.lax.stop_gradient(carry.memory))
        if key is None:
            out = model.apply(params, seg, carry, True)
        else:
            out = model.apply(params, seg, carry, False, rngs={"dropout": k})
        return out.carry, out

    _, outs = jax.lax.scan(body, carry, (segments, keys))
    return outs

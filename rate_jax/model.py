"""RATE: the Recurrent Action Transformer with memory, one segment at a time.

Paper: "Recurrent Action Transformer with Memory" (arXiv 2306.09459), method overview
and Algorithm 1: modality encoders turn (R_t, o_t, a_t) into three tokens; a segment S_n
of K steps (3K tokens) is processed as concat(M_n, S_n, M_n) under the mask of
:mod:`rate_jax.masks`, with a Transformer-XL cache of earlier hidden states as extra
keys and values (no gradient); the outputs of the suffix memory tokens, passed through
the MRV when it is on, are M_{n+1}; action logits are read at the observation tokens.
M_0 is a learned parameter drawn from N(0, 1) at initialisation.

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
  row is an independent N(0, 1) draw, as the paper states (M_0 ~ N(0, 1)).
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rate_jax.attention import RelativeMultiHeadAttention
from rate_jax.config import ModelConfig
from rate_jax.masks import key_extent, query_blocks, segment_mask
from rate_jax.mrv import MRV, mrv_activation


MAX_UNROLL = 8  # segment recurrences up to this length are unrolled (see ``unroll``)
QUERY_BLOCKS = 3  # query blocks of the attention (``masks.query_blocks``): 1/3 of the causal score work skipped
MIN_BLOCK_ROWS = 32  # a segment of fewer than 2 x 32 tokens runs as one block (small blocks cost more compile than they save)


def config_mask(config: ModelConfig) -> np.ndarray:
    """The static segment mask of a model configuration (``masks.segment_mask``), [Q, C + Q]."""
    return segment_mask(3 * config.segment_len, config.num_mem_tokens, config.mem_len, config.read_mem_from_cache)


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


@struct.dataclass
class DecodeState:
    """Per-layer buffers of one segment for incremental inference, tuples of n_layer arrays:
    keys [B, H, d_head, C + Q] and values [B, H, C + Q, d_head] (the C = mem_len cache
    positions first, then the Q = 2m + 3K positions of concat(M_n, S_n, M_n)); inputs
    [B, Q, d], each layer's inputs (for the next cache; empty without a cache). The buffers
    may hold only the first positions (:meth:`grow`, :func:`step_groups`)."""

    keys: tuple
    values: tuple
    inputs: tuple

    @property
    def num_keys(self) -> int:
        return self.values[0].shape[2]

    def grow(self, num_keys: int) -> DecodeState:
        """The key/value buffers zero-padded to ``num_keys`` positions (no copy when they have them)."""
        extra = num_keys - self.num_keys
        if extra < 0:
            raise ValueError(f"cannot shrink decode buffers of {self.num_keys} positions to {num_keys}")
        if extra == 0:
            return self
        return self.replace(keys=tuple(jnp.pad(k, [(0, 0)] * 3 + [(0, extra)]) for k in self.keys),
                            values=tuple(jnp.pad(v, [(0, 0), (0, 0), (0, extra), (0, 0)]) for v in self.values))


class DecoderLayer(nn.Module):
    """One post-LN Transformer-XL layer: x <- LN(x + Attn(x; cache)), x <- LN(x + FFN(x))."""

    config: ModelConfig

    def setup(self):
        c = self.config
        self.attn = RelativeMultiHeadAttention(c.n_head, c.d_head, c.d_model, c.dropatt)
        self.ln_attn = nn.LayerNorm()
        if c.d_inner > 0:
            self.ff_in = nn.Dense(c.d_inner)
            self.ff_out = nn.Dense(c.d_model)
            self.ln_ff = nn.LayerNorm()
        self.drop = nn.Dropout(c.dropout)

    def _residuals(self, x, attn, deterministic: bool):
        """Both post-LN residual steps around the attention output ``attn``."""
        x = self.ln_attn(x + self.drop(attn, deterministic=deterministic))
        if self.config.d_inner > 0:
            f = self.drop(nn.relu(self.ff_in(x)), deterministic=deterministic)
            x = self.ln_ff(x + self.drop(self.ff_out(f), deterministic=deterministic))
        return x

    def __call__(self, x, cache, mask, r_w_bias, r_r_bias, deterministic: bool, blocks=None):
        attn = self.attn(x, cache, mask, r_w_bias, r_r_bias, deterministic, blocks)
        return self._residuals(x, attn, deterministic)

    def decode(self, x, keys, values, start, mask, r_w_bias, r_r_bias):
        """The layer for new inputs x [B, n, d] against key/value buffers (see ``attention.decode``)."""
        attn, keys, values = self.attn.decode(x, keys, values, start, mask, r_w_bias, r_r_bias)
        return self._residuals(x, attn, True), keys, values

    def key_values(self, x):
        """Decode-buffer keys and values of this layer's inputs x (``attention.key_values``)."""
        return self.attn.key_values(x)


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

    def _inputs(self, segment: Segment, carry: Carry) -> jax.Array:
        """concat(M_n, S_n, M_n): [B, Q, d] with Q = 2m + 3K."""
        return jnp.concatenate([carry.memory, self.embed(segment), carry.memory], axis=1)

    def _mask(self, carry: Carry) -> tuple[jax.Array, jax.Array]:
        """The segment mask with invalid cache entries removed, [B, Q, C + Q], and key validity [B, C + Q]."""
        b = carry.cache_valid.shape[0]
        static = jnp.asarray(config_mask(self.config))
        key_valid = jnp.concatenate([carry.cache_valid, jnp.ones((b, static.shape[0]), dtype=bool)], axis=1)
        return static[None] & key_valid[:, None, :], key_valid

    def _next_carry(self, carry: Carry, layer_inputs, write, key_valid) -> tuple[Carry, jax.Array]:
        """M_{n+1} (write outputs through the activation and MRV when on) and the cache of
        every layer (its last mem_len inputs, without gradient). Returns (carry, MRV attention)."""
        c = self.config
        if c.n_head_ca > 0:
            memory, attn = self.mrv(carry.memory, mrv_activation(c.mrv_act)(write))
        else:
            b, m = write.shape[:2]
            memory, attn = write, jnp.zeros((b, 0, m, m))
        if c.mem_len:
            cache = jnp.stack([jnp.concatenate([old, jax.lax.stop_gradient(x)], axis=1)[:, -c.mem_len:]
                               for old, x in zip(carry.cache, layer_inputs)])
            cache_valid = key_valid[:, -c.mem_len:]
        else:
            cache, cache_valid = carry.cache, carry.cache_valid
        return Carry(memory=memory, cache=cache, cache_valid=cache_valid), attn

    def decode_start(self, carry: Carry, num_keys: int | None = None) -> DecodeState:
        """Buffers for a new segment: keys and values of every layer's cache, zeros after it, for
        ``num_keys`` positions (default C + Q, all of them; at least the cache's C)."""
        c = self.config
        q_len = c.tokens_per_segment
        kv = [layer.key_values(cache) for layer, cache in zip(self.layers, carry.cache)]
        b = carry.memory.shape[0]
        inputs = tuple(jnp.zeros((b, q_len, c.d_model)) for _ in self.layers) if c.mem_len else ()
        state = DecodeState(keys=tuple(k for k, _ in kv), values=tuple(v for _, v in kv), inputs=inputs)
        return state.grow(c.mem_len + q_len if num_keys is None else num_keys)

    def _decode_rows(self, segment: Segment, carry: Carry, state: DecodeState, start, num: int):
        """Outputs [B, num, d] of positions start .. start + num - 1 and the state with them added."""
        c = self.config
        x = jax.lax.dynamic_slice_in_dim(self._inputs(segment, carry), start, num, axis=1)
        mask = jax.lax.dynamic_slice_in_dim(self._mask(carry)[0][..., :state.num_keys], start, num, axis=1)
        keys, values, inputs = [], [], []
        for i, layer in enumerate(self.layers):
            if c.mem_len:
                inputs.append(jax.lax.dynamic_update_slice_in_dim(state.inputs[i], x, start, axis=1))
            x, k, v = layer.decode(x, state.keys[i], state.values[i], start + c.mem_len, mask, self.r_w_bias,
                                   self.r_r_bias)
            keys.append(k)
            values.append(v)
        return x, DecodeState(keys=tuple(keys), values=tuple(values), inputs=tuple(inputs))

    def decode(self, segment: Segment, carry: Carry, state: DecodeState, start, num: int
               ) -> tuple[jax.Array, DecodeState]:
        """Incremental inference: the ``num`` positions start .. start + num - 1 of concat(M_n, S_n, M_n).

        Runs only these positions through the layers, against the buffers of ``state`` (every
        position they may attend to must already be in it) and adds their keys and values.
        Returns the logits [B, A] read at the last of them (the caller makes it an
        observation token) and the updated state. Deterministic. Equals ``__call__``'s logits
        there (``tests/rate_jax/test_rate_model.py``).
        """
        x, state = self._decode_rows(segment, carry, state, start, num)
        return self.head(x[:, -1]), state

    def decode_finish(self, segment: Segment, carry: Carry, state: DecodeState) -> Carry:
        """The carry for segment n+1 after incremental steps 0 .. K-1: runs the last action
        token and the write suffix (m + 1 positions); equals ``__call__(...).carry``."""
        c = self.config
        q_len = c.tokens_per_segment
        state = state.grow(c.mem_len + q_len)
        x, state = self._decode_rows(segment, carry, state, q_len - c.num_mem_tokens - 1, c.num_mem_tokens + 1)
        return self._next_carry(carry, state.inputs, x[:, 1:], self._mask(carry)[1])[0]

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

        x = self.drop(self._inputs(segment, carry), deterministic=deterministic)
        q_len = x.shape[1]
        mask, key_valid = self._mask(carry)
        blocks = query_blocks(config_mask(c), max(1, min(QUERY_BLOCKS, q_len // MIN_BLOCK_ROWS)))
        layer_inputs = []
        for layer, cache in zip(self.layers, carry.cache):
            layer_inputs.append(x)
            x = layer(x, cache, mask, self.r_w_bias, self.r_r_bias, deterministic, blocks)
        logits = self.head(x[:, m + 1:m + 3 * k_steps:3])
        write = x[:, q_len - m:]
        new_carry, attn = self._next_carry(carry, layer_inputs, write, key_valid)
        return SegmentOutput(logits=logits, carry=new_carry, write=write, mrv_attention=attn)


def step_groups(config: ModelConfig, num_groups: int) -> tuple[tuple[int, int, int], ...]:
    """Steps 1 .. K-1 of incremental inference in ``num_groups`` near-equal ranges [lo, hi), each with
    the key positions its queries may attend to, cache included (:func:`rate_jax.masks.key_extent`):
    ``((lo, hi, num_keys), ...)``. Decoding a group with buffers of ``num_keys`` positions
    (:meth:`DecodeState.grow`) gives the same outputs, since every later key is masked; the first
    group's buffers also serve step 0 (the prefix memory and R_0, o_0, earlier rows)."""
    k, m = config.segment_len, config.num_mem_tokens
    if not (isinstance(num_groups, int) and 1 <= num_groups <= max(k - 1, 1)):
        raise ValueError(f"num_groups must be an integer in [1, {max(k - 1, 1)}], got {num_groups!r}")
    mask = config_mask(config)
    bounds = np.linspace(1, k, num_groups + 1).round().astype(int)
    return tuple((int(lo), int(hi), key_extent(mask, 0, m + 3 * (hi - 1) + 2)) for lo, hi in zip(bounds[:-1], bounds[1:]))


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
    """Segment recurrence as ``lax.scan`` (the paper's Algorithm 1): M_{n+1}, cache_{n+1} from segment n.

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

    # a short recurrence (training: N = 3) is unrolled: the rolled loop's stacked residuals
    # cost about a quarter of the backward pass on a CPU (measured at the bench configuration)
    _, outs = jax.lax.scan(body, carry, (segments, keys), unroll=num if num <= MAX_UNROLL else 1)
    return outs

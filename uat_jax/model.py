"""The decision Transformer family: UAT and its baselines (UAT paper, sections 2, 4, 6.1).

One flax module, ``DecisionTransformer``, whose ``cfg.kind`` chooses the tokens:

- ``vt``, ``gtrxl``, ``uat``: x_j = LN(W^E o_j + p_j) (section 2, Appendix A.1);
- ``adt``: x_j = LN(W^E [o_j; onehot(a_{j-1}); r_{j-1}] + p_j) (Proposition 2, A-DT);
- ``dt``: three tokens per step, (a_{t-1}, R_t, o_t), each with its own embedding and
  a learned position over the 3T tokens; logits are read at the o_t token. Reading of
  "DT-style" for online causal rollouts: the return-to-go is the DT test-time rule
  R_t = G - sum_{s<t} r_s with a fixed target G (``dt_target_return``), used in training
  too, so it depends on shifted rewards only. Starting the triplet with a_{t-1} (a zero
  start token at t = 1) is DT's interleaving (R_t, o_t, a_t) shifted by one token.

Blocks are pre-LN: x <- x + Attn(LN(x)), x <- x + FFN(LN(x)) (ReLU FFN of width d_ff),
then a final LN and the task head pi = softmax(W_head h_t^(L) + b_head) of section 4.2
(reading of the lost block equations: pre-LN, as the paper only says the FFN and LN are
deterministic maps of the attention output). GTrXL (``uat_jax.gtrxl``) adds the
Transformer-XL memory (segments of ``gtrxl_mem_len`` steps attending to the previous
segment's stop-gradient layer inputs), a GRU gate on the attention residual and the
identity-map reordering (ReLU on both sub-layer outputs). UAT feeds
the utility u_j (local gates, every layer) and rho_t (all layers) to the attention.

Where an action is a portfolio allocation (Domain C, ``uat_jax.markets``), a_{j-1} is fed as the
allocation vector in place of the one-hot (``feedback.action_vector``): f_a, A-DT's and DT-style's
action embeddings are linear in it.

The module maps one chunk of n environment steps (obs, a_{j-1}, r_{j-1}) and a
``DecodeCache`` to (logits [n, A], new cache): the whole episode with a fresh cache is
the causally masked parallel forward pass; one step at a time is causal inference.

A ``cfg.traced_variant`` model is the union of the ``config.SWITCHED`` family (UAT, its
Table 4 ablations, Vanilla-TF, A-DT), run as member ``variant`` (a traced int): the switches
become 0/1 multipliers (``utility.Switches``) on f_a(a), r, the Q-pathway regime state
(so rho = 0), the KV-pathway utility (so g = 0), the U gate terms and the fed pair in the
token's input (A-DT's), and the encoder output is selected between the MLP and the linear
map. A 1 multiplies by exactly 1.0, a 0 gives exactly the zero gates of the static switch
(q = W_Q x, k = W_K x, v = W_V x at g = rho = 0, Vanilla-TF's attention) and zero feedback
columns in the token's input (so W^E [o; 0; 0] = W^E_o o, the observation-only embedding), so
member i computes what the static member computes, up to the rounding of those zero terms.
The parameters a member lacks exist but have no effect and get zero
gradient (AdamW only decays them); they are not parameters of the member and count in
no reported parameter count. :func:`init_params` gives every parameter the member has
the value the static member's initialisation gives it (same key, same routing); a member
without A-DT's input gets its static observation embedding and zero rows for the feedback
columns, which then stay zero (no gradient reaches them, and AdamW decays zero to zero).
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct, traverse_util

from uat_jax.attention import FeedbackAttention, KVCache, empty_kv
from uat_jax.config import SWITCHED, ModelConfig, member
from uat_jax.feedback import action_vector, shift
from uat_jax.gtrxl import GRUGate
from uat_jax.utility import GateReadout, Switches, UtilityEncoder, regime_state, switched


@struct.dataclass
class DecodeCache:
    """Everything a causal step needs from the steps before it."""

    step: jax.Array  # [] int32, environment steps already consumed
    kv: KVCache  # keys / values [L, H, d_m, N]
    regime: jax.Array  # [d_u] ubar of the last consumed step (UAT)
    reward_sum: jax.Array  # [] sum of the rewards fed so far (DT-style return-to-go)


def init_cache(cfg: ModelConfig) -> DecodeCache:
    """The empty cache of one sequence."""
    kv = jax.tree.map(lambda a: jnp.zeros((cfg.n_layers,) + a.shape, a.dtype), empty_kv(cfg))
    return DecodeCache(step=jnp.zeros((), jnp.int32), kv=kv, regime=jnp.zeros(cfg.d_u),
                       reward_sum=jnp.zeros(()))


class Block(nn.Module):
    """One pre-LN Transformer layer (plain residuals, or a GTrXL layer); scanned
    over the L layers, so every parameter and cache entry has a leading layer axis."""

    cfg: ModelConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, x, kv: KVCache, positions, rho, u, bias_scale):
        cfg = self.cfg
        gtrxl = cfg.kind == "gtrxl"
        drop = lambda y: nn.Dropout(cfg.dropout)(y, deterministic=self.deterministic)  # noqa: E731
        ln_attn = nn.LayerNorm(name="ln_attn")
        memory = ln_attn(jax.lax.stop_gradient(x)) if gtrxl else None
        y, kv = FeedbackAttention(cfg, name="attn")(ln_attn(x), positions, rho, u, kv, memory,
                                                  bias_scale)
        if gtrxl:  # identity-map reordering, GRU-gated attention residual (uat_jax.gtrxl)
            x = GRUGate(cfg.gtrxl_gate_bias, name="gate_attn")(x, nn.relu(drop(y)))
        else:
            x = x + drop(y)
        y = nn.LayerNorm(name="ln_ff")(x)
        y = nn.Dense(cfg.d_model, name="ff_out")(nn.relu(nn.Dense(cfg.d_ff, name="ff_in")(y)))
        y = drop(y)
        return x + (nn.relu(y) if gtrxl else y), kv


class DecisionTransformer(nn.Module):
    """UAT / Vanilla-TF / A-DT / DT-style / GTrXL policy over one episode; ``variant``
    (int, traceable) is the ``SWITCHED`` member a ``cfg.traced_variant`` model runs as."""

    cfg: ModelConfig
    variant: jax.Array | None = None

    @nn.compact
    def __call__(self, obs: jax.Array, prev_action: jax.Array, prev_reward: jax.Array,
                 cache: DecodeCache, deterministic: bool = True) -> tuple[jax.Array, DecodeCache]:
        """obs [n, obs_dim], prev_action [n] int (-1 = none) or [n, A] allocation
        (``feedback.action_vector``), prev_reward [n] for the steps cache.step .. cache.step + n - 1;
        returns (logits [n, A], cache)."""
        cfg = self.cfg
        sw = self._switches()
        n = obs.shape[0]
        chex.assert_shape(obs, (n, cfg.obs_dim))
        chex.assert_shape(prev_reward, (n,))
        chex.assert_shape(prev_action, (n,) if jnp.issubdtype(prev_action.dtype, jnp.integer) else (n, cfg.n_actions))
        prev_reward = prev_reward.astype(obs.dtype)
        tokens, reward_sum = self._tokens(obs, prev_action, prev_reward, cache.reward_sum, sw)
        k = cfg.tokens_per_step
        positions = cache.step * k + jnp.arange(n * k)
        pos_table = self.param("pos_embed", nn.initializers.normal(0.02), (cfg.context, cfg.d_model))
        x = nn.LayerNorm(name="embed_norm")(tokens + jax.lax.dynamic_slice_in_dim(pos_table, positions[0], n * k))
        x = nn.Dropout(cfg.dropout)(x, deterministic=deterministic)

        rho, u, regime = None, None, cache.regime
        if cfg.has_utility:
            u_steps = UtilityEncoder(cfg, name="utility_encoder")(prev_action, prev_reward, sw)
            if cfg.modulate_q:
                ubar = regime_state(u_steps, cache.regime, cfg.ema_decay)
                rho = GateReadout(cfg.n_heads, cfg.d_head, name="regime_readout")(switched(sw, "modulate_q", ubar))
                self.sow("intermediates", "regime_gate", rho)  # [n, H, d_m] (Figure 3 right; regime_gate_norms)
                regime = ubar[-1]
            if cfg.modulate_kv:
                u = switched(sw, "modulate_kv", u_steps)

        # The L layers are unrolled. In a decoding step (n = 1) a rolled loop over the layer axis of a
        # cache that vmap has put behind the batch axes transposes the whole cache in and out at every step
        # (uat.sepsis's training rollout: 616 -> 400 ms an epoch with the position-last KVCache); in the
        # parallel pass its slices of the stacked parameters and gradients cost about a tenth of an epoch
        # (uat.sepsis's quick union, 4 cells a call: 31.0 -> 27.6 ms a cell and epoch; DarkRoom's: 12.1 -> 11.0).
        layers = nn.scan(Block, variable_axes={"params": 0, "intermediates": 0},
                         split_rngs={"params": True, "dropout": True},
                         in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                         length=cfg.n_layers, unroll=cfg.n_layers)
        bias_scale = None if sw is None else sw.utility_bias
        x, kv = layers(cfg, deterministic, name="blocks")(x, cache.kv, positions, rho, u, bias_scale)
        h = nn.LayerNorm(name="final_norm")(x).reshape(n, k, cfg.d_model)[:, -1]
        logits = nn.Dense(cfg.n_actions, name="head")(h)
        new_cache = DecodeCache(step=cache.step + n, kv=kv, regime=regime, reward_sum=reward_sum)
        return logits, new_cache

    def _switches(self) -> Switches | None:
        """The traced switches of member ``variant``, or None for a static model."""
        if self.cfg.traced_variant != (self.variant is not None):
            raise ValueError("variant must be given exactly when cfg.traced_variant is True, got "
                             f"traced_variant={self.cfg.traced_variant}, variant={self.variant!r}")
        return None if self.variant is None else Switches.of(self.variant)

    def _tokens(self, obs, prev_action, prev_reward, reward_sum, sw):
        """Token embeddings [n * k, d] before positions, and the updated reward sum. The traced
        union embeds A-DT's input for every member, the fed pair times the member's
        ``input_feedback`` switch (0: the observation alone, as Vanilla-TF and UAT embed it)."""
        cfg = self.cfg
        embed = lambda name, z: nn.Dense(cfg.d_model, name=name)(z)
        onehot = action_vector(prev_action, cfg.n_actions)
        rtg = returns_to_go(prev_reward, reward_sum, cfg.dt_target_return)
        if cfg.kind == "adt" or sw is not None:
            fed = switched(sw, "input_feedback", jnp.concatenate([onehot, prev_reward[:, None]], -1))
            tok = embed("obs_embed", jnp.concatenate([obs, fed], -1))
        elif cfg.kind == "dt":
            tok = jnp.stack([embed("action_embed", onehot), embed("rtg_embed", rtg[:, None]),
                             embed("obs_embed", obs)], axis=1).reshape(-1, cfg.d_model)
        else:
            tok = embed("obs_embed", obs)
        return tok, reward_sum + prev_reward.sum()


def returns_to_go(prev_reward: jax.Array, reward_sum: jax.Array, target: float) -> jax.Array:
    """DT test-time return-to-go R_t = G - sum_{s<t} r_s for the steps of a chunk, from the
    shifted rewards r_{t-1} [n] and the sum of the rewards fed before the chunk."""
    return target - (reward_sum + jnp.cumsum(prev_reward))


def parallel_logits(model: DecisionTransformer, params, obs: jax.Array, prev_action: jax.Array,
                    prev_reward: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
    """Causally masked parallel forward pass over one sequence (section 4.3): logits [T, A] at
    every step from obs [T, obs_dim] and the fed pairs (prev_action, prev_reward) [T] as given
    (already shifted; Domain C feeds allocation vectors [T, N + 1]). Dropout is active when
    ``dropout_key`` is given."""
    rngs = None if dropout_key is None else {"dropout": dropout_key}
    logits, _ = model.apply(params, obs, prev_action, prev_reward, init_cache(model.cfg),
                            deterministic=dropout_key is None, rngs=rngs)
    return logits


def sequence_logits(model: DecisionTransformer, params, obs: jax.Array, actions: jax.Array,
                    rewards: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
    """:func:`parallel_logits` over one episode from the *unshifted* actions / fed rewards [T];
    the shift happens here."""
    return parallel_logits(model, params, obs, *shift(actions, rewards), dropout_key)


def regime_gates(model: DecisionTransformer, params, obs: jax.Array, prev_action: jax.Array,
                 prev_reward: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(||rho_t||_2, ||W ubar_t||_2)``, each [T] over heads and head dimensions: the regime gate and its
    pre-activation (the gate before its tanh, which keeps varying where the tanh saturates, every |rho| near 1:
    docs/uat.md, "The regime gate saturates") in the parallel pass over one episode with the fed (already
    shifted) pairs as given (Figure 3 right); zeros for a model without the Q-pathway regime gate (a traced
    union run as such a member gives zeros itself)."""
    if not (model.cfg.has_utility and model.cfg.modulate_q):
        return jnp.zeros(obs.shape[0]), jnp.zeros(obs.shape[0])
    _, state = model.apply(params, obs, prev_action, prev_reward, init_cache(model.cfg), mutable=["intermediates"])
    (rho,) = state["intermediates"]["regime_gate"]
    (pre,) = state["intermediates"]["regime_readout"]["pre_activation"]
    return jnp.sqrt(jnp.sum(rho**2, axis=(-2, -1))), jnp.sqrt(jnp.sum(pre**2, axis=(-2, -1)))


def regime_gate_norms(model: DecisionTransformer, params, obs: jax.Array, prev_action: jax.Array,
                      prev_reward: jax.Array) -> jax.Array:
    """||rho_t||_2 [T] of :func:`regime_gates`."""
    return regime_gates(model, params, obs, prev_action, prev_reward)[0]


# The parameters whose static initialisation in a member differs from the union's: Flax numbers the random
# draws of a scope in creation order, and these members create fewer utility projections than the union
# (found by comparing every member's static initialisation with the union's; tests/uat_jax/test_switched.py
# checks every member's parameters bitwise). Every other parameter a member has is drawn as in the union.
REDRAWN = {"no_q": ("W_K_u", "W_V_u"), "no_kv": ("W_Q_u",), "no_bias": ("W_Q_u", "W_K_u", "W_V_u")}


def init_params(model: DecisionTransformer, key: jax.Array):
    """Parameters for one episode-length input. A ``traced_variant`` model gets the
    union's initialisation, with the parameters of ``REDRAWN`` replaced by the value that
    member ``model.variant``'s static initialisation from the same key gives them (each
    such member is initialised and the variant's row selected, so ``variant`` may be
    traced), and the observation embedding of every member but A-DT replaced by its static
    one (UAT's draw over the observation columns) padded with zero rows for the feedback
    columns (A-DT's draw is the union's: same module, shape and fan-in): every parameter
    the member has is its static initialisation."""
    cfg = model.cfg
    T = cfg.horizon
    args = (jnp.zeros((T, cfg.obs_dim)), jnp.zeros(T, jnp.int32), jnp.zeros(T), init_cache(cfg))
    params = model.init(key, *args)
    if not cfg.traced_variant:
        return params
    flat = traverse_util.flatten_dict(params)
    own = {name: traverse_util.flatten_dict(DecisionTransformer(member(cfg, name)).init(key, *args))
           for name in REDRAWN}
    for path in flat:
        if any(path[-1] in names for names in REDRAWN.values()):
            rows = [own[name][path] if path[-1] in REDRAWN.get(name, ()) else flat[path] for name in SWITCHED]
            flat[path] = jnp.stack(rows)[model.variant]
    path = ("params", "obs_embed", "kernel")
    static_uat = own[next(name for name in REDRAWN if member(cfg, name).kind == "uat")]  # UAT's embedding draw
    observation_only = jnp.zeros_like(flat[path]).at[:cfg.obs_dim].set(static_uat[path])
    flat[path] = jnp.where(model.variant == SWITCHED.index("adt"), flat[path], observation_only)
    return traverse_util.unflatten_dict(flat)

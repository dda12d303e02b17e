"""GTrXL (Parisotto et al. 2020, arXiv 1910.06764) and the parameter counts of Table 6.

The model's GTrXL (one masked parallel pass, KV cache) against an independent
segment-by-segment Transformer-XL written here with explicit concatenation of the
stop-gradient memory; chunked causal decoding against the parallel pass; the receptive
field of the recurrence (L segments back); and every kind's parameter count from its
real initialisation against the hand arithmetic of docs/uat.md section 6.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import random_tree
from uat_jax.config import ModelConfig
from uat_jax.feedback import shift
from uat_jax.model import DecisionTransformer, init_cache, init_params, sequence_logits
from uat_jax.theory import count

T, S = 8, 3  # segments [0, 3), [3, 6), [6, 8)
CFG = tiny("gtrxl", horizon=T, gtrxl_mem_len=S)
MODEL = DecisionTransformer(CFG)


def _episode(seed, horizon=T):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    obs = jax.random.bernoulli(k1, 0.4, (horizon, 10)).astype(jnp.float32)
    return obs, jax.random.randint(k2, (horizon,), 0, 5), jax.random.normal(k3, (horizon,))


def _params(model, seed=0):
    cfg = model.cfg
    return random_tree(model.init, jnp.zeros((cfg.horizon, cfg.obs_dim)), jnp.zeros(cfg.horizon, jnp.int32),
                       jnp.zeros(cfg.horizon), init_cache(cfg), seed=seed)


PARAMS = _params(MODEL)
parallel = jax.jit(lambda p, o, a, r: sequence_logits(MODEL, p, o, a, r))


# ---------------------------------------------------------------- reference Transformer-XL

def _ln(x, p):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-6) * p["scale"] + p["bias"]


def _dense(x, p):
    return x @ p["kernel"] + p.get("bias", 0.0)


def reference_gtrxl(params, obs):
    """Segment-by-segment GTrXL: for each layer and segment, attention over
    LN([StopGrad(memory); segment]) with queries from the segment (causal), the gate
    (1 - z) x + z tanh(W_g y), z = sigmoid(W_z y + U_z x - 2), then x + relu(FFN(LN(x)))."""
    p = params["params"]
    n, H, dm = obs.shape[0], CFG.n_heads, CFG.d_head
    x = _ln(_dense(obs, p["obs_embed"]) + p["pos_embed"][:n], p["embed_norm"])
    for layer in range(CFG.n_layers):
        b = jax.tree.map(lambda a, i=layer: a[i], p["blocks"])
        a = b["attn"]
        outs = []
        for s0 in range(0, n, S):
            cur = x[s0:s0 + S]
            mem = jax.lax.stop_gradient(x[max(0, s0 - S):s0])
            ctx = _ln(jnp.concatenate([mem, cur]), b["ln_attn"])
            proj = lambda z, w: jnp.einsum("nd,dhm->nhm", z, w["kernel"]) + w["bias"]  # noqa: E731
            q = proj(_ln(cur, b["ln_attn"]), a["W_Q"])
            k, v = proj(ctx, a["W_K"]), proj(ctx, a["W_V"])
            m, c = mem.shape[0], cur.shape[0]
            scores = jnp.einsum("qhm,khm->hqk", q, k) / np.sqrt(dm)
            allowed = np.arange(m + c)[None, :] <= m + np.arange(c)[:, None]
            w = jax.nn.softmax(jnp.where(allowed, scores, -jnp.inf), -1)
            y = jnp.einsum("hqk,khm->qhm", w, v).reshape(c, H * dm) @ a["W_O"]["kernel"].reshape(H * dm, -1)
            y = jax.nn.relu(y + a["W_O"]["bias"])
            g = b["gate_attn"]
            z = jax.nn.sigmoid(_dense(y, g["W_z"]) + cur @ g["U_z"]["kernel"] - CFG.gtrxl_gate_bias)
            e = (1 - z) * cur + z * jnp.tanh(y @ g["W_g"]["kernel"])
            f = _dense(jax.nn.relu(_dense(_ln(e, b["ln_ff"]), b["ff_in"])), b["ff_out"])
            outs.append(e + jax.nn.relu(f))
        x = jnp.concatenate(outs)
    return _dense(_ln(x, p["final_norm"]), p["head"])


def test_parallel_pass_is_segment_by_segment_transformer_xl():
    obs, actions, rewards = _episode(1)
    np.testing.assert_allclose(parallel(PARAMS, obs, actions, rewards), jax.jit(reference_gtrxl)(PARAMS, obs),
                               rtol=2e-5, atol=2e-5)


def test_gradients_are_those_of_truncated_backpropagation_through_segments():
    """A loss on the last segment: no gradient reaches the observations of earlier
    segments (their hidden states enter only as stop-gradient memory), yet the parameter
    gradient, memory path included, is that of the segment-by-segment reference."""
    obs, actions, rewards = _episode(2)
    weights = jax.random.normal(jax.random.key(3), (T, CFG.n_actions)) * (jnp.arange(T) >= 6)[:, None]
    model_loss = lambda p, o: jnp.sum(weights * sequence_logits(MODEL, p, o, actions, rewards))  # noqa: E731
    ref_loss = lambda p, o: jnp.sum(weights * reference_gtrxl(p, o))  # noqa: E731
    g_obs = np.asarray(jax.jit(jax.grad(model_loss, argnums=1))(PARAMS, obs))
    assert np.abs(g_obs[:6]).max() == 0.0 and np.abs(g_obs[6:]).max() > 1e-3
    g_model, g_ref = jax.jit(jax.grad(model_loss))(PARAMS, obs), jax.jit(jax.grad(ref_loss))(PARAMS, obs)
    for a, b in zip(jax.tree.leaves(g_model), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sizes", [[1] * T, [S, S, 2], [2, 2, 2, 2], [5, 3], [4, 1, 3]])
def test_chunked_causal_decoding_equals_the_parallel_pass(sizes):
    obs, actions, rewards = _episode(4)
    prev_a, prev_r = shift(actions, rewards)
    step = jax.jit(MODEL.apply)
    cache, outs, t = init_cache(CFG), [], 0
    for n in sizes:
        out, cache = step(PARAMS, obs[t:t + n], prev_a[t:t + n], prev_r[t:t + n], cache)
        outs.append(out)
        t += n
    np.testing.assert_allclose(np.concatenate(outs), parallel(PARAMS, obs, actions, rewards), rtol=1e-5, atol=1e-5)


def test_the_recurrence_reaches_back_exactly_n_layers_segments():
    """With segments of 2 steps and L = 2 layers, the last segment (steps 6, 7) depends
    on segments 1-3 and not on segment 0: information crosses one segment per layer."""
    cfg = tiny("gtrxl", horizon=T, gtrxl_mem_len=2)
    model = DecisionTransformer(cfg)
    params = _params(model, seed=5)
    obs, actions, rewards = _episode(6)
    logits = jax.jit(lambda o: sequence_logits(model, params, o, actions, rewards))
    base = logits(obs)
    flip = lambda lo, hi: logits(obs.at[lo:hi].set(1.0 - obs[lo:hi]))[6:]  # noqa: E731
    np.testing.assert_array_equal(flip(0, 2), base[6:])
    assert np.abs(flip(2, 4) - base[6:]).max() > 1e-4  # two segments back: through the layer-1 memory


# ---------------------------------------------------------------- parameter counts (Table 6)

def _backbone(cfg: ModelConfig) -> int:
    """Vanilla-TF by hand: embedding + positions + LN, L pre-LN layers, final LN + head."""
    d, f, A = cfg.d_model, cfg.d_ff, cfg.n_actions
    embed = cfg.obs_dim * d + d + cfg.context * d + 2 * d
    layer = 2 * (2 * d) + 3 * (d * d + d) + (d * d + d) + (d * f + f) + (f * d + d)
    return embed + cfg.n_layers * layer + 2 * d + d * A + A


def _expected(cfg: ModelConfig) -> int:
    L, d, H, dm, du = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_u
    if cfg.kind == "vt":
        return _backbone(cfg)
    if cfg.kind == "gtrxl":  # one gate per layer: W_z, U_z, W_g and the bias b_z
        return _backbone(cfg) + L * (3 * d * d + d)
    encoder = cfg.n_actions * cfg.d_act + (cfg.d_act + 1) * cfg.ue_hidden + cfg.ue_hidden + cfg.ue_hidden * du + du
    return _backbone(cfg) + 3 * L * d * d + 3 * L * H * dm * dm + (L + 1) * H * dm * du + encoder


@pytest.mark.parametrize("kind", ["vt", "gtrxl", "uat"])
@pytest.mark.parametrize("cfg", [ModelConfig(), ModelConfig(d_model=24, n_heads=3, d_ff=40, n_layers=2, horizon=7,
                                                            n_actions=4, d_u=5, d_act=3, ue_hidden=6)])
def test_parameter_count_of_the_real_initialisation_matches_the_hand_formula(kind, cfg):
    cfg = ModelConfig(**{**cfg.__dict__, "kind": kind})
    model = DecisionTransformer(cfg)
    assert count(jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))) == _expected(cfg)


@pytest.mark.parametrize("kind, table6", [("vt", 109_828), ("gtrxl", 146_884), ("uat", 155_972)])
def test_parameter_counts_at_table3_sizes_within_5_percent_of_table6(kind, table6):
    """Like-for-like baselines: each model at the Table 3 sizes within 5% of the paper's Table 6 count."""
    assert abs(_expected(ModelConfig(kind=kind)) / table6 - 1.0) <= 0.05

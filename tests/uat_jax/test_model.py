"""UAT and baselines: Eqs. 14-16 against numpy, the shift, zero degradation,
Proposition 1, the ablation switches and gradient flow into the gates."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from tests.uat_jax.conftest import tiny
from uat_jax.attention import FeedbackAttention, empty_kv
from uat_jax.config import ABLATIONS, KINDS, ablation
from uat_jax.feedback import shift
from uat_jax.gtrxl import GRUGate
from uat_jax.model import DecisionTransformer, init_cache, regime_gate_norms, regime_gates, returns_to_go, sequence_logits
from uat_jax.theory import backbone_params, zero_gates
from uat_jax.utility import GateReadout, UtilityEncoder, regime_state

T = 6
ZERO_INIT = ("local_gate", "regime_readout", "U_Q", "U_K", "U_V")


def episode(seed):
    """A random episode: obs [T, 10] (binary like DarkRoom), actions [T], rewards [T]."""
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    obs = jax.random.bernoulli(k1, 0.4, (T, 10)).astype(jnp.float32)
    return obs, jax.random.randint(k2, (T,), 0, 5), jax.random.normal(k3, (T,))


def random_tree(init, *args, seed=0):
    """Every parameter of ``init(key, *args)`` drawn N(0, 0.3^2), from its shapes only
    (no init program to compile)."""
    shapes = jax.eval_shape(init, jax.random.key(0), *args)
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), s.dtype), shapes)


def random_params(model, seed):
    cfg = model.cfg
    return random_tree(model.init, jnp.zeros((T, cfg.obs_dim)), jnp.zeros(T, jnp.int32),
                       jnp.zeros(T), init_cache(cfg), seed=seed)


@functools.cache
def model_and_params(kind, ablation_name=None):
    cfg = tiny(kind, gtrxl_mem_len=2)  # GTrXL: three segments of the T = 6 steps
    if ablation_name:
        cfg = ablation(cfg, ablation_name)
    model = DecisionTransformer(cfg)
    logits = jax.jit(lambda p, o, a, r: sequence_logits(model, p, o, a, r))
    return model, random_params(model, 0), logits


# ---------------------------------------------------------------- equations vs numpy

def np_attention(p, x, rho, u, d_head):
    """Independent numpy Eqs. 14-16 and causal softmax attention, head by head."""
    n, _ = x.shape
    heads = []
    for h in range(p["W_Q"]["kernel"].shape[1]):
        proj = {}
        for name, gate in (("Q", rho[:, h]), ("K", None), ("V", None)):
            rows = []
            for j in range(n):
                gj = gate[j] if name == "Q" else np.tanh(p["local_gate"]["W"][h] @ u[j])
                w = p[f"W_{name}"]["kernel"][:, h, :].T + np.diag(gj) @ p[f"W_{name}_u"][h]
                rows.append(w @ x[j] + p[f"W_{name}"]["bias"][h] + p[f"U_{name}"][h] @ gj)
            proj[name] = np.array(rows)
        out = np.zeros((n, d_head))
        for t in range(n):
            scores = np.array([proj["Q"][t] @ proj["K"][j] / np.sqrt(d_head) for j in range(t + 1)])
            w = np.exp(scores - scores.max())
            out[t] = (w / w.sum()) @ proj["V"][: t + 1]
        heads.append(out)
    concat = np.stack(heads, 1)  # [n, H, d_m]
    return np.einsum("nhm,hmd->nd", concat, p["W_O"]["kernel"]) + p["W_O"]["bias"]


def test_feedback_attention_matches_numpy(rng):
    cfg = tiny("uat", horizon=5)
    att = FeedbackAttention(cfg)
    x = rng.normal(size=(5, cfg.d_model)).astype(np.float32)
    rho = rng.uniform(-1, 1, (5, cfg.n_heads, cfg.d_head)).astype(np.float32)
    u = rng.normal(size=(5, cfg.d_u)).astype(np.float32)
    params = random_tree(att.init, x, jnp.arange(5), rho, u, empty_kv(cfg))
    out, _ = att.apply(params, x, jnp.arange(5), rho, u, empty_kv(cfg))
    expected = np_attention(jax.tree.map(np.asarray, params["params"]), x, rho, u, cfg.d_head)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)


def test_initialisation_of_section_4_3():
    """W_s = 0 (bias-free), U = 0, W^(u) ~ N(0, 0.1^2): every utility term starts gated out."""
    cfg = tiny("uat", d_model=64, n_heads=4)
    x, u = jnp.zeros((T, cfg.d_model)), jnp.ones((T, cfg.d_u))
    rho = jnp.zeros((T, cfg.n_heads, cfg.d_head))
    p = jax.jit(FeedbackAttention(cfg).init)(jax.random.key(0), x, jnp.arange(T), rho, u, empty_kv(cfg))
    p = p["params"]
    assert set(p["local_gate"]) == {"W"} and float(jnp.abs(p["local_gate"]["W"]).max()) == 0.0
    for name in ("Q", "K", "V"):
        assert float(jnp.abs(p[f"U_{name}"]).max()) == 0.0
        w = np.asarray(p[f"W_{name}_u"]).ravel()  # 4096 draws: std within 5 % of 0.1
        assert abs(w.std() - 0.1) < 0.005 and abs(w.mean()) < 0.01


def test_utility_encoder_gates_and_regime_match_numpy(rng):
    cfg = tiny("uat")
    prev_a = jnp.array([-1, 0, 4, 2, 2, 1])
    prev_r = jnp.array([0.0, 0.49, -0.51, 2.49, 1.99, -0.01])
    enc = UtilityEncoder(cfg)
    p = random_tree(enc.init, prev_a, prev_r)["params"]
    u = np.asarray(enc.apply({"params": p}, prev_a, prev_r))
    table, w1, b1 = p["action_embedding"], p["hidden"]["kernel"], p["hidden"]["bias"]
    for j in range(T):
        f_a = np.zeros(cfg.d_act) if prev_a[j] < 0 else np.asarray(table[prev_a[j]])
        z = np.concatenate([f_a, [prev_r[j]]])
        expected = np.maximum(z @ w1 + b1, 0) @ p["out"]["kernel"] + p["out"]["bias"]
        np.testing.assert_allclose(u[j], expected, rtol=1e-5, atol=1e-6)
    # an allocation w fed as the action (Domain C): f_a = sum_k w_k table[k]
    alloc = jnp.asarray(rng.dirichlet(np.ones(cfg.n_actions), size=T), jnp.float32)
    u_alloc = np.asarray(enc.apply({"params": p}, alloc, prev_r))
    for j in range(T):
        z = np.concatenate([np.asarray(alloc[j]) @ np.asarray(table), [prev_r[j]]])
        expected = np.maximum(z @ w1 + b1, 0) @ p["out"]["kernel"] + p["out"]["bias"]
        np.testing.assert_allclose(u_alloc[j], expected, rtol=1e-5, atol=1e-6)
    # linear variant: u = W [f_a; r], no bias
    lin = UtilityEncoder(ablation(cfg, "linear"))
    pl = random_tree(lin.init, prev_a, prev_r)["params"]
    z1 = np.concatenate([pl["action_embedding"][4], [-0.51]])
    np.testing.assert_allclose(lin.apply({"params": pl}, prev_a, prev_r)[2], z1 @ pl["linear"]["kernel"],
                               rtol=1e-5, atol=1e-6)
    # regime state: closed form ubar_t = sum_s (1 - lam) lam^(t - s) u_s + lam^(t+1) ubar_0
    lam, ubar0 = 0.7, rng.normal(size=cfg.d_u)
    ubar = np.asarray(regime_state(jnp.asarray(u), jnp.asarray(ubar0, jnp.float32), lam))
    for t in range(T):
        closed = sum((1 - lam) * lam ** (t - s) * u[s] for s in range(t + 1)) + lam ** (t + 1) * ubar0
        np.testing.assert_allclose(ubar[t], closed, rtol=1e-5, atol=1e-6)
    # gate readout: tanh(W u) per head, zero at initialisation
    ro = GateReadout(cfg.n_heads, cfg.d_head)
    pr = ro.init(jax.random.key(0), jnp.asarray(u))
    assert float(jnp.abs(ro.apply(pr, jnp.asarray(u))).max()) == 0.0
    w = rng.normal(size=(cfg.n_heads, cfg.d_head, cfg.d_u)).astype(np.float32)
    np.testing.assert_allclose(ro.apply({"params": {"W": w}}, jnp.asarray(u)),
                               np.tanh(np.einsum("hmk,nk->nhm", w, u)), rtol=1e-5, atol=1e-6)


def test_gru_gate_matches_numpy(rng):
    x, y = rng.normal(size=(2, 4, 8)).astype(np.float32)
    gate = GRUGate(2.0)
    p = jax.tree.map(np.asarray, random_tree(gate.init, x, y)["params"])
    assert set(p) == {"W_z", "U_z", "W_g"} and set(p["W_z"]) == {"kernel", "bias"}
    sig = lambda a: 1 / (1 + np.exp(-a))
    z = sig(y @ p["W_z"]["kernel"] + p["W_z"]["bias"] + x @ p["U_z"]["kernel"] - 2.0)
    h = np.tanh(y @ p["W_g"]["kernel"])
    np.testing.assert_allclose(gate.apply({"params": p}, x, y), (1 - z) * x + z * h, rtol=1e-5, atol=1e-6)


def test_returns_to_go_matches_loop():
    r = np.array([0.0, 0.5, -0.5, 2.0])
    expected = [10.0 - 3.0 - sum(r[: t + 1]) for t in range(4)]
    np.testing.assert_allclose(returns_to_go(jnp.asarray(r), jnp.asarray(3.0), 10.0), expected, rtol=1e-6)


# ---------------------------------------------------------------- causality and the shift


@pytest.mark.parametrize("kind", ["uat", "adt", "dt"])
def test_an_allocation_feeds_the_weighted_sum_of_its_actions(kind):
    """An action fed as a float vector (Domain C's allocations, ``feedback.action_vector``): its
    one-hot gives the integer action's logits, the zero vector NO_ACTION's, and an even mixture of
    actions 0 and 1 gives logits of neither (the encoder's weighted sum is checked against numpy
    in ``test_utility_encoder_gates_and_regime_match_numpy``)."""
    model, params, _ = model_and_params(kind)
    obs, actions, rewards = episode(3)
    A = model.cfg.n_actions
    prev_a, prev_r = shift(actions, rewards)
    apply = jax.jit(lambda p, a: model.apply(p, obs, a, prev_r, init_cache(model.cfg))[0])
    as_ints = apply(params, prev_a)
    np.testing.assert_allclose(apply(params, jax.nn.one_hot(prev_a, A)), as_ints, atol=1e-6)
    np.testing.assert_allclose(apply(params, jnp.zeros((T, A))), apply(params, jnp.full(T, -1)), atol=1e-6)
    mixed = jnp.zeros((T, A)).at[:, 0].set(0.5).at[:, 1].set(0.5)
    out = apply(params, mixed)
    assert not np.allclose(out, apply(params, jnp.zeros(T, jnp.int32)), atol=1e-4)
    assert not np.allclose(out, apply(params, jnp.ones(T, jnp.int32)), atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_pass_equals_step_by_step_inference(kind):
    model, params, logits_fn = model_and_params(kind)
    obs, actions, rewards = episode(3)
    parallel = logits_fn(params, obs, actions, rewards)
    prev_a, prev_r = shift(actions, rewards)
    step = jax.jit(model.apply)
    cache, stepwise = init_cache(model.cfg), []
    for t in range(T):
        out, cache = step(params, obs[t:t + 1], prev_a[t:t + 1], prev_r[t:t + 1], cache)
        stepwise.append(out[0])
    np.testing.assert_allclose(parallel, np.stack(stepwise), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_no_model_sees_feedback_before_the_next_step(kind):
    """Perturbing (a_t, r_t) and every later observation leaves steps <= t unchanged;
    step t + 1 moves exactly for the feedback-aware kinds (Prop. 1 for vt, gtrxl)."""
    _, params, logits_fn = model_and_params(kind)
    obs, actions, rewards = episode(4)
    t = 2
    base = logits_fn(params, obs, actions, rewards)
    new_obs = obs.at[t + 1:].set(1.0 - obs[t + 1:])
    new_a = actions.at[t].set((actions[t] + 1) % 5)
    new_r = rewards.at[t].add(3.0)
    np.testing.assert_array_equal(logits_fn(params, new_obs, new_a, new_r)[: t + 1], base[: t + 1])
    moved = np.abs(logits_fn(params, obs, new_a, new_r) - base)
    assert moved[: t + 1].max() == 0.0
    if kind in ("vt", "gtrxl"):
        assert moved.max() == 0.0  # Proposition 1: observation-only models are feedback-blind
    else:
        assert moved[t + 1].max() > 1e-4


def test_batch_elements_are_independent():
    _, params, logits_fn = model_and_params("uat")
    eps = [episode(s) for s in (5, 6, 7)]
    batched = jax.vmap(logits_fn, in_axes=(None, 0, 0, 0))(params, *map(jnp.stack, zip(*eps)))
    for b, (o, a, r) in enumerate(eps):
        np.testing.assert_allclose(batched[b], logits_fn(params, o, a, r), rtol=1e-5, atol=1e-6)
    assert np.abs(batched[0] - batched[1]).max() > 1e-3


# ---------------------------------------------------------------- zero degradation and ablations

def test_zero_gates_recover_vanilla_transformer_exactly():
    """Section 4.2: with g = rho = 0 UAT is the Vanilla-TF with the same base weights,
    whatever W^(u) and U hold."""
    _, params, uat_logits = model_and_params("uat")
    _, _, vt_logits = model_and_params("vt")
    obs, actions, rewards = episode(8)
    vt = vt_logits(backbone_params(params), obs, actions, rewards)
    np.testing.assert_array_equal(uat_logits(zero_gates(params), obs, actions, rewards), vt)
    assert np.abs(uat_logits(params, obs, actions, rewards) - vt).max() > 1e-3  # gates do act


def zero_out(params, names):
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict(
        {p: jnp.zeros_like(v) if any(n in p for n in names) else v for p, v in flat.items()})


REMOVED = {"no_action": {"action_embedding"}, "no_reward": set(), "linear": None,
           "no_q": {"W_Q_u", "U_Q", "regime_readout"},
           "no_kv": {"W_K_u", "W_V_u", "U_K", "U_V", "local_gate"}, "no_bias": {"U_Q", "U_K", "U_V"}}


@pytest.mark.parametrize("name", [a for a in ABLATIONS if a != "linear"])
def test_ablation_removes_exactly_its_parameters_effect(name):
    model, full, full_logits = model_and_params("uat")
    _, ablated_init, ablated_logits = model_and_params("uat", name)
    full_paths = set(traverse_util.flatten_dict(full))
    abl_paths = set(traverse_util.flatten_dict(ablated_init))
    removed = {p[-1] if p[-1] not in ("W", "kernel", "bias") else p[-2] for p in full_paths - abl_paths}
    assert abl_paths <= full_paths and removed == REMOVED[name]
    # the ablated model on the full model's remaining weights = the full model with the
    # removed pathway zeroed (no-reward: the reward column of E's first layer)
    sub = traverse_util.unflatten_dict({p: v for p, v in traverse_util.flatten_dict(full).items()
                                        if p in abl_paths})
    if name == "no_reward":
        path = ("params", "utility_encoder", "hidden", "kernel")
        flat = traverse_util.flatten_dict(full)
        flat[path] = flat[path].at[-1].set(0.0)
        equivalent = traverse_util.unflatten_dict(flat)
    else:
        equivalent = zero_out(full, REMOVED[name])
    obs, actions, rewards = episode(9)
    out = ablated_logits(sub, obs, actions, rewards)
    np.testing.assert_allclose(out, full_logits(equivalent, obs, actions, rewards), rtol=1e-6, atol=1e-6)
    assert np.abs(out - full_logits(full, obs, actions, rewards)).max() > 1e-4


def test_linear_ablation_swaps_the_encoder_only():
    _, full, _ = model_and_params("uat")
    _, lin, _ = model_and_params("uat", "linear")
    enc_free = lambda tree: {p for p in traverse_util.flatten_dict(tree) if "utility_encoder" not in p}
    assert enc_free(full) == enc_free(lin)
    assert set(lin["params"]["utility_encoder"]) == {"action_embedding", "linear"}
    assert "bias" not in lin["params"]["utility_encoder"]["linear"]


# ---------------------------------------------------------------- gradients from zero init

def test_gradients_reach_the_gates_from_zero_initialisation():
    """At the section-4.3 initialisation (W_s = W_rho = 0, U = 0) every gate is 0, so
    only the readouts W_s, W_rho receive gradient (through W^(u) x != 0)."""
    model = DecisionTransformer(tiny("uat", dropout=0.0))
    params = zero_out(random_params(model, 1), ZERO_INIT)
    obs, actions, rewards = episode(10)
    labels = jnp.array([1, 2, 3, 4, 0, 1])

    def loss(p):
        logits = sequence_logits(model, p, obs, actions, rewards)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1).mean()

    grads = traverse_util.flatten_dict(jax.jit(jax.grad(loss))(params))
    norm = lambda key: float(sum(jnp.abs(v).sum() for p, v in grads.items() if key in p))
    assert norm("local_gate") > 1e-6 and norm("regime_readout") > 1e-6
    for silent in ("W_Q_u", "W_K_u", "W_V_u", "U_Q", "U_K", "U_V", "utility_encoder"):
        assert norm(silent) == 0.0, silent


def test_regime_gate_norms_match_the_encoder_ema_and_readout_by_hand():
    """||rho_t|| = || tanh(W ubar_t) || with ubar_t the EMA (from 0) of the encoder's u over the fed pairs: the
    norm over heads and head dimensions of the parallel pass; 0 for a model without the regime gate."""
    model, params, _ = model_and_params("uat")
    obs, actions, rewards = episode(7)
    prev_a, prev_r = shift(actions, rewards)
    norms = np.asarray(regime_gate_norms(model, params, obs, prev_a, prev_r))
    p = params["params"]
    u = np.asarray(UtilityEncoder(model.cfg).apply({"params": p["utility_encoder"]}, prev_a, prev_r))
    lam, ubar, want, want_pre = model.cfg.ema_decay, np.zeros(model.cfg.d_u), [], []
    w = np.asarray(p["regime_readout"]["W"])
    for t in range(T):
        ubar = lam * ubar + (1 - lam) * u[t]
        want.append(np.sqrt(np.sum(np.tanh(np.einsum("hmk,k->hm", w, ubar)) ** 2)))
        want_pre.append(np.sqrt(np.sum(np.einsum("hmk,k->hm", w, ubar) ** 2)))
    np.testing.assert_allclose(norms, want, rtol=1e-5)
    assert norms.shape == (T,) and np.all(norms > 0)
    gate, pre = regime_gates(model, params, obs, prev_a, prev_r)
    np.testing.assert_array_equal(gate, norms)
    np.testing.assert_allclose(pre, want_pre, rtol=1e-5)
    assert np.all(np.asarray(pre) > np.asarray(gate))  # |tanh x| < |x|
    vt, vt_params, _ = model_and_params("vt")
    np.testing.assert_array_equal(regime_gate_norms(vt, vt_params, obs, prev_a, prev_r), np.zeros(T))

"""Segment mask, forward pass, cache gradient, MRV and baselines of rate_jax against numpy references."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rate_reference as ref
from rate_jax import (MRV, RATE, VARIANTS, Carry, ModelConfig, Segment, mrv_activation, segment_mask, step_groups, unroll,
                      variant)

TINY = ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=2, d_model=8, n_head=2, d_head=4, d_inner=6,
                   mem_len=16, n_head_ca=2)


def random_segments(key, cfg, num_segments, batch):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    shape = (num_segments, batch, cfg.segment_len)
    return Segment(obs=jax.random.normal(k1, shape + (cfg.obs_dim,)),
                   actions=jax.random.randint(k2, shape, 0, cfg.num_actions),
                   rtg=jax.random.normal(k3, shape),
                   action_known=(jax.random.uniform(k4, shape) < 0.7).astype(jnp.float32))


def first(segs):
    return jax.tree.map(lambda x: x[0], segs)


@functools.cache
def shared_params():
    """Parameters of TINY; every variant below has a subset of them (segment_len, mem_len and
    the switches do not change parameter shapes), so one initialisation serves all tests."""
    seg = first(random_segments(jax.random.key(100), TINY, 1, 1))
    return jax.jit(RATE(TINY).init)(jax.random.key(101), seg)


@pytest.mark.parametrize("m,k,c,read", [(0, 6, 0, False), (2, 9, 4, False), (3, 6, 5, True), (1, 3, 0, False)])
def test_segment_mask_matches_token_roles(m, k, c, read):
    np.testing.assert_array_equal(segment_mask(k, m, c, read), ref.role_mask(m, k, c, read))


def test_segment_mask_properties():
    m, k, c = 2, 9, 4
    mask = segment_mask(k, m, c)
    seq = mask[:, c:]
    tokens = range(m, m + k)
    # prefix reads: every segment token sees every prefix memory token
    assert all(seq[i, :m].all() for i in tokens)
    # suffix writes: every suffix memory token sees the whole segment and the prefix
    assert seq[m + k:, :m + k].all()
    # nothing sees the future: a segment token sees no later token and no suffix token
    for i in tokens:
        assert not seq[i, i + 1:].any()
    # prefix memory sees neither the segment nor the suffix nor the cache
    assert not seq[:m, m:].any() and not mask[:m, :c].any()


def test_logits_do_not_see_future_but_memory_reads_and_writes():
    cfg = dataclasses.replace(TINY, mem_len=0)
    model = RATE(cfg)
    segs = random_segments(jax.random.key(0), cfg, 1, 2)
    seg = first(segs)
    params = shared_params()
    apply = jax.jit(model.apply)
    carry = model.apply(params, 2, method=RATE.initial_carry)
    base = apply(params, seg, carry)
    t = 1  # change everything from step t on (obs, rtg, action)
    future = seg.replace(obs=seg.obs.at[:, t:].add(5.0), rtg=seg.rtg.at[:, t:].add(3.0),
                         actions=(seg.actions.at[:, t:].add(1)) % cfg.num_actions,
                         action_known=seg.action_known.at[:, t:].set(1.0))
    out = apply(params, future, carry)
    np.testing.assert_allclose(out.logits[:, :t], base.logits[:, :t], atol=1e-6)
    assert np.abs(np.asarray(out.logits[:, t:] - base.logits[:, t:])).max() > 1e-3
    # the write (suffix) sees the last step of the segment
    last = seg.replace(obs=seg.obs.at[:, -1].add(5.0))
    assert np.abs(np.asarray(apply(params, last, carry).write - base.write)).max() > 1e-3
    # the read (prefix) changes the first logits
    other = carry.replace(memory=carry.memory + 1.0)
    assert np.abs(np.asarray(apply(params, seg, other).logits[:, 0] - base.logits[:, 0])).max() > 1e-3


@pytest.mark.parametrize("name", ["RATE", "TrXL", "DT"])
def test_incremental_decode_equals_the_full_segment(name):
    """Buffers filled step by step give every observation's logits and the next carry (memory,
    cache) of the parallel forward pass, in a second segment whose cache is partly valid
    (TrXL, RATE) and read by the tokens. The steps run in the evaluator's groups, with
    buffers only as long as each group's queries can see (``step_groups``)."""
    cfg, _ = variant(name, TINY, 2)
    model = RATE(cfg)
    params = shared_params()
    segs = random_segments(jax.random.key(12), cfg, 2, 3)
    start_carry = model.apply(params, 3, method=RATE.initial_carry)
    carry = jax.jit(model.apply)(params, first(segs), start_carry).carry
    seg = jax.tree.map(lambda x: x[1], segs)
    want = jax.jit(model.apply)(params, seg, carry)
    m = cfg.num_mem_tokens

    groups = step_groups(cfg, min(3, cfg.segment_len - 1))
    assert len({n for *_, n in groups}) == len(groups) > 1 and groups[-1][1] == cfg.segment_len

    @jax.jit
    def decode_all(seg, carry):
        state = model.apply(params, carry, groups[0][2], method=RATE.decode_start)
        logits, state = model.apply(params, seg, carry, state, 0, m + 2, method=RATE.decode)
        out = [logits]
        for lo, hi, num_keys in groups:
            state = state.grow(num_keys)
            for t in range(lo, hi):  # a_{t-1}, R_t, o_t
                logits, state = model.apply(params, seg, carry, state, m + 3 * t - 1, 3, method=RATE.decode)
                out.append(logits)
        return jnp.stack(out, axis=1), model.apply(params, seg, carry, state, method=RATE.decode_finish)

    logits, next_carry = decode_all(seg, carry)
    np.testing.assert_allclose(np.asarray(logits), want.logits, atol=2e-5, rtol=1e-4)
    for got, full in zip(jax.tree.leaves(next_carry), jax.tree.leaves(want.carry)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(full), atol=2e-5, rtol=1e-4)
    if cfg.mem_len:
        assert 0 < int(carry.cache_valid.sum(-1)[0]) < cfg.mem_len  # partly valid cache


def _numpy_unroll(params, cfg, segs, mask=None):
    """Reference recurrence: memory and cache passed by hand, one example at a time."""
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params["params"])
    n, b = segs.rtg.shape[:2]
    act = mrv_activation(cfg.mrv_act)
    logits = np.zeros((n, b, cfg.segment_len, cfg.num_actions))
    memories = np.zeros((n, b, cfg.num_mem_tokens, cfg.d_model))
    for e in range(b):
        memory = p["mem_init"] if cfg.num_mem_tokens else np.zeros((0, cfg.d_model))
        cache = np.zeros((cfg.n_layer, cfg.mem_len, cfg.d_model))
        valid = np.zeros(cfg.mem_len, bool)
        for s in range(n):
            get = lambda x, s=s, e=e: np.asarray(x[s, e], np.float64)
            lg, write, inputs = ref.segment_forward(p, cfg, get(segs.obs), get(segs.actions), get(segs.rtg),
                                                    get(segs.action_known), memory, cache, valid, mask)
            logits[s, e] = lg
            if cfg.n_head_ca:
                write = ref.mrv(p["mrv"], memory, write, cfg.n_head_ca, lambda z: np.asarray(act(z)))
            memory = write
            memories[s, e] = memory
            if cfg.mem_len:
                cache = np.concatenate([cache, inputs], 1)[:, -cfg.mem_len:]
                valid = np.concatenate([valid, np.ones(inputs.shape[1], bool)])[-cfg.mem_len:]
    return logits, memories


@pytest.mark.parametrize("name", ["RATE", "TrXL"])
def test_recurrent_forward_matches_numpy(name):
    cfg, _ = variant(name, TINY, 3)
    model = RATE(cfg)
    segs = random_segments(jax.random.key(2), cfg, 3, 2)  # two examples that differ
    params = shared_params()
    outs = jax.jit(lambda p, s: unroll(model, p, s, model.apply(p, 2, method=RATE.initial_carry)))(params, segs)
    logits, memories = _numpy_unroll(params, cfg, segs)
    np.testing.assert_allclose(np.asarray(outs.logits), logits, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(outs.carry.memory), memories, atol=2e-5, rtol=1e-4)
    assert np.abs(logits[:, 0] - logits[:, 1]).max() > 1e-3  # batch elements differ


def test_dt_configuration_is_a_plain_causal_transformer():
    cfg, n = variant("DT", TINY, 2)
    assert (n, cfg.segment_len, cfg.num_mem_tokens, cfg.mem_len, cfg.n_head_ca) == (1, 6, 0, 0, 0)
    model = RATE(cfg)
    segs = random_segments(jax.random.key(4), cfg, 1, 2)
    params = shared_params()
    got = jax.jit(model.apply)(params, first(segs)).logits
    causal = np.tril(np.ones((3 * cfg.segment_len,) * 2, bool))  # plain causal mask over the 3K tokens
    want, _ = _numpy_unroll(params, cfg, segs, mask=causal)
    np.testing.assert_allclose(np.asarray(got), want[0], atol=2e-5, rtol=1e-4)


def test_cache_carries_no_gradient_but_memory_does():
    def grad_norm(name):
        cfg, _ = variant(name, dataclasses.replace(TINY, mem_len=8), 2)
        model = RATE(cfg)
        segs = random_segments(jax.random.key(6), cfg, 2, 1)
        params = shared_params()
        carry = model.apply(params, 1, method=RATE.initial_carry)

        @jax.jit
        def second_logits(obs0):
            s = segs.replace(obs=segs.obs.at[0].set(obs0))
            return unroll(model, params, s, carry).logits[1]

        value_changes = np.abs(np.asarray(second_logits(segs.obs[0] + 1.0) - second_logits(segs.obs[0]))).max()
        grad = jax.jit(jax.grad(lambda o: jnp.sum(second_logits(o))))(segs.obs[0])
        return value_changes, float(jnp.abs(grad).max())

    changes, grad = grad_norm("TrXL")  # cache only
    assert changes > 1e-4 and grad == 0.0  # segment 1 reaches segment 2 through the cache, gradient does not
    changes, grad = grad_norm("RMT")  # memory tokens only
    assert changes > 1e-4 and grad > 1e-6


def test_mrv_shapes_matches_numpy_and_limits():
    b, m, d, h = 3, 4, 8, 2
    k_old, k_new, k_init = jax.random.split(jax.random.key(8), 3)
    old = jax.random.normal(k_old, (b, m, d))
    new = jax.random.normal(k_new, (b, m, d))
    mrv = MRV(h, d)
    params = mrv.init(k_init, old, new)
    apply = jax.jit(mrv.apply)
    out, attn = apply(params, old, new)
    assert out.shape == (b, m, d) and attn.shape == (b, h, m, m)
    np.testing.assert_allclose(np.asarray(attn.sum(-1)), 1.0, atol=1e-6)
    p = jax.tree.map(lambda x: np.asarray(x, np.float64), params["params"])
    for e in range(b):
        want = ref.mrv(p, np.asarray(old[e], np.float64), np.asarray(new[e], np.float64), h, lambda z: z)
        np.testing.assert_allclose(np.asarray(out[e]), want, atol=1e-5)
    # limit 1: zero query weights -> uniform attention -> every row is W_M(mean_j W_V new_j + b_V) + b_M
    flat = jax.tree.map(lambda x: x, params)
    flat["params"]["w_q"] = jax.tree.map(jnp.zeros_like, flat["params"]["w_q"])
    out0, attn0 = apply(flat, old, new)
    np.testing.assert_allclose(np.asarray(attn0), 1.0 / m, atol=1e-6)
    mean_v = np.asarray(new, np.float64).mean(1) @ p["w_v"]["kernel"] + p["w_v"]["bias"]
    np.testing.assert_allclose(np.asarray(out0), np.broadcast_to((mean_v @ p["w_m"]["kernel"] + p["w_m"]["bias"])
                                                                  [:, None], (b, m, d)), atol=1e-5)
    # limit 2: one memory token -> attention is 1 -> output is the affine map of the new token
    out1, _ = mrv.apply(params, old[:, :1], new[:, :1])
    want1 = (np.asarray(new[:, 0], np.float64) @ p["w_v"]["kernel"] + p["w_v"]["bias"]) @ p["w_m"]["kernel"] \
        + p["w_m"]["bias"]
    np.testing.assert_allclose(np.asarray(out1[:, 0]), want1, atol=1e-5)


def test_variants_switch_components():
    names = {name: variant(name, TINY, 3)[0] for name in VARIANTS}
    assert names["RATE"] == TINY
    assert names["RMT"].n_head_ca == 0 and names["RMT"].mem_len == 0 and names["RMT"].num_mem_tokens == 2
    assert names["TrXL"].num_mem_tokens == 0 and names["TrXL"].mem_len == 16
    assert names["RATE-noMRV"].n_head_ca == 0 and names["RATE-noMRV"].mem_len == 16
    assert names["RATE-nocache"].mem_len == 0 and names["RATE-nocache"].n_head_ca == 2
    assert variant("TrXL", dataclasses.replace(TINY, mem_len=0), 3)[0].mem_len == 27
    with pytest.raises(ValueError, match="variant"):
        variant("GPT", TINY, 3)


@pytest.mark.parametrize("field,value", [("segment_len", 0), ("num_mem_tokens", -1), ("mrv_act", "gelu"),
                                         ("dropout", 1.0), ("n_head_ca", 3)])
def test_model_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(TINY, **{field: value})


def test_carry_shapes():
    model = RATE(TINY)
    params = shared_params()
    carry = model.apply(params, 2, method=RATE.initial_carry)
    assert isinstance(carry, Carry)
    assert carry.memory.shape == (2, 2, 8) and carry.cache.shape == (2, 2, 16, 8)
    np.testing.assert_array_equal(np.asarray(carry.memory[0]), np.asarray(params["params"]["mem_init"]))

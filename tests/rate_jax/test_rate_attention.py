"""The attention core's own backward pass and the query blocks, against automatic
differentiation of a plain einsum formulation and against one block of every key."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import DecodeState, ModelConfig, step_groups
from rate_jax.attention import RelativeMultiHeadAttention, attention_core
from rate_jax.masks import query_blocks, segment_mask

H, B, Q, K, DH = 2, 3, 5, 7, 4


def _plain(qu, qv, k, r, v, mask, keep, scale):
    """The same function in [B, Q, H, dh] layouts with einsums, differentiated by JAX."""
    content = jnp.einsum("hbqd,hbdk->hbqk", qu, k)
    position = jnp.einsum("hqbd,hqdk->hbqk", qv, r)
    s = jnp.where(mask, (content + position) * scale, -jnp.inf)
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    return jnp.einsum("hbqk,hbkd->hbqd", p if keep is None else p * keep, v)


def _inputs(seed):
    keys = jax.random.split(jax.random.key(seed), 7)
    shapes = [(H, B, Q, DH), (H, Q, B, DH), (H, B, DH, K), (H, Q, DH, K), (H, B, K, DH)]
    args = [jax.random.normal(k, s) for k, s in zip(keys, shapes)]
    mask = jax.random.bernoulli(keys[5], 0.6, (1, B, Q, K)).at[..., 0].set(True)  # every row sees a key
    keep = jax.random.bernoulli(keys[6], 0.7, (H, B, Q, K)) / 0.7
    return args, mask, keep


@pytest.mark.parametrize("dropout", [False, True])
def test_core_and_its_backward_equal_autodiff_of_the_plain_formula(dropout):
    args, mask, keep = _inputs(0)
    keep = keep if dropout else None
    cot = jax.random.normal(jax.random.key(1), (H, B, Q, DH))
    ours, ours_vjp = jax.vjp(lambda *a: attention_core(*a, mask, keep, 0.5), *args)
    plain, plain_vjp = jax.vjp(lambda *a: _plain(*a, mask, keep, 0.5), *args)
    np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-6)
    for name, a, b in zip(("qu", "qv", "k", "r", "v"), ours_vjp(cot), plain_vjp(cot)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)


def test_query_blocks_by_hand():
    causal = np.tril(np.ones((6, 6), bool))
    assert query_blocks(causal, 3) == ((0, 2, 2), (2, 4, 4), (4, 6, 6))
    with_cache = np.concatenate([np.ones((6, 2), bool), causal], axis=1)
    assert query_blocks(with_cache, 2) == ((0, 3, 5), (3, 6, 8))
    assert query_blocks(causal, 1) == ((0, 6, 6),)
    # RATE: the suffix memory sees every token, so the last block needs every key
    mask = segment_mask(9, 2, 0)
    assert query_blocks(mask, 3)[-1] == (9, 13, 13)
    with pytest.raises(ValueError, match="num_blocks"):
        query_blocks(causal, 7)


@pytest.mark.parametrize("cache_len", [0, 6])
def test_blocked_attention_equals_one_block_of_every_key(cache_len):
    """Output and gradients (parameters, inputs) of the layer with 3 query blocks against
    one block, under RATE's mask with an XL cache whose first two entries are invalid."""
    d, m, tokens = 8, 2, 9
    static = segment_mask(tokens, m, cache_len)
    valid = np.arange(cache_len) >= 2
    mask = jnp.asarray(static & np.concatenate([valid, np.ones(static.shape[0], bool)])[None, :])[None]
    q_len = static.shape[0]
    x = jax.random.normal(jax.random.key(2), (B, q_len, d))
    cache = jax.random.normal(jax.random.key(3), (B, cache_len, d))
    u, v = jax.random.normal(jax.random.key(4), (2, H, DH))
    layer = RelativeMultiHeadAttention(H, DH, d)
    params = layer.init(jax.random.key(5), x, cache, mask, u, v)
    blocks = query_blocks(static, 3)
    assert len({nk for _, _, nk in blocks}) == 3  # the blocks really skip keys

    def loss(params, x, blocks):
        out = layer.apply(params, x, cache, mask, u, v, True, blocks)
        return jnp.sum(out * jnp.cos(jnp.arange(out.size).reshape(out.shape))), out

    (_, out1), g1 = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, x, None)
    (_, out3), g3 = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, x, blocks)
    np.testing.assert_allclose(out3, out1, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g3), jax.tree.leaves(g1)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_step_groups_and_growing_buffers_by_hand():
    """K = 3 steps, m = 2 memory tokens, no cache: step t's observation is row m + 3t + 1, so the
    group of step 1 sees keys 0..6 and that of step 2 keys 0..9; buffers only grow."""
    cfg = ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=1, d_model=8, n_head=2, d_head=4)
    assert step_groups(cfg, 2) == ((1, 2, 7), (2, 3, 10))
    assert step_groups(cfg, 1) == ((1, 3, 10),)
    with pytest.raises(ValueError, match="num_groups"):
        step_groups(cfg, 3)
    state = DecodeState(keys=(jnp.ones((1, 2, 4, 7)),), values=(jnp.ones((1, 2, 7, 4)),), inputs=())
    grown = state.grow(10)
    assert grown.num_keys == 10 and grown.keys[0].shape == (1, 2, 4, 10)
    assert float(grown.values[0][:, :, 7:].sum()) == 0.0 and state.grow(7) is state
    with pytest.raises(ValueError, match="shrink"):
        grown.grow(7)

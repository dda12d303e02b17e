"""BERT4Rec (uat_jax.bert4rec): bidirectional attention (SASRec's stays causal), the Cloze masks against
numpy from the same uniform draws, the masked cross-entropy against numpy, the evaluation input and the
ranked scores against a manual computation, and training through the Domain D cell (vmapped over seeds)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import bert4rec, recsys_data, sasrec
from uat_jax.cells import Size
from uat_jax.recsys import train_config

V, T = 30, 6


def config(epochs=1, batch_size=4, lr=1e-3):
    size = Size(d_model=16, n_heads=2, d_ff=16, n_layers=2, horizon=T, batch_size=batch_size, epochs=epochs,
                eval_episodes=1, dropout=0.0)
    return dataclasses.replace(train_config(size, V, "vt"), lr=lr)


def _params(cfg, seed=1):
    return bert4rec.BERT4Rec(cfg.model).init(jax.random.key(seed), jnp.zeros(T, jnp.int32))


def _np_logits(params, features):
    p = jax.tree.map(np.asarray, params)["params"]
    return np.asarray(features, np.float64) @ p["item_embedding"][:V].T.astype(np.float64) + p["output_bias"]


def _np_log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_attention_is_bidirectional_and_sasrecs_is_causal():
    cfg = config()
    model = bert4rec.BERT4Rec(cfg.model)
    items = jnp.array([3, 7, 1, 9, 4, 2])
    params = _params(cfg)
    f = model.apply(params, items)
    assert f.shape == (T, cfg.model.d_model) and bert4rec.item_logits(params, f).shape == (T, V)
    later = items.at[4].set(11)
    changed = model.apply(params, later)
    assert np.abs(np.asarray(f[:4] - changed[:4])).max() > 1e-4  # every earlier position sees position 4
    np.testing.assert_allclose(f[5:], model.apply(params, items)[5:])  # deterministic without dropout
    # the counterpart: SASRec at the same size is causal, its earlier positions ignore the change
    s_model = sasrec.SASRec(cfg.model)
    s_params = s_model.init(jax.random.key(1), items)
    np.testing.assert_allclose(s_model.apply(s_params, items)[:4], s_model.apply(s_params, later)[:4],
                               rtol=1e-6, atol=1e-6)


def test_masks_match_numpy_from_the_same_draws():
    key = jax.random.key(5)
    shape = (4000, 50)
    masked = np.asarray(bert4rec.draw_mask(key, shape, 0.2))
    u = np.asarray(jax.random.uniform(key, shape))  # the same uniform draws
    want = (u < 0.2) | (np.arange(shape[1]) == u.argmin(1)[:, None])
    np.testing.assert_array_equal(masked, want)
    assert masked.mean() == pytest.approx(0.2, abs=0.004) and masked.sum(1).min() >= 1
    # at a rate where many windows draw no u below it, those get exactly one mask, at their lowest draw
    rare = np.asarray(bert4rec.cloze_mask(jnp.asarray(u[:, :T]), 0.02))
    none_below = (u[:, :T] >= 0.02).all(1)
    assert none_below.mean() > 0.5 and (rare.sum(1) >= 1).all()
    np.testing.assert_array_equal(rare[none_below], np.eye(T, dtype=bool)[u[none_below, :T].argmin(1)])
    np.testing.assert_array_equal(rare[~none_below], u[~none_below, :T] < 0.02)
    # masked positions get [MASK] = V, the others keep their item
    items = np.random.default_rng(0).integers(0, V, shape).astype(np.int32)
    inputs = np.asarray(bert4rec.cloze_inputs(jnp.asarray(items), jnp.asarray(masked), V))
    np.testing.assert_array_equal(inputs, np.where(want, V, items))
    assert bert4rec.mask_token(config().model) == V


def test_cloze_loss_matches_numpy(rng):
    logits, targets = rng.normal(size=(3, 5, 7)), rng.integers(0, 7, (3, 5))
    masked = rng.random((3, 5)) < 0.4
    masked[:, 0] = True
    nll = -np.take_along_axis(_np_log_softmax(logits), targets[..., None], -1)[..., 0]
    got = bert4rec.cloze_loss(jnp.asarray(logits), jnp.asarray(targets), jnp.asarray(masked))
    assert float(got) == pytest.approx(nll[masked].mean(), rel=1e-5)


def test_training_loss_is_the_masked_cross_entropy_of_the_masked_input(rng):
    """make_loss on fixed parameters: the input built here in numpy ([MASK] at the masked positions), the
    softmax over the V items with the shared table and bias, the mean -log p of the true item over the
    masked positions only."""
    cfg = config()
    params = _params(cfg, seed=2)
    params["params"]["output_bias"] = jnp.asarray(rng.normal(size=V), jnp.float32)  # a non-zero b^O
    seqs = rng.integers(0, V, (3, T)).astype(np.int32)
    masked = rng.random((3, T)) < 0.3
    masked[:, 2] = True
    model = bert4rec.BERT4Rec(cfg.model)
    features = np.stack([np.asarray(model.apply(params, jnp.asarray(np.where(m, V, s)))) for s, m in zip(seqs, masked)])
    logp = _np_log_softmax(_np_logits(params, features))
    want = -np.mean([logp[b, t, seqs[b, t]] for b in range(3) for t in range(T) if masked[b, t]])
    got = bert4rec.make_loss(cfg)(params, jnp.asarray(seqs), jnp.asarray(masked))
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_evaluation_ranks_the_last_position_of_the_shifted_history(rng):
    items = rng.integers(0, V, (5, T)).astype(np.int32)
    shifted = np.asarray(bert4rec.eval_inputs(jnp.asarray(items), V))
    np.testing.assert_array_equal(shifted, np.concatenate([items[:, 1:], np.full((5, 1), V)], 1))
    cfg = dataclasses.replace(config(), eval_batch=2)
    params = _params(cfg, seed=3)
    params["params"]["output_bias"] = jnp.asarray(rng.normal(size=V), jnp.float32)
    candidates = np.stack([rng.choice(V, 25, replace=False) for _ in range(5)]).astype(np.int32)
    test = {"items": jnp.asarray(items), "candidates": jnp.asarray(candidates)}
    model = bert4rec.BERT4Rec(cfg.model)
    want = np.stack([_np_logits(params, model.apply(params, jnp.asarray(np.r_[items[u, 1:], V]))[-1])[candidates[u]]
                     for u in range(5)])
    got = np.asarray(bert4rec.make_scores(cfg)(params, test))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    metrics = bert4rec.make_evaluate(cfg)(params, test)
    for k, v in recsys_data.ranking_metrics(jnp.asarray(want)).items():
        assert float(metrics[k]) == pytest.approx(float(v))


def _rule_data(users=64, seed=0):
    """Windows whose items step by +1 (mod V) from a random start: the logged successors are such a
    window, and the test window's item after its history (candidate 0 of 25) is its last item + 1."""
    r = np.random.default_rng(seed)
    walk = lambda n: ((r.integers(0, V, (n, 1)) + np.arange(T)) % V).astype(np.int32)  # noqa: E731
    train, test_items = walk(users), walk(users)
    target = (test_items[:, -1] + 1) % V
    others = np.stack([r.choice(np.setdiff1d(np.arange(V), [t]), 24, replace=False) for t in target])
    return {"train": {"items": jnp.asarray((train - 1) % V), "next_items": jnp.asarray(train)},
            "test": {"items": jnp.asarray(test_items),
                     "candidates": jnp.asarray(np.concatenate([target[:, None], others], 1).astype(np.int32))}}


def test_cell_learns_the_cloze_task():
    """Training lowers the Cloze loss and ranks the rule's next item near the top (a random model: 10/25)."""
    data = _rule_data()
    key = jax.random.key_data(jax.random.key(3))
    out = jax.jit(bert4rec.make_cell(config(epochs=150, batch_size=16, lr=1e-2)))({"key": key}, data)
    loss = np.asarray(out["loss"])
    assert loss.shape == (150,) and loss[-10:].mean() < 0.5 * loss[:10].mean()
    assert float(out["hr@10"]) > 0.9
    untrained = jax.jit(bert4rec.make_cell(config(epochs=1, batch_size=16, lr=1e-2)))({"key": key}, data)
    assert float(untrained["hr@10"]) < 0.7


def test_cell_vmapped_over_seeds_equals_each_seed_alone():
    """One program over 2 seeds (as ``seeds.train_grid`` runs it) gives each seed's run alone: different
    runs for different keys, the same loss curve and metrics to float tolerance (20 epochs: longer runs
    amplify the rounding of the batched products)."""
    data = _rule_data()
    cell = bert4rec.make_cell(config(epochs=20, batch_size=16, lr=1e-2))
    keys = jnp.stack([jax.random.key_data(jax.random.key(s)) for s in (3, 4)])
    both = jax.jit(jax.vmap(cell, in_axes=({"key": 0}, None)))({"key": keys}, data)
    single = jax.jit(cell)
    for s in range(2):
        alone = single({"key": keys[s]}, data)
        for k, v in alone.items():
            np.testing.assert_allclose(both[k][s], v, rtol=1e-5, atol=1e-5, err_msg=k)
    assert not np.allclose(both["loss"][0], both["loss"][1])


def test_mask_prob_is_checked():
    with pytest.raises(ValueError, match="mask_prob"):
        bert4rec.make_cell(config(), mask_prob=0.0)

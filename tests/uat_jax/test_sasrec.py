"""SASRec (uat_jax.sasrec): eq. (7) against numpy, the negative draw, causality, the shared item table,
and learning a planted successor rule through the Domain D cell."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import sasrec
from uat_jax.cells import Size
from uat_jax.recsys import train_config

V, T = 30, 6


def config(epochs=1, batch_size=4, lr=1e-3):
    size = Size(d_model=16, n_heads=2, d_ff=16, n_layers=1, horizon=T, batch_size=batch_size, epochs=epochs,
                eval_episodes=1, dropout=0.0)
    return dataclasses.replace(train_config(size, V, "vt"), lr=lr)


def test_bce_loss_matches_numpy(rng):
    features, table = rng.normal(size=(3, 4, 5)), rng.normal(size=(7, 5))
    pos, neg = rng.integers(0, 7, (3, 4)), rng.integers(0, 7, (3, 4))
    sig = lambda z: 1.0 / (1.0 + np.exp(-z))  # noqa: E731
    want = np.mean([-(np.log(sig(features[b, t] @ table[pos[b, t]])) + np.log(1 - sig(features[b, t] @ table[neg[b, t]])))
                    for b in range(3) for t in range(4)])
    got = sasrec.bce_loss(jnp.asarray(features), jnp.asarray(table), jnp.asarray(pos), jnp.asarray(neg))
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_negatives_are_uniform_over_the_other_items():
    positives = jnp.full((20000,), 2)
    neg = np.asarray(sasrec.draw_negatives(jax.random.key(0), positives, 5))
    counts = np.bincount(neg, minlength=5)
    assert counts[2] == 0 and set(np.flatnonzero(counts)) == {0, 1, 3, 4}
    np.testing.assert_allclose(counts[[0, 1, 3, 4]] / neg.size, 0.25, atol=0.015)


def test_features_are_causal_and_scores_use_the_input_table():
    cfg = config()
    model = sasrec.SASRec(cfg.model)
    items = jnp.array([3, 7, 1, 9, 4, 2])
    params = model.init(jax.random.key(1), items)
    f = model.apply(params, items)
    changed = model.apply(params, items.at[4:].set(jnp.array([11, 12])))
    np.testing.assert_allclose(f[:4], changed[:4], rtol=1e-6, atol=1e-6)
    assert not np.allclose(f[4:], changed[4:])
    # the input embedding is the scoring table: perturbing one item's row changes its own input and score
    table = sasrec.item_table(params)
    assert table.shape == (V, cfg.model.d_model)
    bumped = jax.tree.map(lambda x: x, params)
    bumped["params"]["item_embedding"] = table.at[items[0]].add(jnp.linspace(-1.0, 1.0, cfg.model.d_model))
    assert not np.allclose(model.apply(bumped, items), f)


def test_cell_learns_a_planted_successor_rule():
    """Windows of random items whose logged successor is item + 1 (mod V): after training, the last step's
    successor (candidate 0 of 25) ranks in the top 10 for almost every test user (a random model: 10/25)."""
    rng = np.random.default_rng(0)
    users = 64
    items = rng.integers(0, V, (users, T)).astype(np.int32)
    test_items = rng.integers(0, V, (users, T)).astype(np.int32)
    target = (test_items[:, -1] + 1) % V
    others = np.stack([rng.choice(np.setdiff1d(np.arange(V), [t]), 24, replace=False) for t in target])
    data = {"train": {"items": jnp.asarray(items), "next_items": jnp.asarray((items + 1) % V)},
            "test": {"items": jnp.asarray(test_items),
                     "candidates": jnp.asarray(np.concatenate([target[:, None], others], 1).astype(np.int32))}}
    cell = jax.jit(sasrec.make_cell(config(epochs=150, batch_size=16, lr=1e-2)))
    key = jax.random.key_data(jax.random.key(3))
    out = cell({"key": key}, data)
    assert out["loss"].shape == (150,) and float(out["loss"][-10:].mean()) < 0.5 * float(out["loss"][:10].mean())
    assert float(out["hr@10"]) > 0.9
    untrained = jax.jit(sasrec.make_cell(config(epochs=1, batch_size=16, lr=1e-2)))({"key": key}, data)
    assert float(untrained["hr@10"]) < 0.7

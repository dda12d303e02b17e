"""SASRec, the Domain D baseline of Table 1 (UAT paper), on the Domain D windows.

Paper: W.-C. Kang and J. McAuley, "Self-Attentive Sequential Recommendation" (ICDM 2018,
arXiv 1808.09781), section III; used by "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910) as a domain-specific
baseline of Domain D (Table 1: HR@10 0.281, NDCG@10 0.129).

Model (SASRec III.A-C). The input of step t is the item embedding of the logged item i_t,
scaled by sqrt(d) as in the authors' code, plus a learned position embedding; dropout; the
causally masked pre-LN Transformer layers of ``uat_jax.model.Block`` (the decision models'
layers at the same size, Vanilla-TF's attention: no feedback, no utility); a final LayerNorm.
The relevance of item v after step t is r_{v,t} = F_t . M_v with M the *same* item embedding
table (SASRec III.D, shared item embedding). SASRec reads the logged items only: no rewards,
no delayed feedback, no regime.

Objective (SASRec eq. (7)): at every step t of a training window the positive item is the
logged successor o_t = i_{t+1} (``Windows.next_items``) and one negative j_t is drawn per
step; the loss is -mean_t [log sigma(r_{o_t,t}) + log(1 - sigma(r_{j_t,t}))]. Reading: the
negative is uniform over the vocabulary minus the positive (the paper draws it outside the
user's whole history; a window holds T = 50 of the user's items, so the two differ by at
most T / V of the draws). SASRec is trained on what the users did, not on the regime-aware
expert targets the decision models imitate (C.2): it is the recommender a practitioner
would fit to the log.

Training follows ``uat_jax.recsys``: one AdamW step per epoch (``RecsysTrainConfig``: lr,
weight decay, clip; ``train.make_optimizer``, every parameter at ``lr``) on B training windows drawn without
replacement, all epochs' draws made before the loop, dropout on. Ranking is C.3's, as for
every Domain D model: the test window's last step scores its 100 candidates (column 0 the
expert target), HR@K / NDCG@K (``recsys_data.ranking_metrics``).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from uat_jax import recsys_data
from uat_jax.config import ModelConfig
from uat_jax.model import Block, init_cache
from uat_jax.recsys import RecsysTrainConfig, fit
from uat_jax.train import CellKeys


class SASRec(nn.Module):
    """Item sequence [T] -> features F [T, d]; sizes from a ``ModelConfig`` (d_model, heads, d_ff,
    layers, horizon, dropout; ``n_actions`` = V items). The item table M is :func:`item_table`."""

    cfg: ModelConfig  # of kind "vt": the layers are Vanilla-TF's

    @nn.compact
    def __call__(self, items: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.cfg
        n = items.shape[0]
        table = self.param("item_embedding", nn.initializers.normal(cfg.d_model ** -0.5),
                           (cfg.n_actions, cfg.d_model))
        pos = self.param("pos_embed", nn.initializers.normal(0.02), (cfg.horizon, cfg.d_model))
        x = table[items] * jnp.sqrt(float(cfg.d_model)) + pos[:n]
        x = nn.Dropout(cfg.dropout)(x, deterministic=deterministic)
        layers = nn.scan(Block, variable_axes={"params": 0, "intermediates": 0}, split_rngs={"params": True, "dropout": True},
                         in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                         length=cfg.n_layers)
        x, _ = layers(cfg, deterministic, name="blocks")(x, init_cache(cfg).kv, jnp.arange(n), None, None, None)
        return nn.LayerNorm(name="final_norm")(x)


def item_table(params) -> jax.Array:
    """M [V, d]: the item embedding table, shared by the input and the relevance scores."""
    return params["params"]["item_embedding"]


def bce_loss(features: jax.Array, table: jax.Array, positives: jax.Array, negatives: jax.Array) -> jax.Array:
    """SASRec eq. (7), averaged over every leading axis: -[log sigma(F_t . M_{o_t}) + log(1 -
    sigma(F_t . M_{j_t}))] for features [..., d], positives and negatives [...] item indices."""
    pos = jnp.sum(features * table[positives], -1)
    neg = jnp.sum(features * table[negatives], -1)
    return -jnp.mean(jax.nn.log_sigmoid(pos) + jax.nn.log_sigmoid(-neg))


def draw_negatives(key: jax.Array, positives: jax.Array, n_items: int) -> jax.Array:
    """One negative per positive, uniform over the ``n_items`` items other than it."""
    offset = jax.random.randint(key, positives.shape, 1, n_items)
    return (positives + offset) % n_items


def make_evaluate(cfg: RecsysTrainConfig):
    """``evaluate(params, test) -> {"hr@K", "ndcg@K"}`` on the ``recsys.data_arrays`` test windows."""
    model = SASRec(cfg.model)

    def evaluate(params, test: dict) -> dict:
        def score(x):
            items, candidates = x
            return item_table(params)[candidates] @ model.apply(params, items)[-1]

        scores = jax.lax.map(score, (test["items"], test["candidates"]), batch_size=cfg.eval_batch)
        return recsys_data.ranking_metrics(scores)

    return evaluate


def make_cell(cfg: RecsysTrainConfig):
    """``cell(item, data) -> {"hr@K", "ndcg@K": [], "loss": [epochs]}``: SASRec trained from
    ``item["key"]`` (raw key data; the keys split as ``train.CellKeys``) on ``recsys.data_arrays``
    ``data`` (its ``train`` windows with ``next_items``), then ranked (pure, jittable)."""
    model = SASRec(cfg.model)  # no utility parameters: recsys.fit trains every one at cfg.lr
    evaluate = make_evaluate(cfg)
    n_items = cfg.model.n_actions

    def cell(item: dict, data: dict) -> dict:
        keys = CellKeys.of(jax.random.wrap_key_data(item["key"]))
        windows = data["train"]

        def loss_fn(params, rows, key):
            k_neg, k_drop = jax.random.split(key)
            items, positives = windows["items"][rows], windows["next_items"][rows]
            features = jax.vmap(lambda i, k: model.apply(params, i, deterministic=False, rngs={"dropout": k}))(
                items, jax.random.split(k_drop, items.shape[0]))
            return bce_loss(features, item_table(params), positives, draw_negatives(k_neg, positives, n_items)), ()

        params, loss, _ = fit(cfg, model.init(keys.init, windows["items"][0]), keys, windows["items"].shape[0],
                              loss_fn)
        return {**evaluate(params, data["test"]), "loss": loss}

    return cell

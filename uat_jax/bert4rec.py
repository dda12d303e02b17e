"""BERT4Rec, a Domain D baseline of Table 1 (UAT paper), on the Domain D windows.

Paper: F. Sun, J. Liu, J. Wu, C. Pei, X. Lin, W. Ou and P. Jiang, "BERT4Rec: Sequential
Recommendation with Bidirectional Encoder Representations from Transformer" (CIKM 2019,
arXiv 1904.06690), section 3; used by "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910) as a domain-specific
baseline of Domain D (Table 1: HR@10 0.160, NDCG@10 0.073).

Model (BERT4Rec 3.2-3.5). The vocabulary is the V items plus one [MASK] token (id V,
:func:`mask_token`). The input of position t is h^0_t = v_t + p_t (3.4: the item embedding of
the token plus a learned position embedding, no sqrt(d) scale), then dropout; L bidirectional
Transformer layers (3.3: multi-head self-attention over *every* position, no causal mask, and
the position-wise FFN with GELU, PFFN) at the decision models' size (d_model, heads, d_ff,
layers, dropout of the ``ModelConfig``); a final LayerNorm. The project's ``model.Block`` has no
mask argument (its attention is always causal), so the layers are :class:`EncoderBlock`. Reading
(deviation): the layers are pre-LN, x <- x + Dropout(Sublayer(LN(x))), as SASRec's here, with the
final LayerNorm closing the stack, where the paper's stacking equations (3.3, Trm) are post-LN, LN(x + Dropout(Sublayer(x)));
the two differ in where the normalisation sits, not in what the layer can represent, and the pre-LN
form keeps BERT4Rec and SASRec different only in attention direction and objective. Output layer
(3.5): P(v) = softmax(GELU(h^L_t W^P + b^P) E^T + b^O); we keep the GELU projection W^P, b^P and
the item bias b^O (RecBole's implementation drops both), so the relevance of item v at position t
is r_{v,t} = F_t . M_v + b_v with F_t = GELU(h^L_t W^P + b^P) (:meth:`BERT4Rec.__call__`'s output),
M = E the *same* item table as the input (its first V rows: [MASK] is never scored) and b = b^O.
BERT4Rec reads the logged items only: no rewards, no delayed feedback, no regime.

Objective (the Cloze task, 3.6). A training sequence is the window's logged successors
o_t = i_{t+1} (``Windows.next_items``, the logged items i_1 .. i_T of the window; the same data
SASRec's positives are): what the users did, not the regime-aware expert targets the decision
models imitate (C.2), as SASRec. Its last position holds the item after the window's history,
the position the evaluation predicts. Each position is masked independently with probability
``mask_prob`` (0.2, RecBole's default; the paper tunes rho per dataset, 4.5) from uniforms
u_t ~ U[0, 1): masked where u_t < mask_prob. At least one per window: the position with the
smallest u_t is masked too (:func:`cloze_mask`), which changes the masked fraction only when no
u_t falls below mask_prob, with probability (1 - mask_prob)^T (1e-5 at T = 50). Masked items are
replaced by [MASK] (no 80/10/10 replacement, as the paper and RecBole); the loss is the softmax
cross-entropy over the V items at the masked positions, averaged over the batch's masked
positions (3.6, L = 1/|S^m| sum_m -log P(v_m = v*_m | S')). Not done: the extra training
samples that mask only the last item (3.6, "works like fine-tuning"); the epochs are one AdamW
step each on B windows, as every Domain D model here.

Evaluation (3.6 test protocol, 4.2 ranking). The test window's items are shifted left by one
and [MASK] is appended, (i_1, .., i_{T-1}, [MASK]) (:func:`eval_inputs`), so the last position
predicts the item after the history i_0 .. i_{T-1} (losing i_0 keeps the length T of the learned
positions, as RecBole's ``reconstruct_test_data``); its scores r_{c,T-1} of the window's 100
candidates (column 0 the expert target) are ranked with HR@K / NDCG@K
(``recsys_data.ranking_metrics``), C.3's ranking, as for SASRec and every Domain D model.

Training follows ``uat_jax.sasrec``: one AdamW step per epoch (``RecsysTrainConfig``: lr, weight
decay, clip; ``train.make_optimizer``, every parameter at ``lr``) on B training windows drawn
without replacement, all epochs' draws made before the loop, the masks and dropout drawn afresh
each epoch; pure and jittable (a ``lax.scan`` over epochs), vmapped over seeds by the caller.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from uat_jax import recsys_data
from uat_jax.config import ModelConfig
from uat_jax.recsys import RecsysTrainConfig, fit
from uat_jax.train import CellKeys

MASK_PROB = 0.2  # RecBole's mask_ratio default
INIT_STD = 0.02  # BERT's / RecBole's initializer_range for the embeddings


def mask_token(cfg: ModelConfig) -> int:
    """The [MASK] id: V, one past the items (``cfg.n_actions`` = V)."""
    return cfg.n_actions


class EncoderBlock(nn.Module):
    """One pre-LN Transformer layer (3.3): x + Dropout(MH(LN(x))), then x + Dropout(FFN(LN(x))) with
    FFN(x) = GELU(x W1 + b1) W2 + b2; bidirectional unless ``mask`` [1, T, T] (True: attend) is given."""

    cfg: ModelConfig
    deterministic: bool = True

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        cfg = self.cfg
        drop = lambda y: nn.Dropout(cfg.dropout)(y, deterministic=self.deterministic)  # noqa: E731
        y = nn.LayerNorm(name="ln_attn")(x)
        y = nn.MultiHeadDotProductAttention(num_heads=cfg.n_heads, qkv_features=cfg.d_model, out_features=cfg.d_model,
                                            deterministic=True, name="attn")(y, y, mask=mask)
        x = x + drop(y)
        y = nn.LayerNorm(name="ln_ff")(x)
        y = nn.Dense(cfg.d_model, name="ff_out")(nn.gelu(nn.Dense(cfg.d_ff, name="ff_in")(y), approximate=False))
        return x + drop(y)


class BERT4Rec(nn.Module):
    """Token sequence [T] (items in [0, V), [MASK] = V) -> output features F [T, d] with
    F_t = GELU(h^L_t W^P + b^P) (3.5); sizes from a ``ModelConfig`` (d_model, heads, d_ff, layers,
    horizon, dropout; ``n_actions`` = V items). Scores: :func:`item_logits` / :func:`candidate_scores`."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens: jax.Array, deterministic: bool = True) -> jax.Array:
        cfg = self.cfg
        n = tokens.shape[0]
        table = self.param("item_embedding", nn.initializers.normal(INIT_STD), (cfg.n_actions + 1, cfg.d_model))
        self.param("output_bias", nn.initializers.zeros, (cfg.n_actions,))  # b^O, read by item_logits
        pos = self.param("pos_embed", nn.initializers.normal(INIT_STD), (cfg.horizon, cfg.d_model))
        x = nn.Dropout(cfg.dropout)(table[tokens] + pos[:n], deterministic=deterministic)
        for layer in range(cfg.n_layers):
            x = EncoderBlock(cfg, deterministic, name=f"block_{layer}")(x)
        h = nn.LayerNorm(name="final_norm")(x)
        return nn.gelu(nn.Dense(cfg.d_model, name="out_proj")(h), approximate=False)


def item_table(params) -> jax.Array:
    """E [V + 1, d]: the token embedding table (row V: [MASK]), shared by the input and the scores."""
    return params["params"]["item_embedding"]


def item_logits(params, features: jax.Array) -> jax.Array:
    """r [..., V] = F . M_v + b_v over the V items (3.5; [MASK] excluded) for features [..., d]."""
    table = item_table(params)[:-1]
    return features @ table.T + params["params"]["output_bias"]


def candidate_scores(params, features: jax.Array, candidates: jax.Array) -> jax.Array:
    """r_c = F . M_c + b_c [C] of the candidates [C] for one position's features F [d]."""
    return item_table(params)[candidates] @ features + params["params"]["output_bias"][candidates]


def cloze_mask(u: jax.Array, mask_prob: float = MASK_PROB) -> jax.Array:
    """Masked positions [..., T] (bool) from uniforms u [..., T] in [0, 1): u_t < mask_prob, and
    the argmin of u over T, so every window has at least one masked position."""
    lowest = jnp.arange(u.shape[-1]) == jnp.argmin(u, axis=-1)[..., None]
    return (u < mask_prob) | lowest


def cloze_inputs(items: jax.Array, masked: jax.Array, mask_id: int) -> jax.Array:
    """The items with the masked positions replaced by [MASK] (``mask_id``)."""
    return jnp.where(masked, mask_id, items).astype(items.dtype)


def cloze_loss(logits: jax.Array, targets: jax.Array, masked: jax.Array) -> jax.Array:
    """3.6: -log softmax(logits)[target] summed over the masked positions and divided by their
    number, for logits [..., T, V], targets and masked [..., T] (all leading axes pooled)."""
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]
    w = masked.astype(nll.dtype)
    return jnp.sum(nll * w) / jnp.sum(w)


def eval_inputs(items: jax.Array, mask_id: int) -> jax.Array:
    """(i_1, .., i_{T-1}, [MASK]) from a window's items [..., T] (3.6 test protocol)."""
    tail = jnp.full(items.shape[:-1] + (1,), mask_id, items.dtype)
    return jnp.concatenate([items[..., 1:], tail], axis=-1)


def make_scores(cfg: RecsysTrainConfig):
    """``scores(params, test) -> [U, C]``: each test window's last-position scores of its candidates
    (:func:`eval_inputs`), ``cfg.eval_batch`` windows at a time."""
    model = BERT4Rec(cfg.model)
    mask_id = mask_token(cfg.model)

    def scores(params, test: dict) -> jax.Array:
        def score(x):
            items, candidates = x
            return candidate_scores(params, model.apply(params, eval_inputs(items, mask_id))[-1], candidates)

        return jax.lax.map(score, (test["items"], test["candidates"]), batch_size=cfg.eval_batch)

    return scores


def make_evaluate(cfg: RecsysTrainConfig):
    """``evaluate(params, test) -> {"hr@K", "ndcg@K"}`` on the ``recsys.data_arrays`` test windows."""
    scores = make_scores(cfg)
    return lambda params, test: recsys_data.ranking_metrics(scores(params, test))


def draw_mask(key: jax.Array, shape: tuple[int, ...], mask_prob: float = MASK_PROB) -> jax.Array:
    """The masked positions [..., T] of one epoch's windows: :func:`cloze_mask` of U[0, 1) draws
    ``jax.random.uniform(key, shape)``."""
    return cloze_mask(jax.random.uniform(key, shape), mask_prob)


def make_loss(cfg: RecsysTrainConfig):
    """``loss(params, seqs, masked, dropout_key=None)``: the Cloze loss (3.6) of sequences [B, T] with
    the ``masked`` [B, T] positions replaced by [MASK] in the input and scored against the sequences'
    items; dropout on when ``dropout_key`` is given."""
    model = BERT4Rec(cfg.model)
    mask_id = mask_token(cfg.model)

    def loss(params, seqs: jax.Array, masked: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
        inputs = cloze_inputs(seqs, masked, mask_id)
        if dropout_key is None:
            features = jax.vmap(lambda s: model.apply(params, s))(inputs)
        else:
            features = jax.vmap(lambda s, k: model.apply(params, s, deterministic=False, rngs={"dropout": k}))(
                inputs, jax.random.split(dropout_key, seqs.shape[0]))
        return cloze_loss(item_logits(params, features), seqs, masked)

    return loss


def make_cell(cfg: RecsysTrainConfig, mask_prob: float = MASK_PROB):
    """``cell(item, data) -> {"hr@K", "ndcg@K": [], "loss": [epochs]}``: BERT4Rec trained on the Cloze
    task from ``item["key"]`` (raw key data; the keys split as ``train.CellKeys``) on
    ``recsys.data_arrays`` ``data`` (its ``train`` windows' ``next_items``), then ranked (pure, jittable)."""
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(f"mask_prob must be in (0, 1), got {mask_prob!r}")
    model = BERT4Rec(cfg.model)  # no utility parameters: recsys.fit trains every one at cfg.lr
    evaluate, cloze = make_evaluate(cfg), make_loss(cfg)

    def cell(item: dict, data: dict) -> dict:
        keys = CellKeys.of(jax.random.wrap_key_data(item["key"]))
        windows = data["train"]

        def loss_fn(params, rows, key):
            k_mask, k_drop = jax.random.split(key)
            seqs = windows["next_items"][rows]
            return cloze(params, seqs, draw_mask(k_mask, seqs.shape, mask_prob), k_drop), ()

        params, loss, _ = fit(cfg, model.init(keys.init, windows["next_items"][0]), keys,
                              windows["next_items"].shape[0], loss_fn)
        return {**evaluate(params, data["test"]), "loss": loss}

    return cell

"""Domain D training and ranking: the decision Transformers as next-item recommenders.

Paper: "Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential Decision
Making" (UAT, arXiv 2607.18910), section 4.3 ("When actions and rewards are dataset-supplied
(Domain D), UAT skips the rollout process"), Appendix C.1-C.3 and Table 3 (Domain D). The
data (windows, regimes, rewards, expert targets, delays, corruptions, candidates, HR / NDCG)
are ``uat_jax.recsys_data``'s; this module trains ``uat_jax.model.DecisionTransformer`` on them.

Inputs at position t of a window (0-based; reading of C.1 "the model observes the logged item
prefix through the completed interaction i_t" and C.2 "UAT sends the shifted logged action and
the currently available delayed reward to the utility encoder"):

- observation o_t = onehot(i_t) over the V items (every model);
- feedback pair (a~_t, r~_t) = (i_{t-d}, r_{t-d}) (``recsys_data.delay``: none, i.e.
  ``NO_ACTION`` and 0, when t - d < 0), r~ then corrupted by the task's channel
  (``recsys_data.delayed_feedback``). The pair is coherent: the reward fed is the reward of the
  logged item fed beside it. At the main setting d = 1 it is the shifted logged action i_{t-1}
  with its reward, the words of C.2; d = 0 feeds (i_t, r_t), the latest completed interaction.
  UAT reads the pair in its utility encoder, A-DT concatenates it to o_t, DT-style feeds
  onehot(a~_t) and the return-to-go G - sum_{s<=t} r~_s as tokens; VT and GTrXL read o only.

The pair is fed as the model's (prev_action, prev_reward) without ``feedback.shift``: the
delay is the shift here, and no model sees r_t before the delay lets it.

Training (Table 3, Domain D; reading of "epoch" as in Domain A, ``uat_jax.train``): one
epoch is one AdamW step (global-norm clip 1.0, weight decay 1e-5, lr 1e-3, the utility
encoder and W_rho at 2e-2: ``train.make_optimizer``) on the mean cross-entropy against the
expert targets a*_t over all T positions of B training windows, teacher-forced (the causally
masked parallel pass, dropout 0.1). The B windows of each epoch are drawn uniformly without
replacement from the users, all epochs' draws made before the epoch loop; the corruption
noise is drawn afresh each epoch. A fixed epoch count replaces early stopping, as in Domain A.

Ranking (C.3): the model's logits at the last position of the test window score the 100
candidates of ``RecsysData.test_candidates`` (target in column 0), HR@K / NDCG@K over the
users (``recsys_data.ranking_metrics``). For logged inputs the causal parallel pass is causal
inference: position T - 1 sees positions 0..T-1 only.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from flax import struct

from uat_jax import cells, recsys_data
from uat_jax.config import ModelConfig, variant_index
from uat_jax.feedback import NO_ACTION, FeedbackChannel
from uat_jax.model import DecisionTransformer, init_params, parallel_logits
from uat_jax.train import CellKeys, check_optimizer_fields, cross_entropy, make_optimizer, task_model


@dataclasses.dataclass(frozen=True)
class RecsysTrainConfig:
    """Table 3, Domain D optimiser settings (epochs and batch: see the module docstring).
    ``eval_batch``: test users scored at once (memory only, not the result)."""

    model: ModelConfig
    epochs: int = 500
    batch_size: int = 256
    lr: float = 1e-3
    ue_lr: float = 2e-2
    weight_decay: float = 1e-5
    grad_clip: float = 1.0
    eval_batch: int = 256

    def __post_init__(self) -> None:
        if self.model.obs_dim != self.model.n_actions:
            raise ValueError("Domain D observes and recommends items of one vocabulary: model.obs_dim must equal "
                             f"model.n_actions, got {self.model.obs_dim} and {self.model.n_actions}")
        check_optimizer_fields(self, ("eval_batch",))


@struct.dataclass
class RecsysTask:
    """What a Domain D sweep varies, as array leaves: the feedback delay d, the corruption
    channel of the delayed rewards and, for a ``traced_variant`` model, the member of
    ``SWITCHED``."""

    delay: jax.Array  # [] int32
    channel: FeedbackChannel
    variant: jax.Array | None = None

    @classmethod
    def make(cls, delay: int = 1, corruption: str = "clean", variant: str | None = None) -> RecsysTask:
        if not (isinstance(delay, int) and delay >= 0):
            raise ValueError(f"delay must be an integer >= 0, got {delay!r}")
        task = cls(delay=jnp.asarray(delay, jnp.int32), channel=recsys_data.corruption(corruption))
        return task if variant is None else task.with_variant(variant)

    def with_variant(self, name: str) -> RecsysTask:
        """This task for member ``name`` of ``SWITCHED`` (a ``traced_variant`` model)."""
        return self.replace(variant=variant_index(name))


def data_arrays(data: recsys_data.RecsysData) -> dict:
    """What the compiled programs read of the dataset (the sweep's ``shared`` argument):
    the training windows' items, rewards, targets and logged successors (``uat_jax.sasrec``), and
    the test windows' items and rewards with their candidates."""
    return {"train": {"items": data.train.items, "rewards": data.train.rewards, "targets": data.train.targets,
                      "next_items": data.train.next_items},
            "test": {"items": data.test.items, "rewards": data.test.rewards, "candidates": data.test_candidates}}


def feedback(key: jax.Array, items: jax.Array, rewards: jax.Array, task: RecsysTask) -> tuple[jax.Array, jax.Array]:
    """The fed pair (a~, r~) of windows [..., T] (module docstring): (i_{t-d}, r_{t-d}),
    ``NO_ACTION`` / 0 where t - d < 0, r~ corrupted by ``task.channel`` with ``key``."""
    actions = recsys_data.delay(items, task.delay, fill=NO_ACTION)
    return actions, recsys_data.delayed_feedback(key, rewards, task.delay, task.channel)


def window_logits(model: DecisionTransformer, params, items: jax.Array, actions: jax.Array, rewards: jax.Array,
                  dropout_key: jax.Array | None = None) -> jax.Array:
    """Logits [T, V] of one window: observations onehot(items [T]), fed pair (actions, rewards)
    [T] as given (no shift), causally masked; dropout when ``dropout_key`` is given."""
    return parallel_logits(model, params, jax.nn.one_hot(items, model.cfg.obs_dim), actions, rewards, dropout_key)


@struct.dataclass
class RecsysResult:
    params: dict
    loss: jax.Array  # [epochs] training cross-entropy
    train_accuracy: jax.Array  # [epochs] argmax against the expert targets
    eval: dict  # HR@K / NDCG@K on the test windows


def make_evaluate(cfg: RecsysTrainConfig):
    """``evaluate(params, key, task, test) -> {"hr@K", "ndcg@K"}`` on the ``data_arrays`` test
    windows, ``cfg.eval_batch`` users at a time."""

    def evaluate(params, key, task: RecsysTask, test: dict) -> dict:
        model = task_model(cfg.model, task)
        actions, rewards = feedback(key, test["items"], test["rewards"], task)

        def score(x):
            items, a, r, candidates = x
            return window_logits(model, params, items, a, r)[-1][candidates]

        scores = jax.lax.map(score, (test["items"], actions, rewards, test["candidates"]), batch_size=cfg.eval_batch)
        return recsys_data.ranking_metrics(scores)

    return evaluate


def fit(cfg: RecsysTrainConfig, params, keys: CellKeys, n_users: int, loss_fn):
    """The Domain D training loop of every model (UAT and its baselines, SASRec, BERT4Rec): one AdamW
    step per epoch (``train.make_optimizer``) on B of the ``n_users`` training windows, drawn without
    replacement, all epochs' draws made before the loop from ``keys.run``; epoch ``i`` calls
    ``loss_fn(params, rows [B], key) -> (loss, aux)`` with ``key = fold_in(keys.epochs, i)``.
    Returns ``(params, loss [epochs], aux [epochs])`` (pure, jittable: a ``lax.scan`` over epochs)."""
    if cfg.batch_size > n_users:
        raise ValueError(f"batch_size ({cfg.batch_size}) exceeds the {n_users} training windows")
    optimizer = make_optimizer(cfg)
    batches = jax.vmap(lambda k: jax.random.choice(k, n_users, (cfg.batch_size,), replace=False))(
        jax.random.split(keys.run, cfg.epochs))

    def epoch(state, xs):
        i, rows = xs
        params, opt_state = state
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, rows, jax.random.fold_in(keys.epochs, i))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), (loss, aux)

    (params, _), (loss, aux) = jax.lax.scan(epoch, (params, optimizer.init(params)), (jnp.arange(cfg.epochs), batches))
    return params, loss, aux


def make_train(cfg: RecsysTrainConfig):
    """``train(key, task, data) -> RecsysResult`` on ``data_arrays`` ``data`` (pure, jittable)."""
    evaluate = make_evaluate(cfg)

    def train(key, task: RecsysTask, data: dict) -> RecsysResult:
        model = task_model(cfg.model, task)
        windows = data["train"]
        keys = CellKeys.of(key)  # run: the epochs' batch draws (a cell's run of the data)

        def loss_fn(params, rows, key):
            k_feedback, k_drop = jax.random.split(key)
            items, targets = windows["items"][rows], windows["targets"][rows]
            actions, rewards = feedback(k_feedback, items, windows["rewards"][rows], task)
            logits = jax.vmap(lambda i, a, r, k: window_logits(model, params, i, a, r, k))(
                items, actions, rewards, jax.random.split(k_drop, cfg.batch_size))
            return cross_entropy(logits, targets), jnp.mean(logits.argmax(-1) == targets)

        params, loss, acc = fit(cfg, init_params(model, keys.init), keys, windows["items"].shape[0], loss_fn)
        return RecsysResult(params=params, loss=loss, train_accuracy=acc,
                            eval=evaluate(params, keys.eval, task, data["test"]))

    return train


def make_cell(cfg: RecsysTrainConfig, keep_params: bool = False):
    """``cell(item, data) -> {"hr@K", "ndcg@K": [], "loss", "train_accuracy": [epochs]}``: train
    ``cfg`` from ``item["key"]`` (raw key data) on ``item["task"]``, then rank (the sweep form of
    ``uat_jax.cells.make_cell``); ``keep_params`` adds the trained ``"params"``."""
    train = make_train(cfg)

    def cell(item: dict, data: dict) -> dict:
        res = train(jax.random.wrap_key_data(item["key"]), item["task"], data)
        out = {**res.eval, "loss": res.loss, "train_accuracy": res.train_accuracy}
        return {**out, "params": res.params} if keep_params else out

    return cell


TABLE3 = cells.Size(horizon=50, ema_decay=0.95, dropout=0.1)
"""Table 3, Domain D: d_model 64 / 4 heads / d_ff 128 / 3 layers, B 256, T 50, 500 epochs,
dropout 0.1, d_u 16, EMA decay 0.95 (lr 1e-3: :class:`RecsysTrainConfig`)."""


def train_config(size: cells.Size, n_items: int, kind: str = "uat", variant: str | None = None,
                 traced_variant: bool = False) -> RecsysTrainConfig:
    """``size``'s model ``kind`` (or UAT ablation ``variant``, or the switched-family union) over a
    vocabulary of ``n_items`` items, with its epochs and batch."""
    model = dataclasses.replace(size.model_config(kind, variant, traced_variant), obs_dim=n_items, n_actions=n_items)
    return RecsysTrainConfig(model=model, epochs=size.epochs, batch_size=size.batch_size)

"""Regret-loss training: ``make_train(config) -> train(key)``, fully jittable (spec 7.1, 8, 10.6).

Each step draws a fresh batch of N(0, I_d) sequences and takes one optax step on
* the squared external regret loss Eq. (6) for ``model = "attention"`` (reduced Eq. (2)
  model, all parameters free, no FTRL supervision) and ``model = "transformer"``;
* the swap loss Eq. (10) with Gaussian block inputs for ``model = "multihead"`` (the
  d-head Eq. (9) model; the fixed point is used only at evaluation).
Optimiser (engineer's choice, spec 7.1): Adam with global-norm clipping.  Sweeps over
seeds are ``jax.vmap(train)`` over keys.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from regret_jax.attention import MultiHeadSimplexAttention, SimplexAttention
from regret_jax.regret_loss import sample_losses, squared_regret_loss, swap_regret_loss
from regret_jax.transformer import CausalTransformer

MODELS = ("attention", "transformer", "multihead")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Sizes and optimiser settings of one regret-loss training run."""

    model: str = "attention"  # one of MODELS
    d: int = 3  # actions
    T: int = 25  # horizon
    batch_size: int = 64
    num_steps: int = 500
    learning_rate: float = 1e-2
    max_grad_norm: float = 10.0
    init_scale: float = 0.1  # attention models: N(0, init_scale^2) initial weights
    num_layers: int = 2  # transformer only
    num_heads: int = 4  # transformer only
    d_model: int = 32  # transformer only

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        for name, low in (("d", 2), ("T", 2), ("batch_size", 1), ("num_steps", 1), ("num_layers", 1), ("num_heads", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {getattr(self, name)}")
        for name in ("learning_rate", "max_grad_norm", "init_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.d_model < self.num_heads or self.d_model % self.num_heads:
            raise ValueError(f"d_model must be a positive multiple of num_heads={self.num_heads}, got {self.d_model}")


def build_model(config: TrainConfig) -> nn.Module:
    """The flax module named by ``config.model``."""
    if config.model == "attention":
        return SimplexAttention(config.d, config.init_scale)
    if config.model == "multihead":
        return MultiHeadSimplexAttention(config.d, config.init_scale)
    return CausalTransformer(config.d, config.num_layers, config.num_heads, config.d_model, max_len=config.T)


def make_loss(config: TrainConfig, model: nn.Module) -> Callable[[Any, jax.Array], jax.Array]:
    """``loss(variables, key)``: the Monte-Carlo objective on one fresh batch (Eq. (6) or Eq. (10))."""
    d, T, B = config.d, config.T, config.batch_size

    if config.model == "multihead":

        def loss(variables, key):
            blocks = sample_losses(key, B, T, d * d).reshape(B, T, d, d)
            q = jax.vmap(model.apply, in_axes=(None, 0))(variables, blocks.reshape(B, T, d * d))
            return swap_regret_loss(q, blocks)

    else:

        def loss(variables, key):
            losses = sample_losses(key, B, T, d)
            return squared_regret_loss(jax.vmap(model.apply, in_axes=(None, 0))(variables, losses), losses)

    return loss


@struct.dataclass
class TrainOutput:
    variables: Any  # trained flax variables
    loss_curve: jax.Array  # [num_steps] training loss per step


def make_train(config: TrainConfig) -> Callable[[jax.Array], TrainOutput]:
    """Return a pure, jittable ``train(key)``; vmap it over keys for seeds."""
    model = build_model(config)
    loss_fn = make_loss(config, model)
    optimiser = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate))
    in_dim = config.d * config.d if config.model == "multihead" else config.d

    def train(key: jax.Array) -> TrainOutput:
        init_key, data_key = jax.random.split(key)
        variables = model.init(init_key, jnp.zeros((config.T, in_dim)))
        opt_state = optimiser.init(variables)

        def update(carry, step_key):
            variables, opt_state = carry
            value, grads = jax.value_and_grad(loss_fn)(variables, step_key)
            updates, opt_state = optimiser.update(grads, opt_state, variables)
            return (optax.apply_updates(variables, updates), opt_state), value

        keys = jax.random.split(data_key, config.num_steps)
        (variables, _), curve = jax.lax.scan(update, (variables, opt_state), keys)
        return TrainOutput(variables=variables, loss_curve=curve)

    return train

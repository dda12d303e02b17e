"""Regret-loss training: ``make_train(config) -> train(key)``, fully jittable (docs/regret.md §7.1, 8, 10.6).

Each step draws a fresh batch of N(0, I_d) sequences and takes one optax step on
* the squared external regret loss Eq. (6) for ``model = "attention"`` (reduced Eq. (2)
  model, all parameters free, no FTRL supervision) and ``model = "transformer"``;
* the swap loss Eq. (10) for ``model = "multihead"`` (the d-head Eq. (9) model), read per
  ``swap_inputs``: ``"blocks"``, independent Gaussian blocks, the fixed point used only at
  evaluation (docs/regret.md §10.3); ``"own_play"``, the model's own Blum-Mansour play on one
  shared N(0, I_d) sequence, gradients through ``fixed_point`` (§10.8, ``own_play_regrets``).
Optimiser (engineer's choice, docs/regret.md §7.1 and 8.2: the paper's optimiser and schedule are
lost): Adam with global-norm clipping, at a constant learning rate or, with
``schedule = "warmup_cosine"``, a linear warmup followed by a cosine decay to 0.  Sweeps
over seeds are ``jax.vmap(train)`` over keys.

``centered = True`` (engineer's choice, a variance reduction of the same objective):
differentiate mean((R - c)^2) with c = E[R] the parameter-free mean regret of docs/regret.md §4.4
(:func:`regret_offset`).  Since E[R] does not depend on the parameters,
E[(R - c)^2] = E[R^2] - c^2 for every parameter value: the two objectives have the same
gradient and minimisers, and the per-batch gradient 2 (R - c) grad R is an unbiased
estimate of grad E[R^2] whose weights R - c are much smaller than R (at d = 3, T = 50,
c^2 = 35.8 of E[R^2] ~ 36.5-47).  The reported ``loss_curve`` is Eq. (6)/(10) itself.
This holds only under the zero-mean training law, the only one trained on here, and only for
the parameter-free E[R] of Eq. (6) and of Eq. (10)'s block reading.  In own play E[sum_j R_j]
= E[SwapReg] depends on the parameters (through the played x_t), so a constant c would change
the objective: grad E[(R - c)^2] = grad E[R^2] - 2 c grad E[R] also rewards a larger expected
swap regret.  Own play is therefore never centred (``centered = True`` is rejected).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from regret_jax.attention import MultiHeadSimplexAttention, SimplexAttention
from regret_jax.regret import external_regret
from regret_jax.regret_loss import own_play_regrets, sample_losses, swap_regrets
from regret_jax.stationarity import mu_d
from regret_jax.transformer import CausalTransformer

MODELS = ("attention", "transformer", "multihead")
SCHEDULES = ("constant", "warmup_cosine")
SWAP_INPUTS = ("blocks", "own_play")


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
    schedule: str = "constant"  # one of SCHEDULES, see make_schedule
    warmup_steps: int = 0  # "warmup_cosine" only: linear warmup steps before the cosine decay
    zero_readout: bool = False  # transformer only: zero read-out kernel, uniform policies at init (CausalTransformer)
    centered: bool = False  # differentiate mean((R - E[R])^2), same expected gradient as Eq. (6) (module docstring)
    swap_inputs: str = "blocks"  # multihead only, one of SWAP_INPUTS: the reading of Eq. (10) (module docstring)

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        for name, low in (("d", 2), ("T", 2), ("batch_size", 1), ("num_steps", 1), ("num_layers", 1), ("num_heads", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {getattr(self, name)}")
        for name in ("learning_rate", "max_grad_norm", "init_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0 <= self.warmup_steps < self.num_steps:
            raise ValueError(f"warmup_steps must be in [0, num_steps), got {self.warmup_steps}")
        if self.d_model < self.num_heads or self.d_model % self.num_heads:
            raise ValueError(f"d_model must be a positive multiple of num_heads={self.num_heads}, got {self.d_model}")
        if self.swap_inputs not in SWAP_INPUTS:
            raise ValueError(f"swap_inputs must be one of {SWAP_INPUTS}, got {self.swap_inputs!r}")
        if self.swap_inputs == "own_play" and (self.model != "multihead" or self.centered):
            raise ValueError(f"swap_inputs='own_play' needs model='multihead' and centered=False, got {self.model!r}, {self.centered}")


def build_model(config: TrainConfig) -> nn.Module:
    """The flax module named by ``config.model``."""
    if config.model == "attention":
        return SimplexAttention(config.d, config.init_scale)
    if config.model == "multihead":
        return MultiHeadSimplexAttention(config.d, config.init_scale)
    return CausalTransformer(config.d, config.num_layers, config.num_heads, config.d_model, max_len=config.T,
                             zero_readout=config.zero_readout)


def regret_offset(config: TrainConfig) -> float:
    """E[Regret] under the training law, the same for every parameter value (docs/regret.md §4.4, Proposition 5).

    sqrt(T) mu_d for Eq. (6); d sqrt(T) mu_d for the summed head regrets of Eq. (10)
    (each head plays a predictable policy against its own zero-mean Gaussian block).  Not defined for
    ``swap_inputs = "own_play"``, where E[sum_j R_j] depends on the parameters (module docstring).
    """
    if config.swap_inputs == "own_play":
        raise ValueError("swap_inputs='own_play' has no parameter-free mean regret")
    offset = float(np.sqrt(config.T) * mu_d(config.d))
    return config.d * offset if config.model == "multihead" else offset


def make_regrets(config: TrainConfig, model: nn.Module) -> Callable[..., jax.Array]:
    """``regrets(variables, key, mask=None)`` [batch]: Regret (Eq. (4)) or sum_j R_j (Eq. (10), in the reading of
    ``swap_inputs``: one d^2-wide Gaussian token per round, or one d-vector l_t played through the model) on one fresh batch.

    ``mask`` [T] multiplies the losses of each round (see :func:`make_train`'s ``horizon``).
    """
    regrets = _make_regrets(config, model)
    return lambda variables, key, mask=None: regrets(variables, key, mask)[0]


def _make_regrets(config: TrainConfig, model: nn.Module) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """:func:`make_regrets` plus the number of played fixed points that did not converge per sequence (own play; else 0)."""
    d, T, B = config.d, config.T, config.batch_size
    own_play = config.swap_inputs == "own_play"  # implies model = "multihead" (TrainConfig)
    width = d * d if config.model == "multihead" and not own_play else d

    def regrets(variables, key, mask=None):
        z = sample_losses(key, B, T, width)
        if mask is not None:
            z = z * mask[:, None]
        if own_play:
            return jax.vmap(own_play_regrets, in_axes=(None, 0))(variables["params"]["heads"], z)
        policies = jax.vmap(model.apply, in_axes=(None, 0))(variables, z)
        if config.model == "multihead":
            r = swap_regrets(policies, z.reshape(B, T, d, d))
        else:
            r = jax.vmap(external_regret)(policies, z)
        return r, jnp.zeros(B, jnp.int32)

    return regrets


@struct.dataclass
class TrainOutput:
    variables: Any  # trained flax variables
    loss_curve: jax.Array  # [num_steps] training loss per step
    nonconverged: jax.Array  # [num_steps] fraction of the batch's played fixed points not converged (own play; else 0)


def make_schedule(config: TrainConfig) -> optax.Schedule:
    """Learning rate per step (engineer's choice, docs/regret.md §8.2: the optimiser and its schedule are unknown).

    ``"constant"``: ``learning_rate`` throughout.  ``"warmup_cosine"``: linear warmup from
    0 to ``learning_rate`` over ``warmup_steps``, then cosine decay to 0 at ``num_steps``,
    so that a large peak rate can be used and the last steps average out batch noise.
    """
    if config.schedule == "constant":
        return optax.constant_schedule(config.learning_rate)
    return optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, config.warmup_steps, config.num_steps, end_value=0.0)


def init_variables(config: TrainConfig, key: jax.Array) -> Any:
    """The variables ``make_train(config)(key)`` starts from: the model at initialisation (the studies' untrained control)."""
    in_dim = config.d * config.d if config.model == "multihead" else config.d
    init_key, _ = jax.random.split(key)
    return build_model(config).init(init_key, jnp.zeros((config.T, in_dim)))


def make_train(config: TrainConfig) -> Callable[..., TrainOutput]:
    """Return a pure, jittable ``train(key, horizon=None, lr_scale=None)``; vmap it over keys for seeds.

    The differentiated objective is mean((R - offset)^2) per batch, offset = E[R] if
    ``config.centered`` else 0 (module docstring); ``loss_curve`` is mean(R^2) either way.

    ``horizon`` (an integer <= ``config.T``, may be traced and vmapped): train at that
    horizon inside the length-``config.T`` program.  The losses of rounds t > horizon are
    set to 0: they add nothing to the learner's loss or to L_T, and the policies of rounds
    t <= horizon do not see them, so every regret, hence the loss and its gradient, is
    that of horizon ``horizon`` (docs/regret.md §14.1; the offset is E[R] at ``horizon``).
    ``lr_scale`` multiplies every update (Adam's step is linear in its rate), so a vmapped
    grid of horizons can train each at its own rate.  ``None`` for both is the plain run.
    """
    model = build_model(config)
    regrets_fn = _make_regrets(config, model)
    optimiser = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(make_schedule(config)))

    def train(key: jax.Array, horizon=None, lr_scale=None) -> TrainOutput:
        if horizon is None:
            mask, offset = None, regret_offset(config) if config.centered else 0.0
        else:
            mask = (jnp.arange(config.T) < horizon).astype(jnp.float32)
            scale = jnp.sqrt(jnp.asarray(horizon, jnp.float32) / config.T)  # E[R] is sqrt(horizon) times a constant
            offset = regret_offset(config) * scale if config.centered else 0.0

        def objective(variables, step_key):  # (differentiated estimate, (Eq. (6)/(10) value, non-converged fraction))
            r, nonconverged = regrets_fn(variables, step_key, mask)
            return jnp.mean((r - offset) ** 2), (jnp.mean(r**2), jnp.mean(nonconverged) / config.T)

        def update(carry, step_key):
            variables, opt_state = carry
            (_, values), grads = jax.value_and_grad(objective, has_aux=True)(variables, step_key)
            updates, opt_state = optimiser.update(grads, opt_state, variables)
            if lr_scale is not None:
                updates = jax.tree.map(lambda u: lr_scale * u, updates)
            return (optax.apply_updates(variables, updates), opt_state), values

        variables = init_variables(config, key)
        data_key = jax.random.split(key)[1]
        opt_state = optimiser.init(variables)
        keys = jax.random.split(data_key, config.num_steps)
        (variables, _), (curve, nonconverged) = jax.lax.scan(update, (variables, opt_state), keys)
        return TrainOutput(variables=variables, loss_curve=curve, nonconverged=nonconverged)

    return train

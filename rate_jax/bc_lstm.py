"""BC-LSTM: behaviour cloning with a recurrent policy, one of the RATE paper's simpler baselines.

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv 2306.09459,
ICLR 2026 version), its POPGym table: BC-LSTM scores -0.2 on the 33 memory tasks (RATE 0.5, DT
-3.5). It is the sanity floor of the memory comparison: a recurrent network that carries the
whole history in its state, trained on the same oracle episodes, with no return-to-go and no
segments.

The policy, per step t of an episode, as the authors' ``BehaviorCloning`` with ``backbone='lstm'``
(their repository CognitiveAISystems/RATE; defaults ``d_model=64``, ``hidden_layers=[128, 128]``,
one LSTM layer, orthogonal LSTM weights, zero biases): x_t = W_x o_t + b_x (a linear embedding of
width ``embed``), (c_t, h_t) = LSTM((c_{t-1}, h_{t-1}), x_t) (``flax.linen.LSTMCell``: gates
i, f, o = sigmoid(W_i. x + U_h. h + b), g = tanh(...), c_t = f c_{t-1} + i g, h_t = o tanh(c_t)),
logits_t = W_a h_t + b_a; it reads the observation only. Named difference: the state starts at
(c, h) = 0, where ``BehaviorCloning`` draws it orthogonally at random (their older offline
baseline, ``DecisionLSTM`` in ``offline_rl_baselines``, used for T-Maze and Minigrid-Memory, starts
at 0, with two LSTM layers of 128 and an embedding of 128: ``hidden=128, embed=128`` is one layer of it).

Training (``init_state``, ``make_chunk``): cross-entropy of the oracle's action at every step that
has one (``action_mask``), averaged over those steps, backpropagated through the whole episode,
with the RATE studies' optimiser (``rate_jax.train.warmup_adamw``: clipping, AdamW, linear warm-up
and decay), on batches drawn with replacement from ``num_train`` oracle episodes that the seed's
key draws. The parameters, optimiser state and data of every seed are made by one
program (``init_states``) and passed to the training program, as ``rate_jax.train`` does. That
program maps over the seeds with ``lax.map``, not ``vmap``: XLA's CPU runtime (jax 0.10.2) waits
forever, its CPU idle, on the vmapped initialisation of this model over 5 seeds (every one of 5
runs: the whole model 3, the ``LSTMCell`` with orthogonal kernels alone 2), and runs the cell's
mapped (2 of 2) or vmapped with Lecun-normal kernels; vmapped orthogonal draws of the same shapes
alone run.
Evaluation (``make_env_evaluate``): greedy actions, one step at a time in the environment, the
LSTM's state carried; training's ``lax.scan`` over steps and evaluation's step are the same
module call, so the two compute the same logits on the same observations (tested).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rate_jax.dataset import Trajectories
from rate_jax.train import masked_cross_entropy, warmup_adamw


@dataclasses.dataclass(frozen=True)
class LSTMConfig:
    """Sizes and training budget of BC-LSTM (``hidden``: the LSTM's state width; ``embed``: the
    observation embedding's); the observation and action sizes come from the task."""

    hidden: int = 128
    embed: int = 64
    num_train: int = 256
    batch_size: int = 16
    num_steps: int = 300
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    lr_end_factor: float = 0.01
    grad_clip: float = 1.0

    def __post_init__(self):
        for name in ("hidden", "embed", "num_train", "batch_size", "num_steps"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"LSTMConfig.{name} must be an integer >= 1, got {value!r}")
        for name in ("learning_rate", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"LSTMConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if not (isinstance(self.warmup_steps, int) and self.warmup_steps >= 0):
            raise ValueError(f"LSTMConfig.warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"LSTMConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 <= self.lr_end_factor <= 1:
            raise ValueError(f"LSTMConfig.lr_end_factor must be in [0, 1], got {self.lr_end_factor!r}")


class BCLSTM(nn.Module):
    """One step of the policy: ``(carry, obs [B, obs_dim]) -> (carry, logits [B, num_actions])``."""

    config: LSTMConfig
    num_actions: int

    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(self.config.embed, name="embed")(obs)
        carry, h = nn.LSTMCell(self.config.hidden, kernel_init=nn.initializers.orthogonal(),
                               name="lstm")(carry, x)
        return carry, nn.Dense(self.num_actions, name="head")(h)


def zero_carry(config: LSTMConfig, batch: int):
    """The LSTM's state before the first step: (c, h) = 0, each [batch, hidden]."""
    zeros = jnp.zeros((batch, config.hidden), jnp.float32)
    return zeros, zeros


def sequence_logits(config: LSTMConfig, num_actions: int, params, obs: jax.Array) -> jax.Array:
    """Logits [B, T, num_actions] of episodes ``obs`` [B, T, obs_dim] from the zero state: the
    step of :class:`BCLSTM` scanned over time."""
    model = BCLSTM(config, num_actions)
    _, logits = jax.lax.scan(lambda carry, o: model.apply(params, carry, o), zero_carry(config, obs.shape[0]),
                             jnp.swapaxes(obs, 0, 1).astype(jnp.float32))
    return jnp.swapaxes(logits, 0, 1)


def loss(config: LSTMConfig, num_actions: int, params, data: Trajectories) -> jax.Array:
    """Mean cross-entropy of ``data.actions`` [B, T] over the steps where ``data.action_mask`` is 1."""
    total, count = masked_cross_entropy(sequence_logits(config, num_actions, params, data.obs), data.actions,
                                        data.action_mask)
    return total / jnp.maximum(count, 1.0)


@struct.dataclass
class LSTMState:
    """One seed's training run: parameters, optimiser state, its ``num_train`` oracle episodes, the
    key its batches are drawn from, the step reached and the loss of every step [num_steps]."""

    params: dict
    opt_state: optax.OptState
    data: Trajectories
    key: jax.Array
    step: jax.Array
    losses: jax.Array


def _optimizer(config: LSTMConfig) -> optax.GradientTransformation:
    return warmup_adamw(config.learning_rate, config.warmup_steps, config.num_steps, config.lr_end_factor,
                        config.weight_decay, config.grad_clip)


def init_state(config: LSTMConfig, task, max_steps: int, key: jax.Array) -> LSTMState:
    """A seed's start: ``num_train`` oracle episodes of ``task`` (``task.data``, padded to
    ``max_steps``), parameters and optimiser state, all drawn from ``key``."""
    k_data, k_init, k_run = jax.random.split(key, 3)
    data = task.data(k_data, config.num_train, max_steps)
    params = BCLSTM(config, task.num_actions).init(k_init, zero_carry(config, 1), data.obs[:1, 0].astype(jnp.float32))
    return LSTMState(params=params, opt_state=_optimizer(config).init(params), data=data, key=k_run,
                     step=jnp.zeros((), jnp.int32), losses=jnp.zeros(config.num_steps))


def init_states(config: LSTMConfig, task, max_steps: int, keys: jax.Array) -> LSTMState:
    """:func:`init_state` of every key of ``keys`` [S, ...], stacked on a leading seed axis; a
    ``lax.map`` over the seeds (the module docstring says why not ``vmap``). Jittable."""
    return jax.lax.map(lambda key: init_state(config, task, max_steps, key), keys)


def make_chunk(config: LSTMConfig, num_actions: int, num_chunks: int) -> Callable[[LSTMState, jax.Array], LSTMState]:
    """``chunk(states, i) -> states``: training steps ``i*C .. (i+1)*C - 1`` (C = num_steps /
    num_chunks) of every seed (``states`` with a leading seed axis), one ``lax.scan`` of AdamW
    steps vmapped over seeds; each step's batch index is ``fold_in(key, step)``."""
    if num_chunks < 1 or config.num_steps % num_chunks:
        raise ValueError(f"num_chunks must be >= 1 and divide num_steps={config.num_steps}, got {num_chunks}")
    per_chunk = config.num_steps // num_chunks
    optimizer = _optimizer(config)

    def step(state: LSTMState, _):
        idx = jax.random.randint(jax.random.fold_in(state.key, state.step), (config.batch_size,), 0,
                                 config.num_train)
        batch = jax.tree.map(lambda x: x[idx], state.data)
        value, grads = jax.value_and_grad(lambda p: loss(config, num_actions, p, batch))(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        return state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state,
                             step=state.step + 1, losses=state.losses.at[state.step].set(value)), None

    def run(state: LSTMState, i):
        del i  # the step counter in the state places the losses
        return jax.lax.scan(step, state, None, length=per_chunk)[0]

    return jax.vmap(run, in_axes=(0, None))


def make_env_evaluate(config: LSTMConfig, num_actions: int, env, max_steps: int
                      ) -> Callable[[dict, jax.Array, object], jax.Array]:
    """``evaluate(params, key, env_params) -> episode returns [E]``: one greedy episode per entry of
    ``env_params`` (leading axis E) in the gymnax-style ``env``, run for ``max_steps`` steps; the
    rewards after an episode ends are not counted."""
    model = BCLSTM(config, num_actions)

    def episode(params, key, env_params):
        k_reset, k_steps = jax.random.split(key)
        obs0, state0 = env.reset(k_reset, env_params)

        def body(carry, k):
            lstm, obs, state, done, ret = carry
            lstm, logits = model.apply(params, lstm, obs[None].astype(jnp.float32))
            action = jnp.argmax(logits[0]).astype(jnp.int32)
            next_obs, next_state, reward, step_done, _ = env.step(k, state, action, env_params)
            ret = ret + jnp.where(done, 0.0, reward)
            keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(done, b, a), new, old)  # noqa: E731
            return (lstm, keep(next_obs, obs), keep(next_state, state), done | step_done, ret), None

        init = (zero_carry(config, 1), obs0, state0, jnp.zeros((), bool), jnp.zeros((), jnp.float32))
        (_, _, _, _, ret), _ = jax.lax.scan(body, init, jax.random.split(k_steps, max_steps))
        return ret

    def evaluate(params, key, env_params):
        num = jax.tree.leaves(env_params)[0].shape[0]
        return jax.vmap(episode, in_axes=(None, 0, 0))(params, jax.random.split(key, num), env_params)

    return evaluate

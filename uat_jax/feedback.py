"""The feedback channel: the shift of section 4.3 and the corruptions of section 6.3.

Shift (section 4.3): the model input at step j is the pair (a_{j-1}, r_{j-1}); at j = 1
it is the zero pair, encoded as action ``NO_ACTION`` = -1 (whose one-hot, and hence
f_a, is the zero vector) and reward 0. So no model sees (a_t, r_t) before step t + 1.

Corruption (section 6.3, Appendix D.2) acts on the rewards the model is fed, never on
the environment or the expert. ``mode`` and ``sigma`` are array leaves so the
conditions vmap. Reading of "within-episode shuffling": a causal model cannot be fed a
reward from the future, so the reward fed for step t is the realised reward of a step
s drawn uniformly from {1, ..., t} of the same episode (a shuffle of the past).
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

NO_ACTION = -1
CORRUPTIONS = ("clean", "gaussian", "null", "shuffle", "sign_flip")


def shift(actions: jax.Array, rewards: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(a_{j-1}, r_{j-1}) for j = 1..T from (a_j, r_j), with the zero pair at j = 1."""
    chex.assert_equal_shape([actions, rewards])
    pad_a = jnp.full(actions.shape[:-1] + (1,), NO_ACTION, actions.dtype)
    pad_r = jnp.zeros(rewards.shape[:-1] + (1,), rewards.dtype)
    return (jnp.concatenate([pad_a, actions[..., :-1]], -1),
            jnp.concatenate([pad_r, rewards[..., :-1]], -1))


def action_vector(action: jax.Array, n_actions: int) -> jax.Array:
    """The fed action as a vector [n, n_actions]: an integer action [n] as its one-hot (``NO_ACTION``
    gives the zero vector), a floating allocation [n, n_actions] as it is (Domain C's portfolio
    weights, ``uat_jax.markets``; the zero vector before the first step). Every map of the
    action (f_a, A-DT's and DT-style's embeddings) is linear in this vector, so an allocation
    is fed as the weighted sum of its actions' embeddings."""
    if jnp.issubdtype(action.dtype, jnp.integer):
        chex.assert_rank(action, 1)
        return jax.nn.one_hot(action, n_actions)
    chex.assert_shape(action, (None, n_actions))
    return action


@struct.dataclass
class FeedbackChannel:
    """Corruption of the fed rewards: ``mode`` indexes CORRUPTIONS; ``sigma`` is the
    Gaussian noise scale (used by mode "gaussian" only)."""

    mode: jax.Array
    sigma: jax.Array

    @classmethod
    def make(cls, name: str, sigma: float = 0.0) -> FeedbackChannel:
        if name not in CORRUPTIONS:
            raise ValueError(f"corruption must be one of {CORRUPTIONS}, got {name!r}")
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        return cls(mode=jnp.asarray(CORRUPTIONS.index(name), jnp.int32),
                   sigma=jnp.asarray(sigma, jnp.float32))


@struct.dataclass
class FeedbackNoise:
    """The random numbers of one episode's corruption, drawn before it is played (so a
    rollout makes two draws per episode, not per step): ``normal`` [T] standard normals
    (mode "gaussian"), ``uniform`` [T] in [0, 1) (mode "shuffle": the past step fed)."""

    normal: jax.Array
    uniform: jax.Array

    @classmethod
    def draw(cls, key: jax.Array, horizon: int) -> FeedbackNoise:
        k_noise, k_pick = jax.random.split(key)
        return cls(normal=jax.random.normal(k_noise, (horizon,)), uniform=jax.random.uniform(k_pick, (horizon,)))


def corrupt(noise: FeedbackNoise, t: jax.Array, rewards: jax.Array, channel: FeedbackChannel) -> jax.Array:
    """The reward fed to the model for step ``t`` (0-based) from step ``t``'s ``noise``
    (scalar fields); ``rewards`` [T] holds the realised rewards, and only entries 0..t are
    read (causal). "shuffle" feeds the reward of step floor(u (t + 1)), uniform on 0..t."""
    chex.assert_rank(rewards, 1)
    r = rewards[t]
    past = rewards[jnp.minimum(jnp.floor(noise.uniform * (t + 1)).astype(jnp.int32), t)]
    options = jnp.stack([r, r + channel.sigma * noise.normal, 0.0 * r, past, -r])
    return options[channel.mode]


def corrupt_episode(key: jax.Array, rewards: jax.Array, channel: FeedbackChannel) -> jax.Array:
    """``corrupt`` at every step of an episode, with the noise ``FeedbackNoise.draw(key, T)``."""
    steps = jnp.arange(rewards.shape[-1])
    noise = FeedbackNoise.draw(key, rewards.shape[-1])
    return jax.vmap(lambda n, t: corrupt(n, t, rewards, channel))(noise, steps)

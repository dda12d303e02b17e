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


def corrupt(key: jax.Array, t: jax.Array, rewards: jax.Array, channel: FeedbackChannel) -> jax.Array:
    """The reward fed to the model for step ``t`` (0-based); ``rewards`` [T] holds the
    realised rewards, and only entries 0..t are read (causal)."""
    chex.assert_rank(rewards, 1)
    k_noise, k_pick = jax.random.split(key)
    r = rewards[t]
    past = rewards[jax.random.randint(k_pick, (), 0, t + 1)]
    options = jnp.stack([r, r + channel.sigma * jax.random.normal(k_noise), 0.0 * r, past, -r])
    return options[channel.mode]


def corrupt_episode(key: jax.Array, rewards: jax.Array, channel: FeedbackChannel) -> jax.Array:
    """``corrupt`` at every step of an episode, step t using key fold_in(key, t)."""
    steps = jnp.arange(rewards.shape[-1])
    return jax.vmap(lambda t: corrupt(jax.random.fold_in(key, t), t, rewards, channel))(steps)

"""Online evaluation in T-Maze: many episodes, segment recurrence, vectorised.

The T-Maze success rate of "Recurrent Action Transformer with Memory" (arXiv 2306.09459)
(its T-Maze generalisation experiment and memory-noise ablation), evaluated as the
authors' ``val_tmaze.py`` does: return-to-go starts at 1, actions are the argmax of the
logits at the current observation, the model sees the steps of the current segment, and
at each segment boundary the memory (and cache) computed from the finished segment is
passed on.

Inference is incremental (``RATE.decode``): at the start of a segment the key/value
buffers hold the cache; step 0 runs the prefix memory and (R_0, o_0), step t > 0 runs
only (a_{t-1}, R_t, o_t) against the buffers. This equals running the whole segment with
the not yet seen steps padded, which by the causal mask (``masks.py``) equals running
the prefix alone (``tests/rate_jax``), at a cost per step of 3 tokens instead of 3K + 2m.

Readings:
* the memory passed on is computed from the complete segment (all K actions),
  exactly as in training; the authors take it from the last per-step call, whose
  final action slot is not yet filled;
* DT (one segment of K*N steps, no memory) therefore restarts its context every K*N
  steps instead of sliding it; either way it cannot see the cue after K*N steps;
* ``memory_noise`` (the paper's ablation that replaces the memory
  embeddings M by random noise at inference): every memory passed
  between segments is replaced by Gaussian noise with the same mean and standard
  deviation (per episode) as the memory it replaces; M_0 is kept.
"""
from __future__ import annotations

from typing import Callable

import chex
import jax
import jax.numpy as jnp
from flax import struct

from rate_jax import tmaze
from rate_jax.config import ModelConfig
from rate_jax.model import RATE, Carry, DecodeState, Segment


@struct.dataclass
class EvalResult:
    """success [E] (1.0 when the episode ended on the goal), episode_return [E], actions
    [E, S*K] (the argmax action at every step, S*K >= max_steps; steps after the end of
    an episode are still chosen but not applied)."""

    success: jax.Array
    episode_return: jax.Array
    actions: jax.Array


@struct.dataclass
class _Rollout:
    env_state: tmaze.EnvState
    obs: jax.Array
    rtg: jax.Array
    done: jax.Array
    ret: jax.Array
    carry: Carry


def _noise_like(key: jax.Array, memory: jax.Array) -> jax.Array:
    mean = jnp.mean(memory, axis=(1, 2), keepdims=True)
    std = jnp.std(memory, axis=(1, 2), keepdims=True)
    return mean + std * jax.random.normal(key, memory.shape)


def make_evaluate(config: ModelConfig, max_steps: int) -> Callable[..., EvalResult]:
    """``evaluate(params, key, corridor_lengths [E], memory_noise=False) -> EvalResult``; runs
    ``max_steps`` steps.

    ``max_steps`` (static) must be at least max(corridor_lengths) + 2, the longest episode.
    ``memory_noise`` (a bool, traceable: the clean run and the ablation are one program)
    replaces every memory passed between segments by noise; the noise is drawn either way,
    so the clean run's numbers do not depend on it.
    """
    model = RATE(config)
    k_seg = config.segment_len
    num_segments = -(-max_steps // k_seg)

    def evaluate(params, key, corridor_lengths, memory_noise=False):
        corridor_lengths = jnp.asarray(corridor_lengths, jnp.int32)
        chex.assert_rank(corridor_lengths, 1)
        e = corridor_lengths.shape[0]
        env_params = jax.vmap(tmaze.make_params)(corridor_lengths)
        k_reset, k_run = jax.random.split(key)
        obs, env_state = jax.vmap(tmaze.reset)(jax.random.split(k_reset, e), env_params)
        initial = _Rollout(env_state=env_state, obs=obs, rtg=jnp.ones(e), done=jnp.zeros(e, bool), ret=jnp.zeros(e),
                         carry=model.apply(params, e, method=RATE.initial_carry))

        def env_step(ro: _Rollout, buf: Segment, kv: DecodeState, idx, key, start, num: int):
            """Step idx of the segment: tokens start .. start + num - 1 end with o_idx."""
            buf = buf.replace(obs=buf.obs.at[:, idx].set(ro.obs), rtg=buf.rtg.at[:, idx].set(ro.rtg))
            logits, kv = model.apply(params, buf, ro.carry, kv, start, num, method=RATE.decode)
            action = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            obs, env_state, reward, done, _ = jax.vmap(tmaze.step)(jax.random.split(key, e), ro.env_state,
                                                                     action, env_params)
            live = ~ro.done
            keep = lambda new, old: jnp.where(live.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
            ro = ro.replace(env_state=jax.tree.map(keep, env_state, ro.env_state), obs=keep(obs, ro.obs),
                            rtg=ro.rtg - reward * live, done=ro.done | done, ret=ro.ret + reward * live)
            buf = buf.replace(actions=buf.actions.at[:, idx].set(action),
                              action_known=buf.action_known.at[:, idx].set(1.0))
            return ro, buf, kv

        def segment(ro: _Rollout, key):
            k_first, k_steps, k_noise = jax.random.split(key, 3)
            buf = Segment(obs=jnp.zeros((e, k_seg, config.obs_dim)), actions=jnp.zeros((e, k_seg), jnp.int32),
                          rtg=jnp.zeros((e, k_seg)), action_known=jnp.zeros((e, k_seg)))
            kv = model.apply(params, ro.carry, method=RATE.decode_start)
            m = config.num_mem_tokens
            first = env_step(ro, buf, kv, 0, k_first, 0, m + 2)  # prefix memory, R_0, o_0

            def body(c, inputs):
                idx, k = inputs
                return env_step(*c, idx, k, m + 3 * idx - 1, 3), None  # a_{idx-1}, R_idx, o_idx

            (ro, buf, kv), _ = jax.lax.scan(body, first, (jnp.arange(1, k_seg), jax.random.split(k_steps, k_seg - 1)))
            carry = model.apply(params, buf, ro.carry, kv, method=RATE.decode_finish)
            if config.num_mem_tokens > 0:
                carry = carry.replace(memory=jnp.where(memory_noise, _noise_like(k_noise, carry.memory), carry.memory))
            return ro.replace(carry=carry), buf.actions

        end, actions = jax.lax.scan(segment, initial, jax.random.split(k_run, num_segments))
        actions = jnp.swapaxes(actions, 0, 1).reshape(e, num_segments * k_seg)
        return EvalResult(success=(end.ret >= 1.0).astype(jnp.float32), episode_return=end.ret, actions=actions)

    return evaluate

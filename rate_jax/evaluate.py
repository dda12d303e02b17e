"""Online evaluation: many episodes, segment recurrence, vectorised; T-Maze and any gymnax-style task.

The T-Maze success rate of "Recurrent Action Transformer with Memory" (arXiv 2306.09459)
(its T-Maze generalisation experiment, inference corridors up to 9,600 steps, and the
memory-noise ablation), evaluated as the authors' ``val_tmaze.py`` does: return-to-go
starts at 1, actions are the argmax of the logits at the current observation, the model
sees the steps of the current segment, and at each segment boundary the memory (and
cache) computed from the finished segment is passed on.

Inference is incremental (``RATE.decode``): at the start of a segment the key/value
buffers hold the cache; step 0 runs the prefix memory and (R_0, o_0), step t > 0 runs
only (a_{t-1}, R_t, o_t) against the buffers. This equals running the whole segment with
the not yet seen steps padded, which by the causal mask (``masks.py``) equals running
the prefix alone (``tests/rate_jax``), at a cost per step of 3 tokens instead of 3K + 2m.
The steps of a segment run in ``DECODE_GROUPS`` scans whose key/value buffers hold only the
positions their queries can see (``model.step_groups``): an early step reads about half the
buffer a late one does, and reading the buffers is most of a step's time.

The rollout (a ``lax.scan`` over segments of a batch of slots) takes any environment with
gymnax-style ``reset``/``step`` (``rate_jax.tmaze``, ``rate_jax.minigrid_memory``, the
``rate_jax.popgym`` tasks); three evaluators share it, and a fourth its step:

* :func:`make_env_evaluate` runs every episode of any such environment for ``max_steps``
  steps (one slot per episode), from a given initial return-to-go; success is the
  environment's ``info["success"]``;
* :func:`make_evaluate` is that in T-Maze, by corridor length;
* :func:`make_packed_evaluate` runs each episode only for the
  :func:`segments_needed` segments its corridor can last: a fixed number of slots, each
  with a static queue of episodes (:func:`slot_queues`, balanced in work, computed in
  numpy); when a slot's episode has used its segments the slot resets (M_0, empty cache,
  a new environment) and starts its next one. The scan is as long as the busiest slot's
  queue, close to sum(segments) / slots instead of episodes x max(segments).
* :func:`make_sliding_evaluate` (its own scan over steps, the rollout's step and keys) is
  :func:`make_env_evaluate` for a model without memory or cache (DT) whose K-step context
  slides by one step at every step instead of restarting every K steps (the authors' DT
  evaluation); it runs the whole window at every step.

Every episode draws its keys from its own index i among the N episodes (reset key
``split(k_reset, N)[i]``, segment n of it ``fold_in(split(k_run, N)[i], n)``), so its
result does not depend on the slot, the queue or the other episodes, and both
evaluators give the same result for the same episodes (``tests/rate_jax/test_rate_eval_packing.py``).

Readings:
* the memory passed on is computed from the complete segment (all K actions),
  exactly as in training; the authors take it from the last per-step call, whose
  final action slot is not yet filled;
* DT (one segment of K*N steps, no memory) therefore restarts its context every K*N
  steps here (:func:`make_sliding_evaluate` slides it); either way it cannot see the cue
  after K*N steps;
* ``memory_noise`` (the paper's ablation that replaces the memory
  embeddings M by random noise at inference): every memory passed
  between segments is replaced by Gaussian noise with the same mean and standard
  deviation (per episode) as the memory it replaces; M_0 is kept.
"""
from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rate_jax import tmaze
from rate_jax.config import ModelConfig
from rate_jax.model import RATE, Carry, DecodeState, Segment, step_groups

DECODE_GROUPS = 3  # step ranges of a segment decoded with buffers only as long as they need (``step_groups``)
MIN_GROUP_STEPS = 10  # a segment of fewer than 2 x 10 steps decodes as one group


@struct.dataclass
class EvalResult:
    """success [E] (1.0 when some step reported ``info["success"]``: in T-Maze, the episode
    ended on the goal; NaN for an environment that reports none), chose [E] (the same of
    ``info["chose"]``: the episode ended on one of the task's choices, right or wrong; in
    T-Maze, a turn at the junction), episode_return [E], episode_length [E] (steps until the
    episode ended), actions [E, S*K] (the argmax action at every step, S*K >= max_steps; steps
    after the end of an episode are still chosen but not applied)."""

    success: jax.Array
    chose: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    actions: jax.Array


@struct.dataclass
class PackedResult:
    """success [N], chose [N], episode_return [N] and episode_length [N] (as in
    :class:`EvalResult`), in the order of the evaluator's ``corridor_lengths``."""

    success: jax.Array
    chose: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Which episode each slot runs in each segment of the scan (static numpy arrays).

    episode [G, S] int32: the episode slot s works on in scan segment g; segment [G, S]
    int32: that episode's own segment number (0: the slot resets and starts it); a slot
    whose queue is done keeps running its last (finished) episode; finish [N, 2]: (g, s)
    of the last segment of every episode, where its result is read.
    """

    episode: np.ndarray
    segment: np.ndarray
    finish: np.ndarray

    @classmethod
    def from_queues(cls, segments: Sequence[int], queues: Sequence[Sequence[int]]) -> Schedule:
        """Slot s runs episodes ``queues[s]`` in order, episode i for ``segments[i]`` segments.

        ``queues`` must hold every episode index 0..N-1 exactly once (N = len(segments)).
        """
        segments = [int(x) for x in segments]
        if not segments or min(segments) < 1:
            raise ValueError(f"segments must be a non-empty sequence of integers >= 1, got {segments!r}")
        order = sorted(i for q in queues for i in q)
        if not queues or min(len(q) for q in queues) < 1 or order != list(range(len(segments))):
            raise ValueError(f"queues must be non-empty and hold each episode 0..{len(segments) - 1} exactly once, "
                             f"got {queues!r}")
        length = max(sum(segments[i] for i in q) for q in queues)
        episode = np.zeros((length, len(queues)), np.int32)
        segment = np.zeros((length, len(queues)), np.int32)
        finish = np.zeros((len(segments), 2), np.int32)
        for s, queue in enumerate(queues):
            g = 0
            for i in queue:
                episode[g:g + segments[i], s] = i
                segment[g:g + segments[i], s] = np.arange(segments[i])
                g += segments[i]
                finish[i] = (g - 1, s)
            episode[g:, s] = queue[-1]
            segment[g:, s] = segments[queue[-1]] + np.arange(length - g)
        return cls(episode=episode, segment=segment, finish=finish)


def segments_needed(corridor_length: int, segment_len: int) -> int:
    """ceil((L + 2) / K): the segments of K steps an episode of corridor L can last (it ends
    after at most L + 2 steps, ``tmaze.make_params``)."""
    return -(-(int(corridor_length) + 2) // int(segment_len))


def slot_queues(segments: Sequence[int], num_slots: int) -> tuple[tuple[int, ...], ...]:
    """Greedy longest-first assignment of episodes (``segments[i]`` segments each) to
    ``num_slots`` slots: each episode, longest first (ties: lower index first), goes to the
    slot with the least work so far (ties: lower slot). The busiest slot then has at most
    the least busy one's work plus the longest episode's. Returns each slot's queue."""
    if not (isinstance(num_slots, int) and 1 <= num_slots <= len(segments)):
        raise ValueError(f"num_slots must be an integer in [1, {len(segments)}] (the number of episodes), "
                         f"got {num_slots!r}")
    heap = [(0, s) for s in range(num_slots)]
    queues = [[] for _ in range(num_slots)]
    for i in sorted(range(len(segments)), key=lambda i: (-segments[i], i)):
        load, s = heapq.heappop(heap)
        queues[s].append(i)
        heapq.heappush(heap, (load + int(segments[i]), s))
    return tuple(tuple(q) for q in queues)


@struct.dataclass
class _Rollout:
    env_state: object
    obs: jax.Array
    rtg: jax.Array
    done: jax.Array
    ret: jax.Array
    length: jax.Array
    success: jax.Array
    chose: jax.Array
    carry: Carry


def _where(cond: jax.Array, new, old):
    """``new`` where ``cond`` [S] holds, else ``old`` (pytrees with a leading slot axis S)."""
    return jax.tree.map(lambda a, b: jnp.where(cond.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old)


def _advance(env, ro: _Rollout, action: jax.Array, keys: jax.Array, env_params) -> _Rollout:
    """One environment step of every slot with ``action`` [S]; a slot whose episode is done keeps its
    state. ``success`` / ``chose``: whether a live step has reported ``info[name]`` (NaN: never reported)."""
    obs, env_state, reward, done, info = jax.vmap(env.step)(keys, ro.env_state, action, env_params)
    live = ~ro.done

    def seen(name, so_far):
        hit = info[name].astype(jnp.float32) if name in info else jnp.full(live.shape, jnp.nan)
        return jnp.where(live, jnp.maximum(so_far, hit), so_far)

    return ro.replace(env_state=_where(live, env_state, ro.env_state), obs=_where(live, obs, ro.obs),
                      rtg=ro.rtg - reward * live, done=ro.done | done, ret=ro.ret + reward * live,
                      length=ro.length + live, success=seen("success", ro.success), chose=seen("chose", ro.chose))


def _fresh(env, reset_keys: jax.Array, env_params, initial_rtg: float, carry: Carry) -> _Rollout:
    """Slots that start their episodes: reset with ``reset_keys`` [S], return-to-go ``initial_rtg``."""
    obs, env_state = jax.vmap(env.reset)(reset_keys, env_params)
    zeros = jnp.zeros(reset_keys.shape[0])
    return _Rollout(env_state=env_state, obs=obs, rtg=jnp.full(zeros.shape, initial_rtg, jnp.float32),
                    done=jnp.zeros(zeros.shape, bool), ret=zeros, length=jnp.zeros(zeros.shape, jnp.int32),
                    success=zeros, chose=zeros, carry=carry)


def _segment_keys(run_key: jax.Array, segment, segment_len: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """An episode's keys for its segment ``segment``: (step 0's environment key, steps 1..K-1's [K-1], the
    memory noise's): ``split(fold_in(run_key, segment), 3)``, the middle one split K-1 ways."""
    first, rest, noise = jax.random.split(jax.random.fold_in(run_key, segment), 3)
    return first, jax.random.split(rest, segment_len - 1), noise


def _noise_like(keys: jax.Array, memory: jax.Array) -> jax.Array:
    """Gaussian noise [B, m, d] with each row's mean and std of ``memory`` (one key per row)."""
    mean = jnp.mean(memory, axis=(1, 2), keepdims=True)
    std = jnp.std(memory, axis=(1, 2), keepdims=True)
    return mean + std * jax.vmap(lambda k: jax.random.normal(k, memory.shape[1:]))(keys)


def _make_rollout(config: ModelConfig, schedule: Schedule, env, initial_rtg: float):
    """``rollout(params, key, env_params [N], memory_noise [N]) -> (ret, length, success, chose, actions)``
    stacked over the scan, [G, S] (actions [G, S, K]), for the slots of ``schedule``.

    ``env`` is any gymnax-style environment: ``reset(key, params) -> (obs, state)`` and
    ``step(key, state, action, params) -> (obs, state, reward, done, info)``; ``env_params`` a
    pytree with a leading episode axis N. ``length`` counts the steps taken before ``done``;
    ``success`` and ``chose`` are whether some step reported ``info["success"]`` /
    ``info["chose"]`` (NaN for an environment whose ``info`` has no such entry). Return-to-go
    starts at ``initial_rtg``.
    """
    model = RATE(config)
    k_seg = config.segment_len
    groups = step_groups(config, max(1, min(DECODE_GROUPS, (k_seg - 1) // MIN_GROUP_STEPS)))
    episodes = jnp.asarray(schedule.episode)
    own_segments = jnp.asarray(schedule.segment)
    s_slots = schedule.episode.shape[1]

    def rollout(params, key, env_params, memory_noise):
        n = memory_noise.shape[0]
        k_reset, k_run = jax.random.split(key)
        reset_keys, run_keys = jax.random.split(k_reset, n), jax.random.split(k_run, n)
        initial_carry = model.apply(params, s_slots, method=RATE.initial_carry)
        of = lambda ep: jax.tree.map(lambda x: x[ep], env_params)

        def fresh(ep, slot_params):
            return _fresh(env, reset_keys[ep], slot_params, initial_rtg, initial_carry)

        def segment(ro: _Rollout, xs):
            ep, own = xs  # [S]: each slot's episode and that episode's segment number
            slot_params = of(ep)
            begins, new = own == 0, fresh(ep, slot_params)  # a slot starting an episode resets
            carry = Carry(memory=_where(begins, new.carry.memory, ro.carry.memory),
                          cache=jnp.where(begins[None, :, None, None], new.carry.cache, ro.carry.cache),
                          cache_valid=_where(begins, new.carry.cache_valid, ro.carry.cache_valid))
            fields = ("env_state", "obs", "rtg", "done", "ret", "length", "success", "chose")
            ro = ro.replace(carry=carry, **{f: _where(begins, getattr(new, f), getattr(ro, f)) for f in fields})
            k_first, k_steps, k_noise = jax.vmap(lambda k, i: _segment_keys(k, i, k_seg))(run_keys[ep], own)
            k_steps = jnp.swapaxes(k_steps, 0, 1)

            def env_step(ro: _Rollout, buf: Segment, kv: DecodeState, idx, keys, start, num: int):
                """Step idx of the segment: tokens start .. start + num - 1 end with o_idx."""
                buf = buf.replace(obs=buf.obs.at[:, idx].set(ro.obs), rtg=buf.rtg.at[:, idx].set(ro.rtg))
                logits, kv = model.apply(params, buf, ro.carry, kv, start, num, method=RATE.decode)
                action = jnp.argmax(logits, axis=-1).astype(jnp.int32)
                ro = _advance(env, ro, action, keys, slot_params)
                buf = buf.replace(actions=buf.actions.at[:, idx].set(action),
                                  action_known=buf.action_known.at[:, idx].set(1.0))
                return ro, buf, kv

            buf = Segment(obs=jnp.zeros((s_slots, k_seg, config.obs_dim)),
                          actions=jnp.zeros((s_slots, k_seg), jnp.int32), rtg=jnp.zeros((s_slots, k_seg)),
                          action_known=jnp.zeros((s_slots, k_seg)))
            kv = model.apply(params, ro.carry, groups[0][2], method=RATE.decode_start)
            m = config.num_mem_tokens
            c = env_step(ro, buf, kv, 0, k_first, 0, m + 2)  # prefix memory, R_0, o_0

            def body(c, inputs):
                idx, keys = inputs
                return env_step(*c, idx, keys, m + 3 * idx - 1, 3), None  # a_{idx-1}, R_idx, o_idx

            for lo, hi, num_keys in groups:  # buffers only as long as the group's queries can see
                c = (c[0], c[1], c[2].grow(num_keys))
                c, _ = jax.lax.scan(body, c, (jnp.arange(lo, hi), k_steps[lo - 1:hi - 1]))
            ro, buf, kv = c
            carry = model.apply(params, buf, ro.carry, kv, method=RATE.decode_finish)
            if m > 0:
                noisy = memory_noise[ep].reshape(-1, 1, 1)
                carry = carry.replace(memory=jnp.where(noisy, _noise_like(k_noise, carry.memory), carry.memory))
            ro = ro.replace(carry=carry)
            return ro, (ro.ret, ro.length, ro.success, ro.chose, buf.actions)

        _, out = jax.lax.scan(segment, fresh(episodes[0], of(episodes[0])), (episodes, own_segments))
        return out

    return rollout


def make_sliding_evaluate(config: ModelConfig, env, max_steps: int, initial_rtg: float = 1.0
                          ) -> Callable[..., EvalResult]:
    """A model without memory or cache (DT) evaluated with a sliding window, as the authors' validation
    scripts run their DT on POPGym and Minigrid-Memory (past the context length K the oldest step
    is dropped at every step): at step t the model sees steps max(0, t - K + 1) .. t, at
    window positions 0 .. min(t, K - 1), and acts on its last observation. :func:`make_env_evaluate`
    instead restarts the window every K steps, so there the context after a boundary is short.

    The same interface and episodes as :func:`make_env_evaluate` (``evaluate(params, key, env_params,
    memory_noise=False) -> EvalResult``): the environment draws the same keys at
    every step, so the two agree on every step before K and, for K >= ``max_steps``, on everything.
    ``memory_noise`` is accepted for that interface and changes nothing (nothing is passed between
    steps but the window). Each step runs the whole window (3K tokens), K times the incremental cost.
    """
    if config.num_mem_tokens or config.mem_len:
        raise ValueError("a sliding window is for a model without memory tokens or cache (DT): got "
                         f"num_mem_tokens={config.num_mem_tokens}, mem_len={config.mem_len}")
    if not (isinstance(max_steps, (int, np.integer)) and max_steps >= 1):
        raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    model, k_seg = RATE(config), config.segment_len
    num_steps = -(-int(max_steps) // k_seg) * k_seg  # as make_env_evaluate's whole segments

    def evaluate(params, key, env_params, memory_noise=False):
        del memory_noise
        n = jax.tree.leaves(env_params)[0].shape[0]
        k_reset, k_run = jax.random.split(key)
        carry = model.apply(params, n, method=RATE.initial_carry)
        ro = _fresh(env, jax.random.split(k_reset, n), env_params, initial_rtg, carry)
        segment_keys = jax.vmap(lambda k: jax.vmap(lambda seg: _segment_keys(k, seg, k_seg))(
            jnp.arange(num_steps // k_seg)))(jax.random.split(k_run, n))
        step_keys = jnp.concatenate([segment_keys[0][:, :, None], segment_keys[1]], axis=2)  # [N, segments, K]
        step_keys = jnp.swapaxes(step_keys.reshape((n, num_steps) + step_keys.shape[3:]), 0, 1)  # [steps, N]
        window = Segment(obs=jnp.zeros((n, k_seg, config.obs_dim)), actions=jnp.zeros((n, k_seg), jnp.int32),
                         rtg=jnp.zeros((n, k_seg)), action_known=jnp.zeros((n, k_seg)))

        def step(c, xs):
            (ro, window), (t, keys) = c, xs
            idx = jnp.minimum(t, k_seg - 1)  # the step's window position: the last one once the window is full
            window = jax.tree.map(lambda x: jnp.where(t >= k_seg, jnp.roll(x, -1, axis=1), x), window)
            window = window.replace(obs=window.obs.at[:, idx].set(ro.obs), rtg=window.rtg.at[:, idx].set(ro.rtg),
                                    action_known=window.action_known.at[:, idx].set(0.0))
            logits = model.apply(params, window, carry).logits
            action = jnp.argmax(jnp.take(logits, idx, axis=1), axis=-1).astype(jnp.int32)
            ro = _advance(env, ro, action, keys, env_params)
            window = window.replace(actions=window.actions.at[:, idx].set(action),
                                    action_known=window.action_known.at[:, idx].set(1.0))
            return (ro, window), action

        (ro, _), actions = jax.lax.scan(step, (ro, window), (jnp.arange(num_steps), step_keys))
        return EvalResult(success=ro.success, chose=ro.chose, episode_return=ro.ret, episode_length=ro.length,
                          actions=actions.T)

    return evaluate


def _noise_flags(memory_noise, num_episodes: int) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(memory_noise, bool), (num_episodes,))


def _tmaze_params(corridor_lengths) -> tmaze.EnvParams:
    corridor_lengths = jnp.asarray(corridor_lengths, jnp.int32)
    if corridor_lengths.ndim != 1:
        raise ValueError(f"corridor_lengths must be a 1-d array [E], got shape {corridor_lengths.shape}")
    return jax.vmap(tmaze.make_params)(corridor_lengths)


def make_env_evaluate(config: ModelConfig, env, max_steps: int, initial_rtg: float = 1.0
                      ) -> Callable[..., EvalResult]:
    """``evaluate(params, key, env_params, memory_noise=False) -> EvalResult`` in any gymnax-style
    environment ``env`` (``reset``/``step``, see :func:`_make_rollout`): one episode per entry of
    ``env_params`` (a pytree with leading axis E), each run for ``max_steps`` steps
    (ceil(max_steps / K) segments) from return-to-go ``initial_rtg``.

    ``max_steps`` (static) must be at least the longest episode. ``memory_noise`` (a bool or
    [E] bools, traceable: the clean run and the ablation are one program) replaces every memory
    passed between segments by noise; the noise is drawn either way, so the clean run's
    numbers do not depend on it. ``success`` is NaN where ``env`` reports none.
    """
    if not (isinstance(max_steps, (int, np.integer)) and max_steps >= 1):
        raise ValueError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    num_segments = -(-int(max_steps) // config.segment_len)

    def evaluate(params, key, env_params, memory_noise=False):
        e = jax.tree.leaves(env_params)[0].shape[0]
        schedule = Schedule.from_queues([num_segments] * e, [(i,) for i in range(e)])
        rollout = _make_rollout(config, schedule, env, initial_rtg)
        ret, length, success, chose, actions = rollout(params, key, env_params, _noise_flags(memory_noise, e))
        actions = jnp.swapaxes(actions, 0, 1).reshape(e, num_segments * config.segment_len)
        return EvalResult(success=success[-1], chose=chose[-1], episode_return=ret[-1], episode_length=length[-1],
                          actions=actions)

    return evaluate


def make_evaluate(config: ModelConfig, max_steps: int) -> Callable[..., EvalResult]:
    """T-Maze: ``evaluate(params, key, corridor_lengths [E], memory_noise=False) -> EvalResult``;
    :func:`make_env_evaluate` in :mod:`rate_jax.tmaze` (return-to-go from 1, the goal reward).

    ``max_steps`` (static) must be at least max(corridor_lengths) + 2, the longest episode.
    """
    evaluate_env = make_env_evaluate(config, tmaze, max_steps)

    def evaluate(params, key, corridor_lengths, memory_noise=False):
        return evaluate_env(params, key, _tmaze_params(corridor_lengths), memory_noise)

    return evaluate


def make_packed_evaluate(config: ModelConfig, corridor_lengths: Sequence[int], num_slots: int,
                         queues: Sequence[Sequence[int]] | None = None) -> Callable[..., PackedResult]:
    """``evaluate(params, key, memory_noise=False) -> PackedResult``: episode i on corridor
    ``corridor_lengths[i]`` (static; repeat a length for more episodes), each run for its
    :func:`segments_needed` segments only, in ``num_slots`` slots run in parallel.

    ``queues`` (default :func:`slot_queues`) says which episodes each slot runs, in order.
    Episode i's result equals ``make_evaluate(config, max_steps)(params, key,
    jnp.asarray(corridor_lengths))`` at i, for any packing. ``memory_noise``: as in
    :func:`make_env_evaluate` (a bool or [N] bools).
    """
    lengths = [int(x) for x in corridor_lengths]
    if not lengths or min(lengths) < 1:
        raise ValueError(f"corridor_lengths must be a non-empty sequence of integers >= 1, got {corridor_lengths!r}")
    segments = [segments_needed(x, config.segment_len) for x in lengths]
    if queues is None:
        queues = slot_queues(segments, num_slots)
    elif len(queues) != num_slots:
        raise ValueError(f"queues must hold num_slots={num_slots} queues, got {len(queues)}")
    schedule = Schedule.from_queues(segments, queues)
    rollout = _make_rollout(config, schedule, tmaze, 1.0)
    g, s = schedule.finish[:, 0], schedule.finish[:, 1]

    def evaluate(params, key, memory_noise=False):
        ret, length, success, chose, _ = rollout(params, key, _tmaze_params(lengths),
                                                 _noise_flags(memory_noise, len(lengths)))
        return PackedResult(success=success[g, s], chose=chose[g, s], episode_return=ret[g, s],
                            episode_length=length[g, s])

    return evaluate

"""Packed T-Maze evaluation (``make_packed_evaluate``): each episode runs only for the segments its
corridor can last, in a fixed number of slots that reset between episodes; it must give every
episode exactly what the unpacked ``make_evaluate`` (every episode to the longest corridor, one
slot per episode) gives it, whatever the packing."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import RATE, ModelConfig, Segment
from rate_jax.evaluate import Schedule, make_evaluate, make_packed_evaluate, segments_needed, slot_queues

# RATE with memory tokens, MRV and a cache, so that a slot has all three to reset
CFG = ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=1, d_model=16, n_head=2, d_head=8, n_head_ca=1, mem_len=6)
# mixed corridors: 1 segment (1), 2 segments (2, 3, 4: L + 2 = 6 fills two exactly), 3 (5, 7), 4 (9, 10)
LENGTHS = (4, 1, 9, 2, 5, 3, 10, 1, 7, 2, 4, 5)
NOISE = np.arange(len(LENGTHS)) % 3 == 0  # memory noise on a third of the episodes
SLOTS = 3


@functools.cache
def _params():
    k = CFG.segment_len
    seg = Segment(obs=jnp.zeros((1, k, CFG.obs_dim)), actions=jnp.zeros((1, k), jnp.int32), rtg=jnp.zeros((1, k)),
                  action_known=jnp.zeros((1, k)))
    params = RATE(CFG).init(jax.random.key(2), seg)
    # let the noise channel drive the actions, so that the episodes end in every way (goal, wrong goal, time out)
    params["params"]["embed_obs"]["kernel"] = params["params"]["embed_obs"]["kernel"].at[3].multiply(30.0)
    return params


@functools.cache
def _unpacked():
    out = jax.jit(make_evaluate(CFG, max(LENGTHS) + 2))(_params(), jax.random.key(7), jnp.asarray(LENGTHS), NOISE)
    return jax.tree.map(np.asarray, out)


def _packed(num_slots, queues=None):
    out = jax.jit(make_packed_evaluate(CFG, LENGTHS, num_slots, queues))(_params(), jax.random.key(7), NOISE)
    return jax.tree.map(np.asarray, out)


def test_segments_needed_by_hand():
    # an episode of corridor L lasts at most L + 2 steps
    assert [segments_needed(x, 3) for x in (1, 2, 3, 4, 5, 7, 10)] == [1, 2, 2, 2, 3, 3, 4]
    assert [segments_needed(x, 6) for x in (4, 10, 58, 9600)] == [1, 2, 10, 1601]


def test_unpacked_run_ends_every_episode_in_every_way():
    ref = _unpacked()
    lengths = np.asarray(LENGTHS)
    assert (ref.episode_length >= lengths + 1).all() and (ref.episode_length <= lengths + 2).all()
    timed_out = ref.episode_length == lengths + 2
    assert timed_out.any() and (~timed_out).any()  # some reach a goal, some time out
    assert 0 < ref.success.sum() < len(LENGTHS)
    # a turn ends the episode: before the last step only by a turn, and every success is a turn
    assert (ref.chose[~timed_out] == 1).all() and (ref.chose >= ref.success).all()
    assert (ref.chose == 0).any() and (ref.chose > ref.success).any()  # timeouts, and wrong turns


def test_packed_equals_unpacked():
    ref, got = _unpacked(), _packed(SLOTS)
    np.testing.assert_array_equal(got.success, ref.success)
    np.testing.assert_array_equal(got.chose, ref.chose)
    np.testing.assert_array_equal(got.episode_return, ref.episode_return)
    np.testing.assert_array_equal(got.episode_length, ref.episode_length)


def test_episode_result_does_not_depend_on_the_packing():
    ref = _unpacked()
    segments = [segments_needed(x, CFG.segment_len) for x in LENGTHS]
    greedy = slot_queues(segments, SLOTS)
    shuffled = [list(q) for q in greedy]
    shuffled = [shuffled[1][::-1], shuffled[2] + shuffled[0][:1], shuffled[0][1:][::-1]]  # other order and slots
    for got in (_packed(1), _packed(SLOTS, shuffled)):
        np.testing.assert_array_equal(got.episode_return, ref.episode_return)
        np.testing.assert_array_equal(got.episode_length, ref.episode_length)


def test_slots_start_every_episode_from_m0_and_an_empty_cache(monkeypatch):
    """What each slot's segment reads (spied at ``RATE.decode_start``): M_0 and no valid cache
    entry where an episode starts, an updated memory and a filled cache elsewhere."""
    seen, decode_start = [], RATE.decode_start

    def spy(self, carry, num_keys=None):
        jax.debug.callback(lambda m, v: seen.append((np.asarray(m), np.asarray(v))), carry.memory, carry.cache_valid,
                           ordered=True)
        return decode_start(self, carry, num_keys)

    monkeypatch.setattr(RATE, "decode_start", spy)
    jax.block_until_ready(make_packed_evaluate(CFG, LENGTHS, SLOTS)(_params(), jax.random.key(7), NOISE))
    jax.effects_barrier()
    segments = [segments_needed(x, CFG.segment_len) for x in LENGTHS]
    begins = Schedule.from_queues(segments, slot_queues(segments, SLOTS)).segment == 0  # [G, S]
    assert len(seen) == begins.shape[0] and begins.sum() == len(LENGTHS)
    memory, valid = np.stack([m for m, _ in seen]), np.stack([v for _, v in seen])  # [G, S, m, d], [G, S, C]
    m0 = np.asarray(_params()["params"]["mem_init"])
    np.testing.assert_array_equal(memory[begins], np.broadcast_to(m0, memory[begins].shape))
    assert not valid[begins].any()
    assert (np.abs(memory[~begins] - m0).max(axis=(1, 2)) > 1e-3).all() and valid[~begins].any(axis=1).all()


def test_slot_queues_by_hand_and_balanced():
    # longest first, each to the least loaded slot: 5 -> s0, 4 -> s1, 3 -> s1 (4 < 5), 3 -> s0 (5 < 7), 3 -> s1 (7 < 8)
    assert slot_queues([5, 4, 3, 3, 3], 2) == ((0, 3), (1, 2, 4))
    rng = np.random.default_rng(0)
    for _ in range(20):
        segments = rng.integers(1, 60, size=int(rng.integers(1, 40))).tolist()
        slots = int(rng.integers(1, len(segments) + 1))
        queues = slot_queues(segments, slots)
        assert sorted(i for q in queues for i in q) == list(range(len(segments)))
        loads = [sum(segments[i] for i in q) for q in queues]
        assert max(loads) - min(loads) <= max(segments)  # list scheduling bound
        assert max(loads) <= -(-sum(segments) // slots) + max(segments)


def test_schedule_runs_every_episode_exactly_once_then_resets():
    segments = [2, 1, 3, 1]
    schedule = Schedule.from_queues(segments, [(2, 1), (0, 3)])
    np.testing.assert_array_equal(schedule.episode, [[2, 0], [2, 0], [2, 3], [1, 3]])
    np.testing.assert_array_equal(schedule.segment, [[0, 0], [1, 1], [2, 0], [0, 1]])  # slot 1 idles on ep 3
    np.testing.assert_array_equal(schedule.finish, [[1, 1], [3, 0], [2, 0], [2, 1]])
    rng = np.random.default_rng(1)
    segments = rng.integers(1, 9, size=25).tolist()
    schedule = Schedule.from_queues(segments, slot_queues(segments, 4))
    for i, n in enumerate(segments):
        g, s = np.nonzero((schedule.episode == i) & (schedule.segment < n))
        assert len(g) == n and (s == s[0]).all() and (np.diff(g) == 1).all()
        np.testing.assert_array_equal(schedule.segment[g, s], np.arange(n))
        assert tuple(schedule.finish[i]) == (g[-1], s[0])


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="num_slots"):
        make_packed_evaluate(CFG, LENGTHS, 0)
    with pytest.raises(ValueError, match="num_slots"):
        make_packed_evaluate(CFG, (4, 5), 3)
    with pytest.raises(ValueError, match="corridor_lengths"):
        make_packed_evaluate(CFG, (), 1)
    with pytest.raises(ValueError, match="corridor_lengths"):
        make_packed_evaluate(CFG, (4, 0), 1)
    with pytest.raises(ValueError, match="queues"):
        make_packed_evaluate(CFG, (4, 5, 6), 2, queues=[(0, 1), (1, 2)])  # episode 1 twice
    with pytest.raises(ValueError, match="queues"):
        make_packed_evaluate(CFG, (4, 5, 6), 2, queues=[(0, 1, 2)])  # one queue for two slots
    with pytest.raises(ValueError, match="queues"):
        Schedule.from_queues([1, 2], [(0,), ()])  # an empty slot
    with pytest.raises(ValueError, match="max_steps"):
        make_evaluate(CFG, 0)
    with pytest.raises(ValueError, match="corridor_lengths"):
        make_evaluate(CFG, 6)(_params(), jax.random.key(0), jnp.ones((2, 2), jnp.int32))

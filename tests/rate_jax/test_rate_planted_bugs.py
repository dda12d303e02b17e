"""RATE memory-noise ablation at inference (``make_evaluate(...)(..., memory_noise=True)``) is not a no-op:
the memories passed between segments are replaced (M_0 kept) and the logits change."""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rate_jax import RATE, ModelConfig, Segment, make_evaluate

CFG = ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=1, d_model=16, n_head=2, d_head=8, n_head_ca=1)
LENGTHS = jnp.asarray([4, 7], jnp.int32)
MAX_STEPS = 9  # three segments of three steps


@functools.cache
def _params():
    seg = Segment(obs=jnp.zeros((1, CFG.segment_len, CFG.obs_dim)), actions=jnp.zeros((1, CFG.segment_len), jnp.int32),
                  rtg=jnp.zeros((1, CFG.segment_len)), action_known=jnp.zeros((1, CFG.segment_len)))
    return RATE(CFG).init(jax.random.key(3), seg)


def _spied_run(monkeypatch, memory_noise: bool):
    """Runs the evaluation recording, at every decode step, the memory it reads and the logits,
    and, at every segment end, the memory decode_finish computes (before any replacement)."""
    steps, finished = [], []
    decode, finish = RATE.decode, RATE.decode_finish

    def spy_decode(self, segment, carry, state, start, num):
        logits, state = decode(self, segment, carry, state, start, num)
        jax.debug.callback(lambda m, l: steps.append((np.asarray(m), np.asarray(l))), carry.memory, logits,
                           ordered=True)
        return logits, state

    def spy_finish(self, segment, carry, state):
        out = finish(self, segment, carry, state)
        jax.debug.callback(lambda m: finished.append(np.asarray(m)), out.memory, ordered=True)
        return out

    with monkeypatch.context() as mp:
        mp.setattr(RATE, "decode", spy_decode)
        mp.setattr(RATE, "decode_finish", spy_finish)
        result = make_evaluate(CFG, MAX_STEPS)(_params(), jax.random.key(11), LENGTHS, memory_noise)
        jax.block_until_ready(result)
        jax.effects_barrier()
    k = CFG.segment_len
    assert len(steps) == MAX_STEPS and len(finished) == MAX_STEPS // k
    memory = np.stack([m for m, _ in steps])  # [steps, E, m, d]
    logits = np.stack([l for _, l in steps])  # [steps, E, A]
    return result, memory, logits, np.stack(finished)


def test_memory_noise_replaces_the_passed_memory_and_changes_the_logits(monkeypatch):
    k = CFG.segment_len
    clean, mem_c, log_c, fin_c = _spied_run(monkeypatch, False)
    noisy, mem_n, log_n, fin_n = _spied_run(monkeypatch, True)

    # clean run: segment n + 1 reads exactly the memory segment n wrote; within a segment it is constant
    for s in range(1, MAX_STEPS // k):
        for t in range(k):
            np.testing.assert_allclose(mem_c[s * k + t], fin_c[s - 1], rtol=1e-6, atol=1e-6)
    # both runs start from M_0 (kept by the ablation), so the first segment is identical
    np.testing.assert_allclose(mem_n[:k], mem_c[:k], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(log_n[:k], log_c[:k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fin_n[0], fin_c[0], rtol=1e-5, atol=1e-6)
    # with noise on, every later segment reads a memory that is neither the clean run's nor the one written
    for s in range(1, MAX_STEPS // k):
        read = mem_n[s * k]
        assert np.all(np.abs(read - mem_c[s * k]).max(axis=(1, 2)) > 1e-3), f"segment {s}: memory not replaced"
        assert np.all(np.abs(read - fin_n[s - 1]).max(axis=(1, 2)) > 1e-3), f"segment {s}: written memory passed on"
        assert np.all(np.isfinite(read))
    # ... and the logits there change
    assert np.abs(log_n[k:] - log_c[k:]).max() > 1e-4, "memory noise leaves the logits unchanged"

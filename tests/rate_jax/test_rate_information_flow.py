"""Where the T-Maze cue can reach at inference (``make_evaluate``), by construction of each variant.

Two evaluations differ only in the goal side (same keys, so the same noise observations and
the same corridor): the cue in the first observation is the only input that differs until the
episode ends. A decision whose logits are equal in both runs cannot depend on the cue:

* DT (one segment of K*N steps, no memory, no cache) restarts its context every K*N steps,
  so from step K*N on its logits are the same whatever the cue;
* TrXL's cache holds the last ``mem_len`` inputs of every layer, so a query in the segment
  starting at step s reaches back to step s - n_layer * mem_len / 3 and no further;
* RATE's memory tokens carry the cue across every segment boundary.

This is why the study ``rate.tmaze`` reports DT beyond its context and TrXL at its longest
corridor as metrics (they must guess there) rather than as checks.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import RATE, ModelConfig, Segment, make_evaluate, tmaze, variant

BASE = ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=2, d_model=16, n_head=2, d_head=8, n_head_ca=1)
N = 2  # training segments: K*N = 6 steps; TrXL mem_len = 3*K*N = 18 tokens (6 steps) per layer
CORRIDOR = 20  # the agent cannot end the episode before step 21, so logits up to step 20 are comparable
MAX_STEPS = 24
LAST = CORRIDOR  # last compared step
EPISODES = 4


@functools.cache
def _params(name: str):
    cfg, _ = variant(name, BASE, N)
    k = cfg.segment_len
    seg = Segment(obs=jnp.zeros((1, k, cfg.obs_dim)), actions=jnp.zeros((1, k), jnp.int32), rtg=jnp.zeros((1, k)),
                  action_known=jnp.zeros((1, k)))
    return cfg, RATE(cfg).init(jax.random.key(5), seg)


def _logits(monkeypatch, name: str, goal: int) -> np.ndarray:
    """Logits [steps, episodes, actions] of every decode step, with the goal side forced to ``goal``."""
    cfg, params = _params(name)
    reset, decode = tmaze.reset, RATE.decode
    recorded = []

    def forced_reset(key, env_params):
        obs, state = reset(key, env_params)
        return obs.at[1].set(goal), state.replace(goal_y=jnp.int32(goal))  # the cue is obs[1] at t = 0

    def spy_decode(self, segment, carry, state, start, num):
        logits, state = decode(self, segment, carry, state, start, num)
        jax.debug.callback(lambda x: recorded.append(np.asarray(x)), logits, ordered=True)
        return logits, state

    with monkeypatch.context() as mp:
        mp.setattr(tmaze, "reset", forced_reset)
        mp.setattr(RATE, "decode", spy_decode)
        out = make_evaluate(cfg, MAX_STEPS)(params, jax.random.key(9), jnp.full((EPISODES,), CORRIDOR, jnp.int32))
        jax.block_until_ready(out)
        jax.effects_barrier()
    assert len(recorded) == MAX_STEPS
    return np.stack(recorded)


@functools.cache
def _cue_effect(name: str) -> np.ndarray:
    """max |logits(goal +1) - logits(goal -1)| per step 0..LAST."""
    with pytest.MonkeyPatch.context() as mp:
        up, down = _logits(mp, name, 1), _logits(mp, name, -1)
    return np.abs(up - down).max(axis=(1, 2))[: LAST + 1]


def test_dt_cannot_read_a_cue_outside_its_context():
    effect = _cue_effect("DT")
    context = BASE.segment_len * N
    assert effect[1:context].min() > 1e-5  # inside the first context the cue reaches every decision
    np.testing.assert_array_equal(effect[context:], 0.0)  # after the restart it reaches none


def test_trxl_reaches_back_n_layer_times_its_cache():
    cfg, _ = variant("TrXL", BASE, N)
    k = cfg.segment_len
    reach = cfg.n_layer * cfg.mem_len // 3  # steps: 12
    effect = _cue_effect("TrXL")
    starts = np.arange(LAST + 1) // k * k  # start step of each step's segment
    assert effect[(starts <= reach) & (np.arange(LAST + 1) > 0)].min() > 1e-6  # the segment at s = reach still sees it
    np.testing.assert_array_equal(effect[starts > reach], 0.0)


def test_rate_memory_carries_the_cue_past_every_boundary():
    effect = _cue_effect("RATE")
    assert effect[1:].min() > 1e-5  # every decision, through every segment boundary, depends on the cue

"""DT evaluated with a sliding window (``rate_jax.make_sliding_evaluate``, the authors' DT evaluation):
the restarting evaluator's actions before the window fills and everywhere when the window holds the
whole episode, a step-by-step Python reference that rebuilds the window from the episode so far, and
the error for a model that passes memory or cache."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rate_jax
from rate_jax import RATE, ModelConfig, Segment
from rate_jax.tasks import MinigridTask, PopgymTask

EPISODES = 4


class NoiseTask:
    """An environment whose every observation is drawn from its step's key (the reset key at reset) and
    whose episode ends after ``horizon`` steps: a window's content and the keys both decide the actions."""

    obs_dim, num_actions = 6, 3

    @staticmethod
    def reset(key, horizon):
        return jax.random.normal(key, (NoiseTask.obs_dim,)), jnp.zeros((), jnp.int32)

    @staticmethod
    def step(key, t, action, horizon):
        return (jax.random.normal(key, (NoiseTask.obs_dim,)), t + 1, 0.1 * action.astype(jnp.float32), t + 1 >= horizon,
                {})

    @property
    def env(self):
        return self

    def env_params(self, episodes):
        return jnp.arange(episodes, dtype=jnp.int32) + 9  # horizons 9, 10, ...: every episode ends inside 12 steps


TASKS = [PopgymTask("count_recall"), MinigridTask(7, time_limit=20), NoiseTask()]


def _dt(task, segment_len: int, **memory) -> ModelConfig:
    return ModelConfig(obs_dim=task.obs_dim, num_actions=task.num_actions, segment_len=segment_len, n_layer=1,
                       d_model=16, n_head=2, d_head=8, **{"num_mem_tokens": 0, "n_head_ca": 0, "mem_len": 0, **memory})


def _init(cfg: ModelConfig, seed: int):
    window = Segment(obs=jnp.zeros((1, cfg.segment_len, cfg.obs_dim)), actions=jnp.zeros((1, cfg.segment_len), jnp.int32),
                     rtg=jnp.zeros((1, cfg.segment_len)), action_known=jnp.zeros((1, cfg.segment_len)))
    return RATE(cfg).init(jax.random.key(seed), window)


def _reference_actions(cfg: ModelConfig, params, env, key, env_params, num_steps: int) -> np.ndarray:
    """[E, num_steps] argmax actions, episode by episode in Python: at step t the model runs once on the
    episode's steps max(0, t - K + 1) .. t (observations, return-to-go, the actions before t) at
    positions 0 .. and acts on the last observation; the environment's keys are drawn as the segment
    evaluator draws them (step t of segment t // K); a finished episode keeps its last observation."""
    k = cfg.segment_len
    logits_of = jax.jit(lambda p, w: RATE(cfg).apply(p, w).logits[0])
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    k_reset, k_run = jax.random.split(key)
    out = np.zeros((EPISODES, num_steps), np.int32)
    for i, (k_i, run_i) in enumerate(zip(jax.random.split(k_reset, EPISODES), jax.random.split(k_run, EPISODES))):
        p = jax.tree.map(lambda x, i=i: x[i], env_params)
        obs, state = reset(k_i, p)
        rtg, done, seen_obs, seen_rtg = 1.0, False, [], []
        for t in range(num_steps):
            seen_obs.append(np.asarray(obs))
            seen_rtg.append(rtg)
            lo = max(0, t - k + 1)
            w = t - lo + 1
            window = Segment(obs=jnp.zeros((1, k, cfg.obs_dim)).at[0, :w].set(np.stack(seen_obs[lo:])),
                             actions=jnp.zeros((1, k), jnp.int32).at[0, :w - 1].set(out[i, lo:t]),
                             rtg=jnp.zeros((1, k)).at[0, :w].set(np.asarray(seen_rtg[lo:])),
                             action_known=jnp.zeros((1, k)).at[0, :w - 1].set(1.0))
            out[i, t] = int(jnp.argmax(logits_of(params, window)[w - 1]))
            first, rest, _ = jax.random.split(jax.random.fold_in(run_i, t // k), 3)
            env_key = first if t % k == 0 else jax.random.split(rest, k - 1)[t % k - 1]
            if not done:
                obs, state, reward, done, _ = step(env_key, state, jnp.int32(out[i, t]), p)
                rtg, done = rtg - float(reward), bool(done)
    return out


@pytest.mark.parametrize("task", TASKS, ids=lambda t: type(t).__name__)
def test_sliding_window_matches_a_step_by_step_reference(task):
    """Every action of 3 windows' worth of steps equals the Python reference's (a window shifted the wrong
    way, read at the wrong position or not shifted at all fails), and the sliding window acts differently
    from the restarting one after the first K steps, so the comparison tests the sliding."""
    cfg = _dt(task, segment_len=4)
    params, key, env_params = _init(cfg, 7), jax.random.key(7), task.env_params(EPISODES)
    steps = 3 * cfg.segment_len
    sliding = jax.jit(rate_jax.make_sliding_evaluate(cfg, task.env, steps))(params, key, env_params)
    restarting = jax.jit(rate_jax.make_env_evaluate(cfg, task.env, steps))(params, key, env_params)
    np.testing.assert_array_equal(np.asarray(sliding.actions),
                                  _reference_actions(cfg, params, task.env, key, env_params, steps))
    k = cfg.segment_len
    np.testing.assert_array_equal(np.asarray(sliding.actions)[:, :k], np.asarray(restarting.actions)[:, :k])
    assert (np.asarray(sliding.actions)[:, k:] != np.asarray(restarting.actions)[:, k:]).any()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: type(t).__name__)
def test_a_window_that_holds_the_episode_is_the_restarting_evaluation(task):
    """With K >= the steps run nothing is dropped or restarted: the two evaluators agree on every field."""
    cfg = _dt(task, segment_len=12)
    params, key, env_params = _init(cfg, 4), jax.random.key(8), task.env_params(EPISODES)
    sliding = jax.jit(rate_jax.make_sliding_evaluate(cfg, task.env, 12))(params, key, env_params)
    restarting = jax.jit(rate_jax.make_env_evaluate(cfg, task.env, 12))(params, key, env_params)
    for field in ("actions", "episode_length", "success", "chose"):
        np.testing.assert_array_equal(np.asarray(getattr(sliding, field)), np.asarray(getattr(restarting, field)))
    np.testing.assert_allclose(np.asarray(sliding.episode_return), np.asarray(restarting.episode_return), atol=1e-6)


@pytest.mark.parametrize("memory", [{"num_mem_tokens": 2}, {"mem_len": 4}])
def test_a_model_that_passes_memory_or_cache_is_refused(memory):
    with pytest.raises(ValueError, match="without memory tokens or cache"):
        rate_jax.make_sliding_evaluate(_dt(TASKS[0], 4, **memory), TASKS[0].env, 8)

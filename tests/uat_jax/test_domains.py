"""The domain layer (uat_jax.domains) and the sepsis metrics of uat_jax.rollout against numpy loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import random_params
from tests.uat_jax.test_sepsis import tiny_params
from uat_jax import domains, sepsis
from uat_jax.cells import Size
from uat_jax.feedback import FeedbackChannel
from uat_jax.model import DecisionTransformer
from uat_jax.rollout import (Trajectory, efficiency, post_shift_accuracy, post_shift_mask, recovery_curve,
                             regime_accuracy, rollout, steps_since_switch)
from uat_jax.train import Task, TrainConfig, default_env, make_evaluate


def np_post_shift(switched, window):
    out = np.zeros_like(switched)
    for b in range(switched.shape[0]):
        for t in range(switched.shape[1]):
            for s in range(max(0, t - window + 1), t + 1):
                out[b, t] |= switched[b, s]
    return out


def traj_of(actions, expert, record):
    z = np.zeros(actions.shape, np.float32)
    return Trajectory(obs=z[..., None], actions=actions, rewards=z, fed_rewards=z, expert=expert,
                              record=record)


def test_post_shift_mask_is_the_window_after_each_switch(rng):
    switched = rng.random((5, 40)) < 0.1
    for window in (1, 3, 5):
        np.testing.assert_array_equal(post_shift_mask(jnp.asarray(switched), window),
                                      np_post_shift(switched, window))
    hand = np.zeros((1, 12), bool)
    hand[0, [3, 9]] = True  # switches at steps 3 and 9: steps 3..7 and 9..11 are post-shift at window 5
    assert np.flatnonzero(post_shift_mask(jnp.asarray(hand), 5)[0]).tolist() == [3, 4, 5, 6, 7, 9, 10, 11]


def test_regime_and_post_shift_accuracy_match_numpy_loops(rng):
    B, T = 4, 30
    actions, expert = rng.integers(0, 3, (B, T)), rng.integers(0, 3, (B, T))
    regime, switched = rng.integers(0, 3, (B, T)), rng.random((B, T)) < 0.15
    traj = traj_of(actions, expert, {"regime": regime, "switched": switched})
    hits = actions == expert
    want = [hits[regime == k].mean() for k in range(3)]
    np.testing.assert_allclose(regime_accuracy(traj, 3), want, rtol=1e-6)
    mask = np_post_shift(switched, 5)
    np.testing.assert_allclose(post_shift_accuracy(traj, 5), hits[mask].mean(), rtol=1e-6)
    metrics = domains.SEPSIS.metrics(traj)
    assert metrics["accuracy_vasopressor_dependent"] == pytest.approx(want[1], rel=1e-6)
    assert metrics["accuracy"] == pytest.approx(hits.mean(), rel=1e-6)


def np_since_switch(switched):
    out = np.full(switched.shape, -1)
    for b in range(switched.shape[0]):
        last = -1
        for t in range(switched.shape[1]):
            last = t if switched[b, t] else last
            out[b, t] = t - last if last >= 0 else -1
    return out


def test_recovery_curve_matches_a_numpy_loop_and_averages_to_post_shift_accuracy(rng):
    hand = np.zeros((1, 10), bool)
    hand[0, [2, 7]] = True
    assert np.asarray(steps_since_switch(jnp.asarray(hand)))[0].tolist() == [-1, -1, 0, 1, 2, 3, 4, 0, 1, 2]
    B, T = 6, 40
    switched = rng.random((B, T)) < 0.2
    np.testing.assert_array_equal(steps_since_switch(jnp.asarray(switched)), np_since_switch(switched))
    actions, expert = rng.integers(0, 3, (B, T)), rng.integers(0, 3, (B, T))
    traj = traj_of(actions, expert, {"regime": np.zeros((B, T), int), "switched": switched})
    since, hits = np_since_switch(switched), actions == expert
    want = [hits[since == k].mean() if (since == k).any() else np.nan for k in range(8)]
    np.testing.assert_allclose(recovery_curve(traj, 8), want, rtol=1e-6)
    # segments of >= 8 steps: every switch adds one step to each k, so the first 5 points average to C.3's metric
    spaced = np.zeros((B, T), bool)
    spaced[:, [5, 13, 30]] = True
    traj = traj_of(actions, expert, {"regime": np.zeros((B, T), int), "switched": spaced})
    assert float(np.mean(recovery_curve(traj, 8)[:5])) == pytest.approx(float(post_shift_accuracy(traj, 5)), rel=1e-6)
    assert np.asarray(domains.SEPSIS.metrics(traj)["recovery"]).shape == (domains.RECOVERY_STEPS,)


def test_sepsis_rollout_records_the_schedule_and_labels_the_regime_expert(rng):
    env = tiny_params(rng, min_segments=2, max_segments=3, min_segment_len=2, horizon=8)
    model = DecisionTransformer(tiny("uat", obs_dim=2, horizon=8))
    params = random_params(model, 3)
    keys = jax.random.split(jax.random.key(4), 6)
    traj = jax.jit(jax.vmap(lambda k: rollout(model, params, k, domains.SEPSIS, env,
                                                      FeedbackChannel.make("clean"), True)))(keys)
    schedules = jax.vmap(lambda k: sepsis.reset(jax.random.split(k, 4)[0], env)[1].schedule)(keys)
    np.testing.assert_array_equal(traj.record["regime"], schedules)
    np.testing.assert_array_equal(traj.expert, np.asarray(sepsis.EXPERT_CLUSTER)[np.asarray(schedules)])
    switched = np.concatenate([np.zeros((6, 1), bool), np.diff(np.asarray(schedules), axis=1) != 0], 1)
    np.testing.assert_array_equal(traj.record["switched"], switched)
    assert switched.any()


def test_domain_configs_check_their_inputs():
    with pytest.raises(ValueError, match="domain must be one of"):
        domains.get("mujoco")
    with pytest.raises(ValueError, match="obs_dim 20"):
        TrainConfig(model=tiny("uat"), domain="sepsis")
    cfg = Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=90, batch_size=2, epochs=1,
               eval_episodes=2).train_config("vt", domain="sepsis")
    assert (cfg.model.obs_dim, cfg.model.n_actions) == (sepsis.OBS_DIM, sepsis.N_ACTIONS)
    with pytest.raises(ValueError, match="needs its environment parameters"):
        default_env(cfg)
    with pytest.raises(ValueError, match="needs a uat_jax.sepsis.EnvParams"):
        make_evaluate(cfg)(None, jax.random.key(0), Task.make("abrupt"), jax.random.key(1),
                           default_env(TrainConfig()))


def test_efficiency_by_hand():
    """eta = d* / max(t_goal, d*): arrival at step index 2 is t_goal = 3 steps (eta 2/3 for d* = 2); an
    arrival faster than d* is capped at 1; never arriving is t_goal = T (eta 3/6)."""
    at_goal = np.zeros((3, 6), bool)
    at_goal[0, [2, 3, 5]] = True
    at_goal[1, 0] = True
    distance = np.array([[2, 1, 0, 0, 1, 0], [4, 0, 0, 0, 0, 0], [3, 3, 3, 3, 3, 3]])
    traj = traj_of(np.zeros((3, 6), np.int32), np.zeros((3, 6), np.int32), {"at_goal": at_goal, "distance": distance})
    assert float(efficiency(traj)) == pytest.approx((2 / 3 + 1 + 3 / 6) / 3)
    assert domains.DARKROOM.metrics(traj)["efficiency"] == pytest.approx((2 / 3 + 1 + 3 / 6) / 3)

"""Causal rollouts, the Domain A metrics, the optimiser groups and a tiny training run."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_darkroom import np_step
from tests.uat_jax.test_model import random_params
from uat_jax import darkroom
from uat_jax.domains import DARKROOM
from uat_jax.feedback import FeedbackChannel
from uat_jax.model import DecisionTransformer, sequence_logits
from uat_jax.rollout import accuracy, efficiency, rollout
from uat_jax.train import Task, TrainConfig, cross_entropy, make_optimizer, make_train

H = 12  # horizon of these tests


@functools.cache
def rollouts(greedy: bool):
    """Four episodes of a random UAT on a 5x5 DarkRoom with different goals."""
    model, params, run = _policy()
    goals = jnp.array([[0, 0], [4, 4], [2, 3], [1, 4]])
    return model, params, goals, run(jax.random.split(jax.random.key(0), 4), goals, greedy)


@functools.cache
def _policy():
    model = DecisionTransformer(tiny("uat", horizon=H))
    params = random_params(model, 2)
    env = darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), size=5, horizon=H)
    run = jax.jit(jax.vmap(lambda k, g, greedy: rollout(model, params, k, DARKROOM, env.replace(goal=g),
                                                        FeedbackChannel.make("clean"), greedy),
                           in_axes=(0, 0, None)))
    return model, params, run


def test_rollout_replays_in_numpy_and_metrics_match():
    _, _, goals, traj = rollouts(True)
    etas, hits = [], []
    for b in range(4):
        goal = tuple(np.asarray(goals[b]))
        walls = np.asarray(traj.obs[b, 0, :9]).reshape(3, 3)
        # recover the start from the replay: the first expert label and walls must match it
        starts = [(r, c) for r in range(5) for c in range(5) if (r, c) != goal
                  and np.array_equal(walls, [[float(not (0 <= r + dr < 5 and 0 <= c + dc < 5))
                                              for dc in (-1, 0, 1)] for dr in (-1, 0, 1)])
                  and int(darkroom.expert_action(jnp.array([r, c]), jnp.array(goal))) == int(traj.expert[b, 0])
                  and abs(r - goal[0]) + abs(c - goal[1]) == int(traj.record["distance"][b, 0])]
        ok = False
        for start in starts:  # exactly the true start replays every label and reward
            pos, t_goal, good = start, H, True
            for t in range(H):
                good &= int(darkroom.expert_action(jnp.array(pos), jnp.array(goal))) == int(traj.expert[b, t])
                pos, reward = np_step(pos, int(traj.actions[b, t]), goal, size=5)
                good &= abs(reward - float(traj.rewards[b, t])) < 1e-6
                if pos == goal and t_goal == H:
                    t_goal = t + 1
            if good:
                ok = True
                break
        assert ok, f"episode {b} does not replay"
        d_star = abs(start[0] - goal[0]) + abs(start[1] - goal[1])
        etas.append(d_star / max(t_goal, d_star))
        hits.append(np.mean(np.asarray(traj.actions[b]) == np.asarray(traj.expert[b])))
    np.testing.assert_allclose(efficiency(traj), np.mean(etas), rtol=1e-6)
    np.testing.assert_allclose(accuracy(traj), np.mean(hits), rtol=1e-6)
    np.testing.assert_array_equal(traj.fed_rewards, traj.rewards)  # clean channel


def test_rollout_actions_come_from_the_parallel_pass_logits():
    """Causal step-by-step inference and the parallel pass over the collected episode
    agree: greedy actions are its argmax, sampled actions its categorical draws over all
    steps at once with the rollout's k_act (the second of four splits)."""
    model, params, _, greedy = rollouts(True)
    _, _, _, sampled = rollouts(False)
    logits_of = jax.jit(jax.vmap(lambda o, a, r: sequence_logits(model, params, o, a, r)))
    np.testing.assert_array_equal(jnp.argmax(logits_of(greedy.obs, greedy.actions, greedy.fed_rewards), -1),
                                  greedy.actions)
    logits = logits_of(sampled.obs, sampled.actions, sampled.fed_rewards)
    k_act = jax.vmap(lambda k: jax.random.split(k, 4)[1])(jax.random.split(jax.random.key(0), 4))
    redraw = jax.vmap(jax.random.categorical)(k_act, logits)
    np.testing.assert_array_equal(redraw, sampled.actions)
    assert len(set(np.asarray(sampled.actions).ravel().tolist())) > 2  # the draws vary


def test_rollout_refuses_a_model_of_another_horizon_or_action_count():
    model, params, _ = _policy()
    env = darkroom.EnvParams(goal=jnp.zeros(2, jnp.int32), size=5, horizon=H)
    with pytest.raises(ValueError, match="horizon"):
        rollout(model, params, jax.random.key(0), DARKROOM, env.replace(horizon=H + 1), FeedbackChannel.make("clean"), True)
    three = DecisionTransformer(tiny("uat", horizon=H, n_actions=3))
    with pytest.raises(ValueError, match="n_actions 3 != the darkroom domain's 5"):
        rollout(three, params, jax.random.key(0), DARKROOM, env, FeedbackChannel.make("clean"), True)


def test_cross_entropy_matches_numpy(rng):
    logits = rng.normal(size=(3, 4, 5)).astype(np.float32)
    labels = rng.integers(0, 5, (3, 4))
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean(np.take_along_axis(logp, labels[..., None], -1))
    np.testing.assert_allclose(cross_entropy(jnp.asarray(logits), jnp.asarray(labels)), expected, rtol=1e-5)


def test_optimizer_uses_the_ue_rate_for_encoder_and_regime_readout_only():
    """Adam's first step is -lr * sign(g) (weight decay off): it reveals each leaf's rate."""
    cfg = TrainConfig(model=tiny("uat"), lr=1e-3, ue_lr=3e-2, weight_decay=0.0, grad_clip=1e9)
    params = random_params(DecisionTransformer(cfg.model), 3)
    grads = jax.tree.map(jnp.ones_like, params)
    opt = make_optimizer(cfg)
    updates, _ = jax.jit(opt.update)(grads, opt.init(params), params)
    for path, upd in traverse_util.flatten_dict(updates).items():
        ue = "utility_encoder" in path or "regime_readout" in path
        np.testing.assert_allclose(upd, -(3e-2 if ue else 1e-3), rtol=1e-4, err_msg=str(path))


def test_tiny_training_run_is_seed_independent_under_vmap():
    """Seeds vmapped in one program: changing seed 1 leaves seed 0's run unchanged."""
    cfg = TrainConfig(model=tiny("uat", horizon=6, dropout=0.1), epochs=2, batch_size=3,
                      eval_episodes=3, grid_size=4)
    task = Task.make("abrupt")
    keys = jax.random.split(jax.random.key(0), 3)
    # a test compiles, it does not race: low XLA optimisation halves the compile time
    train = jax.jit(jax.vmap(make_train(cfg), in_axes=(0, None))).lower(keys[:2], task).compile(
        compiler_options={"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True})
    a = train(keys[:2], task)
    b = train(jnp.stack([keys[0], keys[2]]), task)
    assert a.loss.shape == (2, 2) and np.isfinite(np.asarray(a.loss)).all()
    for x, y in zip(jax.tree.leaves((a.loss, a.eval, a.params)), jax.tree.leaves((b.loss, b.eval, b.params))):
        np.testing.assert_array_equal(x[0], y[0])
    assert not np.array_equal(a.loss[1], b.loss[1])
    assert 0.0 <= float(a.eval["accuracy"][0]) <= 1.0 and 0.0 <= float(a.eval["efficiency"][0]) <= 1.0


@pytest.mark.parametrize("kind", ["dt", "gtrxl"])
def test_tiny_training_run_of_the_full_size_only_baselines(kind):
    """DT-style and GTrXL train only in the full uat.darkroom run: one tiny run each, end to end
    (rollout, parallel pass, update, causal evaluation), the loss falling on a fixed goal."""
    cfg = TrainConfig(model=tiny(kind, horizon=6), epochs=30, batch_size=8, eval_episodes=4, grid_size=4, lr=3e-3)
    train = jax.jit(make_train(cfg)).lower(jax.random.key(0), Task.make("gradual")).compile(
        compiler_options={"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True})
    out = train(jax.random.key(0), Task.make("gradual"))
    loss = np.asarray(out.loss)
    assert loss.shape == (30,) and np.isfinite(loss).all()
    assert loss[-5:].mean() < loss[:5].mean()
    assert 0.0 <= float(out.eval["accuracy"]) <= 1.0 and 0.0 <= float(out.eval["efficiency"]) <= 1.0

"""TENT and CoTTA (uat_jax.tta): the objectives against numpy, the parameter masks and
updates, the stream bookkeeping against train.make_evaluate and a Python loop."""
import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import random_params
from uat_jax.cells import stack_tasks
from uat_jax.config import SWITCHED
from uat_jax.model import DecisionTransformer, sequence_logits
from uat_jax.rollout import Trajectory
from uat_jax.train import Task, TrainConfig, batch_rollout, episode_settings, eval_episodes, make_evaluate
from uat_jax.tta import (CottaConfig, CottaState, TentConfig, augment,
                         batch_logits, cotta_update, make_tta_evaluate, make_tta_stream, norm_mask, prediction_entropy,
                         pseudo_labels, stochastic_restore, teacher_ema, tent_update, tta_optimizer)

T, B = 6, 3
CFG = TrainConfig(model=tiny("vt", d_model=8, n_heads=2, d_ff=8, n_layers=1), epochs=1, batch_size=2,
                  eval_episodes=6, grid_size=5)
MODEL = DecisionTransformer(CFG.model)
NORM_PATHS = {("params", layer, leaf) for layer in ("embed_norm", "final_norm") for leaf in ("scale", "bias")} | {
    ("params", "blocks", layer, leaf) for layer in ("ln_attn", "ln_ff") for leaf in ("scale", "bias")}


def flat(tree):
    return {tuple(k.key for k in path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


@functools.cache
def batch() -> Trajectory:
    """B random episodes (binary observations like DarkRoom's; a Vanilla-TF reads only them)."""
    rng = np.random.default_rng(5)  # numpy leaves: the cached batch holds no tracer of a jit
    return Trajectory(obs=(rng.random((B, T, 10)) < 0.4).astype(np.float32),
                      actions=rng.integers(0, 5, (B, T)).astype(np.int32), rewards=np.zeros((B, T), np.float32),
                      fed_rewards=rng.normal(size=(B, T)).astype(np.float32), expert=np.zeros((B, T), np.int32),
                      record={})


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_entropy(logits):
    p = softmax(np.asarray(logits, np.float64))
    return np.mean(-(p * np.log(p)).sum(-1))


def test_prediction_entropy_matches_numpy(rng):
    logits = rng.normal(size=(3, 4, 5)) * 3
    np.testing.assert_allclose(prediction_entropy(jnp.asarray(logits, jnp.float32)), np_entropy(logits), rtol=1e-5)
    assert float(prediction_entropy(jnp.zeros((2, 5)))) == pytest.approx(np.log(5), rel=1e-6)


def test_norm_mask_selects_exactly_the_layernorm_affines():
    union = DecisionTransformer(tiny("uat", traced_variant=True), variant=jnp.asarray(SWITCHED.index("vt")))
    for model in (MODEL, union):
        mask = flat(norm_mask(random_params(model, 0)))
        assert {path for path, m in mask.items() if m} == NORM_PATHS
        assert len(mask) > len(NORM_PATHS)


def test_tent_step_lowers_the_batch_entropy_and_moves_only_the_norm_affines():
    params = random_params(MODEL, 0)
    optimizer = tta_optimizer(TentConfig(lr=1e-3))
    new, _, before = jax.jit(lambda p: tent_update(MODEL, p, optimizer.init(p), batch(), optimizer))(params)
    logits = jax.jit(lambda p: batch_logits(MODEL, p, batch()))
    np.testing.assert_allclose(before, np_entropy(logits(params)), rtol=1e-5)
    assert np_entropy(logits(new)) < np_entropy(logits(params))
    old, new = flat(params), flat(new)
    for path in old:
        if path in NORM_PATHS:
            assert not np.array_equal(old[path], new[path]), path
        else:
            np.testing.assert_array_equal(old[path], new[path], err_msg=str(path))


def policy_params(seed):
    """Random parameters N(0, 0.3^2) with unit LayerNorm scales (a policy whose argmax TENT moves)."""
    return jax.tree_util.tree_map_with_path(lambda path, x: jnp.ones_like(x) if path[-1].key == "scale" else x,
                                            random_params(MODEL, seed))


@functools.cache
def stream_inputs():
    """Two cells (params, key, task, run_key) stacked, to evaluate as one vmapped program."""
    params = jax.tree.map(lambda *x: jnp.stack(x), policy_params(2), policy_params(12))
    keys, run_keys = jax.random.split(jax.random.key(0), 2), jax.random.split(jax.random.key(1), 2)
    return params, keys, stack_tasks([Task.make("abrupt"), Task.make("cyclic")]), run_keys


def run_stream(evaluate):
    inputs = stream_inputs()
    return jax.jit(jax.vmap(evaluate))(*inputs)


def cell(i):
    return jax.tree.map(lambda x: x[i], stream_inputs())


@functools.cache
def plain_metrics():
    return run_stream(make_evaluate(CFG))


def test_tent_at_lr_zero_replays_make_evaluate():
    """TENT at lr = 0: every batch is played by the source parameters on the episodes,
    goals and keys of make_evaluate, so the metrics are exactly its own."""
    got = jax.jit(make_tta_evaluate(CFG, TentConfig(lr=0.0, batch_size=2)))(*cell(0))
    np.testing.assert_array_equal(got["accuracy"], plain_metrics()["accuracy"][0])
    np.testing.assert_array_equal(got["efficiency"], plain_metrics()["efficiency"][0])


def test_cotta_with_a_frozen_teacher_replays_make_evaluate_vmapped():
    """CoTTA with a frozen teacher (decay 1) while its student adapts and is restored:
    the teacher plays every batch, so the metrics are make_evaluate's, cell by cell of a
    vmapped pair of cells (params, key, task, run_key)."""
    method = CottaConfig(lr=0.3, batch_size=2, ema_decay=1.0, restore_prob=0.5, n_augment=2)
    got, want = run_stream(make_tta_evaluate(CFG, method)), plain_metrics()
    np.testing.assert_array_equal(got["accuracy"], want["accuracy"])
    np.testing.assert_array_equal(got["efficiency"], want["efficiency"])


def test_tent_carries_its_adaptation_over_the_stream_as_a_python_loop():
    """The stream's scan is a Python loop over the batches: roll out with the adapted
    parameters, adapt on that batch, carry the parameters and the Adam state to the next
    batch (same episodes, same final state)."""
    method = TentConfig(lr=0.3, batch_size=2)
    params, key, task, run_key = cell(0)
    n = CFG.eval_episodes // method.batch_size
    goals = episode_settings(CFG, task, run_key, eval_episodes(CFG)).reshape(n, method.batch_size, 2)
    keys = jax.random.split(key, CFG.eval_episodes).reshape(n, method.batch_size)
    optimizer = tta_optimizer(method)
    play = jax.jit(lambda p, k, g: batch_rollout(CFG, MODEL, p, k, task.channel, g, greedy=True))
    adapt = jax.jit(lambda p, s, traj: tent_update(MODEL, p, s, traj, optimizer)[:2])
    state, trajs = (params, optimizer.init(params)), []
    for b in range(n):
        trajs.append(play(state[0], keys[b], goals[b]))
        state = adapt(*state, trajs[-1])
    traj = jax.tree.map(lambda *x: jnp.concatenate(x), *trajs)
    got_state, got_traj = jax.jit(make_tta_stream(CFG, method))(params, key, task, run_key)
    jax.tree.map(np.testing.assert_array_equal, got_traj, traj)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got_state, state)
    _, source_traj = jax.jit(make_tta_stream(CFG, TentConfig(lr=0.0, batch_size=2)))(params, key, task, run_key)
    assert np.any(np.asarray(traj.actions) != np.asarray(source_traj.actions))  # the adaptation changed the play


def test_teacher_ema_matches_numpy(rng):
    teacher = {"a": rng.normal(size=(3, 4)), "b": {"c": rng.normal(size=5)}}
    student = jax.tree.map(lambda x: x + rng.normal(size=x.shape), teacher)
    as32 = lambda tree: jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree)
    got = teacher_ema(as32(teacher), as32(student), 0.9)
    want = jax.tree.map(lambda t, s: 0.9 * t + 0.1 * s, teacher, student)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6), got, want)
    same = teacher_ema(as32(teacher), as32(teacher), 0.999)
    jax.tree.map(np.testing.assert_array_equal, same, as32(teacher))


def test_cotta_step_adam_then_ema_of_the_stepped_student_then_restoration():
    """One CoTTA step from student = source: the teacher moved by (1 - alpha)(theta - theta')
    towards the *stepped* student theta = source + Adam's first step (-lr g / (|g| + eps),
    so |theta - source| = lr where g != 0) on every parameter, a step that lowers the
    cross-entropy to the pseudo-labels; then about half of the student (p = 0.5) is back
    at the source and the rest is theta."""
    source, teacher, key = random_params(MODEL, 0), random_params(MODEL, 3), jax.random.key(4)
    cfg = CottaConfig(lr=1e-3, ema_decay=0.75, restore_prob=0.5, n_augment=2)
    optimizer = tta_optimizer(cfg)
    state = CottaState(student=source, teacher=teacher, source=source, opt_state=optimizer.init(source))
    out = jax.jit(lambda s: cotta_update(MODEL, s, batch(), key, optimizer, cfg))(state)
    as_vec = lambda tree: np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])
    src, t0 = as_vec(source), as_vec(teacher)
    stepped = t0 + (as_vec(out.teacher) - t0) / (1 - cfg.ema_decay)  # invert the teacher update
    step = np.abs(stepped - src)
    assert step.max() <= cfg.lr * (1 + 1e-3) and np.mean(step > 0.99 * cfg.lr) > 0.8
    student = as_vec(out.student)
    restored = student == src
    assert abs(restored.mean() - 0.5) < 5 * np.sqrt(0.25 / src.size)
    np.testing.assert_allclose(student[~restored], stepped[~restored], atol=1e-6)
    unravel = jax.flatten_util.ravel_pytree(source)[1]
    target = jax.jit(lambda: pseudo_labels(MODEL, teacher, source, batch(), jax.random.split(key)[0], cfg))()
    ce = jax.jit(lambda p: optax.softmax_cross_entropy(batch_logits(MODEL, p, batch()), target).mean())
    assert float(ce(unravel(jnp.asarray(stepped, jnp.float32)))) < float(ce(source))
    jax.tree.map(np.testing.assert_array_equal, out.source, source)


def test_augment_draws_independent_gaussian_copies():
    obs = batch().obs
    noisy = augment(jax.random.key(0), obs, 64, 0.5)
    assert noisy.shape == (64,) + obs.shape
    noise = np.asarray(noisy - obs[None])
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 0.5) < 0.02
    assert abs(np.corrcoef(noise[0].ravel(), noise[1].ravel())[0, 1]) < 0.15


def test_pseudo_labels_against_a_numpy_loop_over_the_copies():
    """Augmentation-averaged pseudo-labels: the teacher's probabilities, or their mean over
    the N augmented copies at the steps where the source model's confidence is below the
    threshold."""
    teacher, source, traj, key = random_params(MODEL, 1), random_params(MODEL, 2), batch(), jax.random.key(7)
    episode = jax.jit(lambda p, o, a, r: sequence_logits(MODEL, p, o, a, r))
    logits = lambda p, o: np.stack([np.asarray(episode(p, o[b], traj.actions[b], traj.fed_rewards[b]))
                                    for b in range(B)])
    confidence = softmax(logits(source, traj.obs)).max(-1)
    threshold = float(np.median(confidence))
    cfg = CottaConfig(n_augment=3, aug_std=0.5, confidence=threshold)
    noisy = np.asarray(augment(key, traj.obs, 3, 0.5))
    averaged = np.mean([softmax(logits(teacher, noisy[i])) for i in range(3)], axis=0)
    plain = softmax(logits(teacher, traj.obs))
    low = confidence < threshold
    assert low.any() and not low.all()
    want = np.where(low[..., None], averaged, plain)
    got = jax.jit(lambda: pseudo_labels(MODEL, teacher, source, traj, key, cfg))()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(averaged - plain)[low].max() > 1e-3  # the two branches differ where switched


def test_stochastic_restore_resets_a_binomial_fraction():
    params = {"a": jnp.zeros((100, 50)), "b": {"c": jnp.zeros((100, 50)), "d": jnp.zeros(7)}}
    source = jax.tree.map(lambda x: x + 1.0, params)
    n = sum(x.size for x in jax.tree.leaves(params))
    for p in (0.0, 0.01, 0.3, 1.0):
        out = stochastic_restore(params, source, jax.random.key(2), p)
        restored = jax.tree.map(lambda x: np.asarray(x) == 1.0, out)
        assert all(np.all((np.asarray(x) == 0.0) | r) for x, r in zip(jax.tree.leaves(out), jax.tree.leaves(restored)))
        k = sum(int(r.sum()) for r in jax.tree.leaves(restored))
        assert abs(k - n * p) <= 5 * np.sqrt(n * p * (1 - p)), (p, k, n)
        if p == 0.3:  # independent masks per leaf
            assert not np.array_equal(restored["a"], restored["b"]["c"])


def test_bad_configs_raise():
    for kwargs, field in [(dict(lr=-1e-3), "lr"), (dict(batch_size=0), "batch_size"),
                          (dict(batch_size=2.0), "batch_size")]:
        for cls in (TentConfig, CottaConfig):
            with pytest.raises(ValueError, match=field):
                cls(**kwargs)
    for kwargs, field in [(dict(ema_decay=1.5), "ema_decay"), (dict(restore_prob=-0.1), "restore_prob"),
                          (dict(confidence=2.0), "confidence"), (dict(n_augment=0), "n_augment"),
                          (dict(aug_std=-1.0), "aug_std")]:
        with pytest.raises(ValueError, match=field):
            CottaConfig(**kwargs)
    with pytest.raises(ValueError, match="multiple of the TTA batch_size"):
        make_tta_evaluate(CFG, TentConfig(batch_size=4))
    with pytest.raises(ValueError, match="kind must be 'vt'"):
        make_tta_evaluate(TrainConfig(model=tiny("uat"), eval_episodes=6), TentConfig(batch_size=2))
    with pytest.raises(ValueError, match="method"):
        make_tta_evaluate(CFG, CFG)

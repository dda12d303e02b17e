"""Config validation, FTRL fitting, the deep Transformer's causality, the centred estimator and schedule, and small seeded learning checks."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import regret_jax as rj


@pytest.mark.parametrize(
    "kwargs, field",
    [({"model": "mlp"}, "model"), ({"d": 1}, "d"), ({"T": 0}, "T"), ({"learning_rate": 0.0}, "learning_rate"),
     ({"d_model": 30, "num_heads": 4}, "d_model"), ({"schedule": "linear"}, "schedule"),
     ({"num_steps": 10, "warmup_steps": 10}, "warmup_steps")],
)
def test_config_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        rj.TrainConfig(**kwargs)


def test_fit_eta_recovers_ftrl_step():
    losses = jax.random.normal(jax.random.key(0), (64, 20, 4))
    fit = jax.jit(rj.fit_eta)  # one compile for both steps
    for eta0 in (0.13, 0.41):
        pols = jax.vmap(rj.ftrl_policies, in_axes=(0, None))(losses, eta0)
        eta_hat = fit(pols, losses, jnp.linspace(0.02, 1.0, 25))
        assert abs(float(eta_hat) - eta0) < 1e-4
        assert float(rj.policy_mse(pols, losses, eta_hat)) < 1e-9


def test_transformer_is_causal_and_online_matches_batch():
    d, T = 3, 8
    model = rj.CausalTransformer(d, num_layers=1, num_heads=4, d_model=8, max_len=T)
    losses = jax.random.normal(jax.random.key(0), (T, d))
    variables = jax.jit(model.init)(jax.random.key(1), losses)
    apply = jax.jit(model.apply)
    pols = apply(variables, losses)
    np.testing.assert_allclose(np.asarray(pols.sum(-1)), 1.0, rtol=1e-5)
    changed = apply(variables, losses.at[4].set(10.0))  # l_5 only affects pi_6..pi_T
    np.testing.assert_allclose(np.asarray(changed[:5]), np.asarray(pols[:5]), atol=1e-6)
    assert not np.allclose(changed[5], pols[5])
    online = jax.jit(lambda v, l: rj.run_online(rj.sequence_model_learner(model, v, T, d), l))(variables, losses)
    np.testing.assert_allclose(np.asarray(online.policies), np.asarray(pols), atol=1e-5)
    config = rj.TrainConfig(model="transformer", d=d, T=T, batch_size=2, num_layers=1, d_model=8)
    assert np.isfinite(np.asarray(jax.jit(rj.make_regrets(config, model))(variables, jax.random.key(2)))).all()


def _heldout_loss(model, variables, losses):
    return float(rj.squared_regret_loss(jax.vmap(model.apply, in_axes=(None, 0))(variables, losses), losses))


def test_attention_training_beats_uniform_and_moves_toward_ftrl():
    config = rj.TrainConfig(model="attention", d=3, T=16, batch_size=128, num_steps=300, learning_rate=2e-2)
    out = jax.jit(jax.vmap(rj.make_train(config)))(jax.random.split(jax.random.key(0), 2))
    assert out.loss_curve.shape == (2, 300)
    heldout = jax.random.normal(jax.random.key(9), (4000, config.T, config.d))
    model = rj.build_model(config)
    uniform = rj.exact_F0(config.d, config.T)
    for s in range(2):
        trained = _heldout_loss(model, jax.tree.map(lambda x, s=s: x[s], out.variables), heldout)
        assert trained < 0.93 * uniform, (trained, uniform)
    assert not np.allclose(out.variables["params"]["head"]["V"][0], out.variables["params"]["head"]["V"][1])


def test_multihead_training_step_shapes():
    config = rj.TrainConfig(model="multihead", d=3, T=4, batch_size=2, num_steps=2)
    out = jax.jit(rj.make_train(config))(jax.random.key(0))
    assert out.loss_curve.shape == (2,) and np.all(np.isfinite(np.asarray(out.loss_curve)))
    assert out.variables["params"]["heads"]["V"].shape == (3, 3, 9)


def test_swap_learner_with_learned_heads_stays_on_simplex():
    heads = jax.jit(rj.MultiHeadSimplexAttention(3, init_scale=0.5).init)(jax.random.key(0), jnp.zeros((2, 9)))["params"]["heads"]
    losses = jax.random.normal(jax.random.key(1), (10, 3))
    run = jax.jit(lambda c: rj.run_online(rj.swap_learner(heads, c), losses).policies)  # c is a leaf: one compile
    for c in (1.0, 3.0):
        pols = run(c)
        np.testing.assert_allclose(np.asarray(pols.sum(-1)), 1.0, rtol=1e-5)
        assert np.all(np.asarray(pols) > 0)


def test_zero_readout_plays_uniform_at_init():
    d, T = 3, 8
    model = rj.CausalTransformer(d, num_layers=1, num_heads=2, d_model=8, max_len=T, zero_readout=True)
    losses = jax.random.normal(jax.random.key(0), (T, d))
    variables = jax.jit(model.init)(jax.random.key(1), losses)
    np.testing.assert_array_equal(np.asarray(model.apply(variables, losses)), np.full((T, d), 1 / d, np.float32))
    assert not np.any(np.asarray(rj.CausalTransformer(d, 1, 2, 8, max_len=T).init(jax.random.key(1), losses)["params"]["readout"]["kernel"]) == 0)


def test_regret_offset_is_the_parameter_free_mean_regret():
    """E[R] = sqrt(T) mu_d (d sqrt(T) mu_d for the summed heads) for any predictable model, here random ones."""
    for model_name, extra in (("transformer", {"num_layers": 1, "num_heads": 2, "d_model": 8}), ("multihead", {"init_scale": 0.5})):
        config = rj.TrainConfig(model=model_name, d=3, T=10, batch_size=8000, **extra)
        model = rj.build_model(config)
        in_dim = 9 if model_name == "multihead" else 3
        variables = model.init(jax.random.key(0), jnp.zeros((config.T, in_dim)))
        r = np.asarray(jax.jit(rj.make_regrets(config, model))(variables, jax.random.key(1)), np.float64)
        se = r.std() / np.sqrt(r.size)
        assert abs(r.mean() - rj.regret_offset(config)) < 4 * se, (model_name, r.mean(), rj.regret_offset(config), se)
    assert rj.regret_offset(rj.TrainConfig(d=3, T=50)) == pytest.approx(np.sqrt(50) * rj.mu_d(3))


def test_centered_gradient_is_unbiased_for_eq6():
    """grad mean((R - c)^2) - grad mean(R^2) = -2 c grad mean(R), and E[grad R] = 0: per-coordinate mean within 5 SE."""
    config = rj.TrainConfig(model="transformer", d=3, T=6, batch_size=1, num_layers=1, num_heads=2, d_model=8)
    model = rj.build_model(config)
    variables = model.init(jax.random.key(0), jnp.zeros((config.T, config.d)))
    regret = rj.make_regrets(config, model)
    keys = jax.random.split(jax.random.key(1), 4000)
    grads = jax.jit(jax.vmap(jax.grad(lambda v, k: regret(v, k)[0]), in_axes=(None, 0)))(variables, keys)
    flat = np.concatenate([np.asarray(g, np.float64).reshape(len(keys), -1) for g in jax.tree.leaves(grads)], axis=1)
    mean, se = flat.mean(0), flat.std(0) / np.sqrt(len(keys))
    live = se > 1e-8
    assert live.sum() > 100
    assert np.all(np.abs(mean[live]) < 5 * se[live]), np.max(np.abs(mean[live]) / se[live])


def test_centered_training_reports_eq6_and_schedule_shape():
    sched = rj.make_schedule(rj.TrainConfig(num_steps=100, learning_rate=0.1, schedule="warmup_cosine", warmup_steps=10))
    assert float(sched(0)) == 0.0 and float(sched(10)) == pytest.approx(0.1) and float(sched(100)) == pytest.approx(0.0, abs=1e-9)
    assert float(sched(55)) == pytest.approx(0.05, rel=1e-4)
    assert float(rj.make_schedule(rj.TrainConfig(learning_rate=0.1))(77)) == pytest.approx(0.1)
    base = dict(model="transformer", d=3, T=8, batch_size=2000, num_steps=1, num_layers=1, num_heads=2, d_model=8, zero_readout=True)
    plain, centered = (jax.jit(rj.make_train(rj.TrainConfig(**base, centered=c)))(jax.random.key(3)) for c in (False, True))
    # step 0 plays uniformly (zero read-out): the curve is the Eq. (6) value, equal for both estimators and near exact_F0
    np.testing.assert_allclose(np.asarray(centered.loss_curve), np.asarray(plain.loss_curve), rtol=1e-6)
    assert float(centered.loss_curve[0]) == pytest.approx(rj.exact_F0(3, 8), rel=0.1)


T_MAX, HORIZON = 7, 4


@pytest.mark.parametrize("model", ["attention", "multihead"])
def test_masked_training_step_is_the_horizon_T_step(model):
    """One step of make_train(...)(key, horizon=4) at length T_MAX equals one step of an independent horizon-4
    computation on the first 5 rounds of the same draws: same loss, same centred gradient, same Adam update."""
    tc = rj.TrainConfig(model=model, d=3, T=T_MAX, batch_size=4, num_steps=1, learning_rate=0.05, centered=True)
    out = jax.jit(rj.make_train(tc))(jax.random.key(3), jnp.asarray(HORIZON), 0.5)
    short = dataclasses.replace(tc, T=HORIZON)
    module = rj.build_model(short)
    init_key, data_key = jax.random.split(jax.random.key(3))
    width = 9 if model == "multihead" else 3
    variables = module.init(init_key, jnp.zeros((T_MAX, width)))
    z = rj.sample_losses(jax.random.split(data_key, 1)[0], 4, T_MAX, width)[:, :HORIZON]  # rounds t <= horizon only

    def regrets(v):
        pols = jax.vmap(module.apply, in_axes=(None, 0))(v, z)
        if model == "multihead":
            return rj.swap_regrets(pols, z.reshape(4, HORIZON, 3, 3))
        return jax.vmap(rj.external_regret)(pols, z)

    offset = rj.regret_offset(short)
    opt = optax.chain(optax.clip_by_global_norm(tc.max_grad_norm), optax.adam(tc.learning_rate))

    @jax.jit
    def step(v):
        grads = jax.grad(lambda v: jnp.mean((regrets(v) - offset) ** 2))(v)
        updates, _ = opt.update(grads, opt.init(v), v)
        return optax.apply_updates(v, jax.tree.map(lambda u: 0.5 * u, updates)), jnp.mean(regrets(v) ** 2)

    expected, loss = step(variables)
    assert float(out.loss_curve[0]) == pytest.approx(float(loss), rel=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), out.variables, expected)


def test_zero_losses_past_T_leave_the_regret_unchanged():
    """The identity behind the masking: regret of the padded sequence == regret of the first T rounds."""
    head = {"V": jax.random.normal(jax.random.key(0), (3, 3)), "k": jnp.full(3, 0.2), "v": jnp.ones(3), "b": jnp.asarray(0.5)}
    losses = jax.random.normal(jax.random.key(1), (HORIZON, 3))
    padded = jnp.concatenate([losses, jnp.zeros((T_MAX - HORIZON, 3))])
    pol = lambda x: jax.nn.softmax(rj.causal_logits(head, x))  # noqa: E731
    assert float(rj.external_regret(pol(padded), padded)) == pytest.approx(float(rj.external_regret(pol(losses), losses)), rel=1e-6)


@pytest.mark.parametrize("shape, dtype", [((25, 10), jnp.float32), ((3, 4, 5), jnp.float32), ((7,), jnp.float64), ((), float)])
def test_flat_normal_draws_the_numbers_of_jax_random_normal(shape, dtype, x64):
    """flat_normal is only a faster-compiling way to draw jax.random.normal(key, shape): bitwise the same numbers,
    also for vmapped keys (the way every study draws its sequences)."""
    keys = jax.random.split(jax.random.key(5), 3)
    flat = jax.vmap(lambda k: rj.flat_normal(k, shape, dtype))(keys)
    direct = jax.vmap(lambda k: jax.random.normal(k, shape, dtype))(keys)
    assert flat.shape == (3, *shape) and flat.dtype == direct.dtype
    np.testing.assert_array_equal(np.asarray(flat), np.asarray(direct))

"""The own-play reading of the swap loss Eq. (10) (docs/regret.md §10.8): value and gradient against a numpy loop of
the Blum-Mansour recurrence, Eq. (8) at the Theorem-2 configuration, and the training config's switch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import regret_jax as rj

D, T, B = 3, 6, 4


def _heads(seed: int, scale: float = 0.4) -> dict:
    """Random head parameters (layout of ``MultiHeadSimplexAttention``'s "heads"), float64 numpy."""
    rng = np.random.default_rng(seed)
    return {"V": scale * rng.normal(size=(D, D, D * D)), "k": scale * rng.normal(size=(D, D * D)),
            "v": scale * rng.normal(size=(D, D)), "b": 1.0 + scale * rng.normal(size=D)}


def _losses(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(B, T, D))


def _numpy_fixed_point(Q: np.ndarray) -> np.ndarray:
    x = np.full(D, 1.0 / D)
    for _ in range(100_000):
        y = Q @ x
        y = y / y.sum()
        if np.abs(y - x).sum() < 1e-15:
            return y
        x = y
    raise AssertionError("numpy power iteration did not converge")


def _numpy_sum_r(heads: dict, losses: np.ndarray) -> float:
    """sum_j R_j (Eq. (7)) of one sequence, playing the recurrence round by round: q_{j,t} = softmax(u_{j,t-1}),
    x_t = FixedPoint([q_{1,t}, ...]), token z_t = x_t (x) l_t, u_{j,t} = u_{j,t-1} + (V_j z_t + v_j)(b_j + k_j z_t)."""
    u = np.zeros((D, D))
    learner, scaled = np.zeros(D), np.zeros((D, D))  # sum_t x_t[j] <q_{j,t}, l_t>, sum_t x_t[j] l_t[a]
    for loss in losses:
        q = np.exp(u - u.max(axis=1, keepdims=True))
        q = q / q.sum(axis=1, keepdims=True)  # row j = q_{j,t}
        x = _numpy_fixed_point(q.T)
        learner += x * (q @ loss)
        scaled += np.outer(x, loss)
        z = np.kron(x, loss)
        u = u + (np.einsum("jan,n->ja", heads["V"], z) + heads["v"]) * (heads["b"] + heads["k"] @ z)[:, None]
    return float(np.sum(learner - scaled.min(axis=1)))


def _numpy_loss(heads: dict, losses: np.ndarray) -> float:
    """Eq. (10) in the own-play reading: the batch mean of (sum_j R_j)^2."""
    return float(np.mean([_numpy_sum_r(heads, seq) ** 2 for seq in losses]))


def _jax_loss(heads, losses):
    r, _ = jax.vmap(rj.own_play_regrets, in_axes=(None, 0))(heads, losses)
    return jnp.mean(r**2)


def test_own_play_loss_matches_a_numpy_loop():
    heads, losses = _heads(0), _losses(1)
    as32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), (heads, losses))
    r, nonconverged = jax.jit(jax.vmap(rj.own_play_regrets, in_axes=(None, 0)))(*as32)
    expected = np.array([_numpy_sum_r(heads, seq) for seq in losses])
    np.testing.assert_allclose(np.asarray(r), expected, rtol=1e-5, atol=1e-5)
    assert np.asarray(nonconverged).tolist() == [0] * B
    assert float(jax.jit(_jax_loss)(*as32)) == pytest.approx(_numpy_loss(heads, losses), rel=1e-5)


def test_own_play_gradient_matches_finite_differences_of_the_numpy_loop(x64):
    """Through the heads' softmaxes and every x_t (implicit VJP of ``fixed_point``), all head parameters."""
    heads, losses = _heads(2), _losses(3)
    grad = jax.jit(jax.grad(_jax_loss))(jax.tree.map(jnp.asarray, heads), jnp.asarray(losses))
    rng, h = np.random.default_rng(4), 1e-5
    for _ in range(3):
        direction = {k: rng.normal(size=np.shape(v)) for k, v in heads.items()}
        shifted = [_numpy_loss({k: heads[k] + s * h * direction[k] for k in heads}, losses) for s in (1, -1)]
        fd = (shifted[0] - shifted[1]) / (2 * h)
        analytic = sum(float(np.sum(np.asarray(grad[k]) * direction[k])) for k in heads)
        assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-8), (analytic, fd)


def test_own_play_sum_of_head_regrets_is_the_swap_regret_at_bm_params():
    """Eq. (8): at V_j = e_j^T (x) (-eta P) the played x_t are fixed points, so sum_j R_j = SwapReg(x_{1:T})."""
    heads, losses = rj.bm_params(D, 0.8), jnp.asarray(_losses(5), jnp.float32)

    def both(seq):
        play = rj.run_online(rj.swap_learner(heads, 1.0), seq)
        return rj.own_play_regrets(heads, seq)[0], rj.swap_regret(play.policies, seq)

    r, swap = jax.jit(jax.vmap(both))(losses)
    np.testing.assert_allclose(np.asarray(r), np.asarray(swap), rtol=1e-5, atol=1e-5)


def test_train_config_own_play_switch():
    config = rj.TrainConfig(model="multihead", d=D, T=T, batch_size=B, swap_inputs="own_play")
    model = rj.build_model(config)
    variables = rj.init_variables(config, jax.random.key(0))
    r = jax.jit(rj.make_regrets(config, model))(variables, jax.random.key(1))
    losses = rj.sample_losses(jax.random.key(1), B, T, D)  # one shared d-vector per round
    np.testing.assert_allclose(np.asarray(r), np.asarray(jax.vmap(rj.own_play_regrets, in_axes=(None, 0))(
        variables["params"]["heads"], losses)[0]), rtol=1e-6)
    for kwargs in ({"swap_inputs": "x"}, {"swap_inputs": "own_play"},
                   {"model": "multihead", "swap_inputs": "own_play", "centered": True}):
        with pytest.raises(ValueError, match="swap_inputs"):
            rj.TrainConfig(**kwargs)
    with pytest.raises(ValueError, match="own_play"):
        rj.regret_offset(config)  # E[sum_j R_j] depends on the parameters in own play


def test_own_play_on_the_bm_ray_prefers_the_uncalibrated_step_and_its_mean_depends_on_it():
    """docs/regret.md §10.8 (Monte Carlo, 2000 common sequences, d = 3, T = 25): on bm_params(d, kappa / sqrt(T)) the
    own-play Eq. (10) is lower at kappa = 2 (about kappa*, the block reading's step read at c_d = 1) than at d kappa
    (c_d = d); and E[sum_j R_j] differs between the two steps (why own play is not centred, ``regret_jax.train``)."""
    losses = rj.sample_losses(jax.random.key(0), 2000, 25, D)
    r = jax.jit(jax.vmap(lambda e: jax.vmap(lambda seq: rj.own_play_regrets(rj.bm_params(D, e), seq)[0])(losses)))
    r = np.asarray(r(jnp.asarray([2.0, 2.0 * D]) / 5.0), np.float64)
    for diff in (r[1] ** 2 - r[0] ** 2, r[1] - r[0]):
        assert diff.mean() > 5 * diff.std(ddof=1) / np.sqrt(diff.size), (diff.mean(), diff.std(ddof=1))

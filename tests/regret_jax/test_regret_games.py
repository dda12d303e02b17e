"""Games with expected feedback: CCE / CE / swap gaps against brute force, uniform values, self-play."""
import jax
import jax.numpy as jnp
import numpy as np
from regret_reference import game_gaps

import regret_jax as rj


def test_gaps_brute_force_general_sum(x64):
    rng = np.random.default_rng(0)
    for m, n in [(3, 3), (2, 4)]:
        U1, U2 = rng.normal(size=(m, n)), rng.normal(size=(m, n))
        sigma = rng.exponential(size=(m, n))
        sigma /= sigma.sum()
        params = rj.GameParams(row_payoff=jnp.asarray(U1), col_payoff=jnp.asarray(U2))
        got = [float(f(jnp.asarray(sigma), params)) for f in (rj.cce_gap, rj.ce_gap, rj.swap_gap)]
        np.testing.assert_allclose(got, game_gaps(sigma, U1, U2), rtol=1e-12, atol=1e-14)


def test_uniform_and_equilibrium_values_in_weighted_rps():
    params = rj.zero_sum_game(rj.WEIGHTED_RPS)
    uniform = jnp.full((3, 3), 1.0 / 9)
    np.testing.assert_allclose(float(rj.cce_gap(uniform, params)), 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(float(rj.ce_gap(uniform, params)), 2 / 9, rtol=1e-6)
    np.testing.assert_allclose(float(rj.swap_gap(uniform, params)), 1 / 3, rtol=1e-6)
    x_star = jnp.array([0.4, 0.4, 0.2])
    np.testing.assert_allclose(np.asarray(jnp.asarray(rj.WEIGHTED_RPS) @ x_star), 0.0, atol=1e-7)
    nash = jnp.outer(x_star, x_star)
    for f in (rj.cce_gap, rj.ce_gap, rj.swap_gap):
        assert abs(float(f(nash, params))) < 1e-6


def test_env_step_expected_feedback():
    params = rj.zero_sum_game(rj.WEIGHTED_RPS)
    obs, state = rj.reset(jax.random.key(0), params)
    x, y = jnp.array([1.0, 0.0, 0.0]), jnp.array([0.0, 0.0, 1.0])  # rock vs scissors: row wins 2
    obs, state, rewards, done, _ = rj.step(jax.random.key(1), state, rj.JointPolicy(row=x, col=y), params)
    np.testing.assert_allclose(np.asarray(obs.row_loss), [-2.0, 2.0, 0.0])  # -A y
    np.testing.assert_allclose(np.asarray(obs.col_loss), [0.0, -1.0, 2.0])  # A^T x: paper beats rock, scissors loses 2
    np.testing.assert_allclose(np.asarray(rewards), [2.0, -2.0])
    assert int(state.t) == 1 and not bool(done)
    np.testing.assert_allclose(np.asarray(state.joint_sum), np.outer(x, y))


def test_ftrl_self_play_matches_loop_and_gap_equals_average_regret(x64):
    A = np.asarray(rj.WEIGHTED_RPS)
    params = rj.zero_sum_game(A)
    T = 60
    for eta in (0.1, 0.5):
        learner = rj.attention_learner(rj.ftrl_params(3, eta))
        out = rj.self_play(learner, learner, params, T)
        # independent loop
        Lx, Ly = np.zeros(3), np.zeros(3)
        xs, ys = [], []
        for _ in range(T):
            x, y = np.exp(-eta * Lx) / np.exp(-eta * Lx).sum(), np.exp(-eta * Ly) / np.exp(-eta * Ly).sum()
            xs.append(x), ys.append(y)
            Lx, Ly = Lx - A @ y, Ly + A.T @ x
        np.testing.assert_allclose(np.asarray(out.row_policy), np.array(xs), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(out.col_policy), np.array(ys), rtol=1e-12)
        reg = max(float(rj.external_regret(out.row_policy, out.row_loss)), float(rj.external_regret(out.col_policy, out.col_loss)))
        np.testing.assert_allclose(float(out.gap_cce[-1]), reg / T, rtol=1e-10)
        sw = max(float(rj.swap_regret(out.row_policy, out.row_loss)), float(rj.swap_regret(out.col_policy, out.col_loss)))
        np.testing.assert_allclose(float(out.gap_swap[-1]), sw / T, rtol=1e-10)


def test_uniform_self_play_gap_constant():
    params = rj.zero_sum_game(rj.WEIGHTED_RPS)
    u = rj.uniform_learner(3)
    out = rj.self_play(u, u, params, 5)
    np.testing.assert_allclose(np.asarray(out.gap_cce), 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out.gap_ce), 2 / 9, rtol=1e-6)


def test_reference_learners_in_weighted_rps_self_play():
    """The comparators' behaviour the studies rely on (docs/regret.md §9.4, 10.6), at the Theorem-1 step kappa / sqrt(T).

    Entropic FTRL drives the CCE gap far below uniform play's 1/3 (regret.cce); Blum-Mansour with Hedge
    heads drives the CE gap far below uniform's 2/9 and below plain FTRL's (regret.swap).
    """
    game = rj.zero_sum_game(rj.WEIGHTED_RPS)
    kappa = 2.0  # about kappa* at d = 3 (regret.stationarity)
    ftrl50 = rj.attention_learner(rj.ftrl_params(3, kappa / np.sqrt(50)))
    assert float(rj.self_play(ftrl50, ftrl50, game, 50).gap_cce[-1]) < 0.5 / 3
    eta = kappa / np.sqrt(200)
    bm, ftrl = rj.swap_learner(rj.bm_params(3, eta)), rj.attention_learner(rj.ftrl_params(3, eta))
    bm_play, ftrl_play = rj.self_play(bm, bm, game, 200), rj.self_play(ftrl, ftrl, game, 200)
    assert float(bm_play.gap_ce[-1]) < 0.5 * 2 / 9
    assert float(bm_play.gap_ce[-1]) < float(ftrl_play.gap_ce[-1])
    assert int(bm_play.row_state.nonconverged) == 0

"""Tiny run of regret.cce (compute, summarize, write), and its self-play and equilibrium pieces against independent computations."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments.registry import RunContext
from experiments.studies.regret.cce import (
    CCEConfig,
    attention_self_play_seeds,
    compute,
    equilibrium,
    gap_ratio,
    self_play_seeds,
    summarize,
    tv_from_uniform,
    write,
)


def _numpy_attention_policy(head, past):
    """Eq. (2) by hand: pi = softmax(sum_i (V l_i + v)(b + k^T l_i)) over the past losses."""
    u = sum(((head["V"] @ l + head["v"]) * (head["b"] + head["k"] @ l) for l in past), np.zeros(head["v"].shape))
    w = np.exp(u - u.max())
    return w / w.sum()


def _numpy_cce_gap(sigma, A):
    """max over players and deviations of E_sigma[u_i(a', .)] - E_sigma[u_i], written out for u_1 = A, u_2 = -A."""
    value = float(np.sum(sigma * A))
    row = max(float(sigma.sum(0) @ A[a]) - value for a in range(A.shape[0]))
    col = max(float(-(sigma.sum(1) @ A[:, b])) + value for b in range(A.shape[1]))
    return max(row, col)


def test_equilibrium_matches_weighted_rps_closed_form():
    rng = np.random.default_rng(0)
    for a, b, c in rng.uniform(0.5, 3.0, size=(3, 3)):
        A = np.array([[0, -a, b], [a, 0, -c], [-b, c, 0]])
        np.testing.assert_allclose(equilibrium(A), np.array([c, b, a]) / (a + b + c), atol=1e-12)
    np.testing.assert_allclose(equilibrium(rj.WEIGHTED_RPS), [0.4, 0.4, 0.2], atol=1e-12)


def test_self_play_seeds_matches_numpy_loop():
    T, A = 6, rj.WEIGHTED_RPS
    module = rj.SimplexAttention(3, init_scale=0.5)
    v0 = module.init(jax.random.key(0), np.zeros((T, 3), np.float32))
    seeds = jax.tree.map(lambda x: np.stack([x, -0.7 * x + 0.2]), v0)  # two different parameter sets
    out = jax.jit(lambda v: self_play_seeds(module, v, rj.zero_sum_game(A), T))(seeds)
    assert out.gap_cce.shape == (2, T)
    for s in range(2):
        head = {k: np.asarray(x[s], np.float64) for k, x in seeds["params"]["head"].items()}
        row_past, col_past, joint = [], [], np.zeros((3, 3))
        for t in range(T):
            x, y = _numpy_attention_policy(head, row_past), _numpy_attention_policy(head, col_past)
            row_past.append(-A @ y)
            col_past.append(A.T @ x)
            joint += np.outer(x, y)
            np.testing.assert_allclose(out.row_policy[s, t], x, rtol=1e-4, atol=1e-5)
            assert float(out.gap_cce[s, t]) == pytest.approx(_numpy_cce_gap(joint / (t + 1), A), abs=1e-4)
    assert not np.allclose(out.gap_cce[0], out.gap_cce[1])
    # the running-sum learner used beyond T plays the same games, and continues them
    longer = jax.jit(lambda v: attention_self_play_seeds(v, rj.zero_sum_game(A), 2 * T))(seeds)
    np.testing.assert_allclose(np.asarray(longer.row_policy)[:, :T], np.asarray(out.row_policy), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(longer.gap_cce)[:, :T], np.asarray(out.gap_cce), rtol=1e-5, atol=1e-6)
    assert longer.gap_cce.shape == (2, 2 * T)


def test_cce_study_tiny(tmp_path):
    config = CCEConfig(
        attention=rj.TrainConfig(model="attention", d=3, T=8, batch_size=16, num_steps=20, learning_rate=2e-2),
        transformer=rj.TrainConfig(model="transformer", d=3, T=8, num_heads=2, d_model=8),
        depths=(), beyond=(2,), num_seeds=2, scan_sequences=1000,
    )
    arrays = compute(config, RunContext(study="regret.cce", quick=True, out_dir=tmp_path))
    assert arrays["curves"]["1layer"]["loss"].shape == (2, 20) and arrays["gaps"]["1layer"].shape == (2, 16)
    assert arrays["gaps"]["uniform"].shape == (16,) and arrays["row_policy"]["ftrl"].shape == (16, 3)
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["gap_cce_uniform"] == pytest.approx(1 / 3, abs=1e-6) and m["ratio_uniform_t16"] == pytest.approx(1.0, abs=1e-5)
    assert m["dist_to_equilibrium_uniform"] == pytest.approx(0.4 / 3 * 2, abs=1e-6)  # |1/3-.4|*2 + |1/3-.2|
    assert 0 <= m["gap_cce_ftrl"] < 1 / 3 and np.isfinite(m["gap_cce_1layer"]) and m["gap_cce_1layer_std"] > 0
    assert [c.name for c in summary.checks] == ["1layer_far_below_uniform_at_T", "1layer_far_below_uniform_off_T"]
    assert summary.tables["table"]["learner"] == ["uniform", "ftrl", "1layer"]
    assert summary.tables["curve"]["t"] == [2, 4, 6, 8, 16]
    write(config, arrays, summary, tmp_path)
    for f in ("cce_gap.csv", "cce_gap.npz", "cce_gap.png"):
        assert (tmp_path / f).exists()
    assert np.load(tmp_path / "cce_gap.npz")["1layer"].shape == (2, 16)


def test_gap_ratio_and_tv_from_uniform_by_hand():
    gaps = {"uniform": np.array([0.5, 0.25, 0.2, 0.1]), "a": np.array([[0.5, 0.1, 0.1, 0.0], [0.3, 0.2, 0.1, 0.1]]),
            "short": np.array([[0.25, 0.25]])}
    r = gap_ratio(gaps)
    np.testing.assert_allclose(r["a"], [0.8, 0.6, 0.5, 0.5])
    np.testing.assert_allclose(r["short"], [0.5, 1.0])
    policy = np.array([[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0]])
    assert tv_from_uniform(policy, 0, 1) == pytest.approx(2 / 3)
    assert tv_from_uniform(policy, 1, 3) == pytest.approx(1 / 6)  # (0 + 1/3) / 2
    assert tv_from_uniform(np.stack([policy, policy[::-1]]), 0, 1) == pytest.approx((2 / 3 + 1 / 3) / 2)


def test_cce_summarize_on_synthetic_gaps():
    config = CCEConfig(attention=rj.TrainConfig(model="attention", d=3, T=4),
                       transformer=rj.TrainConfig(model="transformer", d=3, T=4), depths=(2,), beyond=(2,), num_seeds=2)
    x_star = np.array([0.4, 0.4, 0.2])
    u = np.full(8, 1 / 3)
    gaps = {"uniform": u, "ftrl": np.array([0.3, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05]),
            "1layer": np.array([[0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], [0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2]]),
            "2layer": np.array([[0.3, 0.3, 0.2, 0.1], [0.3, 0.3, 0.2, 0.1]])}
    policy = {"uniform": np.full((8, 3), 1 / 3), "ftrl": np.tile(x_star, (8, 1)),
              "1layer": np.tile(x_star, (2, 8, 1)), "2layer": np.tile([1.0, 0.0, 0.0], (2, 4, 1))}
    arrays = {"gaps": gaps, "row_policy": policy, "root": {"eta_star": np.asarray(0.5), "se": np.asarray(0.01)},
              "curves": {k: {"loss": np.ones((2, 5))} for k in ("1layer", "2layer")}}
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["gap_cce_1layer"] == pytest.approx(0.1) and m["gap_cce_1layer_std"] == pytest.approx(0.0)
    assert m["ratio_1layer_t8"] == pytest.approx(0.15 / u[0]) and m["ratio_2layer_t2"] == pytest.approx(0.9)
    assert "ratio_2layer_t8" not in m  # the Transformers stop at T
    assert m["gap_cce_ftrl_second_half_mean"] == pytest.approx(0.075)
    assert m["ratio_2layer_second_half_mean"] == pytest.approx(0.45)
    assert m["tv_from_uniform_2layer_first_half"] == pytest.approx(2 / 3) and m["tv_from_uniform_ftrl_second_half"] == pytest.approx(2 / 15)
    assert m["dist_to_equilibrium_ftrl"] == pytest.approx(0.0, abs=1e-12) and m["dist_to_equilibrium_2layer"] == pytest.approx(1.2)
    checks = {c.name: c for c in summary.checks}
    assert {k: c.passed for k, c in checks.items()} == {
        "1layer_far_below_uniform_at_T": True, "1layer_far_below_uniform_off_T": True,  # 0.3 at T, 0.3 and 0.45 at t = 2, 8
        "2layer_far_below_uniform_at_T": True, "2layer_far_below_uniform_off_T": False}  # 0.3 at T, 0.9 at T/2
    assert checks["1layer_far_below_uniform_off_T"].value == pytest.approx(0.45)
    assert summary.tables["curve"]["t"] == [1, 2, 3, 4, 8] and np.isnan(summary.tables["curve"]["2layer"][-1])


@pytest.mark.parametrize("field, kwargs", [
    ("attention.model", {"attention": rj.TrainConfig(model="transformer", d=3, T=8)}),
    ("attention.T", {"attention": rj.TrainConfig(model="attention", d=3, T=9)}),
    ("transformer.d", {"transformer": rj.TrainConfig(model="transformer", d=4, T=8)}),
    ("depth", {"depths": (1, 2)}),
    ("num_seeds", {"num_seeds": 1}),
    ("beyond", {"beyond": (1,)}),
    ("stream", {"stream": 5}),
])
def test_cce_config_validates(field, kwargs):
    base = {"attention": rj.TrainConfig(model="attention", d=3, T=8), "transformer": rj.TrainConfig(model="transformer", d=3, T=8)}
    with pytest.raises(ValueError, match=field):
        CCEConfig(**{**base, **kwargs})

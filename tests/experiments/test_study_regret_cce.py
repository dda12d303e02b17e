"""Tiny run of regret.cce (compute, summarize, write), and its self-play and equilibrium pieces against independent computations."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments import checks
from experiments.registry import RunContext
from experiments.studies.regret.cce import (
    AT_T,
    OFF_T,
    QUICK,
    CCEConfig,
    attention_self_play_seeds,
    compute,
    equilibrium,
    gap_ratio,
    seed_ratio,
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
    assert arrays["gaps"]["1layer_init"].shape == (2, 16)
    assert arrays["gaps"]["uniform"].shape == (16,) and arrays["row_policy"]["ftrl"].shape == (16, 3)
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["gap_cce_uniform"] == pytest.approx(1 / 3, abs=1e-6) and m["ratio_uniform_t16"] == pytest.approx(1.0, abs=1e-5)
    assert m["dist_to_equilibrium_uniform"] == pytest.approx(0.4 / 3 * 2, abs=1e-6)  # |1/3-.4|*2 + |1/3-.2|
    assert 0 <= m["gap_cce_ftrl"] < 1 / 3 and np.isfinite(m["gap_cce_1layer"]) and m["gap_cce_1layer_std"] > 0
    assert [c.name for c in summary.checks] == ["1layer_far_below_uniform_at_T", "1layer_far_below_uniform_off_T"]
    assert all(c.n == 2 and c.control.n == 2 for c in summary.checks)
    assert summary.tables["table"]["learner"] == ["uniform", "ftrl", "1layer", "1layer_init"]
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
            "1layer_init": np.tile(u, (2, 1)), "2layer_init": np.full((2, 4), 1 / 3),
            "1layer": np.array([[0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1], [0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2]]),
            "2layer": np.array([[0.3, 0.3, 0.2, 0.1], [0.3, 0.3, 0.2, 0.1]])}
    policy = {"uniform": np.full((8, 3), 1 / 3), "ftrl": np.tile(x_star, (8, 1)),
              "1layer": np.tile(x_star, (2, 8, 1)), "2layer": np.tile([1.0, 0.0, 0.0], (2, 4, 1)),
              "1layer_init": np.full((2, 8, 3), 1 / 3), "2layer_init": np.full((2, 4, 3), 1 / 3)}
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
    found = {c.name: c for c in summary.checks}
    # per seed: the largest ratio over the rounds; two seeds that agree exactly carry no PASS (experiments.checks)
    assert {k: c.verdict for k, c in found.items()} == {
        "1layer_far_below_uniform_at_T": checks.INCONCLUSIVE, "1layer_far_below_uniform_off_T": checks.INCONCLUSIVE,  # 0.3, 0.3 at T; 0.3, 0.6 off
        "2layer_far_below_uniform_at_T": checks.INCONCLUSIVE, "2layer_far_below_uniform_off_T": checks.FAIL}  # 0.3 at T, 0.9 at T/2
    assert found["1layer_far_below_uniform_at_T"].hi == pytest.approx(0.3)  # below 0.5: a PASS but for the rule
    assert found["1layer_far_below_uniform_off_T"].value == pytest.approx(0.45)
    assert all(c.control.verdict == checks.FAIL and c.control.value == pytest.approx(1.0) for c in found.values())
    assert summary.tables["curve"]["t"] == [1, 2, 3, 4, 8] and np.isnan(summary.tables["curve"]["2layer"][-1])


def test_untrained_controls_fail_the_claims():
    """The controls on real self-play: QUICK's models at initialisation on 4 seeds (the Transformer's zero read-out
    plays exactly uniform; the one-layer model starts from a random Eq. (2) head), read at t = T and off T."""
    game, T, keys = rj.zero_sum_game(rj.WEIGHTED_RPS), QUICK.T, np.asarray(jax.random.key_data(jax.random.split(jax.random.key(7), 4)))
    uniform = np.full(QUICK.long_T, 1 / 3)
    for name, tc in QUICK.models().items():
        init = jax.vmap(lambda k, tc=tc: rj.init_variables(tc, jax.random.wrap_key_data(k)))(keys)
        if name == "1layer":
            gaps = attention_self_play_seeds(init, game, QUICK.long_T).gap_cce
        else:
            gaps = self_play_seeds(rj.build_model(tc), init, game, T).gap_cce
            np.testing.assert_allclose(np.asarray(gaps)[:, T - 1], 1 / 3, rtol=1e-5)
        for claim, rounds in ((AT_T, [T]), (OFF_T, QUICK.off_T_rounds(name))):
            values = seed_ratio({"uniform": uniform, name: np.asarray(gaps)}, name, rounds)
            assert claim.judge(values, key=name).verdict != checks.PASS


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

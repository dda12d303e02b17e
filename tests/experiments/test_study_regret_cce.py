"""Tiny run of regret.cce (compute, summarize, write), and its self-play and equilibrium pieces against independent computations."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments.registry import RunContext
from experiments.studies.regret.cce import CCEConfig, compute, equilibrium, self_play_seeds, summarize, write


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


def test_cce_study_tiny(tmp_path):
    config = CCEConfig(
        attention=rj.TrainConfig(model="attention", d=3, T=8, batch_size=16, num_steps=20, learning_rate=2e-2),
        transformer=rj.TrainConfig(model="transformer", d=3, T=8, num_heads=2, d_model=8),
        depths=(), num_seeds=2, scan_sequences=1000,
    )
    arrays = compute(config, RunContext(study="regret.cce", quick=True, out_dir=tmp_path))
    assert arrays["curves"]["1layer"]["loss"].shape == (2, 20) and arrays["gaps"]["1layer"].shape == (2, 8)
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["gap_cce_uniform"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["dist_to_equilibrium_uniform"] == pytest.approx(0.4 / 3 * 2, abs=1e-6)  # |1/3-.4|*2 + |1/3-.2|
    assert 0 <= m["gap_cce_ftrl"] < 1 / 3 and np.isfinite(m["gap_cce_1layer"]) and m["gap_cce_1layer_std"] > 0
    names = [c.name for c in summary.checks]
    assert names == ["uniform_gap_is_one_third", "ftrl_far_below_uniform", "1layer_far_below_uniform"]
    assert summary.checks[0].passed
    assert summary.tables["table"]["learner"] == ["uniform", "ftrl", "1layer"]
    write(config, arrays, summary, tmp_path)
    for f in ("cce_gap.csv", "cce_gap.npz", "cce_gap.png"):
        assert (tmp_path / f).exists()
    assert np.load(tmp_path / "cce_gap.npz")["1layer"].shape == (2, 8)


def test_cce_summarize_on_synthetic_gaps():
    config = CCEConfig(attention=rj.TrainConfig(model="attention", d=3, T=4),
                       transformer=rj.TrainConfig(model="transformer", d=3, T=4), depths=(2,), num_seeds=2)
    x_star = np.array([0.4, 0.4, 0.2])
    gaps = {"uniform": np.full(4, 1 / 3), "ftrl": np.array([0.3, 0.2, 0.1, 0.05]),
            "1layer": np.array([[0.3, 0.2, 0.1, 0.1], [0.3, 0.2, 0.1, 0.3]]), "2layer": np.full((2, 4), 0.2)}
    policy = {"uniform": np.full((4, 3), 1 / 3), "ftrl": np.tile(x_star, (4, 1)),
              "1layer": np.tile(x_star, (2, 4, 1)), "2layer": np.tile([1.0, 0.0, 0.0], (2, 4, 1))}
    arrays = {"gaps": gaps, "row_policy": policy, "root": {"eta_star": np.asarray(0.5), "se": np.asarray(0.01)},
              "curves": {k: {"loss": np.ones((2, 5))} for k in ("1layer", "2layer")}}
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["gap_cce_1layer"] == pytest.approx(0.2) and m["gap_cce_1layer_std"] == pytest.approx(np.std([0.1, 0.3], ddof=1))
    assert m["gap_cce_ftrl_second_half_mean"] == pytest.approx(0.075)
    assert m["dist_to_equilibrium_ftrl"] == pytest.approx(0.0, abs=1e-12) and m["dist_to_equilibrium_2layer"] == pytest.approx(1.2)
    passed = {c.name: c.passed for c in summary.checks}
    assert passed == {"uniform_gap_is_one_third": True, "ftrl_far_below_uniform": True,
                      "1layer_far_below_uniform": False, "2layer_far_below_uniform": False}  # 0.6 of uniform


@pytest.mark.parametrize("field, kwargs", [
    ("attention.model", {"attention": rj.TrainConfig(model="transformer", d=3, T=8)}),
    ("attention.T", {"attention": rj.TrainConfig(model="attention", d=3, T=9)}),
    ("transformer.d", {"transformer": rj.TrainConfig(model="transformer", d=4, T=8)}),
    ("depth", {"depths": (1, 2)}),
    ("num_seeds", {"num_seeds": 1}),
])
def test_cce_config_validates(field, kwargs):
    base = {"attention": rj.TrainConfig(model="attention", d=3, T=8), "transformer": rj.TrainConfig(model="transformer", d=3, T=8)}
    with pytest.raises(ValueError, match=field):
        CCEConfig(**{**base, **kwargs})

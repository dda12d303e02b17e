"""Tiny run of regret.deep (compute, summarize, write), and its evaluation pieces against numpy loops."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments.registry import RunContext
from experiments import checks
from experiments.studies.regret.deep import (
    BELOW_FTRL,
    FAR_BELOW,
    DeepConfig,
    baseline_regret_curves,
    biased_sequences,
    compute,
    model_regret_curves,
    summarize,
    write,
)


def _numpy_cumulative_regret(policies, losses):
    """Reg(t) = sum_{s<=t} <pi_s, l_s> - min_a L_{t,a}, as an explicit loop over t."""
    out, played, cum = [], 0.0, np.zeros(losses.shape[-1])
    for p, l in zip(policies, losses):
        played += float(p @ l)
        cum = cum + l
        out.append(played - cum.min())
    return np.array(out)


def _numpy_ftrl(losses, eta):
    pols, cum = [], np.zeros(losses.shape[-1])
    for l in losses:
        w = np.exp(-eta * (cum - cum.min()))
        pols.append(w / w.sum())
        cum = cum + l
    return np.array(pols)


def test_biased_sequences_have_per_sequence_means():
    losses, mu = biased_sequences(jax.random.key(0), 400, 50, 3, 2.0)
    losses, mu = np.asarray(losses), np.asarray(mu)
    assert losses.shape == (400, 50, 3) and mu.shape == (400, 3)
    noise = losses - mu[:, None, :]
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 1) < 0.02  # unit Gaussian noise around mu
    assert abs(mu.std() - 2.0) < 0.15  # mu ~ N(0, 2^2 I)
    assert np.abs(losses.mean(axis=1) - mu).max() < 5 / np.sqrt(50)  # each sequence centred on its own mu


def test_regret_curves_match_numpy_loops_per_seed():
    d, T = 3, 7
    model = rj.CausalTransformer(d, num_layers=1, num_heads=2, d_model=8, max_len=T)
    v0 = jax.jit(model.init)(jax.random.key(1), np.zeros((T, d), np.float32))
    seeds = jax.tree.map(lambda x: np.stack([x, 1.3 * x + 0.05]), v0)  # two different parameter sets
    losses, _ = biased_sequences(jax.random.key(2), 5, T, d, 1.0)
    curves = np.asarray(jax.jit(lambda v, l: model_regret_curves(model, v, l, batch=2))(seeds, losses))
    assert curves.shape == (2, 5, T)
    policies = np.asarray(jax.jit(jax.vmap(jax.vmap(model.apply, (None, 0)), (0, None)))(seeds, losses), np.float64)
    for s in range(2):
        for n in range(5):
            np.testing.assert_allclose(curves[s, n], _numpy_cumulative_regret(policies[s, n], np.asarray(losses[n], np.float64)), rtol=1e-4, atol=1e-4)
    assert not np.allclose(curves[0], curves[1])  # seeds differ
    base = jax.tree.map(np.asarray, jax.jit(baseline_regret_curves)(losses, 0.4))
    for n in range(5):
        ln = np.asarray(losses[n], np.float64)
        np.testing.assert_allclose(base["uniform"][n], _numpy_cumulative_regret(np.full((T, d), 1 / d), ln), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(base["ftrl"][n], _numpy_cumulative_regret(_numpy_ftrl(ln, 0.4), ln), rtol=1e-4, atol=1e-4)


def test_deep_study_tiny(tmp_path):
    tc = rj.TrainConfig(model="transformer", d=3, T=6, batch_size=8, num_steps=20, learning_rate=3e-3, num_heads=2, d_model=8)
    config = DeepConfig(tc, depths=(1,), num_seeds=2, heldout_sequences=40, scan_sequences=1000, eval_batch=16)
    arrays = compute(config, RunContext(study="regret.deep", quick=True, out_dir=tmp_path))
    assert arrays["curves"]["1layer"]["loss"].shape == (2, 20) and arrays["regret"]["1layer"].shape == (2, 40, 6)
    summary = summarize(config, arrays)
    m = summary.metrics
    for name in ("1layer", "uniform", "ftrl"):
        assert np.isfinite(m[f"regret_final_{name}"]) and m[f"regret_final_{name}_std"] > 0
    assert [c.name for c in summary.checks] == ["1layer_far_below_uniform", "1layer_below_ftrl"]
    check = summary.checks[0]
    assert check.value == pytest.approx(m["regret_final_1layer"] / m["regret_final_uniform"]) and check.n == 2
    # the control, the untrained models on the same sequences, is run and fails the claim (regret like uniform play's)
    assert arrays["init_final"]["1layer"].shape == (2, 40) and check.control.n == 2
    assert check.control.value == pytest.approx(m["ratio_1layer_init_mean"]) and check.control.value > 0.5
    assert check.control.verdict != checks.PASS
    assert m["sq_regret_gauss_uniform"] == pytest.approx(m["sq_regret_gauss_uniform_exact"], rel=0.5)  # 40 sequences only
    assert summary.tables["table"]["learner"] == ["ftrl", "uniform", "1layer"]  # jitted dicts come back sorted
    write(config, arrays, summary, tmp_path)
    for f in ("regret_curves.csv", "regret_curves.npz", "regret_curves.png"):
        assert (tmp_path / f).exists()
    curves = np.load(tmp_path / "regret_curves.npz")
    assert curves["1layer"].shape == (2, 40, 6) and curves["uniform"].shape == (40, 6) and curves["mu"].shape == (40, 3)


def test_deep_summarize_on_synthetic_curves():
    tc = rj.TrainConfig(model="transformer", d=3, T=4)
    config = DeepConfig(tc, depths=(2,), num_seeds=2, heldout_sequences=10, scan_sequences=1000)
    t = np.arange(1, 5, dtype=float)
    uniform = np.tile(2.0 * t, (10, 1))  # linear regret, Reg(T) = 8
    learned = np.stack([np.tile(np.sqrt(t), (10, 1)), np.tile(3 * np.sqrt(t), (10, 1))])  # seeds: Reg(T) = 2 and 6
    arrays = {"regret": {"uniform": uniform, "ftrl": uniform / 2, "2layer": learned}, "mu": np.zeros((10, 3)),
              "final_sq_gauss": {"uniform": np.full(10, 4.0), "ftrl": np.full(10, 2.0), "2layer": np.full((2, 10), 1.0)},
              "root": {"eta_star": np.asarray(0.5), "se": np.asarray(0.01)}, "curves": {"2layer": {"loss": np.ones((2, 7))}},
              "init_final": {"2layer": np.full((2, 10), 8.0)}}
    summary = summarize(config, arrays)
    m = summary.metrics
    assert m["regret_final_2layer"] == pytest.approx(4.0) and m["regret_final_uniform"] == pytest.approx(8.0)
    assert m["regret_final_2layer_seed_std"] == pytest.approx(np.std([2.0, 6.0], ddof=1))
    assert m["normalized_regret_uniform"] == pytest.approx(2.0) and m["sq_regret_gauss_ftrl"] == 2.0
    assert m["kappa_star"] == pytest.approx(1.0) and m["uniform_linear_reference"] == 0.0
    check = summary.checks[0]
    assert check.name == "2layer_far_below_uniform" and check.value == pytest.approx(0.5)  # seeds 0.25 and 0.75
    assert check.verdict == checks.INCONCLUSIVE and check.control.verdict == checks.FAIL  # untrained: ratio 1
    ftrl = summary.checks[1]  # against FTRL (Reg(T) = 4): seeds 0.5 and 1.5; untrained 2
    assert ftrl.name == "2layer_below_ftrl" and ftrl.value == pytest.approx(1.0) and ftrl.verdict == checks.INCONCLUSIVE
    assert ftrl.control.value == pytest.approx(2.0) and ftrl.control.verdict == checks.FAIL


def test_deep_claim_passes_only_with_a_failing_control():
    ratios = np.array([0.30, 0.33, 0.28, 0.35])
    assert FAR_BELOW.judge(ratios, control=np.array([1.02, 0.97, 1.05, 0.99]), key=2).verdict == checks.PASS
    assert FAR_BELOW.judge(ratios, control=ratios + 0.01, key=2).verdict == checks.NO_POWER  # an untrained model as good
    assert FAR_BELOW.judge(ratios + 0.4, control=np.ones(4), key=2).verdict == checks.FAIL
    # against FTRL: the judged quick run's ratios (about 1.75) fail; an untrained model (about 5.5) fails too
    assert BELOW_FTRL.judge(np.array([1.6, 1.9, 1.7, 1.8]), control=np.array([5.2, 5.9, 5.4, 5.6]), key=2).verdict == checks.FAIL
    assert BELOW_FTRL.judge(np.array([0.80, 0.85, 0.78, 0.83]), control=np.array([5.2, 5.9, 5.4, 5.6]), key=2).verdict == checks.PASS


@pytest.mark.parametrize("kwargs, field", [({"depths": ()}, "depths"), ({"num_seeds": 1}, "num_seeds"), ({"bias_scale": 0.0}, "bias_scale"),
                                           ({"stream": 2}, "stream")])
def test_deep_config_validates(kwargs, field):
    tc = rj.TrainConfig(model="transformer", d=3, T=6)
    with pytest.raises(ValueError, match=field):
        DeepConfig(tc, **kwargs)
    with pytest.raises(ValueError, match="train.model"):
        DeepConfig(rj.TrainConfig(model="attention"))

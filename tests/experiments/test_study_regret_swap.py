"""regret.swap: a tiny run (compute, summarize, write) and the summary on synthetic gap curves."""
import numpy as np
import pytest

import regret_jax as rj
from experiments.registry import RunContext
from experiments.studies.regret.swap import SwapConfig, compute, summarize, write

TINY = SwapConfig(rj.TrainConfig(model="multihead", d=3, T=6, batch_size=8, num_steps=10), T=6, num_seeds=2,
                  scan_sequences=1000)


def test_swap_study_tiny(tmp_path):
    arrays = compute(TINY, RunContext(study="regret.swap", quick=True, out_dir=tmp_path))
    assert arrays["curves"]["multihead"]["loss"].shape == (2, 10)
    assert set(arrays["gaps"]) == {"uniform", "ftrl", "bm", "learned_d", "learned_sqrtd", "learned_uncalibrated"}
    assert arrays["gaps"]["learned_d"]["gap_ce"].shape == (2, 6) and arrays["gaps"]["bm"]["gap_swap"].shape == (6,)
    summary = summarize(TINY, arrays)
    assert summary.metrics["gap_ce_uniform"] == pytest.approx(2 / 9, abs=1e-6)
    assert summary.metrics["gap_swap_uniform"] == pytest.approx(1 / 3, abs=1e-6)
    assert {c.name: c.passed for c in summary.checks}["uniform_ce_is_2_9"]
    write(TINY, arrays, summary, tmp_path)
    saved = np.load(tmp_path / "gap_curves.npz")
    assert {"uniform_gap_ce", "bm_gap_swap", "learned_d_seed1_gap_cce", "learned_uncalibrated_seed0_gap_ce"} <= set(saved)
    np.testing.assert_array_equal(saved["learned_sqrtd_seed1_gap_ce"], arrays["gaps"]["learned_sqrtd"]["gap_ce"][1])


def _gaps(final_ce, T=5):
    """Gap curves that fall linearly from 1/3 to ``final_ce`` (gap_swap = 1.5 gap_ce, gap_cce = gap_ce)."""
    def curve(v):
        ce = np.linspace(1 / 3, v, T) if np.ndim(v) == 0 else np.stack([np.linspace(1 / 3, x, T) for x in v])
        return {"gap_ce": ce, "gap_swap": 1.5 * ce, "gap_cce": ce}
    return {k: curve(v) for k, v in final_ce.items()}


def test_swap_summarize_on_synthetic_gaps():
    gaps = _gaps({"uniform": 2 / 9, "ftrl": 0.1, "bm": 0.05, "learned_d": [0.02, 0.04], "learned_sqrtd": [0.1, 0.1],
                  "learned_uncalibrated": [0.2, 0.2]})
    arrays = {"gaps": gaps, "root": {"eta_star": np.asarray(0.4), "se": np.asarray(0.01)},
              "curves": {"multihead": {"loss": np.ones((2, 8))}}}
    summary = summarize(TINY, arrays)
    m = summary.metrics
    assert m["gap_ce_learned"] == pytest.approx(0.03) and m["gap_swap_learned"] == pytest.approx(0.045)
    assert m["gap_ce_uncalibrated"] == pytest.approx(0.2) and m["gap_ce_bm"] == pytest.approx(0.05)
    assert [c.passed for c in summary.checks] == [True, True, True, True]
    assert summary.checks[0].value == pytest.approx(0.03 / (2 / 9))
    worse = summarize(TINY, {**arrays, "gaps": {**gaps, **_gaps({"bm": 0.15, "learned_d": [0.2, 0.2]})}})
    assert [c.passed for c in worse.checks] == [False, False, False, True]
    assert summary.tables["table"]["learner"] == list(gaps)


def test_swap_config_validates():
    with pytest.raises(ValueError, match="train.model"):
        SwapConfig(rj.TrainConfig(model="attention"))
    with pytest.raises(ValueError, match="train.d"):
        SwapConfig(rj.TrainConfig(model="multihead", d=4))
    with pytest.raises(ValueError, match="num_seeds"):
        SwapConfig(TINY.train, num_seeds=0)

"""regret.rates: the slope fit, the summary and checks on synthetic gaps, a tiny run (the masked-horizon training
identity it relies on is tested with the library, tests/regret_jax/test_regret_training.py)."""
import json

import numpy as np
import pytest

import regret_jax as rj
from experiments import cli
from experiments.studies.regret.rates import QUICK, RatesConfig, fit_slope, summarize

def test_fit_slope_matches_polyfit_per_seed():
    H = np.array([16, 32, 64, 128])
    gaps = np.exp(np.random.default_rng(0).normal(size=(4, 3))) * H[:, None] ** -0.5
    np.testing.assert_allclose(fit_slope(H, gaps), [np.polyfit(np.log(H), np.log(gaps[:, s]), 1)[0] for s in range(3)])
    assert fit_slope(H, 0.7 * H**-0.5) == pytest.approx(-0.5)


def _arrays(config, learned_slope, ratio, nonconverged=0):
    """Synthetic gaps: references 0.5 T^-1/2; learned = ratio x reference x (T / T_0)^(learned_slope + 1/2), seed-varied."""
    H = np.asarray(config.horizons, float)
    S = config.num_seeds
    ref = 0.5 * H**-0.5
    wobble = 1 + 0.01 * np.arange(S)
    learned = ratio * ref[:, None] * (H[:, None] / H[0]) ** (learned_slope + 0.5) * wobble
    kappa = np.full((len(H), S), 2.0)
    return {"learned": {"gap_cce": learned, "gap_ce": learned, "gap_swap": 1.2 * learned, "kappa_param": kappa,
                        "kappa_param_heads": np.repeat(kappa[..., None], 3, axis=-1), "nonconverged": np.full((len(H), S), nonconverged)},
            "ftrl": {"gap_cce": ref}, "bm": {"gap_ce": np.stack([ref, 2 * ref]), "gap_swap": np.stack([1.2 * ref, 2 * ref])},
            "root": {"eta_star": np.asarray(0.5), "se": np.asarray(0.01)},
            "curves": {f"{k}_T{h}": {"loss": np.ones((S, 5))} for k in ("attention", "multihead") for h in config.horizons}}


CHECKS = ["cce_slope_1layer", "ce_slope_multihead", "swap_slope_multihead", "cce_within_ref_1layer", "ce_within_ref_multihead",
          "fixed_points_converged"]


def test_summarize_checks_pass_and_fail_on_synthetic_gaps():
    good = summarize(QUICK, _arrays(QUICK, -0.5, 1.2))
    m = good.metrics
    assert [c.name for c in good.checks] == CHECKS and all(c.passed for c in good.checks)
    assert m["slope_gap_cce_1layer"] == pytest.approx(-0.5) and m["slope_gap_cce_1layer_se"] == pytest.approx(0.0, abs=1e-12)
    assert m["slope_gap_ce_bm"] == pytest.approx(-0.5) and m["ratio_gap_ce_multihead_to_bm_T128"] == pytest.approx(1.2 * 1.01)
    assert m["kappa_param_multihead_T64"] == pytest.approx(2.0) and m["slope_eta_param_1layer"] == pytest.approx(-0.5)
    assert m["gap_ce_bm_uncalibrated_T16"] == pytest.approx(2 * 0.5 / 4)
    assert good.tables["slopes"]["learner"][:3] == ["1layer", "multihead", "multihead"] and good.tables["table"]["T"] == [16, 32, 64, 128]
    flat = summarize(QUICK, _arrays(QUICK, 0.0, 1.2, nonconverged=1))  # a gap that does not fall with T
    assert [c.passed for c in flat.checks] == [False, False, False, False, False, False]
    worse = summarize(QUICK, _arrays(QUICK, -0.6, 1.6))
    assert [c.passed for c in worse.checks] == [True, True, True, False, False, True]


def test_tiny_run_through_cli(tmp_path):
    sets = ["horizons=[4,8]", "scan_sequences=1000"] + [f"{k}.{f}" for k in ("attention", "multihead")
                                                         for f in ("T=8", "batch_size=4", "num_steps=3", "warmup_steps=0")]
    code = cli.main(["run", "regret.rates", "--quick", *sum((["--set", s] for s in sets), []), "--seeds", "2", "--out", str(tmp_path)])
    out = tmp_path / "regret.rates"
    assert code in (0, 1) and not (out / "error.txt").exists()
    result = json.loads((out / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == CHECKS
    assert result["metrics"]["nonconverged_fraction"] == 0 and result["metrics"]["gap_cce_ftrl_T8"] > 0
    saved = np.load(out / "rates.npz")
    assert saved["learned_gap_ce"].shape == (2, 2) and saved["bm_gap_swap"].shape == (2, 2) and (out / "rates.png").exists()


@pytest.mark.parametrize("field, kwargs", [
    ("attention.model", {"attention": rj.TrainConfig(model="multihead", T=128)}),
    ("multihead.d", {"multihead": rj.TrainConfig(model="multihead", d=4, T=128)}),
    ("horizons", {"horizons": (32, 16, 128)}),
    ("attention.T", {"horizons": (16, 32, 64)}),
    ("num_seeds", {"num_seeds": 1}),
    ("scan_sequences", {"scan_sequences": 10}),
    ("stream", {"stream": 3}),
])
def test_rates_config_validates(field, kwargs):
    with pytest.raises(ValueError, match=field):
        RatesConfig(**{"attention": QUICK.attention, "multihead": QUICK.multihead, **kwargs})

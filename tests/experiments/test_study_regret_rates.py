"""regret.rates: the slope fit, the summary and checks on synthetic gaps, a tiny run (the masked-horizon training
identity it relies on is tested with the library, tests/regret_jax/test_regret_training.py)."""
import json

import numpy as np
import pytest

import regret_jax as rj
from experiments import checks, cli
from experiments.studies.regret import rates
from experiments.studies.regret.rates import QUICK, RatesConfig, fit_slope, summarize

def test_fit_slope_matches_polyfit_per_seed():
    H = np.array([16, 32, 64, 128])
    gaps = np.exp(np.random.default_rng(0).normal(size=(4, 3))) * H[:, None] ** -0.5
    np.testing.assert_allclose(fit_slope(H, gaps), [np.polyfit(np.log(H), np.log(gaps[:, s]), 1)[0] for s in range(3)])
    assert fit_slope(H, 0.7 * H**-0.5) == pytest.approx(-0.5)


def _arrays(config, learned_slope, ratio, nonconverged=0, step_slope=-0.5, step_level=1.0):
    """Synthetic gaps: references 0.5 T^-1/2; learned = ratio x reference x (T / T_0)^(learned_slope + 1/2), seed-varied;
    learned steps kappa_param = step_level x kappa* x (T / T_0)^(step_slope + 1/2), seed-varied; controls as played."""
    H = np.asarray(config.horizons, float)
    S = config.num_seeds
    ref = 0.5 * H**-0.5
    wobble = 1 + 0.01 * np.arange(S)
    learned = ratio * ref[:, None] * (H[:, None] / H[0]) ** (learned_slope + 0.5) * wobble
    kappa_star = 0.5 * np.sqrt(H[0])
    kappa = step_level * kappa_star * (H[:, None] / H[0]) ** (step_slope + 0.5) * wobble
    ctrl_kappa = np.stack([kappa_star * np.sqrt(H / H[0]), np.full(len(H), 0.5 * kappa_star)])  # fixed, half
    return {"learned": {"gap_cce": learned, "gap_ce": learned, "gap_swap": 1.2 * learned, "kappa_param": kappa,
                        "kappa_param_heads": np.repeat(kappa[..., None], 3, axis=-1), "nonconverged": np.full((len(H), S), nonconverged)},
            "ftrl": {"gap_cce": ref}, "bm": {"gap_ce": np.stack([ref, 2 * ref]), "gap_swap": np.stack([1.2 * ref, 2 * ref])},
            "controls": {"gap_cce": np.stack([ref * 1.5, ref]), "gap_ce": np.stack([ref, ref]), "gap_swap": np.stack([ref, ref]),
                         "kappa_param": ctrl_kappa, "kappa_param_heads": np.repeat(ctrl_kappa[..., None], 3, axis=-1)},
            "root": {"eta_star": np.asarray(0.5), "se": np.asarray(0.01)},
            "curves": {f"{k}_T{h}": {"loss": np.ones((S, 5))} for k in ("attention", "multihead") for h in config.horizons}}


CHECKS = [c.name for c in rates.CLAIMS]


def test_summarize_checks_pass_and_fail_on_synthetic_gaps():
    good = summarize(QUICK, _arrays(QUICK, -0.5, 1.2))
    m = good.metrics
    assert [c.name for c in good.checks] == CHECKS and all(c.passed for c in good.checks)
    assert [c.control.verdict for c in good.checks[:4]] == [checks.FAIL] * 4  # fixed-step and half-step controls
    assert good.checks[0].control.value == pytest.approx(0.0) and good.checks[2].control.value == pytest.approx(-0.5)
    assert m["slope_gap_cce_1layer"] == pytest.approx(-0.5) and m["slope_gap_cce_1layer_se"] == pytest.approx(0.0, abs=1e-12)
    assert m["slope_gap_ce_bm"] == pytest.approx(-0.5) and m["ratio_gap_ce_multihead_to_bm_T128"] == pytest.approx(1.2 * 1.01)
    assert m["slope_gap_cce_ftrl_fixed"] == pytest.approx(-0.5) and m["worst_ratio_gap_cce_1layer_to_ftrl"] == pytest.approx(1.212)
    assert m["kappa_param_multihead_T64"] == pytest.approx(0.5 * 4 * 1.01) and m["slope_eta_param_1layer"] == pytest.approx(-0.5)
    assert m["gap_ce_bm_uncalibrated_T16"] == pytest.approx(2 * 0.5 / 4)
    assert good.tables["slopes"]["learner"][:3] == ["1layer", "multihead", "multihead"] and good.tables["table"]["T"] == [16, 32, 64, 128]
    fixed = summarize(QUICK, _arrays(QUICK, 0.0, 1.2, nonconverged=1, step_slope=0.0))  # a step that does not shrink with T
    assert [c.verdict for c in fixed.checks] == [checks.FAIL, checks.FAIL, checks.FAIL, checks.FAIL, checks.FAIL]
    short = summarize(QUICK, _arrays(QUICK, -0.5, 1.6, step_level=0.6))  # the right rate, 40% short of kappa*
    assert [c.verdict for c in short.checks] == [checks.PASS, checks.PASS, checks.FAIL, checks.FAIL, checks.PASS]


def test_controls_fail_on_played_parameters():
    """The controls' steps as the study fits them, from the FTRL and Blum-Mansour parameters themselves: a fixed step
    has slope 0 and half of eta*(T) a level of -0.5, outside the claims' bands (the verdicts FAIL)."""
    H = np.asarray(QUICK.horizons, float)
    eta = 2.14 / np.sqrt(H)
    fixed = np.asarray([float(rj.ray_fit(rj.invariants(rj.ftrl_params(3, eta[0]))["W"])[0]) for _ in H])
    half = np.asarray([float(rj.swap_head_match(rj.bm_params(3, 0.5 * e))["eta"].mean()) for e in eta])
    slope = np.full(3, fit_slope(H, fixed))
    level = np.full(3, np.mean(half * np.sqrt(H) / 2.14 - 1))
    assert rates.STEP_SCALING["1layer"].judge(slope).verdict == checks.FAIL and slope[0] == pytest.approx(0.0, abs=1e-5)
    assert rates.STEP_LEVEL["multihead"].judge(level).verdict == checks.FAIL and level[0] == pytest.approx(-0.5, abs=1e-5)


def test_tiny_run_through_cli(tmp_path):
    sets = ["horizons=[4,8]", "scan_sequences=1000"] + [f"{k}.{f}" for k in ("attention", "multihead")
                                                         for f in ("T=8", "batch_size=4", "num_steps=3", "warmup_steps=0")]
    code = cli.main(["run", "regret.rates", "--quick", *sum((["--set", s] for s in sets), []), "--seeds", "2", "--out", str(tmp_path)])
    out = tmp_path / "regret.rates"
    assert code in (0, 1) and not (out / "error.txt").exists()
    result = json.loads((out / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == CHECKS
    assert result["metrics"]["nonconverged_fraction"] == 0 and result["metrics"]["gap_cce_ftrl_T8"] > 0
    assert result["metrics"]["slope_eta_param_1layer_fixed"] == pytest.approx(0.0, abs=1e-4)
    assert result["metrics"]["kappa_rel_multihead_half"] == pytest.approx(-0.5, abs=1e-4)
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

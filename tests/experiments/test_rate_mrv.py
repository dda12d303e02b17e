"""Study rate.mrv: the random-instance part at a tiny size, the presets, summarize on synthetic arrays."""
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import mrv, tmaze


def test_random_instances_respect_the_bound_and_cover_the_grid():
    config = dataclasses.replace(mrv.QUICK, ms=(1, 3), alphas=(0.0, 0.6, 1.0), d=4, instances=64)
    out = mrv.random_instances(config)
    ratio, bound = out["ratio"], out["bound"]
    assert ratio.shape == bound.shape == (2, 3, 64)
    np.testing.assert_allclose(bound[1, :, 0], np.sqrt(2 * (1 - np.array([0.0, 0.6, 1.0]) / 3)), rtol=1e-6)
    assert (ratio <= bound + 1e-5).all()
    assert ratio[1, 0].max() > 0.3  # alpha = 0 instances are not trivially close
    assert ratio[0, 2].max() < 1e-3  # m = 1, alpha = 1: the update returns m_1 (bound 0)


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_trained_run_is_rate_tmaze_s_rate_run(preset):
    ours, theirs = getattr(mrv, preset.upper()), getattr(tmaze, preset.upper())
    rate = theirs.train_config("RATE")
    assert rate.lengths == ours.train.lengths
    assert dataclasses.replace(rate, corridor_lengths=None) == ours.train
    assert (ours.chunks, ours.seed) == (theirs.chunks, theirs.seed)


def test_overrides_reach_the_training_run(capsys):
    assert cli.main(["show", "rate.mrv", "--quick", "--set", "train.model.d_model=32", "--set", "seeds=4"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["train"]["model"]["d_model"] == 32 and shown["seeds"] == 4
    assert cli.main(["show", "rate.mrv", "--quick", "--set", "train.model.n_head_ca=0"]) == 2
    assert cli.main(["show", "rate.mrv", "--quick", "--set", "chunks=3"]) == 2


def _synthetic(config, alpha, a4, unit_ratio, seeds=2, segments=3, trajectories=4):
    shape = (seeds, segments, trajectories)
    ms, alphas = np.asarray(config.ms), np.asarray(config.alphas)
    bound = np.broadcast_to(np.sqrt(2 * (1 - alphas[None, :, None] / ms[:, None, None])), (len(ms), len(alphas), 5))
    return {
        "random": {"ratio": 0.5 * bound, "bound": bound},
        "counterexample": {k: {"ratio": np.asarray(2.0), "bound": np.asarray(1.0)} for k in mrv.COUNTEREXAMPLES},
        "trained": {"alpha": np.broadcast_to(alpha, shape), "a4": np.broadcast_to(a4, shape),
                    "raw_ratio": np.full(shape, 0.3), "unit_ratio": np.broadcast_to(unit_ratio, shape),
                    "decomposition_error": np.full(seeds, 1e-6)},
        "val_turn_accuracy": np.ones(seeds),
    }


def test_summarize_on_synthetic_arrays():
    config = dataclasses.replace(mrv.QUICK, ms=(1, 3), alphas=(0.0, 0.5, 1.0))
    keys = config.effective_keys  # 3 memory tokens, 1 head
    # segment 0: aligned (alpha 0.8) and below its bound; segment 1: alpha 0.2 (fails A3 at 0.5);
    # segment 2: anti-aligned (fails A4), with a ratio above the bound that must not count
    alpha = np.array([0.8, 0.2, 0.9])[None, :, None]
    a4 = np.array([True, True, False])[None, :, None]
    unit = np.array([0.1, 0.2, 5.0])[None, :, None]
    summary = mrv.summarize(config, _synthetic(config, alpha, a4, unit))
    m = summary.metrics
    assert m["random_violations"] == 0 and m["random_instances"] == 2 * 3 * 5
    assert m["random_max_ratio_over_bound_alpha0"] == pytest.approx(0.5)
    assert m["counterexample_A3_ratio_over_bound"] == 2.0
    assert m["trained_frac_a3"] == pytest.approx(2 / 3) and m["trained_frac_a4"] == pytest.approx(2 / 3)
    assert m["trained_frac_assumptions_hold"] == pytest.approx(1 / 3)
    assert [m[f"trained_frac_assumptions_hold_segment{n}"] for n in range(3)] == [1.0, 0.0, 0.0]
    assert m["trained_unit_violations_under_assumptions"] == 0 and m["trained_alpha_median"] == pytest.approx(0.8)
    verdict = {c.name: c.passed for c in summary.checks}
    assert len(verdict) == 7 and not verdict["trained_frac_assumptions_hold"]
    assert all(v for k, v in verdict.items() if k != "trained_frac_assumptions_hold")
    assert summary.tables["table"]["m"] == [1, 1, 1, 3, 3, 3]
    np.testing.assert_allclose(summary.tables["trained_segments"]["frac_assumptions_hold"], [1, 0, 0])

    # an aligned update above its bound is a violation; a counterexample that meets the bound fails its check
    arrays = _synthetic(config, alpha, a4, np.array([np.sqrt(2 * (1 - 0.8 / keys)) + 0.01, 0.2, 0.1])[None, :, None])
    arrays["counterexample"]["A1"] = {"ratio": np.asarray(0.5), "bound": np.asarray(1.0)}
    arrays["random"]["ratio"] = arrays["random"]["bound"] + 1e-3
    verdict = {c.name: c.passed for c in mrv.summarize(config, arrays).checks}
    assert not verdict["trained_unit_violations_under_assumptions"] and not verdict["random_violations"]
    assert not verdict["counterexample_A1_ratio_over_bound"]

"""Study rate.mrv: the presets, overrides, and summarize on synthetic arrays."""
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import mrv, tmaze

CHECKS = ["trained_frac_aligned", "trained_frac_within_bound", "rate_cue_retention", "rate_minus_no_mrv_cue_retention"]


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_trained_runs_are_rate_tmaze_s_runs(preset):
    ours, theirs = getattr(mrv, preset.upper()), getattr(tmaze, preset.upper())
    for name in mrv.MODELS:
        run = theirs.train_config(name)
        assert run.lengths == ours.train_config(name).lengths
        assert dataclasses.replace(run, corridor_lengths=None) == ours.train_config(name)
    assert (ours.chunks, ours.stream) == (theirs.chunks, theirs.stream)


def test_overrides_reach_the_training_run(capsys):
    assert cli.main(["show", "rate.mrv", "--quick", "--set", "train.model.d_model=32", "--set", "seeds=4"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["train"]["model"]["d_model"] == 32 and shown["seeds"] == 4 and shown["stream"] == 0
    for bad in ("train.model.n_head_ca=0", "chunks=3", "long_segments=4", "stream=-1", "align_alpha=2"):
        assert cli.main(["show", "rate.mrv", "--quick", "--set", bad]) == 2, bad


def _synthetic(alpha, a4, ratio, sep_rate, sep_no_mrv, seeds=2, trajectories=4):
    """alpha, a4, ratio per update n (N' of them); separations per memory M_0 .. M_{N'}."""
    shape = (seeds, len(alpha), trajectories)
    per = lambda v, s=shape: np.broadcast_to(np.asarray(v)[None, :, None], s)
    sep_shape = (seeds, len(sep_rate), trajectories)
    return {
        "trained": {"alpha": per(alpha), "a4": per(a4), "ratio": per(ratio)},
        "separation": {"RATE": per(sep_rate, sep_shape), "RATE-noMRV": per(sep_no_mrv, sep_shape)},
        "val_turn_accuracy": {name: np.ones(seeds) for name in mrv.MODELS},
    }


def test_summarize_on_synthetic_arrays():
    config = dataclasses.replace(mrv.QUICK, long_segments=5)  # H*m = 3 effective keys; N = 3 training segments
    bound = lambda a: np.sqrt(2 * (1 - a / 3))
    # update 0 (query M_0) anti-aligned, and above its bound: it must count in neither fraction;
    # updates 1-4: aligned at 0.8, 0.6; 0.2 (fails A3 at 0.5); 0.9 but anti-aligned (fails A4)
    alpha = [-0.3, 0.8, 0.6, 0.2, 0.9]
    a4 = [False, True, True, True, False]
    ratio = [5.0, bound(0.8) - 0.01, bound(0.6) + 0.01, 0.1, 0.1]
    sep_rate = [0.0, 0.4, 0.4, 0.3, 0.3, 9.0]  # M_0 .. M_5: retention M_4 / M_1 = 0.75 (M_5 saw the turn)
    sep_no_mrv = [0.0, 0.5, 0.3, 0.2, 0.1, 9.0]  # retention 0.2
    summary = mrv.summarize(config, _synthetic(alpha, a4, ratio, sep_rate, sep_no_mrv))
    m = summary.metrics
    assert m["trained_frac_aligned"] == pytest.approx(0.5) and m["trained_frac_aligned_first"] == 0.0
    assert m["trained_frac_aligned_training_segments"] == 1.0  # updates 1, 2
    assert m["trained_frac_aligned_beyond_training"] == 0.0  # updates 3, 4
    assert m["trained_frac_a4"] == pytest.approx(0.75) and m["trained_alpha_median"] == pytest.approx(0.7)
    assert m["trained_frac_within_bound"] == pytest.approx(0.75)
    assert m["trained_ratio_over_bound_max"] == pytest.approx((bound(0.6) + 0.01) / bound(0.6))
    assert m["rate_cue_retention"] == pytest.approx(0.75) and m["rate_no_mrv_cue_retention"] == pytest.approx(0.2)
    assert m["rate_minus_no_mrv_cue_retention"] == pytest.approx(0.55)
    verdict = {c.name: c.passed for c in summary.checks}
    assert verdict == {**dict.fromkeys(CHECKS, True), "trained_frac_within_bound": False}
    table = summary.tables["table"]
    assert table["segment"] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(table["frac_aligned"], [0, 1, 1, 0, 0])
    np.testing.assert_allclose(table["cue_separation_rate"], sep_rate[1:])

    # a separation that grows is capped at full retention
    capped = mrv.summarize(config, _synthetic(alpha, a4, ratio, sep_rate, [0.0, 0.5, 1.0, 1.0, 2.0, 9.0])).metrics
    assert capped["rate_no_mrv_cue_retention"] == 1.0 and capped["rate_minus_no_mrv_cue_retention"] == pytest.approx(-0.25)

    # no alignment, updates far above the bound, the cue washed out, RATE-noMRV keeping it better
    bad = mrv.summarize(config, _synthetic([0.1] * 5, [True] * 5, [3.0] * 5, [0, 1, 0.5, 0.2, 0.1, 1],
                                           [0, 1, 1, 1, 1, 1]))
    assert not any(c.passed for c in bad.checks)

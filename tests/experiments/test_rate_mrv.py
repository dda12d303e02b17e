"""Study rate.mrv: the presets, overrides, and summarize on synthetic arrays."""
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import mrv, tmaze

CHECKS = ["trained_frac_aligned", "rate_cue_retention", "rate_minus_no_mrv_cue_retention"]


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
    # update 0 (query M_0) anti-aligned, and above its bound: it must count in no fraction;
    # updates 1-4: aligned at 0.8, 0.6, 0.7; 0.9 but anti-aligned (fails A4)
    alpha = [-0.3, 0.8, 0.6, 0.7, 0.9]
    a4 = [False, True, True, True, False]
    ratio = [5.0, bound(0.8) - 0.01, bound(0.6) + 0.01, 0.1, 0.1]
    sep_rate = [0.0, 0.4, 0.4, 0.3, 0.3, 9.0]  # M_0 .. M_5: retention M_4 / M_1 = 0.75 (M_5 saw the turn)
    sep_no_mrv = [0.0, 0.5, 0.3, 0.2, 0.1, 9.0]  # retention 0.2
    summary = mrv.summarize(config, _synthetic(alpha, a4, ratio, sep_rate, sep_no_mrv))
    m = summary.metrics
    assert m["trained_frac_aligned"] == pytest.approx(0.75) and m["trained_frac_aligned_first"] == 0.0
    assert m["trained_frac_aligned_training_segments"] == 1.0  # updates 1, 2
    assert m["trained_frac_aligned_beyond_training"] == 0.5  # updates 3, 4
    assert m["trained_frac_a4"] == pytest.approx(0.75) and m["trained_alpha_median"] == pytest.approx(0.75)
    assert m["trained_frac_within_bound"] == pytest.approx(0.75)  # a metric (see the next test)
    assert m["trained_ratio_over_bound_max"] == pytest.approx((bound(0.6) + 0.01) / bound(0.6))
    assert m["rate_cue_retention"] == pytest.approx(0.75) and m["rate_no_mrv_cue_retention"] == pytest.approx(0.2)
    assert m["rate_minus_no_mrv_cue_retention"] == pytest.approx(0.55)
    c = {k.name: k for k in summary.checks}
    # two identical synthetic seeds, every value clear of its margin: no PASS on two agreeing units (experiments.checks)
    assert list(c) == CHECKS and all(k.verdict == "INCONCLUSIVE" and k.n == 2 and k.lo == k.hi for k in c.values())
    table = summary.tables["table"]
    assert table["segment"] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(table["frac_aligned"], [0, 1, 1, 1, 0])
    np.testing.assert_allclose(table["cue_separation_rate"], sep_rate[1:])

    # an aligned update whose memory has lost the cue does not count
    faded = mrv.summarize(config, _synthetic(alpha, a4, ratio, [0.0, 0.4, 0.4, 0.1, 0.1, 9.0], sep_no_mrv)).metrics
    assert faded["trained_frac_aligned"] == pytest.approx(0.25) and faded["trained_frac_aligned_any_cue"] == 0.75

    # a separation that grows is capped at full retention
    capped = mrv.summarize(config, _synthetic(alpha, a4, ratio, sep_rate, [0.0, 0.5, 1.0, 1.0, 2.0, 9.0])).metrics
    assert capped["rate_no_mrv_cue_retention"] == 1.0 and capped["rate_minus_no_mrv_cue_retention"] == pytest.approx(-0.25)

    # no alignment, updates far above the bound, the cue washed out, RATE-noMRV keeping it better
    bad = mrv.summarize(config, _synthetic([0.1] * 5, [True] * 5, [3.0] * 5, [0, 1, 0.5, 0.2, 0.1, 1],
                                           [0, 1, 1, 1, 1, 1]))
    assert [k.verdict for k in bad.checks] == ["FAIL"] * 3


def test_copy_valve_control_fails_each_claim():
    """A valve that copies the old memory is perfectly aligned (alpha 1, no anti-alignment) and moves
    nothing, so alignment alone and the retention bound cannot tell it from a working valve; it never
    writes the cue (M_0 is shared by a trajectory and its mirror), so it fails every claim."""
    config = dataclasses.replace(mrv.QUICK, long_segments=5)
    arrays = _synthetic([-0.3, 0.8, 0.6, 0.7, 0.9], [False, True, True, True, False], [1.0, 0.1, 0.1, 0.1, 0.1],
                        [0.0, 0.4, 0.4, 0.3, 0.3, 9.0], [0.0, 0.5, 0.3, 0.2, 0.1, 9.0], seeds=3)
    checks = mrv.summarize(config, arrays).checks
    assert [k.verdict for k in checks] == ["PASS"] * 3 and [k.control.verdict for k in checks] == ["FAIL"] * 3
    trained, sep = mrv.copy_valve(arrays["trained"], arrays["separation"]["RATE"])
    copied = mrv.summarize(config, {**arrays, "trained": trained,
                                    "separation": {**arrays["separation"], "RATE": sep}})
    assert copied.metrics["trained_frac_aligned_any_cue"] == 1.0 and copied.metrics["trained_frac_within_bound"] == 1.0
    assert [k.verdict for k in copied.checks] == ["FAIL"] * 3


def test_retention_bound_is_no_claim_at_the_presets():
    """The bound sqrt(2 (1 - alpha / (H m))) ||M_n|| is at least sqrt(2 (1 - 1 / (H m))) of the old norm
    (alpha <= 1): 1.15 at the quick H m = 3, while trained updates move the memory by about 0.1 of it
    (rate.mrv's judged run), so a fraction of updates within the bound cannot fail: a metric, not a check."""
    for preset, floor in ((mrv.QUICK, 1.15), (mrv.FULL, 1.39)):
        assert np.sqrt(2 * (1 - 1 / preset.effective_keys)) > floor
    assert "trained_frac_within_bound" not in {c.name for c in mrv.STUDY.claims}

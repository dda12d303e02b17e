"""The uat.* studies: summaries on synthetic arrays, config validation, and tiny end-to-end
runs through the command line (``--set`` overrides; no training at a real size)."""
import csv
import dataclasses
import functools
import json

import jax
import numpy as np
import pytest

from experiments import cli, configs, seeds
from experiments.studies.uat import ablation, boundary, darkroom, mechanism, theory
from uat_jax import cells
from uat_jax import mechanism as diag
from uat_jax.train import Task

# One layer, T = 4, two episodes per epoch, two epochs, one seed: seconds of compute, the rest is compile.
TINY_SIZE = ["--set", 'size={"d_model": 8, "n_heads": 2, "d_ff": 8, "n_layers": 1, "horizon": 4, '
                      '"batch_size": 2, "epochs": 2, "eval_episodes": 2}']


def _result(folder):
    return json.loads((folder / "result.json").read_text())


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _checks(result):
    return {c["name"]: c for c in result["checks"]}


# --- presets: the judged quick sizes and seeds ------------------------------------------------


def test_presets_keep_the_quick_and_full_sizes():
    for study, quick_seeds in ((darkroom, 3), (ablation, 3), (boundary, 4)):
        assert study.QUICK.size == cells.CPU and study.QUICK.seeds == quick_seeds
        assert study.FULL.size == cells.TABLE3 and study.FULL.seeds == 3
        assert study.QUICK.stream == study.FULL.stream == seeds.JUDGED  # the checks judge the judged seeds
    assert darkroom.QUICK.models == ("uat", "vt", "adt", "vt_matched") and darkroom.FULL.models == darkroom.MODELS
    assert darkroom.QUICK.schedules == darkroom.FULL.schedules == ("gradual", "abrupt", "cyclic")
    assert ablation.QUICK.schedules == ("gradual",) and ablation.QUICK.variants == ablation.VARIANTS
    assert [boundary.label(*c) for c in boundary.QUICK.conditions()] == [
        "clean", "gaussian_2", "null", "shuffle", "sign_flip"]
    assert [boundary.label(*c) for c in boundary.FULL.conditions()] == [
        "clean", "gaussian_0p5", "gaussian_1", "gaussian_2", "gaussian_5", "null", "shuffle", "sign_flip"]
    assert theory.QUICK.model.horizon == 20 and theory.FULL.model.horizon == 60
    assert mechanism.QUICK.size == cells.CPU and mechanism.QUICK.seeds == darkroom.QUICK.seeds  # plays its kept cells
    assert mechanism.QUICK.episodes == 32 and mechanism.MODELS == darkroom.KEPT
    assert mechanism.QUICK.stream == mechanism.FULL.stream == seeds.JUDGED and mechanism.QUICK.schedule == "cyclic"
    assert theory.QUICK.counted == theory.FULL.counted


# --- config validation -----------------------------------------------------------------------


@pytest.mark.parametrize("study, field, value, message", [
    (darkroom, "models", ["uat", "vt"], "models must"),
    (darkroom, "models", ["uat", "vt", "adt", "bogus"], "models must"),
    (darkroom, "schedules", ["weekly"], "schedules must"),
    (darkroom, "adapt", ["tent", "tent"], "adapt must"),
    (darkroom, "adapt", ["sar"], "adapt must"),
    (darkroom, "adapt_batch", 3, "adapt_batch must be a divisor of size.eval_episodes=64"),
    (darkroom, "seeds", 0, "seeds must"),
    (darkroom, "stream", 2, "stream must"),
    (ablation, "stream", -1, "stream must"),
    (boundary, "stream", 3, "stream must"),
    (darkroom, "size.n_heads", 3, "size.d_model must be a multiple"),
    (darkroom, "size.epochs", 0, "size.epochs must"),
    (ablation, "variants", ["no_kv"], "variants must"),
    (ablation, "schedules", [], "schedules must"),
    (boundary, "sigma", 0.0, "sigma must be > 0"),
    (boundary, "extra_sigmas", [1.0, -1.0], "extra_sigmas must"),
    (boundary, "schedule", "weekly", "schedule must"),
    (theory, "steps", 0, "steps must"),
    (theory, "model.kind", "vt", "model must be kind 'uat'"),
    (theory, "stream", 2, "stream must"),
    (mechanism, "episodes", 0, "episodes must be >= 1"),
    (mechanism, "schedule", "weekly", "schedule must"),
    (mechanism, "size.horizon", 2, "horizon >= 3"),
    (mechanism, "size.horizon", 16, "recovered_after must be >= 0 and below the length of segments 1 and 2 "
                                    r"\(5, 6 at horizon 16"),
    (mechanism, "recovered_after", -1, "recovered_after must be >= 0"),
    (mechanism, "stream", 2, "stream must"),
])
def test_config_rejects_out_of_range_values(study, field, value, message):
    with pytest.raises(configs.ConfigError, match=message):
        configs.apply(study.QUICK, [(field, value)])


def test_cli_rejects_a_bad_override_before_computing(tmp_path, capsys):
    assert cli.main(["run", "uat.boundary", "--quick", "--set", "sigma=-1", "--out", str(tmp_path)]) == 2
    assert "sigma" in capsys.readouterr().err
    assert cli.main(["run", "uat.theory", "--quick", "--set", "batch=0", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "uat.boundary" / "result.json").exists()


# --- summarize on synthetic arrays ------------------------------------------------------------


def _darkroom_arrays(cfg, acc):
    S = len(cfg.schedules)
    return {"accuracy": {m: np.tile(np.asarray(acc[m], float), (S, 1)) for m in cfg.rows},
            "efficiency": {m: np.full((S, cfg.seeds), 0.5) for m in cfg.rows},
            "distinct_goals": np.tile([12, 14, 100, 99, 4, 4][:cfg.seeds], (S, 1))}


def _verdicts(summary):
    return {c.name: c.verdict for c in summary.checks}


def test_darkroom_summary_and_checks():
    cfg = darkroom.QUICK
    n = cfg.seeds
    seeds_ = np.linspace(-0.01, 0.01, n)
    acc = {"uat": 0.9 + seeds_, "vt": 0.35 + seeds_, "adt": 0.89 + seeds_, "vt_matched": 0.4 + seeds_,
           "uat_null": 0.36 + seeds_, "tent": 0.35 + seeds_, "cotta": 0.6 + seeds_}
    s = darkroom.summarize(cfg, _darkroom_arrays(cfg, acc))
    assert s.metrics["acc_uat_gradual"] == pytest.approx(0.9) and s.metrics["acc_uat_null_cyclic"] == pytest.approx(0.36)
    c = {k.name: k for k in s.checks}
    assert list(c) == [f"uat_{claim}_{x}" for claim in ("beats_vt", "on_par_with_adt", "beats_matched_vt")
                       for x in cfg.schedules]
    assert all(k.verdict == "PASS" and k.kind == "interval" and k.n == n and k.unit == "seed" for k in s.checks)
    assert c["uat_beats_vt_gradual"].value == pytest.approx(0.55)  # paired per seed: UAT - VT
    assert c["uat_beats_vt_gradual"].paper == pytest.approx(0.873 - 0.362)
    assert c["uat_on_par_with_adt_abrupt"].value == pytest.approx(0.01)
    assert c["uat_on_par_with_adt_abrupt"].paper == pytest.approx(0.827 - 0.826)
    assert c["uat_on_par_with_adt_abrupt"].se == pytest.approx(0.0)  # UAT and A-DT move together over seeds
    assert c["uat_beats_matched_vt_cyclic"].value == pytest.approx(0.5)  # paired per seed: UAT - matched VT
    assert c["uat_beats_matched_vt_cyclic"].paper is None  # the paper has no parameter-matched VT
    assert c["uat_beats_matched_vt_cyclic"].control.value == pytest.approx(-0.04)  # UAT-null - matched VT
    assert {k.control.arm for k in s.checks} == {"UAT fed null feedback, against VT", "UAT fed null feedback, against A-DT",
                                                 "UAT fed null feedback, against the matched VT"}
    rows = s.tables["table"]["model"]
    assert rows == [m for m in cfg.rows for _ in cfg.schedules] and len(rows) == 21 and "uat_null" in rows
    assert s.tables["table"]["accuracy_paper"][0] == 0.873 and np.isnan(s.tables["table"]["accuracy_paper"][9])
    # without the matched VT among the models its checks are not made
    unmatched = dataclasses.replace(cfg, models=darkroom.CHECKED)
    assert len(darkroom.summarize(unmatched, _darkroom_arrays(unmatched, acc)).checks) == 6
    # VT as good as UAT on one schedule, A-DT clearly better on another: those checks fail
    arrays = _darkroom_arrays(cfg, {**acc, "vt": 0.85 + seeds_, "adt": 0.97 + seeds_})
    v = _verdicts(darkroom.summarize(cfg, arrays))
    assert v["uat_beats_vt_abrupt"] == "FAIL" and v["uat_on_par_with_adt_cyclic"] == "FAIL"
    # A-DT 0.03 better on average with seed noise around it: inconclusive, with a seed count to decide it
    noisy = np.array([0.0, -0.06, 0.02, -0.08, 0.01, -0.05, 0.03, -0.09])[:n]
    c = {k.name: k for k in darkroom.summarize(cfg, _darkroom_arrays(cfg, {**acc, "adt": acc["uat"] - noisy - 0.01}))
         .checks}
    assert c["uat_on_par_with_adt_gradual"].verdict == "INCONCLUSIVE" and c["uat_on_par_with_adt_gradual"].n_needed > n


def test_darkroom_null_feedback_control_fails_every_claim():
    """The control, UAT fed null feedback in UAT's place: at VT's level (the fed pair then carries nothing the
    observations do not) it fails every claim, and a UAT-null as good as UAT turns every pass into NO POWER."""
    cfg = darkroom.QUICK
    seeds_ = np.linspace(-0.01, 0.01, cfg.seeds)
    acc = {"uat": 0.9 + seeds_, "vt": 0.35 + seeds_, "adt": 0.88 + seeds_, "vt_matched": 0.36 + seeds_,
           "uat_null": 0.36 + seeds_, "tent": 0.35 + seeds_, "cotta": 0.35 + seeds_}
    s = darkroom.summarize(cfg, _darkroom_arrays(cfg, acc))
    assert {k.verdict for k in s.checks} == {"PASS"} and {k.control.verdict for k in s.checks} == {"FAIL"}
    assert s.checks[0].control.value == pytest.approx(0.01)  # UAT-null - VT
    as_uat = darkroom.summarize(cfg, _darkroom_arrays(cfg, {**acc, "uat_null": acc["uat"]}))
    assert {k.verdict for k in as_uat.checks} == {"NO POWER"}


def test_ablation_summary_and_checks():
    cfg = ablation.QUICK
    n = cfg.seeds
    seeds_ = np.linspace(-0.01, 0.01, n)
    acc = {"uat": 0.87, "no_action": 0.7, "no_reward": 0.4, "linear": 0.86, "no_q": 0.88, "no_kv": 0.5, "no_bias": 0.87,
           "uat_null": 0.38}
    arrays = {"accuracy": {v: (acc[v] + seeds_)[None] for v in acc}}
    s = ablation.summarize(cfg, arrays)
    c = {k.name: k for k in s.checks}
    assert list(c) == ["no_kv_falls_far_gradual", "no_reward_falls_far_gradual", "no_q_stays_near_gradual",
                       "no_bias_stays_near_gradual", "linear_stays_near_gradual",
                       "reward_matters_more_than_action_gradual"]
    assert all(k.verdict == "PASS" and k.n == n for k in s.checks)
    assert {k.control.verdict for k in s.checks} == {"FAIL"}
    assert c["reward_matters_more_than_action_gradual"].value == pytest.approx(0.3)
    assert c["reward_matters_more_than_action_gradual"].paper == pytest.approx(0.707 - 0.395)
    assert c["no_kv_falls_far_gradual"].value == pytest.approx(0.37)
    assert c["no_kv_falls_far_gradual"].paper == pytest.approx(0.873 - 0.506) and c["no_kv_falls_far_gradual"].claim
    assert c["no_kv_falls_far_gradual"].control.value == pytest.approx(0.38 - 0.5)  # UAT-null - no-KV
    assert c["no_q_stays_near_gradual"].value == pytest.approx(-0.01) and c["no_q_stays_near_gradual"].target == "0 +- 0.05"
    assert s.tables["table"]["variant"][-1] == "uat_null" and np.isnan(s.tables["table"]["accuracy_paper"][-1])
    arrays["accuracy"]["no_kv"] = (0.8 + seeds_)[None]  # no-KV barely hurts: its check fails
    arrays["accuracy"]["linear"] = (0.7 + seeds_)[None]  # the linear encoder hurts: its check fails
    arrays["accuracy"]["no_action"] = (0.39 + seeds_)[None]  # the actions matter more than the reward
    v = _verdicts(ablation.summarize(cfg, arrays))
    assert v["no_kv_falls_far_gradual"] == v["linear_stays_near_gradual"] == "FAIL"
    assert v["no_q_stays_near_gradual"] == "PASS" and v["reward_matters_more_than_action_gradual"] == "FAIL"
    # only the listed variants are checked
    few = configs.apply(cfg, [("variants", ["uat", "no_kv"])])
    s = ablation.summarize(few, {"accuracy": {v: (acc[v] + seeds_)[None] for v in (*few.variants, "uat_null")}})
    assert [k.name for k in s.checks] == ["no_kv_falls_far_gradual"]


def test_ablation_null_feedback_control_fails_every_claim():
    """UAT fed null feedback in place of UAT (falls far), of the variant (stays near) and of no-action: at VT's
    level it fails every claim; a switch that breaks the model below a feedback-blind UAT, or a UAT-null as good as
    the variants, makes the checks NO POWER."""
    cfg = ablation.QUICK
    seeds_ = np.linspace(-0.01, 0.01, cfg.seeds)
    acc = {"uat": 0.87, "no_action": 0.7, "no_reward": 0.4, "linear": 0.86, "no_q": 0.88, "no_kv": 0.5, "no_bias": 0.87,
           "uat_null": 0.38}
    s = ablation.summarize(cfg, {"accuracy": {v: (acc[v] + seeds_)[None] for v in acc}})
    assert [k.control.verdict for k in s.checks] == ["FAIL"] * 6
    broken = {**acc, "no_kv": 0.1, "no_reward": 0.1}  # switches that break the model below VT's level
    v = _verdicts(ablation.summarize(cfg, {"accuracy": {k: (x + seeds_)[None] for k, x in broken.items()}}))
    assert v["no_kv_falls_far_gradual"] == v["no_reward_falls_far_gradual"] == "NO POWER"
    blind = {**acc, "uat_null": 0.87}  # the feedback gain is not the feedback's
    v = _verdicts(ablation.summarize(cfg, {"accuracy": {k: (x + seeds_)[None] for k, x in blind.items()}}))
    assert v["no_q_stays_near_gradual"] == v["reward_matters_more_than_action_gradual"] == "NO POWER"


def _boundary_arrays(cfg, uat, vt):
    return {"accuracy_uat": np.asarray([uat[boundary.label(*c)] for c in cfg.conditions()], float),
            "accuracy_vt": np.asarray(vt, float)}


def _boundary_uat(n):
    e = np.linspace(-0.01, 0.01, n)
    return {"clean": 0.85 + e, "gaussian_2": 0.6 + e, "null": 0.41 + e, "shuffle": 0.39 + e, "sign_flip": 0.84 + e}, \
        0.36 + e


def test_boundary_summary_and_checks():
    cfg = boundary.QUICK
    n = cfg.seeds
    uat, vt = _boundary_uat(n)
    s = boundary.summarize(cfg, _boundary_arrays(cfg, uat, vt))
    c = {k.name: k for k in s.checks}
    assert list(c) == ["gap_clean_wide", "uat_above_vt_at_sigma_2", "gap_null_small", "gap_shuffle_small",
                       "sign_flip_unchanged"]
    assert all(k.verdict == "PASS" and k.n == n for k in s.checks)
    assert s.metrics["gap_clean"] == pytest.approx(0.49) and s.metrics["gap_clean_std"] == pytest.approx(0.0)
    assert c["uat_above_vt_at_sigma_2"].value == pytest.approx(0.24) and c["uat_above_vt_at_sigma_2"].paper == 0.18
    assert s.metrics["gap_shrink_2"] == pytest.approx(0.24 - 0.49)
    assert c["sign_flip_unchanged"].value == pytest.approx(-0.01) and c["sign_flip_unchanged"].target == "0 +- 0.05"
    assert s.tables["table"]["condition"] == ["clean", "gaussian_2", "null", "shuffle", "sign_flip"]
    e = np.linspace(-0.01, 0.01, n)
    uat.update(gaussian_2=0.43 + e, null=0.8 + e, sign_flip=0.5 + e)  # UAT at sigma = 2 back near VT
    assert _verdicts(boundary.summarize(cfg, _boundary_arrays(cfg, uat, vt))) == {
        "gap_clean_wide": "NO POWER",  # its control, UAT null, now leads VT widely too
        "uat_above_vt_at_sigma_2": "FAIL", "gap_null_small": "FAIL",
        "gap_shuffle_small": "PASS", "sign_flip_unchanged": "FAIL"}
    # a gap at the margin, with seed noise as measured at sigma = 2: inconclusive, with a seed count
    uat["gaussian_2"] = vt + 0.1 + np.resize([0.1, -0.1, 0.05, -0.04], n)
    c = {k.name: k for k in boundary.summarize(cfg, _boundary_arrays(cfg, uat, vt)).checks}
    assert c["uat_above_vt_at_sigma_2"].verdict == "INCONCLUSIVE" and c["uat_above_vt_at_sigma_2"].n_needed > n
    # another noise level: its own check name, and no paper number for it
    other = configs.apply(cfg, [("sigma", 0.5), ("extra_sigmas", [2.0])])
    assert [boundary.label(*c) for c in other.conditions()][1:3] == ["gaussian_0p5", "gaussian_2"]
    uat["gaussian_0p5"] = 0.7 + e
    c = {k.name: k for k in boundary.summarize(other, _boundary_arrays(other, uat, vt)).checks}
    assert "uat_above_vt_at_sigma_0p5" in c and c["uat_above_vt_at_sigma_0p5"].paper is None


def test_boundary_controls_fail_every_claim():
    """UAT fed null feedback (against VT for the "above VT" claims, against UAT clean for the sign flip) and UAT fed
    clean feedback (for the "back to VT" claims) each fail their claim; a null arm that learns as well as the clean
    one leaves every check without power."""
    cfg = boundary.QUICK
    uat, vt = _boundary_uat(cfg.seeds)
    s = boundary.summarize(cfg, _boundary_arrays(cfg, uat, vt))
    assert [k.control.verdict for k in s.checks] == ["FAIL"] * 5
    assert [k.control.arm for k in s.checks] == [boundary.NULL_VS_VT] * 2 + [boundary.CLEAN_VS_VT] * 2 + [
        "UAT fed null feedback, against UAT clean"]
    assert s.checks[2].control.value == pytest.approx(0.49)  # the clean gap, under the "small gap" claim
    v = _verdicts(boundary.summarize(cfg, _boundary_arrays(cfg, {**uat, "null": uat["sign_flip"]}, vt)))
    assert v["gap_clean_wide"] == v["uat_above_vt_at_sigma_2"] == v["sign_flip_unchanged"] == "NO POWER"
    v = _verdicts(boundary.summarize(cfg, _boundary_arrays(cfg, {**uat, "clean": uat["null"]}, vt)))
    assert v["gap_null_small"] == v["gap_shuffle_small"] == "NO POWER"


def _mechanism_arrays(T, acc_after, mass_after, base_mass=None, seeds_=2):
    """Diagnostic outputs of ``seeds_`` seeds at horizon T: accuracy 0.9 before the first shift,
    ``acc_after[m]`` + 0.01 per step from the 6th step after each shift on, 0.1 in the 5 before, active-segment mass
    ``mass_after[m]`` after it (``base_mass[m]`` for the base pathway, 0.1 unless given)."""
    since = np.asarray(diag.since_shift(T))
    after = np.asarray(diag.segment_of(T)) >= 1
    uniform = np.tile(np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None], (seeds_, 2, 1, 1))
    base_mass = base_mass or {}
    return {m: {"accuracy": np.linspace(0.8, 0.9, seeds_),
                "step_accuracy": np.tile(np.where(after, np.where(since >= 5, acc_after[m] + 0.01 * (since - 5), 0.1),
                                                  0.9), (seeds_, 1)),
                "segment_accuracy": np.tile([0.9, acc_after[m], acc_after[m]], (seeds_, 1)),
                "post_shift_accuracy": np.linspace(0.3, 0.5, seeds_), "attention": uniform, "base_attention": uniform,
                "active_mass": np.tile(np.where(after, mass_after[m], 0.0), (seeds_, 2, 1)),
                "base_active_mass": np.tile(np.where(after, base_mass.get(m, 0.1), 0.0), (seeds_, 2, 1)),
                "oracle_log_prob": np.tile(np.where(after, -acc_after[m], -0.1), (seeds_, 1))}
            for m in mechanism.MODELS} | {"origin": "trained here"}


def test_mechanism_summary_and_checks():
    cfg, T = mechanism.QUICK, mechanism.QUICK.size.horizon
    s = mechanism.summarize(cfg, _mechanism_arrays(T, {"uat": 0.8, "vt": 0.3, "uat_null": 0.3},
                                                   {"uat": 0.6, "vt": 0.4, "uat_null": 0.4}, {"uat_null": 0.4},
                                                   cfg.seeds))
    c = {k.name: k for k in s.checks}
    assert list(c) == ["uat_recovers_after_shift", "modulation_adds_post_shift_attention",
                       "uat_attends_to_active_segment"] and all(k.verdict == "PASS" for k in s.checks)
    assert all(k.n == cfg.seeds and k.unit == "seed" for k in s.checks)
    assert c["uat_recovers_after_shift"].value == pytest.approx(0.5)  # the recovered steps only
    assert s.metrics["recovered_acc_uat"] == pytest.approx(0.8 + 0.02)  # 0.01 x mean(0, 1, 2, 3, 4)
    assert s.metrics["after_shift_acc_uat"] == pytest.approx((10 * 0.1 + 10 * 0.82) / 20)
    assert c["modulation_adds_post_shift_attention"].value == pytest.approx(0.5)
    assert c["uat_attends_to_active_segment"].value == pytest.approx(0.2)
    assert s.metrics["segment1_acc_uat"] == pytest.approx(0.8) and s.metrics["segment0_acc_vt"] == pytest.approx(0.9)
    assert s.metrics["fixed_goal_acc_uat"] == pytest.approx(0.85) and s.metrics["active_mass_uat_base"] == pytest.approx(0.1)
    assert s.metrics["oracle_log_prob_gain_after_shift"] == pytest.approx(-0.5)
    # uniform causal attention over the 20 queries after the first shift at T = 30
    assert s.metrics["active_mass_uniform"] == pytest.approx(np.mean([(t - (10 if t < 20 else 20) + 1) / (t + 1)
                                                                      for t in range(10, 30)]))
    table = s.tables["table"]
    assert len(table["step"]) == T and table["accuracy_vt"][T - 1] == pytest.approx(0.3 + 0.04)
    assert table["segment"][9:11] == [0, 1] and table["active_mass_uat"][0] == 0.0 and table["accuracy_uat"][14] == pytest.approx(0.1)
    bad = mechanism.summarize(cfg, _mechanism_arrays(T, {"uat": 0.45, "vt": 0.3, "uat_null": 0.3},
                                                     {"uat": 0.4, "vt": 0.37, "uat_null": 0.37},
                                                     {"uat": 0.39}, cfg.seeds))
    assert {k.verdict for k in bad.checks} == {"FAIL"}


def test_mechanism_null_feedback_control_fails_every_claim():
    """UAT fed null feedback played on the same shift episodes: at VT's level, with its gates moving no attention,
    it fails every claim; a UAT-null that recovers and refocuses like UAT makes every check NO POWER."""
    cfg, T = mechanism.QUICK, mechanism.QUICK.size.horizon
    acc, mass = {"uat": 0.8, "vt": 0.3, "uat_null": 0.3}, {"uat": 0.6, "vt": 0.4, "uat_null": 0.4}
    s = mechanism.summarize(cfg, _mechanism_arrays(T, acc, mass, {"uat_null": 0.4}, cfg.seeds))
    assert [k.control.verdict for k in s.checks] == ["FAIL"] * 3
    assert [k.control.value for k in s.checks] == pytest.approx([0.0, 0.0, 0.0])
    as_uat = mechanism.summarize(cfg, _mechanism_arrays(T, {**acc, "uat_null": 0.8}, {**mass, "uat_null": 0.6},
                                                        seeds_=cfg.seeds))
    assert [k.verdict for k in as_uat.checks] == ["NO POWER"] * 3


# --- tiny end-to-end runs through the command line ------------------------------------------


def test_darkroom_tiny_run_writes_results_and_curves(tmp_path, monkeypatch):
    streams = []
    real = seeds.seed_keys
    monkeypatch.setattr(seeds, "seed_keys", lambda n, stream=seeds.JUDGED: streams.append(stream) or real(n, stream))
    argv = ["run", "uat.darkroom", "--quick", *TINY_SIZE, "--set", 'schedules=["abrupt", "cyclic"]',
            "--seeds", "1", "--set", "stream=1", "--set", "adapt_batch=1", "--out", str(tmp_path)]
    assert cli.main(argv) in (0, 1)  # a tiny model may fail the checks; the run must complete
    assert streams == [seeds.SCREENING] * 3  # UAT, VT and A-DT one program, the matched VT one, TENT/CoTTA one
    out = tmp_path / "uat.darkroom"
    result = _result(out)
    assert result["config"]["seeds"] == 1 and result["config"]["size"]["epochs"] == 2
    assert [c["name"] for c in result["checks"]] == [f"uat_{claim}_{x}" for claim in ("beats_vt", "on_par_with_adt",
                                                                                      "beats_matched_vt")
                                                     for x in ("abrupt", "cyclic")]
    assert all(np.isfinite(c["value"]) and c["control"]["n"] == 1 for c in result["checks"])
    # 2 epochs x 2 episodes of one run: inside the first 6-episode block, and all four waypoints
    assert result["metrics"]["distinct_goals_train_abrupt"] == 1.0
    assert result["metrics"]["distinct_goals_train_cyclic"] == 4.0
    curves = _csv(out / "curves.csv")
    assert {r["model"] for r in curves} == {f"{m}/{s}" for m in ("uat", "vt", "adt", "vt_matched", "uat_null")
                                            for s in ("abrupt", "cyclic")}
    assert len(curves) == 10 * 2 and all(np.isfinite(float(r["loss"])) for r in curves)
    assert len(_csv(out / "darkroom.csv")) == 14 and len(_csv(out / "table.csv")) == 14
    assert (out / "darkroom.png").exists()
    assert sorted(p.name for p in (out / "models").iterdir()) == ["abrupt", "cyclic"]
    # uat.mechanism plays the kept cyclic UAT and VT cells, and computes what it computes training them itself
    loaded, origin = _mechanism_tiny_run(tmp_path)
    assert origin.startswith("loaded from") and origin.endswith("uat.darkroom/models/cyclic"), origin
    trained, origin = _mechanism_tiny_run(tmp_path / "alone")
    assert origin.startswith("trained here"), origin
    assert loaded["metrics"].keys() == trained["metrics"].keys()
    for name, value in trained["metrics"].items():
        assert loaded["metrics"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def test_training_grids_run_at_most_the_cpus_cells_per_call(monkeypatch):
    from experiments.studies.uat import training

    caps = []

    def fake_grid(ctx, name, cell, items, *, labels, num_seeds, max_chunk=None, **kwargs):
        caps.append(max_chunk)
        return {"loss": np.zeros((len(labels) * num_seeds, 1))}

    monkeypatch.setattr(seeds, "train_grid", fake_grid)
    tasks = [Task.make("gradual"), Task.make("abrupt")]
    training.train_grid(None, "g", cells.CPU.train_config(), tasks, ["a", "b"], 3, seeds.SCREENING)
    training.replay_grid(None, "r", None, np.zeros((6, 1)), tasks, ["a", "b"], 3, seeds.SCREENING)
    assert jax.default_backend() == "cpu" and caps == [cells.CPU_CELLS_PER_CALL] * 2 == [8, 8]


def test_matched_vt_trains_as_its_own_program_at_the_matched_width(monkeypatch):
    from experiments.studies.uat import training

    programs = {}

    def fake_grid(ctx, name, train_cfg, tasks, labels, num_seeds, stream, keep_params=False, env=None, make_cell=None):
        programs[name] = (train_cfg.model, [t.variant for t in tasks])
        return {"accuracy": np.zeros((len(tasks), num_seeds))}

    monkeypatch.setattr(training, "train_grid", fake_grid)
    size = cells.CPU
    runs = {m: [Task.make("gradual")] for m in ("uat", "vt", darkroom.MATCHED)}
    out = training.train_models(None, "g", size, runs, {m: ["x"] for m in runs}, 2, seeds.SCREENING,
                                configure=functools.partial(darkroom.configure, size))
    assert sorted(programs) == ["g", "g_vt_matched"] and list(out) == ["uat", "vt", "vt_matched"]
    matched, _ = programs["g_vt_matched"]
    assert matched.kind == "vt" and matched.d_ff == size.matched().d_ff == 142 and matched.d_model == size.d_model
    assert programs["g"][0].d_ff == size.d_ff  # the family keeps its width


def test_ablation_tiny_run(tmp_path):
    argv = ["run", "uat.ablation", "--quick", *TINY_SIZE, "--set", 'variants=["uat", "no_kv"]',
            "--set", "seeds=1", "--out", str(tmp_path)]
    assert cli.main(argv) in (0, 1)
    out = tmp_path / "uat.ablation"
    assert [c["name"] for c in _result(out)["checks"]] == ["no_kv_falls_far_gradual"]
    assert {r["model"] for r in _csv(out / "curves.csv")} == {"uat/gradual", "no_kv/gradual", "uat_null/gradual"}
    assert [r["variant"] for r in _csv(out / "ablation.csv")] == ["uat", "no_kv", "uat_null"]


def test_boundary_tiny_sigma_sweep_is_one_program(tmp_path):
    argv = ["run", "uat.boundary", "--quick", *TINY_SIZE, "--set", "seeds=1", "--sweep", "sigma=1,2",
            "--out", str(tmp_path)]
    assert cli.main(argv) in (0, 1)
    folders = {v: tmp_path / "uat.boundary" / "sweep" / f"sigma={v}" for v in ("1", "2")}
    for v, folder in folders.items():
        result = _result(folder)
        assert result["config"]["sigma"] == float(v)
        assert result["sweep"]["field"] == "sigma" and result["sweep"]["value"] == int(v)
        assert result["sweep"]["vmapped"] is True  # a traced field: one program for every value
        names = [c["name"] for c in result["checks"]]
        assert names[1] == f"uat_above_vt_at_sigma_{v}"
        assert {r["condition"] for r in _csv(folder / "boundary.csv")} == {
            "clean", f"gaussian_{v}", "null", "shuffle", "sign_flip"}
        assert {r["model"] for r in _csv(folder / "curves.csv")} == {
            "vt/clean", "uat/clean", f"uat/gaussian_{v}", "uat/null", "uat/shuffle", "uat/sign_flip"}
    # the sigma-free conditions and VT were trained once, for both values
    a, b = (_result(f)["metrics"] for f in folders.values())
    assert a["acc_vt"] == b["acc_vt"] and a["acc_uat_clean"] == b["acc_uat_clean"] and a["gap_null"] == b["gap_null"]


def _mechanism_tiny_run(out):
    argv = ["run", "uat.mechanism", "--quick", *TINY_SIZE, "--set", "episodes=1", "--set", "recovered_after=0",
            "--seeds", "1", "--set", "stream=1", "--out", str(out)]
    assert cli.main(argv) in (0, 1)
    folder = out / "uat.mechanism"
    result = _result(folder)
    assert [c["name"] for c in result["checks"]] == ["uat_recovers_after_shift", "modulation_adds_post_shift_attention",
                                                     "uat_attends_to_active_segment"]
    assert all(np.isfinite(c["value"]) for c in result["checks"])
    assert 0.0 <= result["metrics"]["active_mass_uat"] <= 1.0
    assert len(_csv(folder / "table.csv")) == 4 and (folder / "mechanism.png").exists()
    return result, _csv(folder / "models.csv")[0]["origin"]


def test_kept_cells_load_the_first_seeds_of_each_member_and_train_on_any_mismatch(tmp_path, monkeypatch):
    """``reuse_or_train_cells`` reads the first ``num_seeds`` of each member from a model kept with more seeds
    (rows member-major), and trains (here: a stand-in) when the stream or the config differ."""
    from experiments.registry import RunContext
    from experiments.studies.uat import training

    size = cells.Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=4, batch_size=2, epochs=2, eval_episodes=2)
    tcfg = size.train_config(traced_variant=True)
    members, saved = ("uat", "vt"), 3
    shapes = training._union_template(tcfg, len(members) * saved)
    params = jax.tree.map(lambda s: np.broadcast_to(np.arange(s.shape[0], dtype=s.dtype).reshape((-1,) + (1,) * (
        len(s.shape) - 1)), s.shape).copy(), shapes)  # every leaf holds its row index
    accuracy = np.array([[0.9, 0.8, 0.7], [0.3, 0.2, 0.1]])
    source = RunContext(study="uat.darkroom", quick=True, out_dir=tmp_path / "uat.darkroom")
    training.keep_cells(source, "cyclic", tcfg, members, params, accuracy, stream=1)
    ctx = RunContext(study="uat.mechanism", quick=True, out_dir=tmp_path / "uat.mechanism")
    trained = []
    monkeypatch.setattr(training, "train_grid", lambda *a, **k: trained.append(a[1]) or {"accuracy": "t", "params": "t"})
    tasks = [Task.make("cyclic", variant=m) for m in members]
    grid, origin = training.reuse_or_train_cells(ctx, "uat.darkroom", "cyclic", "prog", tcfg, tasks, members,
                                                 ["a", "b"], 2, 1)
    assert origin.startswith("loaded from") and not trained
    np.testing.assert_array_equal(grid["accuracy"], [[0.9, 0.8], [0.3, 0.2]])
    for leaf in jax.tree.leaves(grid["params"]):
        np.testing.assert_array_equal(leaf.reshape(4, -1)[:, 0], [0, 1, 3, 4])  # uat seeds 0, 1; vt seeds 0, 1
    for stream, cfg, seeds_wanted in ((0, tcfg, 2), (1, dataclasses.replace(tcfg, epochs=3), 2), (1, tcfg, 4)):
        _, origin = training.reuse_or_train_cells(ctx, "uat.darkroom", "cyclic", "prog", cfg, tasks, members,
                                                  ["a", "b"], seeds_wanted, stream)
        assert origin.startswith("trained here")
    assert trained == ["prog"] * 3

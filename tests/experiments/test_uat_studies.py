"""The uat.* studies: summaries on synthetic arrays, config validation, and tiny end-to-end
runs through the command line (``--set`` overrides; no training at a real size)."""
import csv
import json

import numpy as np
import pytest

from experiments import cli, configs
from experiments.studies.uat import ablation, boundary, darkroom, theory
from uat_jax import cells

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
    for study in (darkroom, ablation, boundary):
        assert study.QUICK.size == cells.CPU and study.QUICK.seeds == 2
        assert study.FULL.size == cells.TABLE3 and study.FULL.seeds == 3
    assert darkroom.QUICK.models == ("uat", "vt", "adt") and darkroom.FULL.models == darkroom.MODELS
    assert darkroom.QUICK.schedules == darkroom.FULL.schedules == ("gradual", "abrupt", "cyclic")
    assert ablation.QUICK.schedules == ("gradual",) and ablation.QUICK.variants == ablation.VARIANTS
    assert [boundary.label(*c) for c in boundary.QUICK.conditions()] == [
        "clean", "gaussian_2", "null", "shuffle", "sign_flip"]
    assert [boundary.label(*c) for c in boundary.FULL.conditions()] == [
        "clean", "gaussian_0p5", "gaussian_1", "gaussian_2", "gaussian_5", "null", "shuffle", "sign_flip"]
    assert theory.QUICK.model.horizon == 20 and theory.FULL.model.horizon == 60
    assert theory.QUICK.counted == theory.FULL.counted


# --- config validation -----------------------------------------------------------------------


@pytest.mark.parametrize("study, field, value, message", [
    (darkroom, "models", ["uat", "vt"], "models must"),
    (darkroom, "models", ["uat", "vt", "adt", "bogus"], "models must"),
    (darkroom, "schedules", ["weekly"], "schedules must"),
    (darkroom, "seeds", 0, "seeds must"),
    (darkroom, "size.n_heads", 3, "size.d_model must be a multiple"),
    (darkroom, "size.epochs", 0, "size.epochs must"),
    (ablation, "variants", ["no_kv"], "variants must"),
    (ablation, "schedules", [], "schedules must"),
    (boundary, "sigma", 0.0, "sigma must be > 0"),
    (boundary, "extra_sigmas", [1.0, -1.0], "extra_sigmas must"),
    (boundary, "schedule", "weekly", "schedule must"),
    (theory, "j_star", 19, "j_star must"),
    (theory, "model.kind", "vt", "model must be kind 'uat'"),
    (theory, "init_std", 0.0, "init_std must"),
])
def test_config_rejects_out_of_range_values(study, field, value, message):
    with pytest.raises(configs.ConfigError, match=message):
        configs.apply(study.QUICK, [(field, value)])


def test_cli_rejects_a_bad_override_before_computing(tmp_path, capsys):
    assert cli.main(["run", "uat.boundary", "--quick", "--set", "sigma=-1", "--out", str(tmp_path)]) == 2
    assert "sigma" in capsys.readouterr().err
    assert cli.main(["run", "uat.theory", "--quick", "--seeds", "2", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "uat.boundary" / "result.json").exists()


# --- summarize on synthetic arrays ------------------------------------------------------------


def _darkroom_arrays(cfg, acc):
    S = len(cfg.schedules)
    return {"accuracy": {m: np.tile(np.asarray(acc[m], float), (S, 1)) for m in cfg.models},
            "efficiency": {m: np.full((S, cfg.seeds), 0.5) for m in cfg.models}}


def test_darkroom_summary_and_checks():
    cfg = darkroom.QUICK
    acc = {"uat": [0.85, 0.95], "vt": [0.3, 0.4], "adt": [0.88, 0.90]}
    s = darkroom.summarize(cfg, _darkroom_arrays(cfg, acc))
    assert s.metrics["acc_uat_gradual"] == pytest.approx(0.9) and s.metrics["acc_uat_gradual_std"] == pytest.approx(0.05)
    c = {k.name: k for k in s.checks}
    assert list(c) == ["uat_beats_vt_gradual", "uat_beats_vt_abrupt", "uat_beats_vt_cyclic", "uat_on_par_with_adt"]
    assert all(k.passed for k in s.checks)
    assert c["uat_beats_vt_gradual"].value == pytest.approx(0.55)
    assert c["uat_beats_vt_gradual"].paper == pytest.approx(0.873 - 0.362)
    assert c["uat_on_par_with_adt"].value == pytest.approx(0.01)
    assert len(s.tables["table"]["model"]) == 9 and s.tables["table"]["accuracy_paper"][0] == 0.873
    # VT as good as UAT, and A-DT clearly better: every check fails
    bad = darkroom.summarize(cfg, _darkroom_arrays(cfg, {"uat": [0.5, 0.5], "vt": [0.45, 0.45], "adt": [0.6, 0.6]}))
    assert not any(k.passed for k in bad.checks)


def test_ablation_summary_and_checks():
    cfg = ablation.QUICK
    acc = {"uat": 0.87, "no_action": 0.7, "no_reward": 0.4, "linear": 0.86, "no_q": 0.88, "no_kv": 0.5, "no_bias": 0.87}
    arrays = {"accuracy": {v: np.full((1, 2), acc[v]) for v in cfg.variants}}
    s = ablation.summarize(cfg, arrays)
    c = {k.name: k for k in s.checks}
    assert sorted(c) == sorted(["no_kv_falls_far_gradual", "no_reward_falls_far_gradual", "no_q_stays_near_gradual",
                                "no_bias_stays_near_gradual", "linear_stays_near_gradual"])
    assert all(k.passed for k in s.checks)
    assert c["no_kv_falls_far_gradual"].value == pytest.approx(0.37)
    assert c["no_kv_falls_far_gradual"].paper == pytest.approx(0.873 - 0.506) and c["no_kv_falls_far_gradual"].claim
    assert c["no_q_stays_near_gradual"].value == pytest.approx(0.01)
    arrays["accuracy"]["no_kv"] = np.full((1, 2), 0.8)  # no-KV barely hurts: its check fails
    arrays["accuracy"]["linear"] = np.full((1, 2), 0.7)  # the linear encoder hurts: its check fails
    c = {k.name: k.passed for k in ablation.summarize(cfg, arrays).checks}
    assert not c["no_kv_falls_far_gradual"] and not c["linear_stays_near_gradual"] and c["no_q_stays_near_gradual"]
    # only the listed variants are checked
    few = configs.apply(cfg, [("variants", ["uat", "no_kv"])])
    s = ablation.summarize(few, {"accuracy": {v: np.full((1, 2), acc[v]) for v in few.variants}})
    assert [k.name for k in s.checks] == ["no_kv_falls_far_gradual"]


def _boundary_arrays(cfg, uat, vt):
    return {"accuracy_uat": np.asarray([uat[boundary.label(*c)] for c in cfg.conditions()], float),
            "accuracy_vt": np.asarray(vt, float)}


def test_boundary_summary_and_checks():
    cfg = boundary.QUICK
    uat = {"clean": [0.8, 0.9], "gaussian_2": [0.6, 0.6], "null": [0.4, 0.42], "shuffle": [0.38, 0.4],
           "sign_flip": [0.82, 0.86]}
    s = boundary.summarize(cfg, _boundary_arrays(cfg, uat, [0.35, 0.37]))
    c = {k.name: k for k in s.checks}
    assert list(c) == ["gap_clean_wide", "gap_shrinks_at_sigma_2", "gap_null_small", "gap_shuffle_small",
                       "sign_flip_unchanged"]
    assert all(k.passed for k in s.checks)
    assert s.metrics["gap_clean"] == pytest.approx(0.49) and s.metrics["gap_clean_std"] == pytest.approx(0.04)
    assert c["gap_shrinks_at_sigma_2"].value == pytest.approx(0.24 - 0.49)
    assert c["gap_shrinks_at_sigma_2"].paper == pytest.approx(0.18 - 0.52)
    assert c["sign_flip_unchanged"].value == pytest.approx(0.01)
    assert s.tables["table"]["condition"] == ["clean", "gaussian_2", "null", "shuffle", "sign_flip"]
    uat.update(gaussian_2=[0.9, 0.9], null=[0.8, 0.8], sign_flip=[0.5, 0.5])
    c = {k.name: k.passed for k in boundary.summarize(cfg, _boundary_arrays(cfg, uat, [0.35, 0.37])).checks}
    assert c == {"gap_clean_wide": True, "gap_shrinks_at_sigma_2": False, "gap_null_small": False,
                 "gap_shuffle_small": True, "sign_flip_unchanged": False}
    # another noise level: its own check name, and no paper number for it
    other = configs.apply(cfg, [("sigma", 0.5), ("extra_sigmas", [2.0])])
    assert [boundary.label(*c) for c in other.conditions()][1:3] == ["gaussian_0p5", "gaussian_2"]
    uat["gaussian_0p5"] = [0.7, 0.7]
    c = {k.name: k for k in boundary.summarize(other, _boundary_arrays(other, uat, [0.35, 0.37])).checks}
    assert "gap_shrinks_at_sigma_0p5" in c and c["gap_shrinks_at_sigma_0p5"].paper is None


def _theory_arrays(**changes):
    arrays = {"zero_degradation_max_abs": 0.0, "gated_vs_vt_max_abs": 0.7, "prop1_vt_max_abs": 0.0,
              "prop1_gtrxl_max_abs": 0.0, "thm1_logit_gap_measured": 0.25, "thm1_logit_gap_closed_form": 0.25,
              "thm1_policy_gap": 1e-4, "params_uat": 1100.0, "params_vt": 1000.0,
              "counted": {"affine": 60.0, "bias": 20.0, "gates": 15.0, "encoder": 5.0},
              "formula": {"affine": 60.0, "bias": 20.0, "gates": 15.0, "encoder": 5.0}}
    return {**arrays, **changes}


def test_theory_summary_and_checks():
    s = theory.summarize(theory.QUICK, _theory_arrays())
    assert len(s.checks) == 7 and all(k.passed for k in s.checks)
    assert s.metrics["overhead_gates_counted"] == 15.0 and s.tables["table"]["group"][-1] == "total"
    failing = {
        "zero_degradation_exact": _theory_arrays(zero_degradation_max_abs=1e-12),
        "gates_change_outputs": _theory_arrays(gated_vs_vt_max_abs=0.0),
        "prop1_gtrxl_feedback_blind": _theory_arrays(prop1_gtrxl_max_abs=1e-3),
        "thm1_closed_form": _theory_arrays(thm1_logit_gap_measured=1e-9, thm1_logit_gap_closed_form=1e-9),
        "thm1_policies_differ": _theory_arrays(thm1_policy_gap=0.0),
        "d3_overhead_formulas": _theory_arrays(params_uat=1101.0),
    }
    for name, arrays in failing.items():
        verdict = {k.name: k.passed for k in theory.summarize(theory.QUICK, arrays).checks}
        assert not verdict[name] and sum(verdict.values()) == 6, name
    extra_group = _theory_arrays(counted={"affine": 60.0, "bias": 20.0, "gates": 15.0, "encoder": 5.0, "more": 1.0})
    assert not {k.name: k.passed for k in theory.summarize(theory.QUICK, extra_group).checks}["d3_overhead_formulas"]


# --- tiny end-to-end runs through the command line ------------------------------------------


def test_darkroom_tiny_run_writes_results_and_curves(tmp_path):
    argv = ["run", "uat.darkroom", "--quick", *TINY_SIZE, "--set", 'schedules=["gradual", "cyclic"]',
            "--seeds", "1", "--out", str(tmp_path)]
    assert cli.main(argv) in (0, 1)  # a tiny model may fail the checks; the run must complete
    out = tmp_path / "uat.darkroom"
    result = _result(out)
    assert result["config"]["seeds"] == 1 and result["config"]["size"]["epochs"] == 2
    assert [c["name"] for c in result["checks"]] == ["uat_beats_vt_gradual", "uat_beats_vt_cyclic", "uat_on_par_with_adt"]
    assert all(np.isfinite(c["value"]) for c in result["checks"])
    curves = _csv(out / "curves.csv")
    assert {r["model"] for r in curves} == {f"{m}/{s}" for m in ("uat", "vt", "adt") for s in ("gradual", "cyclic")}
    assert len(curves) == 6 * 2 and all(np.isfinite(float(r["loss"])) for r in curves)
    assert len(_csv(out / "darkroom.csv")) == 6 and len(_csv(out / "table.csv")) == 6
    assert (out / "darkroom.png").exists()


def test_ablation_tiny_run(tmp_path):
    argv = ["run", "uat.ablation", "--quick", *TINY_SIZE, "--set", 'variants=["uat", "no_kv"]',
            "--set", "seeds=1", "--out", str(tmp_path)]
    assert cli.main(argv) in (0, 1)
    out = tmp_path / "uat.ablation"
    assert [c["name"] for c in _result(out)["checks"]] == ["no_kv_falls_far_gradual"]
    assert {r["model"] for r in _csv(out / "curves.csv")} == {"uat/gradual", "no_kv/gradual"}
    assert [r["variant"] for r in _csv(out / "ablation.csv")] == ["uat", "no_kv"]


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
        assert names[1] == f"gap_shrinks_at_sigma_{v}"
        assert {r["condition"] for r in _csv(folder / "boundary.csv")} == {
            "clean", f"gaussian_{v}", "null", "shuffle", "sign_flip"}
        assert {r["model"] for r in _csv(folder / "curves.csv")} == {
            "vt/clean", "uat/clean", f"uat/gaussian_{v}", "uat/null", "uat/shuffle", "uat/sign_flip"}
    # the sigma-free conditions and VT were trained once, for both values
    a, b = (_result(f)["metrics"] for f in folders.values())
    assert a["acc_vt"] == b["acc_vt"] and a["acc_uat_clean"] == b["acc_uat_clean"] and a["gap_null"] == b["gap_null"]


def test_theory_tiny_run_passes(tmp_path):
    argv = ["run", "uat.theory", "--quick", "--set",
            'model={"horizon": 6, "d_model": 8, "n_heads": 2, "d_ff": 8, "n_layers": 2, "d_u": 4, "d_act": 3, '
            '"ue_hidden": 5}', "--set", 'counted={"d_model": 16, "n_heads": 2, "d_ff": 16, "n_layers": 2}',
            "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    result = _result(tmp_path / "uat.theory")
    assert len(result["checks"]) == 7 and all(c["passed"] for c in result["checks"])
    assert result["config"]["model"]["horizon"] == 6

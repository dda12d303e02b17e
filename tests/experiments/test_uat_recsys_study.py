"""Study ``uat.recsys``: config validation, summary and checks on planted arrays, and tiny runs
through the command line on the synthetic files and on a user's MovieLens folder."""
import csv
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli, configs, seeds
from experiments.studies.uat import recsys as study
from uat_jax import recsys_data

TINY_SETS = ['size={"d_model": 8, "n_heads": 2, "d_ff": 8, "n_layers": 1, "horizon": 10, "batch_size": 4, '
             '"epochs": 2, "eval_episodes": 1}',
             'data={"min_user_interactions": 20, "min_item_ratings": 5, "max_users": 25, "horizon": 10, '
             '"n_regimes": 3, "min_segments": 2, "max_segments": 3, "min_segment_len": 3, "n_negatives": 20}',
             'synthetic={"n_users": 40, "n_items": 150, "min_len": 40, "max_len": 60, "light_len": [5, 15]}',
             "delays=[0, 1, 3]", 'models=["uat", "vt", "adt", "no_kv"]']
TINY = [arg for s in TINY_SETS for arg in ("--set", s)] + ["--seeds", "2"]
NOISE = np.array([0.0, 0.02, -0.02, 0.01])  # per seed, shared by every model and condition (paired by seed)


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_presets():
    assert study.FULL.size == study.recsys.TABLE3 and study.FULL.seeds == 3 and study.FULL.lr == 1e-3
    assert study.FULL.models == (*study.MODELS, *study.ABLATIONS) and study.FULL.delays == (0, 1, 3, 5, 10)
    assert study.FULL.corruptions == ("null", "shuffled", "adversarial") and study.FULL.data == recsys_data.RecsysConfig()
    assert study.QUICK.stream == study.FULL.stream == seeds.JUDGED
    assert study.QUICK.reported == (*study.CHECKED, "sasrec", "bert4rec")
    assert study.FULL.reported == (*study.MODELS, *study.ABLATIONS, "sasrec", "bert4rec")
    # --set bert4rec=false (or sasrec=false) drops the row: no program, no metrics, no row
    assert configs.apply(study.QUICK, [("bert4rec", False)]).reported == (*study.CHECKED, "sasrec")
    assert configs.apply(study.QUICK, [("sasrec", False)]).reported == (*study.CHECKED, "bert4rec")
    assert [study.condition_name(*c) for c in study.QUICK.conditions] == ["d1", "d1_null"]
    assert [study.condition_name(*c) for c in study.FULL.conditions] == [
        "d1", "d0", "d3", "d5", "d10", "d1_null", "d1_shuffled", "d1_adversarial"]


@pytest.mark.parametrize("field, value, message", [
    ("models", ["uat", "vt"], "models must"),
    ("delays", [0, 3], "including the main delay 1"),
    ("delays", [1, 1], "delays must be distinct"),
    ("delays", [1, 50], r"in \[0, size.horizon = 50\)"),
    ("corruptions", ["clean"], "corruptions must"),
    ("lr", 0.0, "lr must"),
    ("seeds", 0, "seeds must"),
    ("stream", 2, "stream must"),
    ("data_dir", "/no/such/folder", "is not a folder"),
    ("data.horizon", 40, "must equal data.horizon"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(configs.ConfigError, match=message):
        configs.apply(study.QUICK, [(field, value)])


def _arrays(cfg, hr):
    """Planted arrays: HR@10 ``hr[model][condition]`` plus NOISE on the 4 seeds; the other metrics half of it."""
    metrics = {}
    for m in cfg.reported:
        conds = cfg.conditions if m in study.FAMILY else cfg.conditions[:1]
        grid = np.array([hr[m][study.condition_name(*c)] + NOISE for c in conds])
        metrics[m] = {k: grid if k == "hr@10" else grid / 2 for k in study.METRICS}
    return {"metrics": metrics, "dataset": {"users": np.asarray(30), "items": np.asarray(200)}}


def test_summary_and_checks():
    cfg = dataclasses.replace(study.QUICK, delays=(0, 1, 10), seeds=4)
    good = {"uat": {"d1": 0.40, "d0": 0.45, "d10": 0.30, "d1_null": 0.29}, "vt": dict.fromkeys(
        ("d1", "d0", "d10", "d1_null"), 0.28), "adt": {"d1": 0.41}, "sasrec": {"d1": 0.2}, "bert4rec": {"d1": 0.15}}
    s = study.summarize(cfg, _arrays(cfg, good))
    found = {c.name: c for c in s.checks}
    assert list(found) == ["uat_beats_vt_hr10", "uat_on_par_with_adt_hr10", "uat_gain_needs_feedback",
                           "gap_shrinks_with_delay"]
    assert all(c.passed and c.n == 4 and c.unit == "seed" for c in found.values())
    np.testing.assert_allclose(found["uat_beats_vt_hr10"].value, 0.12)
    assert found["gap_shrinks_with_delay"].control.verdict == "not run here"  # test_controls_fail_their_claims
    np.testing.assert_allclose(found["uat_gain_needs_feedback"].value, 0.12 - 0.01)
    np.testing.assert_allclose(found["gap_shrinks_with_delay"].value, 0.17 - 0.02)
    assert s.metrics["ndcg@10_uat_d0"] == pytest.approx(0.225 + NOISE.mean() / 2)
    assert s.metrics["hr@10_vt_d1_null"] == pytest.approx(0.28 + NOISE.mean())
    assert s.tables["table"]["condition"] == ["d1", "d0", "d10", "d1_null"] * 2 + ["d1", "d1", "d1"]
    assert s.tables["table"]["model"][-2:] == ["sasrec", "bert4rec"]
    assert s.metrics["hr@10_sasrec"] == pytest.approx(0.2 + NOISE.mean())
    assert s.metrics["hr@10_bert4rec"] == pytest.approx(0.15 + NOISE.mean())
    assert s.tables["table"]["hr@10_paper"][-2:] == [0.281, 0.160]
    assert not any(m in c.name for c in s.checks for m in ("sasrec", "bert4rec"))  # reported rows, in no check
    # UAT that gains as much with zero rewards, whose lead does not fall with the delay, below A-DT
    blind = {"uat": {"d1": 0.33, "d0": 0.33, "d10": 0.33, "d1_null": 0.33}, "vt": good["vt"], "adt": {"d1": 0.40},
             "sasrec": good["sasrec"], "bert4rec": good["bert4rec"]}
    found = {c.name: c for c in study.summarize(cfg, _arrays(cfg, blind)).checks}
    assert found["uat_beats_vt_hr10"].verdict == "NO POWER"  # it leads VT, but so does its null-reward control
    assert not any(found[n].passed for n in ("uat_on_par_with_adt_hr10", "uat_gain_needs_feedback",
                                             "gap_shrinks_with_delay"))


def test_controls_fail_their_claims():
    """Each claim judged on its control arm is rejected: UAT under the null corruption at VT's level for the
    HR@10 claims, VT clean against VT under null (feedback-blind) for the null-reward claim, and a UAT reading no
    feedback (the same lead at every delay) for the delay claim; a UAT-null as good as UAT makes the HR@10 checks
    NO POWER."""
    cfg = dataclasses.replace(study.QUICK, delays=(0, 1, 10), seeds=4)
    vt = dict.fromkeys(("d1", "d0", "d10", "d1_null"), 0.28)
    good = {"uat": {"d1": 0.40, "d0": 0.45, "d10": 0.30, "d1_null": 0.28}, "vt": vt, "adt": {"d1": 0.41},
            "sasrec": {"d1": 0.2}, "bert4rec": {"d1": 0.15}}
    found = {c.name: c for c in study.summarize(cfg, _arrays(cfg, good)).checks}
    assert {n: c.control.verdict for n, c in found.items() if c.control.value is not None} == {
        "uat_beats_vt_hr10": "FAIL", "uat_on_par_with_adt_hr10": "FAIL", "uat_gain_needs_feedback": "FAIL"}
    no_delay_effect = {**good, "uat": {"d1": 0.40, "d0": 0.40, "d10": 0.40, "d1_null": 0.28}}
    delay = {c.name: c for c in study.summarize(cfg, _arrays(cfg, no_delay_effect)).checks}["gap_shrinks_with_delay"]
    assert delay.verdict == "FAIL" and delay.value == pytest.approx(0.0)
    as_uat = {**good, "uat": {**good["uat"], "d1_null": 0.40}}
    found = {c.name: c for c in study.summarize(cfg, _arrays(cfg, as_uat)).checks}
    assert [found[n].verdict for n in ("uat_beats_vt_hr10", "uat_on_par_with_adt_hr10")] == ["NO POWER"] * 2


def test_tiny_run_on_synthetic_files_and_on_a_data_folder(tmp_path):
    """A tiny run through the CLI on the synthetic files it writes; then the same files read as a user's
    ``data_dir`` give the same dataset (a run on them would train on identical arrays)."""
    out = tmp_path / "synthetic_run"
    assert cli.main(["run", "uat.recsys", "--quick", *TINY, "--out", str(out)]) in (0, 1)
    folder = out / "uat.recsys"
    result = json.loads((folder / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == ["uat_beats_vt_hr10", "uat_on_par_with_adt_hr10",
                                                     "uat_gain_needs_feedback", "gap_shrinks_with_delay"]
    assert all(np.isfinite(c["value"]) for c in result["checks"])
    # the null-reward claim's control, trained: VT is feedback-blind, so zeroed rewards change nothing on any seed
    null_check = {c["name"]: c for c in result["checks"]}["uat_gain_needs_feedback"]
    assert null_check["control"] == {"arm": study.UAT_GAIN_NEEDS_FEEDBACK.control, "verdict": "FAIL", "value": 0.0,
                                     "lo": 0.0, "hi": 0.0, "n": 2}
    assert {r["condition"] for r in _csv(folder / "recsys.csv")} == {"d1", "d0", "d3", "d1_null"}
    rows = _csv(folder / "recsys.csv")
    # UAT and VT x 4 conditions, A-DT, the no-KV ablation (main condition, Table 5 D beside it), SASRec, BERT4Rec
    assert len(rows) == (4 * 2 + 4) * 2 and (folder / "recsys.png").exists()
    assert {r["condition"] for r in rows if r["model"] == "no_kv"} == {"d1"}
    assert result["paper"]["hr@10_no_kv"] == 0.294 and np.isfinite(result["metrics"]["hr@10_no_kv"])
    assert [r["model"] for r in rows][-4:] == ["sasrec"] * 2 + ["bert4rec"] * 2
    assert all(0.0 <= float(r["hr@10"]) <= 1.0 for r in rows[-4:])
    assert np.isfinite(result["metrics"]["hr@10_bert4rec"]) and np.isfinite(result["metrics"]["ndcg@10_bert4rec"])
    assert result["metrics"]["users"] == 25.0  # max_users of the tiny data config
    # the written files as a user's folder (--set data_dir=...): the same dataset
    cfg = configs.apply(study.QUICK, [(k, json.loads(v)) for k, v in (a.split("=", 1) for a in TINY_SETS)])
    user = dataclasses.replace(cfg, data_dir=str(folder / "synthetic"))
    a, b = study.load_data(cfg, tmp_path / "fresh"), study.load_data(user, tmp_path / "unused")
    for split in ("train", "test"):
        for name in recsys_data.Windows.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(getattr(a, split), name), getattr(getattr(b, split), name))
    np.testing.assert_array_equal(a.test_candidates, b.test_candidates)
    assert not (tmp_path / "unused").exists()  # a user's folder: nothing written

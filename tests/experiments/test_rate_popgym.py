"""Study rate.popgym: config errors, summarize against hand-computed margins, a tiny run end to end."""
import csv
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import popgym as study

# One task, RATE and DT, one layer of d 16, 2 steps, 1 seed, 4 evaluation episodes.
TINY = ["--set", "tasks=[\"repeat_previous\"]", "--set", "base.n_layer=1", "--set", "base.d_model=16",
        "--set", "base.d_head=8", "--set", "base.num_mem_tokens=2", "--set", "training.num_steps=2",
        "--set", "training.num_train=8", "--set", "training.num_val=4", "--set", "training.batch_size=4",
        "--set", "training.warmup_steps=1", "--set", "eval_episodes=4",
        "--seeds", "1"]


@pytest.mark.parametrize("override", ["tasks=[\"battleship\"]", "tasks=[]", "level=\"extreme\"",
                                      "variants=[\"RATE\"]", "num_segments=1", "training.chunks=7", "stream=2",
                                      "training.learning_rate=0"])
def test_bad_overrides_are_usage_errors(override, capsys):
    assert cli.main(["show", "rate.popgym", "--quick", "--set", override]) == 2
    assert "error:" in capsys.readouterr().err


def test_segment_length_holds_the_episode():
    config = study.QUICK
    assert config.segment_len("repeat_previous") == 18  # 51 steps + the final observation: 52 <= 54
    assert config.train_config("autoencode", "RATE").model.segment_len == 35  # 103 + 1 <= 105
    dt = config.train_config("count_recall", "DT")
    assert dt.model.segment_len == 18 and dt.num_segments == 3 and dt.model.num_mem_tokens == 0


def test_summarize_margins_by_hand():
    config = study.QUICK
    returns = {"repeat_previous": {"RATE": np.full((2, 4), 0.9), "DT": np.full((2, 4), 0.8)},
               "count_recall": {"RATE": np.array([[-0.5] * 4, [-0.3] * 4]), "DT": np.full((2, 4), -0.9)}}
    arrays = {"returns": returns, "random_return": {"repeat_previous": -0.5, "count_recall": -0.9},
              "val_accuracy": {t: {v: np.ones(2) for v in config.variants} for t in config.tasks},
              "final_loss": {t: {v: np.zeros(2) for v in config.variants} for t in config.tasks}}
    summary = study.summarize(config, arrays)
    m = summary.metrics
    assert m["rate_minus_dt_repeat_previous"] == pytest.approx(0.1)
    assert m["rate_minus_dt_count_recall"] == pytest.approx(0.5)  # RATE -0.4 against DT -0.9
    assert m["rate_minus_dt_mean_return"] == pytest.approx(0.3)
    assert [c.passed for c in summary.checks] == [True, True, True]
    returns["repeat_previous"]["RATE"] = np.full((2, 4), 0.82)  # 0.02 < 0.05
    assert [c.passed for c in study.summarize(config, arrays).checks] == [False, True, True]


def test_tiny_run_end_to_end(tmp_path):
    assert cli.main(["run", "rate.popgym", "--quick", "--out", str(tmp_path), *TINY]) in (0, 1)
    out = tmp_path / "rate.popgym"
    result = json.loads((out / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == ["rate_minus_dt_repeat_previous", "rate_minus_dt_mean_return"]
    m = result["metrics"]
    assert -1.0 <= m["rate_repeat_previous"] <= 1.0 and -1.0 <= m["random_repeat_previous"] < 0.0
    rows = list(csv.DictReader((out / "returns.csv").open()))
    assert {(r["task"], r["model"]) for r in rows} == {("repeat_previous", "RATE"), ("repeat_previous", "DT")}
    assert (out / "returns.png").stat().st_size > 0
    with np.load(out / "popgym.npz") as npz:
        assert npz["return_repeat_previous_RATE"].shape == (1, 4)

"""regret.ftrl_match end to end at a tiny size through the CLI, and its summary on synthetic seeds."""
import csv
import json

import numpy as np
import pytest

import regret_jax as rj
from experiments import cli
from experiments.studies.regret.ftrl_match import QUICK, MatchConfig, summarize

TINY = ["--set", "train.T=6", "--set", "train.batch_size=16", "--set", "train.num_steps=12",
        "--set", "heldout_sequences=100", "--set", "scan_sequences=1000"]


def test_tiny_run_through_cli(tmp_path):
    code = cli.main(["run", "regret.ftrl_match", "--quick", *TINY, "--seeds", "2", "--out", str(tmp_path)])
    out = tmp_path / "regret.ftrl_match"
    assert code in (0, 1) and not (out / "error.txt").exists()  # checks may fail at this size; the run may not raise
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["num_seeds"] == 2 and result["config"]["train"]["num_steps"] == 12
    assert [c["name"] for c in result["checks"]] == ["policy_close_to_ftrl", "eta_hat_near_eta_star", "trained_beats_uniform",
                                                   "value_matrix_on_ray"]
    assert result["metrics"]["eta_star"] > 0 and result["metrics"]["uniform_loss"] == pytest.approx(rj.exact_F0(3, 6))
    with open(out / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["model", "seed", "step", "loss"]
    assert {r["model"] for r in rows} == {"attention"} and {r["seed"] for r in rows} == {"0", "1"}
    assert [int(r["step"]) for r in rows if r["seed"] == "1"] == list(range(1, 13))
    assert all(np.isfinite(float(r["loss"])) for r in rows)
    with open(out / "seeds.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    assert (out / "table.csv").exists() and np.load(out / "loss_curves.npz")["loss_curve"].shape == (2, 12)


def test_non_finite_loss_stops_the_run(tmp_path):
    """Initial weights of scale 1e30 overflow the logits: the loss guard stops the seed sweep, naming the model."""
    code = cli.main(["run", "regret.ftrl_match", "--quick", *TINY, "--set", "train.init_scale=1e30", "--out", str(tmp_path)])
    error = (tmp_path / "regret.ftrl_match" / "error.txt").read_text()
    assert code == 1 and "non-finite loss" in error and "regret.ftrl_match train: non-finite loss nan at seed 0, step 0" in error


def _arrays(eta_hat, tv_pct, heldout_loss, offray, eta_star=0.3, steps=60):
    n = len(eta_hat)
    params = {"eta_param": np.asarray(eta_hat) * 1.02, "value_offray": np.asarray(offray), "value_dist_eta_hat": np.full(n, 0.05),
              "value_dist_eta_star": np.full(n, 0.06), "key_ratio": np.full(n, 0.1), "bias_ratio": np.full(n, 0.1)}
    return {
        "seeds": {"eta_hat": np.asarray(eta_hat), "mse": np.full(n, 1e-4), "tv_pct": np.asarray(tv_pct),
                  "err_per_action_pp": np.asarray(tv_pct) * 2 / 3, "heldout_loss": np.asarray(heldout_loss), **params},
        "root": {"eta_star": np.asarray(eta_star), "se": np.asarray(0.01)},
        "curves": {"attention": {"loss": np.ones((n, steps))}},
    }


def test_summarize_on_synthetic_seeds():
    uniform = rj.exact_F0(QUICK.train.d, QUICK.train.T)
    summary = summarize(QUICK, _arrays([0.29, 0.31, 0.30], [4.0, 5.0, 6.0], [0.8 * uniform] * 3, [0.1, 0.05, 0.15]))
    m = summary.metrics
    assert m["eta_hat_mean"] == pytest.approx(0.30) and m["eta_hat_std"] == pytest.approx(0.01)
    assert m["kappa_hat"] == pytest.approx(0.30 * np.sqrt(QUICK.train.T)) and m["final_train_loss"] == 1.0
    assert [c.passed for c in summary.checks] == [True, True, True, True]
    assert summary.checks[3].value == pytest.approx(0.1) and m["eta_param_mean"] == pytest.approx(0.306)
    assert summary.checks[0].value == pytest.approx(0.05) and summary.checks[1].value == pytest.approx(0.0, abs=1e-12)
    assert summary.tables["table"]["quantity"][0] == "eta_hat" and summary.tables["seeds"]["seed"] == [0, 1, 2]
    bad = summarize(QUICK, _arrays([0.1, 0.12, 0.11], [20.0, 25.0, 30.0], [uniform] * 3, [0.3, 0.2, 0.25]))
    assert [c.passed for c in bad.checks] == [False, False, False, False]


@pytest.mark.parametrize("kwargs, field", [({"num_seeds": 1}, "num_seeds"), ({"heldout_sequences": 50}, "heldout_sequences"),
                                           ({"train": rj.TrainConfig(model="multihead")}, "train.model"), ({"stream": -1}, "stream")])
def test_match_config_validates(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MatchConfig(**{"train": QUICK.train, **kwargs})

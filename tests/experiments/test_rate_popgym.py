"""Study rate.popgym: config errors, summarize against hand-computed margins, a tiny run end to end."""
import csv
import dataclasses
import json

import numpy as np
import pytest

import rate_jax
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
                                      "training.learning_rate=0", "training.detach_memory=1",
                                      "training.grad_clip=0", "training.lr_end_factor=2", "dt_window=\"slide\""])
def test_bad_overrides_are_usage_errors(override, capsys):
    assert cli.main(["show", "rate.popgym", "--quick", "--set", override]) == 2
    assert "error:" in capsys.readouterr().err


def test_segment_length_holds_the_episode():
    config = study.QUICK
    assert config.segment_len("repeat_previous") == 18  # 51 steps + the final observation: 52 <= 54
    assert config.train_config("autoencode", "RATE").model.segment_len == 35  # 103 + 1 <= 105
    dt = config.train_config("count_recall", "DT")
    assert dt.model.segment_len == 18 and dt.num_segments == 3 and dt.model.num_mem_tokens == 0


def test_full_is_the_authors_script():
    """run_experiments/POPGym/RATE/{0,9,42}.sh of the authors' repository (the FULL comment names each flag)."""
    full = study.FULL
    script = dict(n_layer=8, d_model=128, n_head=10, d_head=128, d_inner=0, num_mem_tokens=30, mem_len=40,
                  n_head_ca=2, mrv_act="relu", dropout=0.05, dropatt=0.2)
    assert {name: getattr(full.base, name) for name in script} == script
    t = full.training
    assert (t.batch_size, t.learning_rate, t.warmup_steps, t.weight_decay, t.lr_end_factor, t.grad_clip,
            t.detach_memory, full.num_segments) == (32, 3e-4, 100, 0.01, 0.1, 5.0, False, 3)
    tcfg = full.train_config("count_recall", "RATE-nocache")
    assert tcfg.model.mem_len == 0 and tcfg.model.num_mem_tokens == 30
    assert (tcfg.lr_end_factor, tcfg.grad_clip) == (0.1, 5.0)
    # run_experiments/POPGym/DT/{0,9,42}.sh: RATE's line with the feed-forward block on (d-inner 64), one section
    dt = full.train_config("count_recall", "DT")
    assert (dt.model.d_inner, dt.model.num_mem_tokens, dt.model.mem_len, dt.model.n_layer, dt.model.dropatt,
            dt.num_segments, dt.batch_size, dt.learning_rate) == (64, 0, 0, 8, 0.2, 3, 32, 3e-4)
    assert full.train_config("count_recall", "RMT").model.d_inner == 0  # no script of theirs: RATE's line
    assert study.QUICK.train_config("count_recall", "DT").model.d_inner == 0  # QUICK: RATE's line throughout


def test_the_authors_detached_trainer_is_an_option_for_every_model():
    config = dataclasses.replace(study.QUICK, training=dataclasses.replace(study.QUICK.training, detach_memory=True))
    assert not study.QUICK.train_config("repeat_previous", "RATE").detach_memory  # full BPTT by default
    assert all(config.train_config("repeat_previous", v).detach_memory for v in ("RATE", "DT", "RMT", "TrXL"))


def _arrays(config, rate, noise, dt, seeds=4, bc_lstm=None):
    """{task: per-seed mean return} of each arm, as compute returns them (4 episodes per seed); BC-LSTM
    at ``bc_lstm`` (default: DT's returns)."""
    per = lambda v: np.repeat(np.asarray(v, float).reshape(-1, 1), 4, 1) if np.ndim(v) else np.full((seeds, 4), v)
    bc_lstm = dt if bc_lstm is None else bc_lstm
    returns = {t: {"RATE": per(rate[t]), study.NOISE: per(noise[t]), "DT": per(dt[t]), study.BC_LSTM: per(bc_lstm[t])}
               for t in config.tasks}
    return {"returns": returns, "random_return": {"repeat_previous": -0.5, "count_recall": -0.9},
            "val_accuracy": {t: {v: np.ones(seeds) for v in config.variants} for t in config.tasks},
            "final_loss": {t: {v: np.zeros(seeds) for v in (*config.variants, study.BC_LSTM)} for t in config.tasks}}


def test_summarize_margins_by_hand():
    config = study.QUICK
    arrays = _arrays(config, rate={"repeat_previous": [0.9, 0.92, 0.88, 0.9], "count_recall": [-0.5, -0.3, -0.4, -0.4]},
                     noise={"repeat_previous": 0.7, "count_recall": -0.9}, dt={"repeat_previous": 0.8,
                                                                                "count_recall": -0.9},
                     bc_lstm={"repeat_previous": 1.0, "count_recall": -0.2})
    summary = study.summarize(config, arrays)
    m = summary.metrics
    assert m["rate_minus_dt_repeat_previous"] == pytest.approx(0.1)
    assert m["rate_minus_dt_count_recall"] == pytest.approx(0.5)  # RATE -0.4 against DT -0.9
    assert m["rate_minus_dt_mean_return"] == pytest.approx(0.3) and m["rate_noise_repeat_previous"] == 0.7
    # POPGym's normalised score: the sum over the tasks of the mean return (RATE 0.9 - 0.4, DT 0.8 - 0.9)
    assert m["rate_normalised_score"] == pytest.approx(0.5) and m["dt_normalised_score"] == pytest.approx(-0.1)
    assert m["rate_mean_return"] == pytest.approx(0.25) and m["random_normalised_score"] == pytest.approx(-1.4)
    # BC-LSTM beside them: score 1.0 - 0.2, RATE below it by 0.3 / 2 per task (its check judged below)
    assert m["bc_lstm_normalised_score"] == pytest.approx(0.8) and m["rate_minus_bc_lstm_mean_return"] == pytest.approx(-0.15)
    assert m["rate_minus_bc_lstm_count_recall"] == pytest.approx(-0.2) and "bc_lstm_count_recall_val_accuracy" not in m
    assert summary.tables["table"]["BC-LSTM"] == pytest.approx([1.0, -0.2])
    c = {k.name: k for k in summary.checks}
    assert list(c) == ["rate_minus_dt_repeat_previous", "rate_minus_dt_count_recall", "rate_minus_dt_mean_return",
                       "rate_minus_bc_lstm_mean_return"]
    assert c["rate_minus_bc_lstm_mean_return"].verdict == "FAIL"  # -0.15 on every seed
    assert c["rate_minus_bc_lstm_mean_return"].control.value == pytest.approx((0.7 - 1.0 - 0.9 + 0.2) / 2)
    assert all(c[k].verdict == "PASS" and c[k].n == 4 and c[k].unit == "seed" for k in list(c)[:3])
    assert c["rate_minus_dt_count_recall"].lo == pytest.approx(0.5 - 3.182446 * np.std([-0.1, 0.1, 0, 0], ddof=1) / 2,
                                                               rel=1e-5)
    assert c["rate_minus_dt_repeat_previous"].control.value == pytest.approx(-0.1)
    arrays["returns"]["repeat_previous"]["RATE"] = np.full((4, 4), 0.82)  # 0.02 < 0.05 on every seed
    assert [k.verdict for k in study.summarize(config, arrays).checks][:3] == ["FAIL", "PASS", "PASS"]


def test_the_papers_normalised_scores_are_sums_over_tasks():
    """The paper's POPGym rows (all 48 tasks, the 15 reactive, the 33 memory) add up as sums of per-task
    scores do, and not as means; PAPER's per-task figures are the memory subset's sums over its 33 tasks."""
    all48, reactive15 = {"rate": 9.5, "dt": 5.8, "bc_lstm": 9.0}, {"rate": 9.1, "dt": 9.3, "bc_lstm": 9.1}
    for model, memory33 in study.PAPER_SCORES.items():
        assert abs(reactive15[model] + memory33 - all48[model]) <= 0.1 + 1e-9, model  # rounded to 0.1
        assert abs((15 * reactive15[model] + 33 * memory33) / 48 - all48[model]) > 3, model  # not means
        assert study.PAPER[f"{model}_mean_return"] == pytest.approx(memory33 / 33)
    assert study.PAPER["rate_minus_dt_mean_return"] == pytest.approx(4.0 / 33)
    assert study.BC_LSTM_CLAIM.paper == study.PAPER["rate_minus_bc_lstm_mean_return"] == pytest.approx(0.7 / 33)
    assert study.MEAN_CLAIM.paper == study.PAPER["rate_minus_dt_mean_return"]


def test_memory_noise_control_fails_every_claim():
    """With noise in place of the memory passed between segments, RATE is a player with a restarting
    segment context, like DT (tests/rate_jax/test_rate_planted_bugs.py: noise erases what the memory
    carried): fed at DT's returns up to seed noise, the control fails every claim, and a RATE no better
    than its noise arm leaves each claim without power."""
    config = study.QUICK
    rate = {"repeat_previous": [0.92, 0.93, 0.9, 0.92], "count_recall": [-0.5, -0.3, -0.4, -0.4]}
    dt = {"repeat_previous": [0.81, 0.8, 0.82, 0.81], "count_recall": [-0.9, -0.85, -0.95, -0.9]}
    noise = {"repeat_previous": [0.8, 0.82, 0.79, 0.81], "count_recall": [-0.88, -0.9, -0.92, -0.9]}
    bc = {"repeat_previous": [0.85, 0.84, 0.86, 0.85], "count_recall": [-0.8, -0.75, -0.85, -0.8]}  # a memory, weaker
    checks = study.summarize(config, _arrays(config, rate, noise, dt, bc_lstm=bc)).checks
    assert [k.verdict for k in checks] == ["PASS"] * 4 and all(k.control.verdict == "FAIL" for k in checks)
    powerless = study.summarize(config, _arrays(config, rate, rate, dt, bc_lstm=bc)).checks
    assert [k.verdict for k in powerless] == ["NO POWER"] * 4


def test_tiny_run_end_to_end(tmp_path, monkeypatch):
    # as the FULL preset trains: the authors' detached trainer (rate.minigrid_memory's tiny run keeps full
    # backpropagation), RATE with a Transformer-XL cache, and RATE without it; DT, and DT only, is
    # evaluated with the authors' sliding window
    sliding, make = [], rate_jax.make_sliding_evaluate
    monkeypatch.setattr(rate_jax, "make_sliding_evaluate", lambda model, *a, **k: sliding.append(model) or make(model, *a, **k))
    argv = ["run", "rate.popgym", "--quick", "--out", str(tmp_path), *TINY, "--set", "training.detach_memory=true",
            "--set", "training.chunks=2",
            "--set", "base.mem_len=6", "--set", 'variants=["RATE", "DT", "RATE-nocache"]']
    assert cli.main(argv) in (0, 1)
    assert len(sliding) == 1 and sliding[0].num_mem_tokens == sliding[0].mem_len == 0
    out = tmp_path / "rate.popgym"
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["training"]["detach_memory"] is True
    assert np.isfinite(result["metrics"]["rate_no_cache_repeat_previous"])
    assert [c["name"] for c in result["checks"]] == ["rate_minus_dt_repeat_previous", "rate_minus_dt_mean_return",
                                                     "rate_minus_bc_lstm_mean_return"]
    assert all(c["kind"] == "interval" and c["n"] == 1 and c["verdict"] == "INCONCLUSIVE" for c in result["checks"])
    m = result["metrics"]
    assert -1.0 <= m["rate_repeat_previous"] <= 1.0 and -1.0 <= m["random_repeat_previous"] < 0.0
    rows = list(csv.DictReader((out / "returns.csv").open()))
    assert {(r["task"], r["model"]) for r in rows} == {("repeat_previous", v) for v in
                                                       ("RATE", "DT", "RATE-nocache", study.BC_LSTM, study.NOISE)}
    assert -1.0 <= m["bc_lstm_repeat_previous"] <= 1.0
    assert (out / "returns.png").stat().st_size > 0
    with np.load(out / "popgym.npz") as npz:
        assert npz["return_repeat_previous_RATE"].shape == (1, 4)

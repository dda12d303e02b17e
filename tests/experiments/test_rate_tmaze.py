"""Study rate.tmaze: config overrides, summarize on synthetic arrays, and a tiny run end to end."""
import csv
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import tmaze

# The smallest run that passes validation, at the quick K = 6, N = 3 (training corridors 4, 10, 16,
# context 18): one layer, 4 steps in 2 chunks, 2 seeds, 2 episodes on corridors 4, 16 and 22.
TINY = ["--set", "base.n_layer=1", "--set", "base.d_model=16", "--set", "base.d_head=8",
        "--set", "base.num_mem_tokens=2", "--set", "num_steps=4", "--set", "chunks=2", "--set", "num_train=16",
        "--set", "num_val=8", "--set", "batch_size=4", "--set", "warmup_steps=1", "--set", "episodes=2",
        "--set", "eval_corridors=[4,16,22]", "--seeds", "2"]


def test_show_applies_nested_overrides(capsys):
    assert cli.main(["show", "rate.tmaze", "--quick", "--set", "base.d_model=32"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["base"]["d_model"] == 32 and shown["base"]["segment_len"] == 6
    assert shown["variants"] == ["RATE", "DT"] and shown["seeds"] == 3


@pytest.mark.parametrize("override", ["chunks=3", "variants=[\"RATE\"]", "eval_corridors=[4,10]",
                                      "base.segment_len=2", "num_segments=1", "variants=[\"RATE\",\"DT\",\"XL\"]"])
def test_bad_overrides_are_usage_errors(override, capsys):
    assert cli.main(["show", "rate.tmaze", "--quick", "--set", override]) == 2
    assert "error:" in capsys.readouterr().err


def _synthetic(config, rate, dt, noise, seeds=3, steps=None):
    """Arrays as compute returns them, every seed at the given success per corridor."""
    steps = steps or config.num_steps
    rows = lambda v: np.tile(np.asarray(v, float), (seeds, 1))
    return {
        "corridor_lengths": np.asarray(config.eval_corridors),
        "success": {"RATE": rows(rate), "DT": rows(dt), tmaze.NOISE: rows(noise)},
        "val_turn_accuracy": {"RATE": np.full(seeds, 0.9), "DT": np.full(seeds, 0.6)},
        "curves": {k: {"loss": np.tile(np.linspace(1.0, 0.1, steps), (seeds, 1)),
                       "grad_norm": np.ones((seeds, steps))} for k in ("RATE", "DT")},
    }


def test_summarize_on_synthetic_arrays():
    config = tmaze.QUICK  # corridors 4, 10, 16 in distribution; 22, 34, 58 beyond K*N = 18
    arrays = _synthetic(config, rate=[1, 1, 1, 1, 0.9, 0.8], dt=[1, 1, 1, 0.5, 0.6, 0.4],
                        noise=[1.0, 0.5, 0.4, 0.5, 0.5, 0.5])
    summary = tmaze.summarize(config, arrays)
    m = summary.metrics
    assert m["rate_success_in_distribution_min"] == 1.0 and m["rate_success_longest"] == pytest.approx(0.8)
    assert m["dt_success_beyond_context"] == pytest.approx(0.5)
    assert m["rate_success_memory_noise"] == pytest.approx(0.45)  # corridors 10 and 16: the cue crosses a segment
    assert m["dt_success_in_distribution"] == 1.0 and m["rate_success_beyond_training"] == pytest.approx(0.9)
    assert m["rate_final_loss"] == pytest.approx(np.linspace(1.0, 0.1, 400)[-20:].mean())
    assert m["dt_val_turn_accuracy"] == pytest.approx(0.6) and m["rate_final_grad_norm"] == 1.0
    verdict = {c.name: c.passed for c in summary.checks}
    assert verdict == dict.fromkeys(("rate_success_in_distribution_min", "dt_success_beyond_context",
                                     "rate_success_longest", "rate_success_memory_noise"), True)
    assert {c.name: c.paper for c in summary.checks}["dt_success_beyond_context"] == tmaze.PAPER["dt_success_beyond_context"]
    table = summary.tables["table"]
    assert table["corridor_length"] == list(config.eval_corridors)
    assert table["in_distribution"] == [True, True, True, False, False, False]
    assert table["crosses_segment"] == [False, True, True, False, False, False]
    assert table[tmaze.NOISE][1] == 0.5

    # a DT that still sees the cue beyond its context, a RATE that loses it in distribution
    bad = tmaze.summarize(config, _synthetic(config, rate=[1, 0.5, 1, 1, 1, 0.6], dt=[1] * 6, noise=[1] * 6))
    assert not any(c.passed for c in bad.checks)


def test_summarize_of_full_variants():
    config = dataclasses.replace(tmaze.QUICK, variants=("RATE", "DT", "RMT"))
    arrays = _synthetic(config, rate=[1] * 6, dt=[0.5] * 6, noise=[0.5] * 6)
    arrays["success"]["RMT"] = arrays["success"]["DT"]
    arrays["val_turn_accuracy"]["RMT"] = np.zeros(3)
    arrays["curves"]["RMT"] = arrays["curves"]["DT"]
    m = tmaze.summarize(config, arrays).metrics
    assert m["rmt_success_beyond_training"] == 0.5 and m["rmt_val_turn_accuracy"] == 0.0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tmaze")
    rc = cli.main(["run", "rate.tmaze", "--quick", *TINY, "--out", str(out)])
    return rc, out / "rate.tmaze"


def test_tiny_run_end_to_end(tiny_run):
    rc, folder = tiny_run
    result = json.loads((folder / "result.json").read_text())
    passed = all(c["passed"] for c in result["checks"])
    assert rc == (0 if passed else 1)  # 4 steps do not train a model: the verdict may go either way
    assert [c["name"] for c in result["checks"]] == ["rate_success_in_distribution_min", "dt_success_beyond_context",
                                                   "rate_success_longest", "rate_success_memory_noise"]
    assert result["config"]["base"]["d_model"] == 16 and result["config"]["num_steps"] == 4
    assert result["config"]["seeds"] == 2 and {"field": "seeds", "value": 2} in result["overrides"]
    assert 0.0 <= result["metrics"]["rate_success_in_distribution"] <= 1.0
    assert result["provenance"]["compile_s"] > 0

    with open(folder / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["model", "seed", "step", "loss", "grad_norm"]
    assert len(rows) == 2 * 2 * 4  # variants x seeds x steps
    assert {(r["model"], r["seed"]) for r in rows} == {(m, s) for m in ("RATE", "DT") for s in ("0", "1")}
    assert [r["step"] for r in rows[:4]] == ["1", "2", "3", "4"]
    assert all(float(r["loss"]) > 0 and float(r["grad_norm"]) > 0 for r in rows)  # every step recorded

    with open(folder / "success.csv") as f:
        success = list(csv.DictReader(f))
    assert len(success) == 3 * 2 * 3  # (RATE, DT, RATE+memory noise) x seeds x corridors
    table = (folder / "table.csv").read_text().splitlines()
    assert table[0].split(",")[:4] == ["corridor_length", "in_distribution", "beyond_context", "crosses_segment"]
    assert len(table) == 4
    assert (folder / "success_vs_length.png").stat().st_size > 10_000
    assert set(np.load(folder / "tmaze.npz")) >= {"corridor_lengths", "success_RATE", "loss_DT"}
    assert not any(p.name.startswith("ckpt_") for p in folder.iterdir())  # checkpoints removed on success

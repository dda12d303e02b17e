"""Study rate.tmaze: config overrides, summarize on synthetic arrays, and a tiny run end to end."""
import csv
import dataclasses
import json
import types

import numpy as np
import pytest

from experiments import cli
from experiments.studies.rate import tmaze

# The smallest run that passes validation, at the quick K = 6, N = 3 (training corridors 4, 10, 16,
# context 18): one layer, 4 steps in 2 chunks, 2 seeds, 2 episodes on corridors 4, 16 and 22 (checked at 22);
# RATE and DT only (RMT and RATE-noMRV share one configuration, trained once: tested above with a
# stubbed trainer; the end-to-end run needs no third model).
TINY = ["--set", "base.n_layer=1", "--set", "base.d_model=16", "--set", "base.d_head=8",
        "--set", "base.num_mem_tokens=2", "--set", "num_steps=4", "--set", "chunks=2", "--set", "num_train=16",
        "--set", "num_val=8", "--set", "batch_size=4", "--set", "warmup_steps=1", "--set", "episodes=[2,2,2]",
        "--set", "eval_corridors=[4,16,22]", "--set", "check_corridor=22", "--set", "eval_slots=3", "--set", 'variants=["RATE","DT"]', "--seeds", "2"]
CHECKS = ["rate_success_in_distribution_min", "rate_success_check_corridor", "rate_minus_rmt_check_corridor",
          "dt_success_beyond_context"]


def test_show_applies_nested_overrides(capsys):
    assert cli.main(["show", "rate.tmaze", "--quick", "--set", "base.d_model=32"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["base"]["d_model"] == 32 and shown["base"]["segment_len"] == 6
    assert shown["variants"] == ["RATE", "RMT", "DT"] and shown["seeds"] == 4
    assert shown["stream"] == 0


@pytest.mark.parametrize("override", ["chunks=3", "variants=[\"RATE\"]", "eval_corridors=[4,10]",
                                      "base.segment_len=2", "num_segments=1", "variants=[\"RATE\",\"DT\",\"XL\"]",
                                      "stream=-1", "episodes=[48]", "check_corridor=16", "check_corridor=5",
                                      "eval_slots=0"])
def test_bad_overrides_are_usage_errors(override, capsys):
    assert cli.main(["show", "rate.tmaze", "--quick", "--set", override]) == 2
    assert "error:" in capsys.readouterr().err


def _synthetic(config, rate, dt, noise, others=None, seeds=3, steps=None, noise_turned=1.0):
    """Arrays as compute returns them, every seed at the given success per corridor (a [seeds,
    corridors] array gives each seed its own); ``others`` {variant: success per corridor} for the
    remaining variants (default: DT's). Every episode turns at the junction, but the noise arm's
    ``noise_turned`` (per corridor)."""
    steps = steps or config.num_steps
    rows = lambda v: np.broadcast_to(np.asarray(v, float), (seeds, len(config.eval_corridors))).copy()
    success = {name: rows((others or {}).get(name, dt)) for name in config.variants}
    success.update({"RATE": rows(rate), "DT": rows(dt), tmaze.NOISE: rows(noise)})
    chose = {name: rows(1.0) for name in success}
    chose[tmaze.NOISE] = rows(noise_turned)
    return {
        "corridor_lengths": np.asarray(config.eval_corridors),
        "success": success,
        "chose": chose,
        "val_turn_accuracy": {k: np.full(seeds, 0.9 if k == "RATE" else 0.6) for k in config.variants},
        "curves": {k: {"loss": np.tile(np.linspace(1.0, 0.1, steps), (seeds, 1)),
                       "grad_norm": np.ones((seeds, steps))} for k in config.variants},
    }


def test_summarize_on_synthetic_arrays():
    # corridors 4, 10, 16 in distribution; 22 .. 9600 beyond K*N = 18; checks at 58 (index 5)
    config = dataclasses.replace(tmaze.QUICK, variants=("RATE", "RMT", "TrXL", "RATE-noMRV", "DT"))
    assert config.eval_corridors[5] == config.check_corridor == 58 and config.eval_corridors[-1] == 9600
    tail = [0.5] * 4  # corridors 150, 600, 2400, 9600
    rate = np.tile([1, 1, 1, 1, 0.9, 0.8, 0.7, 0.6, 0.6, 0.55], (3, 1))
    rate[:, 5] = [0.78, 0.8, 0.82]  # seeds differ at the check corridor
    arrays = _synthetic(config, rate=rate, dt=[1, 1, 1, 0.5, 0.6, 0.4] + tail,
                        noise=[1.0, 0.5, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.13],
                        noise_turned=[1, 1, 0.8, 1, 1, 1, 1, 1, 1, 0.26],
                        others={"RMT": [1, 1, 1, 1, 0.8, 0.78] + tail, "RATE-noMRV": [1, 1, 1, 1, 0.8, 0.65] + tail,
                                "TrXL": [1, 1, 1, 0.9, 0.6, 0.5] + tail})
    summary = tmaze.summarize(config, arrays)
    m = summary.metrics
    assert m["rate_success_in_distribution_min"] == 1.0 and m["rate_success_check_corridor"] == pytest.approx(0.8)
    assert m["rate_success_longest"] == pytest.approx(0.55)
    assert m["dt_success_beyond_context"] == pytest.approx(0.5)
    assert m["rate_success_memory_noise"] == pytest.approx(0.45)  # corridors 10 and 16: the cue crosses a segment
    # below chance at 9,600 because most noise-arm episodes time out before the junction; their turns are at chance
    assert m["rate_success_longest_memory_noise"] == pytest.approx(0.13)
    assert m["rate_memory_noise_turned_longest"] == pytest.approx(0.26)
    assert m["rate_memory_noise_right_turns_longest"] == pytest.approx(0.5)
    assert m["rate_memory_noise_turned_crosses_segment"] == pytest.approx(0.9)
    assert m["rate_turned_longest"] == 1.0 and m["rate_right_turns_longest"] == pytest.approx(0.55)
    assert m["dt_success_in_distribution"] == 1.0 and m["rate_success_beyond_training"] == pytest.approx(5.15 / 7)
    assert m["rate_final_loss"] == pytest.approx(np.linspace(1.0, 0.1, 400)[-20:].mean())
    assert m["dt_val_turn_accuracy"] == pytest.approx(0.6) and m["rate_final_grad_norm"] == 1.0
    at_check = {k: m[f"success_check_{k}"] for k in ("rate", "rmt", "trxl", "rate_no_mrv", "dt")}
    assert at_check == pytest.approx({"rate": 0.8, "rmt": 0.78, "trxl": 0.5, "rate_no_mrv": 0.65, "dt": 0.4})
    longest = {k: m[f"success_longest_{k}"] for k in ("rate", "rmt", "trxl", "rate_no_mrv", "dt")}
    assert longest == pytest.approx({"rate": 0.55, "rmt": 0.5, "trxl": 0.5, "rate_no_mrv": 0.5, "dt": 0.5})
    assert m["rate_minus_rate_no_mrv_check_corridor"] == pytest.approx(0.15)  # reported, not checked
    assert m["rate_minus_dt_check_corridor"] == pytest.approx(0.4) and m["rate_minus_trxl_longest"] == pytest.approx(0.05)
    c = {k.name: k for k in summary.checks}
    assert list(c) == CHECKS
    assert {k: v.verdict for k, v in c.items()} == {**dict.fromkeys(CHECKS, "PASS"),
                                                     "rate_minus_rmt_check_corridor": "INCONCLUSIVE"}
    gap = c["rate_minus_rmt_check_corridor"]  # per seed 0, 0.02, 0.04: t interval 0.02 +- 4.303 * 0.02 / sqrt 3
    assert (gap.value, gap.n, gap.unit) == (pytest.approx(0.02), 3, "seed")
    assert gap.lo == pytest.approx(0.02 - 4.302653 * 0.02 / np.sqrt(3), rel=1e-5) and gap.n_needed == 4
    assert gap.control.value == pytest.approx(-0.28) and gap.control.verdict == "FAIL"
    assert c["rate_success_in_distribution_min"].paper == tmaze.PAPER["rate_success_in_distribution_min"]
    assert c["dt_success_beyond_context"].control.value == pytest.approx(5.15 / 7)
    table = summary.tables["table"]
    assert table["corridor_length"] == list(config.eval_corridors)
    assert table["in_distribution"] == [True, True, True] + [False] * 7
    assert table["crosses_segment"] == [False, True, True] + [False] * 7
    assert table["episodes_per_seed"] == list(config.episodes)
    assert table[tmaze.NOISE][1] == 0.5 and table[f"{tmaze.NOISE} turned"][2] == pytest.approx(0.8)

    # a RATE that loses the cue in distribution and is no better than RMT at the check corridor; a DT that
    # cannot walk the long corridors (success 0 beyond its context)
    bad = tmaze.summarize(config, _synthetic(config, rate=[1, 0.5, 1, 1, 1, 0.6] + tail, dt=[1] * 3 + [0.0] * 7,
                                             noise=[1] * 10, others={"RMT": [1] * 10}))
    assert [k.verdict for k in bad.checks] == ["FAIL"] * 4


def test_memory_noise_control_fails_each_claim():
    """Each claim's control arm fails it. RATE with noise in place of its memory cannot read the cue once
    it has crossed a segment (tests/rate_jax/test_rate_planted_bugs.py), so it guesses at corridors 10,
    16 and 58 (fed here at chance up to episode noise); RATE, whose memory carries the cue, is not at
    DT's chance beyond DT's context. A RATE no better than its noise arm leaves each claim without power."""
    config = tmaze.QUICK
    rng = np.random.default_rng(0)
    jitter = lambda centre: np.clip(centre + 0.04 * rng.standard_normal((4, 10)), 0, 1)
    rate = np.minimum(jitter(0.97), 1.0)
    rate[:, :3] = 1.0
    noise = jitter(0.5)
    noise[:, 0] = 1.0  # corridor 4 lies inside one segment: the cue is still in context
    dt = jitter(0.5)
    dt[:, :3] = 1.0
    arrays = _synthetic(config, rate=rate, dt=dt, noise=noise, others={"RMT": jitter(0.7)}, seeds=4)
    checks = tmaze.summarize(config, arrays).checks
    assert [k.name for k in checks] == CHECKS
    assert [k.verdict for k in checks] == ["PASS"] * 4 and all(k.control.verdict == "FAIL" for k in checks)
    arrays["success"][tmaze.NOISE] = arrays["success"]["RATE"]
    powerless = tmaze.summarize(config, arrays).checks
    assert [k.verdict for k in powerless[:3]] == ["NO POWER"] * 3


def test_summarize_compares_only_the_variants_run():
    config = dataclasses.replace(tmaze.QUICK, variants=("RATE", "DT", "RMT"))
    m = tmaze.summarize(config, _synthetic(config, rate=[1] * 10, dt=[0.5] * 10, noise=[0.5] * 10)).metrics
    assert m["rmt_success_beyond_training"] == 0.5 and m["rmt_val_turn_accuracy"] == 0.6
    assert "success_longest_trxl" not in m and "rate_minus_trxl_longest" not in m


def test_variants_of_one_configuration_are_trained_once(monkeypatch):
    """At the presets RATE has no cache, so RATE-noMRV is RMT (the presets run RMT only): asked for both,
    compute trains it once and reuses it."""
    config = dataclasses.replace(tmaze.QUICK, variants=("RATE", "RMT", "TrXL", "RATE-noMRV", "DT"))
    assert config.train_config("RMT") == config.train_config("RATE-noMRV")
    assert "RATE-noMRV" not in tmaze.QUICK.variants + tmaze.FULL.variants
    assert len({config.train_config(v) for v in config.variants}) == 4
    trained = []
    monkeypatch.setattr(tmaze, "train_variant", lambda cfg, name, ctx: trained.append(name) or (
        types.SimpleNamespace(params=name), {"loss": np.zeros((1, 2))}, np.zeros(1)))
    monkeypatch.setattr(tmaze, "evaluate_variant", lambda cfg, name, params, ctx, noise=(False,): [
        {"success": np.zeros((1, 6)), "chose": np.ones((1, 6))}] * len(noise))
    out = tmaze.compute(config, ctx=None)
    assert trained == ["RATE", "RMT", "TrXL", "DT"]
    assert out["success"]["RATE-noMRV"] is out["success"]["RMT"] and set(out["curves"]) == set(config.variants)
    assert out["chose"]["RATE-noMRV"] is out["chose"]["RMT"] and set(out["chose"]) == {*config.variants, tmaze.NOISE}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tmaze")
    rc = cli.main(["run", "rate.tmaze", "--quick", *TINY, "--out", str(out)])
    return rc, out / "rate.tmaze"


def test_tiny_run_end_to_end(tiny_run):
    rc, folder = tiny_run
    result = json.loads((folder / "result.json").read_text())
    failed = any(c["verdict"] in ("FAIL", "NO POWER") for c in result["checks"])
    assert rc == (1 if failed else 0)  # 4 steps do not train a model: the verdict may go either way
    assert [c["name"] for c in result["checks"]] == [c for c in CHECKS if "rmt" not in c]
    assert all(c["kind"] == "interval" and c["n"] == 2 and c["control"]["n"] == 2 for c in result["checks"])
    assert result["config"]["base"]["d_model"] == 16 and result["config"]["num_steps"] == 4
    assert result["config"]["seeds"] == 2 and {"field": "seeds", "value": 2} in result["overrides"]
    assert 0.0 <= result["metrics"]["rate_success_in_distribution"] <= 1.0
    assert result["provenance"]["compile_s"] > 0

    with open(folder / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["model", "seed", "step", "loss", "grad_norm"]
    assert len(rows) == 2 * 2 * 4  # variants x seeds x steps
    variants = ("RATE", "DT")
    assert {(r["model"], r["seed"]) for r in rows} == {(m, s) for m in variants for s in ("0", "1")}
    assert [r["step"] for r in rows[:4]] == ["1", "2", "3", "4"]
    assert all(float(r["loss"]) > 0 and float(r["grad_norm"]) > 0 for r in rows)  # every step recorded

    with open(folder / "success.csv") as f:
        success = list(csv.DictReader(f))
    assert len(success) == 3 * 2 * 3  # (2 variants, RATE+memory noise) x seeds x corridors
    turned = np.array([float(r["turned"]) for r in success])
    assert ((0 <= turned) & (turned <= 1)).all() and (turned >= np.array([float(r["success"]) for r in success])).all()
    table = (folder / "table.csv").read_text().splitlines()
    assert table[0].split(",")[:5] == ["corridor_length", "episodes_per_seed", "in_distribution", "beyond_context",
                                       "crosses_segment"]
    assert len(table) == 4
    assert (folder / "success_vs_length.png").stat().st_size > 10_000
    assert set(np.load(folder / "tmaze.npz")) >= {"corridor_lengths", "success_RATE", "loss_DT"}
    assert not any(p.name.startswith("ckpt_") for p in folder.iterdir())  # checkpoints removed on success


def test_full_trains_the_baselines_on_the_authors_own_line():
    """FULL's DT, RMT and TrXL read run_experiments/TMaze.sh's baseline line flag for flag (8 layers, 8 heads of
    32, d_inner 64, dropatt 0.1, RMT's 10 memory tokens, TrXL's 450-step cache, batch 64, lr 1e-4, weight decay
    0.001); RATE and its ablations keep RATE's line, and QUICK keeps RATE's line for every model."""
    script = {"n_layer": 8, "n_head": 8, "d_head": 32, "d_inner": 64, "d_model": 64, "dropatt": 0.1, "dropout": 0.2,
              "segment_len": 50}
    for name, extra in (("DT", {"segment_len": 150, "num_mem_tokens": 0, "mem_len": 0}),
                        ("RMT", {"num_mem_tokens": 10, "mem_len": 0, "n_head_ca": 0}),
                        ("TrXL", {"num_mem_tokens": 0, "mem_len": 450, "n_head_ca": 0})):
        cfg = tmaze.FULL.train_config(name)
        got = {k: getattr(cfg.model, k) for k in {**script, **extra}}
        assert got == {**script, **extra}, name  # DT sees the whole 150-step trajectory as one section
        assert (cfg.batch_size, cfg.learning_rate, cfg.weight_decay, cfg.warmup_steps) == (64, 1e-4, 1e-3, 1000), name
    rate = tmaze.FULL.train_config("RATE")
    assert (rate.model.n_layer, rate.model.n_head, rate.model.d_inner, rate.model.dropatt, rate.model.num_mem_tokens,
            rate.batch_size, rate.learning_rate, rate.weight_decay) == (10, 4, 0, 0.0, 15, 128, 3e-4, 0.01)
    assert tmaze.FULL.train_config("RATE-noMRV").model.n_layer == 10  # an ablation of RATE, on RATE's line
    assert not tmaze.QUICK.authors_baselines
    assert tmaze.QUICK.train_config("RMT").model.n_layer == tmaze.QUICK.base.n_layer

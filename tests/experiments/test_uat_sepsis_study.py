"""Study ``uat.sepsis``: presets, config validation, the summary and checks on planted arrays
(gate means against numpy loops), and the command line run end to end on planted training
outputs (the training programs are ``uat_jax``'s, tested there; a real quick run is `make run`)."""
import csv
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli, configs, seeds
from experiments.studies.uat import sepsis as study
from uat_jax import domains

REGIMES = ("fluid_responsive", "vasopressor_dependent", "conservative")


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_presets():
    assert study.FULL.size.horizon == 90 and study.FULL.size.dropout == 0.2 and study.FULL.size.ema_decay == 0.8
    assert (study.FULL.size.d_model, study.FULL.size.n_layers, study.FULL.size.batch_size) == (64, 3, 256)
    assert study.FULL.models == (*study.MODELS, *study.ABLATIONS) and study.QUICK.models == study.CHECKED
    assert study.FULL.null_rewards and study.QUICK.null_rewards and study.QUICK.size.horizon == 60
    assert study.FULL.rows == (*study.MODELS, *study.ABLATIONS, study.NULL, "iql", "tent", "cotta")
    assert dataclasses.replace(study.QUICK, null_rewards=False).rows == (*study.CHECKED, "iql", "tent", "cotta")
    assert study.QUICK.iql.steps < study.FULL.iql.steps and study.FULL.iql == study.iql.IqlConfig()
    assert study.QUICK.stream == study.FULL.stream == seeds.JUDGED


@pytest.mark.parametrize("field, value, message", [
    ("models", ["uat", "vt", "dt"], "models must"),
    ("models", ["uat", "vt", "adt", "adt"], "models must"),
    ("models", ["uat", "vt", "adt", "no_such_ablation"], "models must"),
    ("adapt", ["tent", "bn"], "adapt must"),
    ("adapt_batch", 5, "adapt_batch must"),
    ("offline", ["iql", "sac"], "offline must"),
    ("iql.expectile", 1.5, "iql.expectile must"),
    ("seeds", 0, "seeds must"),
    ("stream", 2, "stream must"),
    ("size.horizon", 40, "horizon 40 cannot hold 6 segments"),
    ("sim.min_segment_len", 20, "horizon 60 cannot hold 6 segments of min_segment_len 20"),
    ("sim.obs_noise", -1.0, "obs_noise = -1.0 outside"),
    ("sim.resistance_decay", 0.0, "resistance_decay = 0.0 outside"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(configs.ConfigError, match=message):
        configs.apply(study.QUICK, [(field, value)])


def _gate(seeds_, episodes=2, T=20):
    """UAT's replay: switches at steps 6 and 13 of every episode (regimes 0, 1, 2 then), ||rho_t|| = t / 10."""
    switched = np.zeros((seeds_, episodes, T), bool)
    switched[..., [6, 13]] = True
    regime = np.zeros((seeds_, episodes, T), int)
    regime[..., 6:13], regime[..., 13:] = 1, 2
    gate = np.broadcast_to(np.arange(T) / 10.0, (seeds_, episodes, T)).copy()
    return {"gate": gate, "correct": np.ones((seeds_, episodes, T), bool), "regime": regime, "switched": switched}


def _arrays(cfg, acc: dict, post: dict):
    metrics = {}
    for m in cfg.rows:
        metrics[m] = {"accuracy": np.asarray(acc[m], float), "post_shift_accuracy": np.asarray(post[m], float),
                      "recovery": np.tile(np.linspace(0.2, 0.9, domains.RECOVERY_STEPS), (cfg.seeds, 1)),
                      **{f"accuracy_{r}": np.full(cfg.seeds, 0.1 * (k + 1)) for k, r in enumerate(REGIMES)}}
    curves = {m: {"loss": np.ones((cfg.seeds, 3))} for m in cfg.trained}
    return {"metrics": metrics, "curves": curves, "gate": _gate(cfg.seeds)}


NOISE = np.array([0.0, 0.01, -0.01, 0.005])  # per seed, shared by every model (the arms are paired by seed)
LEVELS = {"uat": (0.75, 0.55), "vt": (0.6, 0.4), "adt": (0.7, 0.5), "dt": (0.65, 0.475), "tent": (0.6, 0.425),
          "cotta": (0.55, 0.4), "uat_null": (0.6, 0.4), "iql": (0.65, 0.4),
          "no_kv": (0.62, 0.41)}  # (overall, post-shift) seed means


def _levels(**changes):
    """(acc, post): {model: [4 seeds]}, the LEVELS with ``changes`` {model: (overall, post)} plus NOISE."""
    levels = {**LEVELS, **changes}
    return ({m: a + NOISE for m, (a, _) in levels.items()}, {m: p + NOISE for m, (_, p) in levels.items()})


PASSING = _levels()


def test_summary_metrics_and_checks_on_planted_arrays():
    cfg = dataclasses.replace(study.QUICK, seeds=4, models=("uat", "vt", "adt", "dt"), null_rewards=True)
    acc, post = PASSING
    s = study.summarize(cfg, _arrays(cfg, acc, post))
    m = s.metrics
    assert m["acc_uat"] == pytest.approx(0.75 + NOISE.mean()) and m["acc_uat_std"] == pytest.approx(NOISE.std())
    assert m["post_tent"] == pytest.approx(0.425 + NOISE.mean()) and m["acc_dt_conservative"] == pytest.approx(0.3)
    assert m["uat_feedback_gain_post"] == pytest.approx(0.55 - 0.4)
    checks = {c.name: c for c in s.checks}
    assert list(checks) == [c.name for c in study.CLAIMS]
    assert checks["uat_beats_vt_post_shift"].value == pytest.approx(0.55 - 0.4)
    assert checks["uat_beats_input_level_post_shift"].value == pytest.approx(0.55 - 0.5)  # A-DT, the better
    assert checks["uat_beats_tta_post_shift"].value == pytest.approx(0.55 - 0.425)  # TENT, the better
    assert checks["uat_beats_offline_rl_post_shift"].value == pytest.approx(0.55 - 0.4)
    assert checks["uat_beats_offline_rl_post_shift"].paper == pytest.approx(0.599 - 0.425)
    assert checks["uat_beats_vt_overall"].value == pytest.approx(0.75 - 0.6)
    assert checks["uat_beats_input_level_post_shift"].paper == pytest.approx(0.599 - 0.442)
    for c in checks.values():  # paired by seed: the shared noise cancels, a zero-width interval
        assert c.verdict == "PASS" and c.n == 4 and c.unit == "seed" and c.lo == pytest.approx(c.hi)
        assert c.control.arm == study.CONTROL and c.control.n == 4
    # gate means by numpy: ||rho_t|| = t / 10 with regimes on steps 0-5, 6-12, 13-19; post-shift steps 6-10, 13-17
    t = np.arange(20) / 10.0
    assert m["gate_fluid_responsive"] == pytest.approx(t[:6].mean())
    assert m["gate_conservative"] == pytest.approx(t[13:].mean())
    assert m["gate_post_shift"] == pytest.approx(np.concatenate([t[6:11], t[13:18]]).mean())
    assert m["gate_settled"] == pytest.approx(np.concatenate([t[11:13], t[18:]]).mean())
    assert s.tables["table"]["model"] == list(cfg.rows)
    assert s.tables["recovery"]["steps_after_switch"][:3] == [0, 1, 2]
    # UAT below DT-style after a switch fails the input-level check, and only it
    s = study.summarize(cfg, _arrays(cfg, *_levels(dt=(0.65, 0.7))))
    assert {c.name: c.verdict for c in s.checks if not c.passed} == {"uat_beats_input_level_post_shift": "FAIL"}
    # without DT-style the input-level check reads A-DT alone; without UAT-null the control runs in the tests only
    quick = dataclasses.replace(study.QUICK, seeds=4, null_rewards=False)
    s = study.summarize(quick, _arrays(quick, *_levels(dt=(0.65, 0.7))))
    assert {c.name: c.value for c in s.checks}["uat_beats_input_level_post_shift"] == pytest.approx(0.55 - 0.5)
    assert {c.control.verdict for c in s.checks} == {"not run here"}
    no_tta = dataclasses.replace(quick, adapt=())
    assert "uat_beats_tta_post_shift" not in [c.name for c in study.summarize(no_tta, _arrays(no_tta, acc, post)).checks]
    no_iql = dataclasses.replace(quick, offline=())
    assert "iql" not in no_iql.rows
    assert "uat_beats_offline_rl_post_shift" not in [c.name for c in
                                                     study.summarize(no_iql, _arrays(no_iql, acc, post)).checks]
    # IQL within 0.05 of UAT after a switch fails its check, and only it
    s = study.summarize(cfg, _arrays(cfg, *_levels(iql=(0.65, 0.52))))
    assert [c.name for c in s.checks if not c.passed] == ["uat_beats_offline_rl_post_shift"]
    # seed noise that does not cancel leaves a margin inside the interval: INCONCLUSIVE, with a seed count
    noisy = {**post, "uat": post["uat"] - 0.1 + np.array([0.0, 0.04, -0.04, 0.01])}
    c = {c.name: c for c in study.summarize(cfg, _arrays(cfg, acc, noisy)).checks}["uat_beats_vt_post_shift"]
    assert c.verdict == "INCONCLUSIVE" and c.n_needed > 4


def test_the_null_reward_control_fails_every_claim():
    """The control, UAT fed null rewards in UAT's place, judged on the same claims: at VT's level (it cannot
    re-identify the regime) every claim is rejected; a UAT-null that matches UAT makes every check NO POWER."""
    cfg = dataclasses.replace(study.QUICK, seeds=4, null_rewards=True)
    checks = study.summarize(cfg, _arrays(cfg, *PASSING)).checks
    assert [c.control.verdict for c in checks] == ["FAIL", "FAIL", "FAIL", "FAIL", "FAIL"]
    assert checks[0].control.value == pytest.approx(0.0)  # UAT-null - VT after a switch
    assert all(c.verdict == "PASS" for c in checks)
    as_uat = study.summarize(cfg, _arrays(cfg, *_levels(uat_null=LEVELS["uat"]))).checks
    assert [c.verdict for c in as_uat] == ["NO POWER"] * 5


def test_cli_run_end_to_end_on_planted_training_outputs(tmp_path, monkeypatch):
    """compute's glue (the kept UAT cells to the gate replay, the task axis dropped) and the files written."""
    calls = {}

    def fake_train_models(ctx, name, size, runs, labels, num_seeds, stream, adapt=None, domain="darkroom", env=None,
                          keep=()):
        calls["train"] = (name, domain, sorted(runs), sorted(adapt), keep, env.horizon)
        calls["knobs"] = (float(env.obs_noise), float(env.resistance_decay), float(env.tilt))
        acc, post = PASSING
        out = {}
        calls["uat_labels"] = labels["uat"]
        for m in (*runs, *adapt):
            rows = ["uat", "uat_null"] if m == "uat" else [m]  # the tasks of m, in order
            out[m] = {"accuracy": np.asarray([acc[r] for r in rows]),
                      "post_shift_accuracy": np.asarray([post[r] for r in rows]),
                      "recovery": np.full((len(rows), num_seeds, domains.RECOVERY_STEPS), 0.5),
                      **{f"accuracy_{r}": np.full((len(rows), num_seeds), 0.5) for r in REGIMES}}
            if m in runs:
                out[m].update(loss=np.ones((len(rows), num_seeds, 4)), train_accuracy=np.zeros((len(rows), num_seeds, 4)))
        out["uat"]["params"] = {"w": np.arange(2 * num_seeds)}  # flat over the clean and null tasks x seeds
        return out

    def fake_replay_grid(ctx, name, cell, params, tasks, labels, num_seeds, stream, env=None):
        calls["replay"] = (name, params["w"].tolist(), labels)
        return {k: v[None] for k, v in _gate(num_seeds).items()}

    def fake_train_grid(ctx, name, train_cfg, tasks, labels, num_seeds, stream, keep_params=False, env=None,
                        make_cell=None):
        calls["iql"] = (name, labels, train_cfg.domain, train_cfg.eval_episodes, make_cell(train_cfg, False).__name__)
        acc, post = PASSING
        return {"accuracy": np.asarray([acc["iql"]]), "post_shift_accuracy": np.asarray([post["iql"]]),
                "recovery": np.full((1, num_seeds, domains.RECOVERY_STEPS), 0.5),
                **{f"accuracy_{r}": np.full((1, num_seeds), 0.5) for r in REGIMES},
                **{k: np.ones((1, num_seeds, 5)) for k in ("loss", "value_loss", "actor_loss", "critic_loss")}}

    monkeypatch.setattr(study, "train_models", fake_train_models)
    monkeypatch.setattr(study, "train_grid", fake_train_grid)
    monkeypatch.setattr(study, "replay_grid", fake_replay_grid)
    out = tmp_path / "run"
    assert cli.main(["run", "uat.sepsis", "--quick", "--seeds", "4", "--set", "sim.obs_noise=50",
                     "--set", "sim.resistance_decay=1", "--set", 'models=["uat", "vt", "adt", "no_kv"]',
                     "--out", str(out)]) == 0
    assert calls["train"] == ("sepsis", "sepsis", ["adt", "no_kv", "uat", "vt"], ["cotta", "tent"], ("uat",), 60)
    assert calls["replay"] == ("sepsis_gate", [0, 1, 2, 3], ["uat"])  # the clean task's seeds
    assert calls["uat_labels"] == ["sepsis", "sepsis, null rewards"]
    assert calls["knobs"] == (50.0, 1.0, 10.0)  # the simulator knobs set, the others at their defaults
    assert calls["iql"] == ("sepsis_iql", ["iql"], "sepsis", study.QUICK.size.eval_episodes, "cell")
    folder = out / "uat.sepsis"
    result = json.loads((folder / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == ["uat_beats_vt_post_shift", "uat_beats_input_level_post_shift",
                                                     "uat_beats_tta_post_shift", "uat_beats_offline_rl_post_shift",
                                                     "uat_beats_vt_overall"]
    rows = _csv(folder / "sepsis.csv")
    assert [(r["model"], r["seed"]) for r in rows][3:5] == [("uat", "3"), ("vt", "0")]
    null = [r for r in rows if r["model"] == "uat_null"]
    assert [float(r["post_shift"]) for r in null] == pytest.approx(0.4 + NOISE)
    assert [float(r["post_shift"]) for r in rows if r["model"] == "iql"] == pytest.approx(0.4 + NOISE)
    table = {r["model"]: r for r in _csv(folder / "table.csv")}  # a Table 4 ablation is one more row, Table 5 beside it
    assert float(table["no_kv"]["post_shift"]) == pytest.approx(0.41 + NOISE.mean())
    assert (float(table["no_kv"]["accuracy_paper"]), float(table["no_kv"]["post_shift_paper"])) == (0.671, 0.402)
    assert {c["verdict"] for c in result["checks"]} == {"PASS"}
    assert {c["control"]["verdict"] for c in result["checks"]} == {"FAIL"}
    curve_models = {r["model"] for r in _csv(folder / "curves.csv") if r["critic_loss"]}
    assert curve_models == {"iql"}  # IQL's three losses; the transformers record no critic
    assert (folder / "sepsis.png").exists() and (folder / "recovery.csv").exists()

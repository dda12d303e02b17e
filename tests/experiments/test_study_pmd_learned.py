"""The learned PolicyAttention studies at a tiny size through the CLI: the files the issue specifies
(``heldout.npz``, ``control.csv``), metrics recomputed from them with numpy, the kept models
loaded back (and refused for another architecture), the bootstrap and the config errors."""
import csv
import dataclasses
import json

import jax
import numpy as np
import pytest

from experiments import checks, models
from experiments.cli import main
from experiments.seeds import seed_keys
from experiments.studies.pmd import learned_actor as la
from experiments.studies.pmd import learned_critic as lc
from experiments.studies.pmd import repeated_control as rc
from experiments.studies.pmd import training
from pmd_jax import numpy_reference as ref
from pmd_jax import rules
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

TINY = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2))
TINY_MODEL = {"model.d_model": 8, "model.num_layers": 1, "model.num_heads": 2, "num_steps": 4, "warmup": 0,
              "batch_size": 4, "n_train_mdps": 8}


def _sets(prefix, values):
    out = []
    for k, v in values.items():
        out += ["--set", f"{prefix}{k}={json.dumps(v)}"]
    return out


def _run(tmp_path, study, *sets):
    assert main(["run", study, "--quick", *sets, "--out", str(tmp_path)]) in (0, 1)  # tiny runs may miss a claim
    return tmp_path / study, json.loads((tmp_path / study / "result.json").read_text())


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_learned_actor_files_metrics_and_kept_model(tmp_path):
    study_dir, result = _run(tmp_path, "pmd.learned_actor", *_sets("train.", TINY_MODEL), "--set", "seeds=1",
                             "--set", "supervised_seeds=1",
                             "--set", "chunks=2", "--set", "n_test_mdps=4", "--set", "etas=[0.4,0.8]",
                             "--set", 'entropies=["low","any"]', "--set", 'transfer_families=["reward_x2"]')
    with np.load(study_dir / "heldout.npz") as h:
        h = dict(h)
    n = 2 * 2 * 4  # entropies x etas x MDPs
    assert h["log_pi"].shape == h["Q"].shape == h["pi_learned"].shape == (n, 4, 3) and h["eta"].shape == (n,)
    assert h["pi_learned_runs"].shape == (2, n, 4, 3) and list(h["supervised"]) == [0.0, 1.0]
    np.testing.assert_allclose(h["pi_learned"].sum(-1), 1.0, atol=1e-6)
    # the distances recomputed from the file with the numpy reference
    pi = np.exp(h["log_pi"])
    pmd = np.stack([ref.pmd_step(pi[i], h["Q"][i], h["eta"][i]) for i in range(n)])
    m = result["metrics"]
    assert m["row_l1_pmd"] == pytest.approx(np.abs(h["pi_learned"] - pmd).sum(-1).mean(), rel=1e-6)
    assert m["row_l1_prior"] == pytest.approx(np.abs(h["pi_learned"] - pi).sum(-1).mean(), rel=1e-6)
    boltz = np.exp(h["eta"][:, None, None] * h["R"])
    assert m["row_l1_reward_only"] == pytest.approx(
        np.abs(h["pi_learned"] - boltz / boltz.sum(-1, keepdims=True)).sum(-1).mean(), rel=1e-6)
    assert {c["name"] for c in result["checks"]} == {"pmd_closest_of_five_rules", "fitted_slope_shrinks_as_paper"}
    # the kept actors reproduce the held-out outputs
    tcfg = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=4, warmup=0,
                       batch_size=4, n_train_mdps=8)
    params, info = training.load_kept(study_dir, "actor", tcfg, "actor")
    assert info["supervised"] == [0.0, 1.0] and info["runs"] == 2
    actor = tcfg.actor()
    p0 = jax.tree.map(lambda a: a[0], params)
    out = jax.vmap(lambda p, q, e: actor.policy(p0, p, q, e))(pi.astype(np.float32), h["Q"].astype(np.float32),
                                                             h["eta"].astype(np.float32))
    np.testing.assert_allclose(np.asarray(out), h["pi_learned"], atol=1e-5)
    wider = TrainConfig(model=ModelConfig(d_model=16, num_layers=1, num_heads=2), num_steps=4, warmup=0)
    with pytest.raises(models.ModelMismatch, match="d_model: saved 8, expected 16"):
        training.load_kept(study_dir, "actor", wider, "actor")


def test_repeated_control_files_and_ratios(tmp_path):
    study_dir, result = _run(tmp_path, "pmd.repeated_control", *_sets("actor.", TINY_MODEL),
                             *_sets("critic.", TINY_MODEL), "--set", "runs=2", "--set", "chunks=2",
                             "--set", "rounds=3", "--set", "n_mdps=4", "--set", "n_val_mdps=4",
                             "--set", 'families=["iid","sparse_transitions"]', "--set", "n_bootstrap=50")
    rows = _rows(study_dir / "control.csv")
    assert list(rows[0]) == ["run", "family", "mdp", "round", "loss_learned", "loss_reference"]
    assert len(rows) == 2 * 2 * 4 * 3 and {r["family"] for r in rows} == {"iid", "sparse_transitions"}
    last = [r for r in rows if r["family"] == "iid" and r["run"] == "1" and r["round"] == "3"]
    ratio = np.median([float(r["loss_learned"]) for r in last]) / np.median([float(r["loss_reference"]) for r in last])
    assert result["metrics"]["ratio_run_2"] == pytest.approx(ratio, rel=1e-9)
    first = [float(r["loss_reference"]) for r in rows if r["round"] == "1"]
    assert all(0 <= x <= 1.0 + 1e-6 for x in first)  # one exact PMD step from uniform never loses (PMD improves)
    assert len(_rows(study_dir / "control_learned_critic.csv")) == 2 * 4 * 3
    for name, role in (("actor", "actor"), ("critic", "critic")):
        assert models.load_meta(study_dir / "models" / name)["architecture"]["role"] == role
    assert (study_dir / "repeated_control.png").is_file()
    origin = {r["role"]: r["origin"] for r in _rows(study_dir / "models.csv")}
    assert origin["actor"] == "trained here" and origin["critic"].startswith("trained here (pmd.learned_critic keeps no")


def test_learned_critic_runs_and_keeps_its_critic(tmp_path):
    study_dir, result = _run(tmp_path, "pmd.learned_critic", *_sets("train.", TINY_MODEL), "--set", "seeds=1",
                             "--set", "chunks=2", "--set", "n_test_mdps=2", "--set", "inputs_per_mdp=2",
                             "--set", 'transfer_families=["bimodal_rewards"]')
    assert np.all(np.isfinite([c["value"] for c in result["checks"]]))
    m = result["metrics"]
    assert 0 < m["td_error_mean"] <= m["td_error_max"] and 0 < m["td_error_sample_mean_backup"]
    assert [r["family"] for r in _rows(study_dir / "table.csv")] == ["iid", "bimodal_rewards"]
    assert models.load_meta(study_dir / "models" / "critic")["info"]["runs"] == 1
    # pmd.repeated_control in the same folder loads this critic instead of training its own
    rc_dir, _ = _run(tmp_path, "pmd.repeated_control", *_sets("actor.", TINY_MODEL), *_sets("critic.", TINY_MODEL),
                     "--set", "runs=1", "--set", "chunks=2", "--set", "rounds=2", "--set", "n_mdps=2",
                     "--set", "n_val_mdps=2", "--set", 'families=["iid"]', "--set", "n_bootstrap=10")
    origin = {r["role"]: r["origin"] for r in _rows(rc_dir / "models.csv")}
    assert origin["critic"] == f"loaded from {study_dir / 'models' / 'critic'}"
    tcfg = rc.QUICK.critic
    tcfg = TrainConfig(**{**tcfg.__dict__, "model": ModelConfig(**{**tcfg.model.__dict__, "d_model": 8, "num_layers": 1,
                                                                   "num_heads": 2})})
    ours, _ = training.load_kept(study_dir, "critic", tcfg, "critic")
    kept, _ = training.load_kept(rc_dir, "critic", tcfg, "critic")
    jax.tree.map(np.testing.assert_array_equal, ours, kept)


def test_repeated_control_uses_learned_critics_preset_critic():
    """Both presets train the critic pmd.learned_critic keeps, so run all loads it instead of training it twice."""
    assert rc.QUICK.critic == lc.QUICK.train and rc.FULL.critic == lc.FULL.train
    assert "pmd.learned_critic" in rc.STUDY.after


def test_hierarchical_bootstrap_against_a_loop():
    rng = np.random.default_rng(0)
    diff = rng.normal(size=(3, 7))
    med, lo, hi = rc.hierarchical_bootstrap(diff, 400, seed=5)
    draw = np.random.default_rng(5)
    r = draw.integers(0, 3, size=(400, 3))
    i = draw.integers(0, 7, size=(400, 3, 7))
    meds = [np.median([diff[r[b, j], i[b, j, k]] for j in range(3) for k in range(7)]) for b in range(400)]
    assert med == np.median(diff)
    assert (lo, hi) == pytest.approx((np.quantile(meds, 0.025), np.quantile(meds, 0.975)))
    assert lo <= med <= hi


def test_ratio_of_median_last_round_losses():
    # [runs, mdps, rounds]; medians 0.3 and 0.25 of the last round differ from the means (1/3 and 0.3)
    learned = np.array([[[1.0, 0.3], [1.0, 0.6], [1.0, 0.1]]])
    reference = np.array([[[1.0, 0.2], [1.0, 0.25], [1.0, 0.45]]])
    np.testing.assert_allclose(rc.ratios(learned, reference), [0.3 / 0.25])


@pytest.mark.parametrize("kwargs, field", [
    ({"etas": (0.4, 2.0)}, "etas"), ({"entropies": ("cold",)}, "entropies"), ({"stream": 2}, "stream"),
    ({"transfer_families": ("grid",)}, "transfer_families"), ({"chunks": 3}, "chunks"),
])
def test_learned_actor_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        la.LearnedActorConfig(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"eta": 1.6}, "eta"), ({"families": ("sparse_transitions", "iid")}, "families"),
    ({"samples_per_pair": 4}, "samples_per_pair"), ({"runs": 0}, "runs"),
])
def test_repeated_control_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        rc.RepeatedControlConfig(**kwargs)


def test_diverging_training_stops_at_the_nan_guard(tmp_path):
    from experiments.registry import RunContext
    from experiments.sweep import NonFiniteLoss

    tcfg = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=4, warmup=0,
                       batch_size=4, n_train_mdps=8, lr=1e30, clip=1e30)
    ctx = RunContext(study="pmd.learned_actor", quick=True, out_dir=tmp_path)
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 1)))
    with pytest.raises(NonFiniteLoss, match="pmd.learned_actor ckpt_actor"):
        training.train_runs(ctx, "actor", tcfg, "actor", keys, np.zeros(1), 2)


def test_learned_actor_controls_fail_their_claims():
    """The untrained actors (the study's control) and exact PMD (slope 1) fail the shrinkage claim; the untrained
    actors are not closest to PMD. Real outputs of initial parameters (a tiny architecture), 4 seeds."""
    cfg = dataclasses.replace(la.QUICK, train=TINY, n_test_mdps=8)
    keys = seed_keys(4, 1)
    untrained = training.initial_params(cfg.train, "actor", keys)
    h = la.evaluate(dataclasses.replace(cfg, seeds=4, transfer_families=("reward_x2",)), untrained)
    lead = la.pmd_lead(la.rule_distances(h["log_pi_learned"], h["rules"]))
    assert la.PMD_CLOSEST.judge(lead).verdict != checks.PASS
    shrink = la.SHRINKAGE.judge(la.slopes(h["fitted_step_pooled"], cfg.etas))
    assert shrink.verdict == checks.FAIL and shrink.hi < la.PAPER["fitted_slope_label_free"] - la.SHRINKAGE_TOL
    # exact PMD on the same inputs: fitted step = supplied step, slope 1 in every seed
    pmd = np.log(np.broadcast_to(h["rules"][:, 0], (4,) + h["rules"][:, 0].shape))
    etas = np.asarray(cfg.etas)
    by_eta = np.stack([np.flatnonzero(np.isclose(h["eta"], e)) for e in etas])
    fit = np.stack([[rules.fitted_step(np.exp(p[i]), np.exp(h["log_pi"][i]), h["Q"][i]) for i in by_eta] for p in pmd])
    np.testing.assert_allclose(la.slopes(fit, etas), 1.0, atol=1e-4)
    assert la.SHRINKAGE.judge(la.slopes(fit, etas)).verdict == checks.FAIL
    # the study's pooled fit is rules.fitted_step over every input of a run at one supplied step
    out = np.exp(h["log_pi_learned"])
    np.testing.assert_allclose(h["fitted_step_pooled"][1], [rules.fitted_step(out[1][i], np.exp(h["log_pi"][i]), h["Q"][i])
                                                           for i in by_eta], rtol=1e-5)
    assert la.PMD_CLOSEST.judge(la.pmd_lead(la.rule_distances(pmd, h["rules"]))).verdict == checks.PASS


def test_learned_critic_control_fails_its_claim():
    """Untrained critics (the study's control) on held-out packets are far outside 1.25 x the sample-mean backup."""
    cfg = dataclasses.replace(lc.QUICK, train=dataclasses.replace(lc.QUICK.train, model=TINY.model))
    params = training.initial_params(cfg.train, "critic", seed_keys(3, 1))
    e = lc.errors(cfg.train, params, ("iid",), 8, 2, cfg.eval_seed)["iid"]
    ratio = e["learned"].mean(axis=(1, 2, 3)) / e["sample_mean"].mean()
    assert lc.WITHIN_BACKUP.judge(ratio).verdict == checks.FAIL


def test_repeated_control_untrained_actors_leave_the_band():
    """The control arm of every family's claim: untrained actors in the 20-round loop lose far more than exact PMD
    at the step they are credited with (0.8 here)."""
    cfg = dataclasses.replace(rc.QUICK, actor=dataclasses.replace(rc.QUICK.actor, model=TINY.model),
                              critic=dataclasses.replace(rc.QUICK.critic, model=TINY.model), n_mdps=4,
                              families=("iid", "reward_x2"))
    keys = seed_keys(3, 1)
    actors = training.initial_params(cfg.actor, "actor", keys)
    critic = jax.tree.map(lambda a: a[0], training.initial_params(cfg.critic, "critic", keys[:1]))
    L = rc.control(cfg, actors, np.full(3, 0.8, np.float32), critic, actors)
    np.testing.assert_array_equal(L["learned"], L["untrained"])
    for j, fam in enumerate(cfg.families):
        check = rc.RATIO_CLAIMS[fam].judge(rc.ratios(L["untrained"][:, j], L["reference"][:, j]))
        assert check.verdict == checks.FAIL, fam

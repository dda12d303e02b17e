"""regret.ftrl_match end to end at a tiny size through the CLI, and its summary on synthetic seeds."""
import csv
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import regret_jax as rj
from experiments import checks, cli
from experiments.studies.regret import ftrl_match
from experiments.studies.regret.ftrl_match import CONTROLS, PER_SEED, QUICK, MatchConfig, summarize

TINY = ["--set", "train.T=6", "--set", "train.batch_size=16", "--set", "train.num_steps=12",
        "--set", "heldout_sequences=100", "--set", "scan_sequences=1000"]


def test_tiny_run_through_cli(tmp_path):
    code = cli.main(["run", "regret.ftrl_match", "--quick", *TINY, "--seeds", "2", "--out", str(tmp_path)])
    out = tmp_path / "regret.ftrl_match"
    assert code in (0, 1) and not (out / "error.txt").exists()  # checks may fail at this size; the run may not raise
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["num_seeds"] == 2 and result["config"]["train"]["num_steps"] == 12
    assert [c["name"] for c in result["checks"]] == [c.name for c in ftrl_match.CLAIMS]
    assert all(c["n"] == 2 and c["unit"] == "seed" for c in result["checks"])
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


def _arrays(eta_hat, tv_star, loss_gap, offray, eta_star=0.3, steps=60):
    n = len(eta_hat)
    seeds = {k: np.full(n, 0.1) for k in PER_SEED}
    seeds.update(eta_hat=np.asarray(eta_hat), tv_star_pct=np.asarray(tv_star), loss_to_ftrl_star=np.asarray(loss_gap),
                 value_offray=np.asarray(offray), eta_param=np.asarray(eta_hat) * 1.02, init_offray=np.full(n, 0.9))
    for c, scale, tv, gap in zip(CONTROLS, (0.0, 0.5, 2.0), (31.0, 12.6, 12.8), (0.29, 0.048, 0.04)):
        seeds.update({f"{c}_eta_hat": np.full(n, scale * eta_star + 0.01), f"{c}_tv_star_pct": np.full(n, tv) + np.arange(n),
                      f"{c}_loss_to_ftrl_star": np.full(n, gap) + 0.001 * np.arange(n)})
    return {"seeds": seeds, "root": {"eta_star": np.asarray(eta_star), "se": np.asarray(0.01)},
            "curves": {"attention": {"loss": np.ones((n, steps))}}}


def test_summarize_on_synthetic_seeds():
    summary = summarize(QUICK, _arrays([0.29, 0.31, 0.30], [4.0, 5.0, 6.0], [0.01, 0.012, 0.008], [0.1, 0.08, 0.12]))
    m = summary.metrics
    assert m["eta_hat_mean"] == pytest.approx(0.30) and m["eta_hat_std"] == pytest.approx(0.01)
    assert m["kappa_hat"] == pytest.approx(0.30 * np.sqrt(QUICK.train.T)) and m["final_train_loss"] == 1.0
    assert [c.verdict for c in summary.checks] == [checks.PASS] * 4
    assert [c.control.verdict for c in summary.checks] == [checks.FAIL] * 4
    assert summary.checks[0].value == pytest.approx(0.05) and summary.checks[3].value == pytest.approx(0.1)
    assert summary.checks[1].control.value == pytest.approx(0.5 - 0.01 / 0.3)  # the nearest control: FTRL at 0.5x eta*
    assert summary.checks[0].control.value == pytest.approx(0.126 + 0.01)  # nearest TV: 0.5x FTRL, seeds 12.6, 13.6, 14.6 %
    assert summary.tables["table"]["quantity"][0] == "eta_hat" and summary.tables["seeds"]["seed"] == [0, 1, 2]
    bad = summarize(QUICK, _arrays([0.1, 0.12, 0.11], [20.0, 25.0, 30.0], [0.05, 0.06, 0.07], [0.3, 0.35, 0.4]))
    assert [c.verdict for c in bad.checks] == [checks.FAIL] * 4


def test_controls_fail_every_claim_on_real_sequences():
    """The reference learners (uniform, FTRL at 0.5x / 2x eta*) and models at initialisation, played or fitted on
    real held-out sequences at the quick (d, T), fail every claim: the checks can tell them from FTRL at eta*."""
    config = MatchConfig(QUICK.train, num_seeds=3)  # the quick held-out size
    eta_star = 0.398  # the quick scan's root at (d, T) = (3, 25) (16,000 sequences, se 0.004)
    etas = jnp.geomspace(0.05, 8.0, 60) / np.sqrt(config.train.T)
    stats = jax.jit(lambda h, eta: ftrl_match.policy_stats(
        jax.vmap(rj.ftrl_policies, in_axes=(0, None))(h, eta), h, etas, eta_star))
    rows = [{c: jax.tree.map(float, stats(ftrl_match.heldout_sequences(config, s), scale * eta_star))
             for c, scale in zip(CONTROLS, (0.0, 0.5, 2.0))} for s in range(config.num_seeds)]
    per_seed = {f"{c}_{q}": np.asarray([r[c][q] for r in rows]) for c in CONTROLS
                for q in ("tv_star_pct", "eta_hat", "loss_to_ftrl_star")}
    model = rj.build_model(config.train)
    init = ftrl_match.initial_variables(model, config)
    offray = jax.vmap(lambda v: rj.ray_fit(rj.invariants(v["params"]["head"])["W"])[1])(init)
    judged = [ftrl_match.POLICY_CLOSE.judge(ftrl_match.nearest_control(per_seed, "tv_star_pct") / 100),
              ftrl_match.ETA_NEAR.judge(np.min([np.abs(per_seed[f"{c}_eta_hat"] - eta_star) / eta_star for c in CONTROLS], 0)),
              ftrl_match.LOSS_NEAR.judge(ftrl_match.nearest_control(per_seed, "loss_to_ftrl_star", CONTROLS[1:])),
              ftrl_match.ON_RAY.judge(np.asarray(offray))]
    assert [c.verdict for c in judged] == [checks.FAIL] * 4, [(c.name, c.value, c.lo, c.hi) for c in judged]


@pytest.mark.parametrize("kwargs, field", [({"num_seeds": 1}, "num_seeds"), ({"heldout_sequences": 50}, "heldout_sequences"),
                                           ({"train": rj.TrainConfig(model="multihead")}, "train.model"), ({"stream": -1}, "stream")])
def test_match_config_validates(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MatchConfig(**{"train": QUICK.train, **kwargs})

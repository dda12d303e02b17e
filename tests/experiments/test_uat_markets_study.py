"""Study ``uat.markets``: config validation, summary and checks on planted arrays (Sharpe per
market against numpy), and a tiny run through the command line on the synthetic markets it writes,
then on the same files as a user's ``data_dir``."""
import csv
import dataclasses
import json

import numpy as np
import pytest

from experiments import cli, configs, seeds
from experiments.studies.uat import markets as study
from uat_jax import markets_data

TINY_SETS = ['size={"d_model": 8, "n_heads": 2, "d_ff": 8, "n_layers": 1, "horizon": 8, "batch_size": 2, '
             '"epochs": 2, "eval_episodes": 1, "d_u": 4}',
             "synthetic_days=240", 'models=["uat", "vt", "adt", "no_kv"]']
TINY = [arg for s in TINY_SETS for arg in ("--set", s)] + ["--seeds", "2"]


def _csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_presets():
    assert study.FULL.size == study.markets.TABLE3 and study.FULL.seeds == 3 and study.FULL.lr == 2e-3
    assert study.FULL.models == (*study.MODELS, *study.ABLATIONS)  # Table 5 C beside Table 1 C
    assert study.FULL.runs == (*study.MODELS, *study.ABLATIONS, study.NULL, study.NULL_VT)
    assert study.PAPER["sharpe_no_kv_HSI"] == 0.487 and study.PAPER["sharpe_no_kv"] == pytest.approx((0.972 + 0.487 + 0.367) / 3)
    assert study.QUICK.stream == study.FULL.stream == seeds.JUDGED
    assert study.QUICK.runs == ("uat", "vt", "adt", study.NULL, study.NULL_VT)
    assert study.QUICK.ue_lr == study.FULL.ue_lr == 2e-2  # Table 3's rate of the encoder and W_rho


def test_configure_passes_the_studys_rates_on():
    cfg = dataclasses.replace(study.QUICK, lr=1e-3, ue_lr=3e-3, expert_temperature=0.05, eval_batch=7)
    train = study.configure(cfg, "uat", traced_variant=True)
    assert (train.lr, train.ue_lr, train.expert_temperature, train.eval_batch) == (1e-3, 3e-3, 0.05, 7)
    assert train.model.traced_variant and train.model.d_model == cfg.size.d_model


@pytest.mark.parametrize("field, value, message", [
    ("models", ["uat", "adt"], "models must"),
    ("models", ["uat", "vt", "vt"], "models must"),
    ("models", ["uat", "vt", "no_such_ablation"], "models must"),
    ("lr", 0.0, "lr must"),
    ("ue_lr", -1.0, "ue_lr must"),
    ("expert_temperature", -1.0, "expert_temperature must"),
    ("seeds", 0, "seeds must"),
    ("stream", 2, "stream must"),
    ("data_dir", "/no/such/folder", "is not a folder"),
    ("synthetic_days", 100, "synthetic_days must"),
    ("eval_batch", 0, "eval_batch must"),
])
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(configs.ConfigError, match=message):
        configs.apply(study.QUICK, [(field, value)])


KL_NOISE = np.array([0.0, 0.01, -0.01, 0.005])  # per seed, shared by every model (paired by seed)


# UAT's gate before its tanh per window, in the paper's order of the windows' post-hoc regimes (posthoc labels
# below: bull, bear, shock, chop, bull, bull, none): shock 10 > bear 8 > bull 5 > chop 1.
PAPER_ORDER_GATE = np.array([5.0, 8.0, 10.0, 1.0, 5.0, 5.0, 3.0])


def _arrays(cfg, returns: dict, kl: dict, gate=None, gate_pre=PAPER_ORDER_GATE):
    """Planted arrays: two markets of 4 and 3 test windows; ``returns[model]`` [seeds, 7] and
    ``kl[model]`` (a constant plus KL_NOISE per seed) per model; UAT's gate norm ``gate`` [7] and its
    pre-activation ``gate_pre`` [7] on every seed."""
    market = np.array([0, 0, 0, 0, 1, 1, 1])
    windows = {m: {"return": np.asarray(returns[m], np.float64),
                   "kl": np.tile((kl[m] + KL_NOISE[:cfg.seeds])[:, None], (1, 7)),
                   "gate_norm": np.tile(np.zeros(7) if gate is None else gate, (cfg.seeds, 1)),
                   "gate_pre": np.tile(gate_pre, (cfg.seeds, 1))}
               for m in cfg.runs}
    return {"windows": windows, "market": market, "posthoc": np.array([0, 1, 2, 3, 0, 0, -1]),
            "truth": np.array([0, 0, 1, 1, 2, 2, 3]), "equal_weight": np.linspace(-0.01, 0.02, 7),
            "constant": {"return": np.linspace(0.02, -0.01, 7), "kl": np.full(7, 0.7)},
            "names": np.array(["AAA", "BBB"]), "dropped_days": np.array([0, 3])}


def _sharpe(r):
    r = np.asarray(r, np.float64)
    return np.sqrt(252) * r.mean() / r.std(ddof=1)


def _returns(seeds, uat, vt, null, null_vt=None, adt=None):
    """Daily returns [seeds, 7]: a shared random base per seed plus each model's constant offset (A-DT's and
    VT-null's VT's unless given)."""
    base = 0.01 * np.random.default_rng(0).standard_normal((seeds, 7))
    offsets = {"uat": uat, "vt": vt, "adt": vt if adt is None else adt, study.NULL: null,
               study.NULL_VT: vt if null_vt is None else null_vt}
    return {m: base + o for m, o in offsets.items()}


def test_summary_and_checks():
    cfg = dataclasses.replace(study.QUICK, seeds=4)
    returns = _returns(4, 0.003, 0.0, 0.0, adt=0.001)
    s = study.summarize(cfg, _arrays(cfg, returns, {"uat": 0.5, "vt": 0.8, "adt": 0.8, study.NULL: 0.8,
                                                    study.NULL_VT: 0.8},
                                     gate=np.array([1.0, 2.0, 3.0, 4.0, 3.0, 1.0, 9.0])))
    m = s.metrics
    assert m["dropped_days_AAA"] == 0 and m["dropped_days_BBB"] == 3  # the days alignment dropped, per market
    for model, r in returns.items():  # Sharpe per market and seed, then mean over seeds; the markets' mean
        per = np.array([[_sharpe(r[k, :4]), _sharpe(r[k, 4:])] for k in range(4)])
        np.testing.assert_allclose([m[f"sharpe_{model}_AAA"], m[f"sharpe_{model}_BBB"]], per.mean(0), rtol=1e-12)
        np.testing.assert_allclose(m[f"sharpe_{model}"], per.mean(), rtol=1e-12)
        np.testing.assert_allclose(m[f"cagr_{model}_BBB"], np.mean([np.prod(1 + r[k, 4:]) ** (252 / 3) - 1
                                                                    for k in range(4)]), rtol=1e-10)
    found = {c.name: c for c in s.checks}
    assert list(found) == [c.name for c in study.CLAIMS]
    assert all(c.verdict == "PASS" and c.n == 4 and c.unit == "seed" for c in found.values())
    np.testing.assert_allclose(found["uat_beats_vt_sharpe"].value, m["sharpe_uat"] - m["sharpe_vt"])
    sharpe = lambda r: np.array([[_sharpe(x[:4]), _sharpe(x[4:])] for x in r]).mean(-1)  # noqa: E731
    gaps = sharpe(returns["uat"]) - sharpe(returns["vt"])  # per seed, paired
    np.testing.assert_allclose([found["uat_beats_vt_sharpe"].lo, found["uat_beats_vt_sharpe"].hi],
                               gaps.mean() + np.array([-1, 1]) * 3.182446305284263 * gaps.std(ddof=1) / 2)
    np.testing.assert_allclose(found["uat_beats_adt_sharpe"].value, m["sharpe_uat"] - m["sharpe_adt"])
    np.testing.assert_allclose(found["uat_beats_adt_sharpe"].control.value, m["sharpe_uat_null"] - m["sharpe_adt"])
    assert found["uat_beats_adt_sharpe"].paper == pytest.approx(np.mean([1.071 - 1.049, 0.554 - 0.283, 0.473 - 0.372]))
    np.testing.assert_allclose(found["uat_beats_vt_kl"].value, 0.3)
    np.testing.assert_allclose(found["uat_gain_needs_feedback"].value, 0.3)
    # gate per post-hoc regime: bull = windows 0, 4, 5; chop = window 3; window 6 unlabelled
    assert m["gate_norm_uat_posthoc_bull"] == pytest.approx((1 + 3 + 1) / 3)
    assert m["gate_norm_uat_posthoc_chop"] == pytest.approx(4.0)
    assert m["gate_norm_uat_truth_chop"] == pytest.approx(9.0)
    assert m["gate_pre_uat_posthoc_shock"] == pytest.approx(10.0) and m["gate_pre_uat_posthoc_bull"] == pytest.approx(5.0)
    assert found["gate_follows_paper_regime_order"].value == pytest.approx(1.0)
    np.testing.assert_allclose(m["sharpe_equal_weight_BBB"], _sharpe(np.linspace(-0.01, 0.02, 7)[4:]))
    np.testing.assert_allclose(m["sharpe_constant_AAA"], _sharpe(np.linspace(0.02, -0.01, 7)[:4]))
    assert m["kl_constant"] == pytest.approx(0.7)
    assert s.tables["table"]["market"] == ["AAA", "BBB"] * 5  # uat, vt, adt and the two null arms
    # UAT no better than VT, and as far ahead with zero returns fed
    # the gate in the reverse order (chop largest, as the quick runs found it)
    bad = study.summarize(cfg, _arrays(cfg, _returns(4, 0.0, 0.002, 0.0),
                                       {"uat": 0.8, "vt": 0.8, "adt": 0.8, study.NULL: 0.5, study.NULL_VT: 0.8},
                                       gate_pre=11.0 - PAPER_ORDER_GATE))
    assert not any(c.passed for c in bad.checks)
    assert {c.name: c.value for c in bad.checks}["gate_follows_paper_regime_order"] == pytest.approx(-1.0)
    # without the null arms the controls of the lead checks run in the tests only; without A-DT its check is not made
    no_null = dataclasses.replace(cfg, null_rewards=False, models=study.CHECKED)
    found = study.summarize(no_null, _arrays(no_null, returns, {"uat": 0.5, "vt": 0.8})).checks
    assert [c.name for c in found] == ["uat_beats_vt_sharpe", "uat_beats_vt_kl", "gate_follows_paper_regime_order"]
    assert {c.control.verdict for c in found[:2]} == {"not run here"}


def test_controls_fail_their_claims():
    """Each claim judged on its control arm is rejected: UAT fed null returns at VT's level (Sharpe, KL), and VT
    clean against VT fed null returns (feedback-blind) for the null-returns claim; a UAT-null as good as UAT makes
    the two lead checks NO POWER."""
    cfg = dataclasses.replace(study.QUICK, seeds=4)
    kl = {"uat": 0.5, "vt": 0.8, "adt": 0.8, study.NULL: 0.8, study.NULL_VT: 0.8}
    found = study.summarize(cfg, _arrays(cfg, _returns(4, 0.003, 0.0, 0.0), kl)).checks
    assert [c.verdict for c in found] == ["PASS"] * 5 and [c.control.verdict for c in found[:4]] == ["FAIL"] * 4
    assert found[4].control.verdict != "PASS"  # the gate's order under permuted regime labels
    as_uat = study.summarize(cfg, _arrays(cfg, _returns(4, 0.003, 0.0, 0.003), {**kl, study.NULL: 0.5})).checks
    assert [c.verdict for c in as_uat[:4]] == ["NO POWER", "NO POWER", "NO POWER", "FAIL"]


def test_regime_order_correlation_against_scipy():
    """Per seed, the Spearman correlation of the gate's mean per regime with the paper's order, against
    scipy's; a regime without a window is left out."""
    from scipy import stats

    rng = np.random.default_rng(3)
    labels = rng.integers(-1, 3, 60)  # no chop window, some unlabelled
    gate = rng.normal(size=(5, 60))
    present = ["shock", "bear", "bull"]  # the paper's order, chop absent
    means = np.stack([gate[:, labels == markets_data.REGIMES.index(r)].mean(1) for r in present], 1)
    want = [stats.spearmanr(row, [3, 2, 1]).statistic for row in means]
    np.testing.assert_allclose(study.regime_order_correlation(gate, labels), want, rtol=1e-12)


def test_tiny_run_on_synthetic_markets_and_on_a_data_folder(tmp_path):
    """A tiny run through the CLI on the synthetic markets it writes (three markets, one in the
    AkShare layout); then the same files read as a user's ``data_dir`` give the same arrays."""
    out = tmp_path / "synthetic_run"
    assert cli.main(["run", "uat.markets", "--quick", *TINY, "--out", str(out)]) in (0, 1)
    folder = out / "uat.markets"
    result = json.loads((folder / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == [c.name for c in study.CLAIMS]
    assert all(np.isfinite(c["value"]) for c in result["checks"])
    rows = _csv(folder / "markets.csv")
    assert {(r["model"], r["market"]) for r in rows} == {(m, x) for m in ("uat", "vt", "adt", "no_kv", study.NULL,
                                                                          study.NULL_VT)
                                                         for x in ("CSI300", "DJIA", "HSI")}
    assert (folder / "markets.png").exists() and len(_csv(folder / "gates.csv")) == 3 * 4 * 2
    # the null-returns claim's control, trained: VT is feedback-blind, so zeroed returns change nothing on any seed
    null_check = {c["name"]: c for c in result["checks"]}["uat_gain_needs_feedback"]
    assert null_check["control"] == {"arm": study.UAT_GAIN_NEEDS_FEEDBACK.control, "verdict": "FAIL", "value": 0.0,
                                     "lo": 0.0, "hi": 0.0, "n": 2}
    assert [r["kl"] for r in rows if r["model"] == "vt"] == [r["kl"] for r in rows if r["model"] == study.NULL_VT]
    assert sorted(p.name for p in (folder / "synthetic").iterdir()) == ["CSI300", "DJIA", "HSI"]
    cfg = configs.apply(study.QUICK, [(k, json.loads(v)) for k, v in (a.split("=", 1) for a in TINY_SETS)])
    user = dataclasses.replace(cfg, data_dir=str(folder / "synthetic"))
    (a, truth), (b, none) = study.load_markets(cfg, tmp_path / "fresh"), study.load_markets(user, tmp_path / "unused")
    assert [m.name for m in a] == [m.name for m in b] == ["CSI300", "DJIA", "HSI"] and none == {}
    assert set(truth) == {"CSI300", "DJIA", "HSI"} and all(len(truth[m.name]) == len(m.dates) for m in a)
    for x, y in zip(a, b):
        for split in ("train", "test"):
            np.testing.assert_array_equal(getattr(x, split).features, getattr(y, split).features)
            np.testing.assert_array_equal(getattr(x, split).returns, getattr(y, split).returns)
    assert not (tmp_path / "unused").exists()  # a user's folder: nothing written
    assert markets_data.N_MAX == 45


def test_constant_allocation_against_numpy(tmp_path):
    """The no-history reference: the training days' mean expert allocation (softmax of (0, R) / tau
    over cash and the active assets), its mean KL over each test window's steps and its return on
    the window's last day, by numpy loops."""
    sim = markets_data.simulate_market(markets_data.SyntheticSpec(n_assets=4, n_days=320, seed=3))
    markets_data.write_market(sim, tmp_path / "M")
    (market,) = markets_data.prepare_markets(tmp_path, window=6)
    tau, n = 0.02, 4

    def expert(r):
        z = np.concatenate([[0.0], r[:n]]) / tau
        p = np.exp(z - z.max())
        return p / p.sum()

    q = np.mean([expert(r) for r in market.train.returns], 0)
    got = study.constant_allocation(market, tau)
    W = market.test.n_windows
    kl = [np.mean([np.sum(expert(r) * np.log(expert(r) / q)) for r in market.test.returns[w:w + 6]]) for w in range(W)]
    np.testing.assert_allclose(got["kl"], kl, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got["return"], market.test.returns[5:, :n] @ q[1:], rtol=1e-4, atol=1e-7)

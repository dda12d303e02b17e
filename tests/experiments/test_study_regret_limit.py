"""regret.limit: one limit and one discrete cell through the checkpointed sweep, and the summary logic on synthetic arrays."""
import numpy as np
import pytest

from experiments import checks
from experiments.registry import RunContext
from experiments.studies.regret import limit as study
from experiments.studies.regret.limit import LimitConfig, discrete_cell, gap_fit, limit_cell, summarize

TINY = LimitConfig(ds=(2, 3, 5), Ts=(10, 20), num_sequences=200, limit_samples=200, root_samples=200, limit_nodes=6,
                   num_limit_kappas=12)
WOBBLE = 0.01 * np.linspace(-1, 1, 10)  # the planted per-block spread


def test_limit_and_discrete_cells_through_the_sweep(tmp_path):
    ctx = RunContext(study="regret.limit", quick=True, out_dir=tmp_path)
    lim = limit_cell(TINY, 3, ctx)
    assert lim["G"].shape == (12,) and int(lim["sign_changes"]) == 1 and lim["mass_error"] < 1e-5
    assert 1.8 < float(lim["kappa_star"]) < 2.4  # kappa*_inf(3) = 2.1 (docs/regret.md §5.7 table)
    assert lim["block_kappa"].shape == lim["block_G"].shape == (10,)
    assert abs(np.mean(lim["block_kappa"]) / lim["kappa_star"] - 1) < 0.02  # linearised at the root of all samples
    assert bool(lim["root_bracketed"]) and abs(float(lim["root_kappa_star"]) - float(lim["kappa_star"])) < 0.05
    assert 0.5 < float(lim["root_se"]) / float(lim["se"]) < 2  # the same 200 samples, the grid-free root
    cell = discrete_cell(TINY, 3, 20, float(lim["kappa_star"]), ctx)
    assert cell["excess"].shape == (TINY.num_discrete_kappas,)
    np.testing.assert_allclose(cell["kappas"][TINY.num_discrete_kappas // 2], lim["kappa_star"], rtol=1e-6)  # centred grid
    assert int(cell["sign_changes"]) == 1 and abs(float(cell["kappa_star"]) - float(lim["kappa_star"])) < 0.5
    assert cell["block_kappa"].shape == (10,) and cell["block_excess"].shape == (10, TINY.num_discrete_kappas)
    np.testing.assert_allclose(cell["block_excess"].mean(0), cell["excess"], rtol=1e-9)  # 200 = 10 blocks of 20
    assert not (tmp_path / "limit_d3").exists() and not (tmp_path / "scan_d3_T20").exists()  # finished sweeps clean up


def _synthetic(config: LimitConfig, k_inf, k_T, excess=None, se=0.01, se_T=0.03, G=0.015, G_se=5e-4):
    """Arrays as ``compute`` returns them with the given roots (k_T [D, nT]), G_d = G on the limit grid; per block the
    values times 1 + WOBBLE (the discrete cells' reversed), the discrete excess 1.5 times larger at the grid edges."""
    D, nT, Kl, Kd = len(config.ds), len(config.Ts), config.num_limit_kappas, config.num_discrete_kappas
    k_inf, k_T = np.asarray(k_inf, float), np.broadcast_to(np.asarray(k_T, float), (D, nT))
    excess = np.full((D, nT), G) if excess is None else np.broadcast_to(np.asarray(excess, float), (D, nT))
    limit = {"kappas": np.stack([config.limit_kappas(d) for d in config.ds]), "G": np.full((D, Kl), G),
             "G_se": np.full((D, Kl), G_se), "dG": np.zeros((D, Kl)), "dG_se": np.ones((D, Kl)), "kappa_star": k_inf,
             "se": np.full(D, se), "sign_changes": np.ones(D, int), "mass_error": np.full(D, 3e-7),
             "block_kappa": k_inf[:, None] * (1 + WOBBLE), "block_G": np.full((D, 10), G) * (1 + WOBBLE),
             "root_kappa_star": k_inf - 0.005, "root_se": np.full(D, se), "root_bracketed": np.ones(D, bool)}
    profile = np.ones(Kd)
    profile[[0, -1]] = 1.5
    discrete = {"kappas": np.ones((D, nT, Kd)), "excess": np.repeat(excess[..., None], Kd, -1),
                "excess_se": np.full((D, nT, Kd), 1e-3), "dF": np.zeros((D, nT, Kd)), "dF_se": np.ones((D, nT, Kd)),
                "kappa_star": k_T, "se": np.full((D, nT), se_T), "sign_changes": np.ones((D, nT), int),
                "block_kappa": k_T[..., None] * (1 - WOBBLE),
                "block_excess": excess[..., None, None] * (1 - WOBBLE)[:, None] * profile}
    return {"ds": np.asarray(config.ds), "Ts": np.asarray(config.Ts), "limit": limit, "discrete": discrete}


CONFIG = LimitConfig(ds=(2, 5, 20, 100), Ts=(100, 1000))
K_INF = np.array([1.9, 2.25, 2.7, 3.17])  # ratios to sqrt(2 ln d): 1.61, 1.25, 1.10, 1.04


def test_summarize_on_synthetic_arrays():
    summary = summarize(CONFIG, _synthetic(CONFIG, K_INF, K_INF[:, None] + np.array([0.02, -0.01])))
    got = {c.name: c for c in summary.checks}
    assert [c.name for c in summary.checks] == [c.name for c in study.CLAIMS]
    assert all(c.passed for c in summary.checks), [c for c in summary.checks if not c.passed]
    assert got["kappa_star_matches_limit_at_T_max"].value == pytest.approx(np.mean(-0.01 / K_INF), abs=1e-3)
    assert got["excess_at_root_matches_limit"].value == pytest.approx(0.0, abs=1e-3)
    assert got["kappa_inf_grows_in_d"].value == pytest.approx(0.35, rel=0.05) and got["kappa_inf_grows_in_d"].n == 10
    assert summary.metrics["kappa_gap_T_max_z_max_abs"] == pytest.approx(0.01 / np.hypot(0.03, 0.01))
    assert summary.metrics["hedge_gap_d2"] == pytest.approx(1.9 - np.sqrt(2 * np.log(2)))
    assert summary.tables["table"]["d"] == [2, 5, 20, 100] and len(summary.tables["cells"]["d"]) == 8
    assert summary.metrics["kappa_inf_fit_minus_root_d5"] == pytest.approx(0.005) and summary.metrics["root_unbracketed"] == 0
    assert summary.metrics["kappa_inf_root_se_d20"] == pytest.approx(0.01)
    assert summary.tables["table"]["kappa_inf_root"] == pytest.approx(list(K_INF - 0.005))


def test_controls_fail_their_claims():
    """Each claim's control arm does not pass it: the Hedge scale as the limit, the excess read at the grid edge
    (planted 1.5x), the Hedge-normalised root for the growth and the sqrt(ln d) growth arm for the falling ratio."""
    summary = summarize(CONFIG, _synthetic(CONFIG, K_INF, K_INF[:, None]))
    assert all(c.passed and c.control.verdict != checks.PASS for c in summary.checks), summary.checks
    assert {c.control.verdict for c in summary.checks[:3]} == {checks.FAIL}


@pytest.mark.parametrize("k_T, excess, k_inf, failing", [
    (K_INF[:, None] + np.array([0.0, 0.2]), None, K_INF, {"kappa_star_matches_limit_at_T_max"}),  # 4-10% off at T_max
    (K_INF[:, None] + np.array([0.4, 0.0]), None, K_INF, set()),  # a finite-T bias that vanishes at T_max passes
    (K_INF[:, None], np.array([[0.015, 0.02]]), K_INF, {"excess_at_root_matches_limit"}),  # excess off the limit's G
    (np.full((4, 1), 2.5), None, np.full(4, 2.5), {"kappa_inf_grows_in_d"}),  # flat in d (the ratio still falls)
    (None, None, 1.3 * np.sqrt(2 * np.log(np.array([2, 5, 20, 100]))),
     {"hedge_ratio_decreases_in_d"}),  # exactly proportional to sqrt(2 ln d): flat ratio
    (None, None, np.sqrt(np.array([2, 5, 20, 100])),  # sqrt(d) growth: the ratio rises, and the growth claim's
     {"hedge_ratio_decreases_in_d", "kappa_inf_grows_in_d"}),  # Hedge-normalised control passes too (NO POWER)
])
def test_summarize_fails_the_right_checks(k_T, excess, k_inf, failing):
    k_T = np.asarray(k_inf)[:, None] if k_T is None else k_T
    summary = summarize(CONFIG, _synthetic(CONFIG, k_inf, k_T, excess))
    assert {c.name for c in summary.checks if not c.passed} == failing


def test_gap_fit_recovers_the_model():
    ds = np.array([2, 5, 20, 100, 1000])
    fit = gap_fit(ds, 0.6 - 0.3 * np.log(np.log(ds)), np.full(5, 0.01))
    assert fit["gap_fit_a"] == pytest.approx(0.6) and fit["gap_fit_b"] == pytest.approx(-0.3)
    assert fit["gap_fit_chi2_dof"] == pytest.approx(0.0, abs=1e-12)


def test_limit_config_validates():
    for kwargs, field in [({"ds": (2, 5)}, "ds"), ({"ds": (5, 2, 20)}, "ds"), ({"Ts": (100,)}, "Ts"),
                          ({"num_discrete_kappas": 8}, "num_discrete_kappas"), ({"discrete_halfwidth": 1.0}, "discrete_halfwidth"),
                          ({"stream": 2}, "stream"), ({"limit_samples": 10}, "limit_samples"),
                          ({"limit_ratio_min": 3.0}, "limit_ratio"), ({"num_blocks": 1}, "num_blocks"),
                          ({"root_samples": 50}, "root_samples"), ({"root_kappas": 4}, "root_kappas")]:
        with pytest.raises(ValueError, match=field):
            LimitConfig(**kwargs)


def test_estimate_probes_scale_every_sample_count():
    """`show regret.limit --estimate` probes FULL with each of its three sample counts scaled down: the root's
    120,000 samples per d are most of FULL's limit pass, so a probe that kept them would time the pass in full."""
    from experiments import estimate, registry

    study = registry.load_all()["regret.limit"]
    f = estimate.probe_fraction(study.full, study.cost_fields)
    probe = estimate.probe_config(study.full, study.cost_fields, f)
    for field in ("num_sequences", "limit_samples", "root_samples"):
        full = getattr(study.full, field)
        assert f * full <= getattr(probe, field) <= 2 * f * full < full, field

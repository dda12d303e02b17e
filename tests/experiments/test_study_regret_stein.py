"""regret.stein end to end at a tiny size through the CLI, the per-cell moments on planted samples, and the checks."""
import json

import numpy as np
import pytest

from experiments import cli
from experiments.studies.regret.stein import PER_CELL, PER_ETA, TABLE_COLUMNS, SteinConfig, cell_moments, summarize

CHECKS = ["stein_matches_pathwise_every_eta", "stein_root_matches_pathwise_root", "comparator_term_dominates_below_half_root",
          "learner_term_dominates_above_twice_root", "curvature_positive_at_root"]
TINY = ["--set", "ds=[2,3]", "--set", "Ts=[10]", "--set", "num_sequences=600", "--set", "num_kappas=10",
        "--set", "chunk_size=300"]


def test_tiny_run_through_cli(tmp_path):
    code = cli.main(["run", "regret.stein", "--quick", *TINY, "--out", str(tmp_path)])
    out = tmp_path / "regret.stein"
    assert code in (0, 1) and not (out / "error.txt").exists()  # checks may fail at this size; the run may not raise
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["ds"] == [2, 3] and result["config"]["num_sequences"] == 600
    assert [c["name"] for c in result["checks"]] == CHECKS
    assert 0.5 < result["metrics"]["kappa_star_d3_T10"] < 5 and result["metrics"]["var_ratio_root_max"] > 0
    assert (out / "table.csv").read_text().splitlines()[0] == ",".join(TABLE_COLUMNS)
    terms = np.load(out / "terms.npz")
    assert sorted(terms) == ["d2_T10", "d3_T10"] and terms["d3_T10"].shape == (len(PER_ETA), 11)
    assert (out / "stein_terms.png").exists() and not (out / "stein_d2_T10").exists()  # finished sweeps leave no checkpoint


def _samples(N=4000, eta0=0.4, seed=0):
    """Planted per-sequence samples on etas 0..1: pathwise F' = eta - eta0 + noise, Stein F' the same mean, F'' = 2 (s^2 + 1/2)."""
    rng = np.random.default_rng(seed)
    etas = np.linspace(0.0, 1.0, 21)
    eps, dlt = rng.normal(size=(N, 1)) * 0.3, rng.normal(size=(N, 1)) * 0.1
    dR = (etas - eta0) / 2 + eps  # R = 1, so 2 R R' = eta - eta0 + 2 eps
    t1 = np.broadcast_to(etas, (N, 21)) * (1 + dlt)  # t1 >= 0 shape, mean eta
    t2 = t1 - (etas - eta0) / 2 + 0.5 * dlt  # 2 (t1 - t2) = eta - eta0 - dlt
    return {"R": np.ones((N, 21)), "dR": dR, "d2R": np.full((N, 21), 0.5), "t1": t1, "t2": t2}, etas


def test_cell_moments_on_planted_samples():
    samples, etas = _samples()
    m = cell_moments(samples, etas)
    assert set(m) == set(PER_ETA) | set(PER_CELL)
    assert m["eta_star"] == pytest.approx(0.4, abs=0.01) and m["eta_star_stein"] == pytest.approx(0.4, abs=0.005)
    np.testing.assert_allclose(m["dF_path"], etas - 0.4, atol=0.05)
    np.testing.assert_allclose(m["dF_path_se"], 0.6 / np.sqrt(4000), rtol=0.05)
    np.testing.assert_allclose(m["dF_stein_se"], 0.1 / np.sqrt(4000), rtol=0.05)
    np.testing.assert_allclose(m["T1"], etas * samples["t1"][:, -1].mean(), rtol=1e-9)  # etas[-1] = 1
    # F'' = 2 (E[R'^2] + 1/2) with R' = eps at eta*: 2 (0.09 + 0.5); variances 0.1^2 (Stein) over 0.6^2 (pathwise)
    assert float(m["d2F_root"]) == pytest.approx(2 * (0.09 + 0.5), rel=0.05)
    assert float(m["var_ratio_root"]) == pytest.approx(0.01 / 0.36, rel=0.1)
    # (Stein root - pathwise root) / (paired se / F''), the paired difference -2 eps - dlt has sd sqrt(0.37)
    want = (m["eta_star_stein"] - m["eta_star"]) / (np.sqrt(0.37) / np.sqrt(4000) / m["d2F_root"])
    assert float(m["root_diff_z"]) == pytest.approx(want, rel=0.1)
    assert float(m["T1_root"]) == pytest.approx(float(m["T2_root"]), abs=0.01)


def _arrays(config: SteinConfig, *, diff_z=1.0, root_diff_z=0.5, d2F_z=12.0, learner_below=False, comparator_above=False):
    """Arrays as ``compute`` returns them: T1, T2 cross at kappa* = 2, standard errors 0.01 (Stein), 0.1 (pathwise)."""
    cells = [(d, T) for d in config.ds for T in config.Ts]
    C, kappas = len(cells), np.concatenate([[0.0], config.kappas])
    T = np.asarray([c[1] for c in cells])
    etas = kappas[None] / np.sqrt(T)[:, None]
    T1 = np.tile(kappas / (1 + kappas**2 / 4), (C, 1))  # rises from 0, peaks at kappa = 2 (value 1), falls
    T2 = np.tile(16 / (2 + kappas) ** 2, (C, 1))  # 4 at kappa = 0, falls through 1 at kappa = 2
    if learner_below:
        T1[0, 1] = T2[0, 1] + 1.0  # the learner term dominates at a small eta of one cell
    if comparator_above:
        T2[-1, -1] = T1[-1, -1] + 1.0  # the comparator term dominates at a large eta of one cell
    se = np.full((C, len(kappas)), 0.01)
    terms = {"etas": etas, "dF_path": 2 * (T1 - T2), "dF_path_se": 10 * se, "dF_stein": 2 * (T1 - T2),
             "dF_stein_se": se, "diff_z": np.full((C, len(kappas)), diff_z), "T1": T1, "T1_se": se, "T2": T2,
             "T2_se": se, "d2F": np.ones_like(T1), "d2F_se": se}
    root = {"eta_star": 2 / np.sqrt(T), "eta_star_se": 0.01 / np.sqrt(T), "eta_star_stein": 2 / np.sqrt(T),
            "root_diff_z": np.full(C, root_diff_z), "d2F_root": np.ones(C), "d2F_root_z": np.full(C, d2F_z),
            "var_ratio_root": np.full(C, 0.1), "T1_root": np.ones(C), "T2_root": np.ones(C)}
    return {"cells": {"d": np.asarray([c[0] for c in cells]), "T": T}, "terms": terms, "root": root}


def test_summarize_on_synthetic_cells():
    config = SteinConfig(ds=(2, 5), Ts=(25, 100))
    summary = summarize(config, _arrays(config))
    assert [c.name for c in summary.checks] == CHECKS and all(c.passed for c in summary.checks)
    assert summary.checks[0].value == pytest.approx(1.0) and summary.checks[-1].value == pytest.approx(12.0)
    assert summary.metrics["kappa_star_d5_T100"] == pytest.approx(2.0) and summary.metrics["kappa_T1_peak_d2_T25"] > 1.5
    assert list(summary.tables["table"]) == list(TABLE_COLUMNS) and len(summary.tables["table"]["d"]) == 4


@pytest.mark.parametrize("kwargs, failing", [
    ({"diff_z": 6.0}, {"stein_matches_pathwise_every_eta"}),
    ({"root_diff_z": -5.0}, {"stein_root_matches_pathwise_root"}),
    ({"d2F_z": 3.0}, {"curvature_positive_at_root"}),
    ({"learner_below": True}, {"comparator_term_dominates_below_half_root"}),
    ({"comparator_above": True}, {"learner_term_dominates_above_twice_root"}),
])
def test_summarize_fails_the_right_checks(kwargs, failing):
    config = SteinConfig(ds=(2, 5), Ts=(25, 100))
    summary = summarize(config, _arrays(config, **kwargs))
    assert {c.name for c in summary.checks if not c.passed} == failing


@pytest.mark.parametrize("kwargs, field", [({"ds": (1, 2)}, "ds"), ({"ds": (5, 2)}, "ds"), ({"Ts": (1,)}, "Ts"),
                                           ({"num_sequences": 50}, "num_sequences"), ({"kappa_min": 0.0}, "kappa_min"),
                                           ({"num_kappas": 4}, "num_kappas"), ({"chunk_size": 0}, "chunk_size"),
                                           ({"stream": 2}, "stream")])
def test_stein_config_validates(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SteinConfig(**kwargs)

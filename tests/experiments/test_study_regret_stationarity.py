"""regret.stationarity: one (d, T) cell through the checkpointed sweep, and the summary logic on synthetic cells."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments.registry import RunContext
from experiments.studies.regret import stationarity as study
from experiments.studies.regret.stationarity import ScanConfig, cell_rows, scan_cell, summarize


def test_scan_cell_finds_single_root_and_exact_values(tmp_path):
    config = ScanConfig(ds=(2, 3), Ts=(10,), num_sequences=3000, num_kappas=16, chunk_size=1500, structure_cell=(3, 10))
    ctx = RunContext(study="regret.stationarity", quick=True, out_dir=tmp_path)
    cell = scan_cell(config, 3, 10, ctx)
    assert cell["F"].shape == (17,) and cell["etas"][0] == 0.0
    arrays = {"cells": {"d": np.array([3]), "T": np.array([10])},
              "ray": {k: cell[k][None] for k in ("etas", "F", "F_se", "dF", "dF_se", "mean_R", "mean_R_se")},
              "root": {k: cell[k][None] for k in ("eta_star", "se", "sign_changes")}}
    row = {k: v[0] for k, v in cell_rows(arrays).items()}
    assert row["sign_changes"] == 1
    assert 0.5 < row["kappa_star"] < 4.0 and np.isfinite(row["se"])
    assert abs(row["z_F0"]) < 4.5 and abs(row["z_dF0"]) < 4.5 and row["z_mean_R"] < 4.5
    assert not (tmp_path / "scan_d3_T10").exists()  # a finished sweep removes its checkpoint


def _synthetic(config: ScanConfig, kappa, kappa_se=0.02, sign_changes=1, **swap):
    """Arrays as ``compute`` returns them, with exact F(0), F'(0), E[R] and the given roots per cell (d outer, T inner)."""
    cells = [(d, T) for d in config.ds for T in config.Ts]
    d, T = np.array([c[0] for c in cells]), np.array([c[1] for c in cells])
    E = 1 + config.num_kappas
    mean_R = np.sqrt(T)[:, None] * np.array([rj.mu_d(int(x)) for x in d])[:, None] * np.ones(E)
    F = np.zeros((len(cells), E))
    F[:, 0] = [rj.exact_F0(int(a), int(b)) for a, b in zip(d, T)]
    dF = np.zeros((len(cells), E))
    dF[:, 0] = [rj.exact_dF0(int(a), int(b)) for a, b in zip(d, T)]
    kappa = np.broadcast_to(np.asarray(kappa, float), (len(cells),))
    structure = {f"z_{k}_{tag}": 0.5 for k in ("alpha", "max_v", "max_k", "max_V_offray") for tag in ("star", "half")}
    structure.update(z_alpha_half=-9.0, colsum_V_rel_star=1e-7, colsum_V_rel_half=1e-7, z_max_phi=1.0)
    structure.update({f"swap_{k}_{tag}": 0.5 for k in study.SWAP_STAR + ("z_alpha", "z_min_alpha_head") for tag in ("star", "half")})
    structure.update(swap_z_alpha_half=-20.0, swap_z_min_alpha_head_half=8.0, swap_z_max_alpha_head_half=9.0,
                     swap_alpha_root_se=0.01)
    structure.update(swap)
    return {
        "cells": {"d": d, "T": T},
        "ray": {"etas": np.zeros((len(cells), E)), "F": F, "F_se": np.ones_like(F), "dF": dF, "dF_se": np.ones_like(dF),
                "mean_R": mean_R, "mean_R_se": np.ones_like(mean_R)},
        "root": {"eta_star": kappa / np.sqrt(T), "se": kappa_se / np.sqrt(T), "sign_changes": np.full(len(cells), sign_changes)},
        "structure": {k: np.asarray(v) for k, v in structure.items()},
    }


CHECKS = ["one_sign_change_every_cell", "kappa_star_constant_in_T", "kappa_star_monotone_in_d", "kappa_star_grows_in_d",
          "F0_exact", "dF0_exact", "mean_regret_is_sqrtT_mu_d", "gradient_vanishes_at_eta_star",
          "gradient_along_P_at_half_eta_star", "gradient_off_P_vanishes_at_half_eta_star", "multihead_phi_prime_is_d_F_prime",
          "swap_gradient_vanishes_at_eta_star", "swap_gradient_along_P_at_half_eta_star",
          "swap_gradient_off_P_vanishes_at_half_eta_star"]


def test_summarize_on_synthetic_cells():
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    kappa = np.array([1.0, 1.0, 1.3, 1.3, 1.5, 1.5])  # constant in T, slow growth in d
    summary = summarize(config, _synthetic(config, kappa))
    got = {c.name: c for c in summary.checks}
    assert all(c.passed for c in summary.checks), [c for c in summary.checks if not c.passed]
    assert summary.metrics["kappa_star_d5"] == pytest.approx(1.3) and summary.metrics["kappa_growth_ratio"] == pytest.approx(1.5)
    assert summary.metrics["kappa_star_se_d2"] == pytest.approx(0.02 / np.sqrt(2))  # inverse-variance mean of 2 cells
    assert got["kappa_star_constant_in_T"].value == pytest.approx(0.0, abs=1e-9)
    assert got["kappa_star_grows_in_d"].value == pytest.approx(0.5 / 0.02)
    assert got["F0_exact"].value == pytest.approx(0.0, abs=1e-9) and got["mean_regret_is_sqrtT_mu_d"].value < 1e-9
    assert summary.tables["table"]["d"] == [2, 5, 10] and list(summary.tables["roots"]) == list(study.ROOT_COLUMNS)
    assert [c.name for c in summary.checks] == CHECKS
    assert len([c for c in summary.checks if c.claim]) == 4
    assert summary.metrics["kappa_growth_sqrt_d_scale"] == pytest.approx(5**0.5)  # the demoted growth check, reported


@pytest.mark.parametrize("kappa, sign_changes, failing", [
    ([1.0, 1.6, 1.3, 1.3, 1.5, 1.5], 1, {"kappa_star_constant_in_T"}),  # kappa* drifts with T at d = 2
    ([1.0, 1.0, 0.9, 0.9, 1.5, 1.5], 1, {"kappa_star_monotone_in_d"}),  # a step down in d
    ([1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1, {"kappa_star_grows_in_d"}),  # no growth (steps of 0 are not decreases)
    ([1.0, 1.0, 1.3, 1.3, 1.5, 1.5], 2, {"one_sign_change_every_cell"}),
])
def test_summarize_fails_the_right_checks(kappa, sign_changes, failing):
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    summary = summarize(config, _synthetic(config, kappa, sign_changes=sign_changes))
    failed = {c.name for c in summary.checks if not c.passed}
    assert failed == failing


@pytest.mark.parametrize("swap, failing", [
    ({"swap_z_max_alpha_head_star": 5.0}, {"swap_gradient_vanishes_at_eta_star"}),  # one head's alpha != 0 at eta*
    ({"swap_z_max_V_offdiag_star": 6.0}, {"swap_gradient_vanishes_at_eta_star"}),  # a head reads another head's block
    ({"swap_z_max_k_star": 4.6}, {"swap_gradient_vanishes_at_eta_star"}),
    ({"swap_z_min_alpha_head_half": 3.0}, {"swap_gradient_along_P_at_half_eta_star"}),  # one head flat off the root
    ({"swap_z_max_V_offdiag_half": 6.0}, {"swap_gradient_off_P_vanishes_at_half_eta_star"}),
    ({"swap_z_max_alpha_spread_half": 6.0}, {"swap_gradient_off_P_vanishes_at_half_eta_star"}),  # heads' alphas differ
    ({"swap_z_max_V_offray_half": 6.0}, {"swap_gradient_off_P_vanishes_at_half_eta_star"}),
    ({"swap_z_max_v_half": 6.0}, {"swap_gradient_off_P_vanishes_at_half_eta_star"}),
])
def test_summarize_fails_the_right_swap_checks(swap, failing):
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    kappa = np.array([1.0, 1.0, 1.3, 1.3, 1.5, 1.5])
    summary = summarize(config, _synthetic(config, kappa, **swap))
    assert {c.name for c in summary.checks if not c.passed} == failing


def test_scan_config_validates():
    for kwargs, field in [({"ds": (1, 2)}, "ds"), ({"ds": (3, 2)}, "ds"), ({"Ts": (1,)}, "Ts"),
                          ({"structure_cell": (7, 50)}, "structure_cell"), ({"num_kappas": 4}, "num_kappas")]:
        with pytest.raises(ValueError, match=field):
            ScanConfig(**kwargs)


def test_swap_structure_on_tiny_blocks():
    blocks = rj.flat_normal(jax.random.key(3), (400, 8, 3, 3))
    out = study.swap_structure(blocks, 0.7, 0.02)
    keys = {f"swap_{k}_{tag}" for k in (*study.SWAP_STAR, "z_alpha", "z_min_alpha_head", "colsum_V_rel") for tag in ("star", "half")}
    assert set(out) == keys | {"swap_alpha_root_se"} and all(np.isfinite(list(out.values())))
    assert out["swap_colsum_V_rel_star"] < 1e-5 and out["swap_alpha_root_se"] > 0
    assert out["swap_z_max_V_offdiag_star"] < 4.5 and out["swap_z_max_k_half"] < 4.5  # zero at every eta
    assert out["swap_z_min_alpha_head_half"] <= out["swap_z_max_alpha_head_half"]

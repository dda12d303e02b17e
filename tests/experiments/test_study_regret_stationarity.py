"""regret.stationarity: one (d, T) cell through the checkpointed sweep, and the summary logic on synthetic cells."""
import jax
import numpy as np
import pytest

import regret_jax as rj
from experiments import checks
from experiments.registry import RunContext
from experiments.studies.regret import stationarity as study
from experiments.studies.regret.stationarity import ScanConfig, cell_rows, scan_cell, structure_checks, summarize


def test_scan_cell_finds_single_root_and_exact_values(tmp_path):
    config = ScanConfig(ds=(2, 3), Ts=(10, 20), num_sequences=3000, num_kappas=16, chunk_size=1500, structure_cell=(3, 10),
                        structure_sequences=2000)
    ctx = RunContext(study="regret.stationarity", quick=True, out_dir=tmp_path)
    cell = scan_cell(config, 3, 10, ctx)
    assert cell["F"].shape == (17,) and cell["etas"][0] == 0.0
    # linearised block roots of the centred F' scatter around the root of the (noisier) uncentred F'
    assert cell["block_eta"].shape == (10,) and np.std(cell["block_eta"]) > 0
    assert abs(np.mean(cell["block_eta"]) - cell["eta_star"]) < 4 * cell["se"]
    arrays = {"cells": {"d": np.array([3]), "T": np.array([10])},
              "ray": {k: cell[k][None] for k in ("etas", "F", "F_se", "dF", "dF_se", "mean_R", "mean_R_se")},
              "root": {k: cell[k][None] for k in ("eta_star", "se", "sign_changes")}}
    row = {k: v[0] for k, v in cell_rows(arrays).items()}
    assert row["sign_changes"] == 1
    assert 0.5 < row["kappa_star"] < 4.0 and np.isfinite(row["se"])
    assert abs(row["z_F0"]) < 4.5 and abs(row["z_dF0"]) < 4.5 and row["z_mean_R"] < 4.5
    assert not (tmp_path / "scan_d3_T10").exists()  # a finished sweep removes its checkpoint
    # the gradient claims and their eta*/2 controls on a real (small) computation at this cell's root
    _, per_block = structure_checks(config, float(cell["eta_star"]), float(cell["se"]))
    for claim, tag in ((study.GRAD_ZERO, ""), (study.SWAP_GRAD_ZERO, "swap_")):
        c = claim.judge(per_block[f"{tag}alpha_star"], control=per_block[f"{tag}alpha_half"])
        assert c.verdict != checks.FAIL and c.control.verdict == checks.FAIL, c


WOBBLE = 0.01 * np.linspace(-1, 1, 10)  # the planted per-block spread


def _synthetic(config: ScanConfig, kappa, kappa_se=0.02, sign_changes=1, alpha_star=0.0, **swap):
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
        "blocks": {"eta": (kappa / np.sqrt(T))[:, None] * (1 + WOBBLE), "alpha_star": alpha_star + WOBBLE,
                   "alpha_half": -1 + WOBBLE, "swap_alpha_star": alpha_star + WOBBLE, "swap_alpha_half": -1 + WOBBLE},
    }


CHECKS = [c.name for c in study.CLAIMS]


def test_summarize_on_synthetic_cells():
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    kappa = np.array([1.0, 1.0, 1.3, 1.3, 1.5, 1.5])  # constant in T, slow growth in d
    summary = summarize(config, _synthetic(config, kappa))
    got = {c.name: c for c in summary.checks}
    assert [c.name for c in summary.checks] == CHECKS
    assert all(c.passed for c in summary.checks), [c for c in summary.checks if not c.passed]
    assert summary.metrics["kappa_star_d5"] == pytest.approx(1.3) and summary.metrics["kappa_growth_ratio"] == pytest.approx(1.5)
    assert summary.metrics["kappa_star_se_d2"] == pytest.approx(0.02 / np.sqrt(2))  # inverse-variance mean of 2 cells
    assert summary.metrics["kappa_star_T_z_max"] == pytest.approx(0.0, abs=1e-9)
    assert summary.metrics["z_F0_max_abs"] == pytest.approx(0.0, abs=1e-9) and summary.metrics["z_mean_R_max"] < 1e-9
    assert got["root_scales_as_inverse_sqrt_T"].value == pytest.approx(-0.5) and got["root_scales_as_inverse_sqrt_T"].n == 10
    assert got["kappa_star_grows_in_d"].value == pytest.approx(0.2, rel=0.05)  # the smaller step, 1.3 -> 1.5
    assert summary.tables["table"]["d"] == [2, 5, 10] and list(summary.tables["roots"]) == list(study.ROOT_COLUMNS)
    assert summary.metrics["kappa_growth_sqrt_d_scale"] == pytest.approx(5**0.5)  # the demoted growth check, reported


def test_controls_fail_their_claims():
    """Every interval claim's control arm is judged beside it and does not pass: the T-independent step (slope 0),
    the Hedge-normalised root (falling in d) and the gradient at eta*/2 (planted here; on a real computation in
    ``test_scan_cell_finds_single_root_and_exact_values``)."""
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    summary = summarize(config, _synthetic(config, np.array([1.0, 1.0, 1.3, 1.3, 1.5, 1.5])))
    interval = [c for c in summary.checks if c.kind == "interval"]
    assert len(interval) == 4 and all(c.control.verdict == checks.FAIL for c in interval), interval


@pytest.mark.parametrize("kappa, sign_changes, alpha_star, failing", [
    ([0.8, 1.4, 1.3, 1.3, 1.5, 1.5], 1, 0.0, {"root_scales_as_inverse_sqrt_T"}),  # kappa* drifts with T at d = 2
    ([1.0, 1.0, 0.9, 0.9, 1.5, 1.5], 1, 0.0, {"kappa_star_grows_in_d"}),  # a step down in d
    ([1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1, 0.0, {"kappa_star_grows_in_d"}),  # no growth
    ([1.0, 1.0, 1.3, 1.3, 1.5, 1.5], 2, 0.0, {"one_sign_change_every_cell"}),
    ([1.0, 1.0, 1.3, 1.3, 1.5, 1.5], 1, 0.8, {"gradient_vanishes_at_eta_star", "swap_gradient_vanishes_at_eta_star"}),
])
def test_summarize_fails_the_right_checks(kappa, sign_changes, alpha_star, failing):
    config = ScanConfig(ds=(2, 5, 10), Ts=(25, 100))
    summary = summarize(config, _synthetic(config, kappa, sign_changes=sign_changes, alpha_star=alpha_star))
    failed = {c.name for c in summary.checks if not c.passed}
    assert failed == failing


def test_scan_config_validates():
    for kwargs, field in [({"ds": (1, 2)}, "ds"), ({"ds": (3, 2)}, "ds"), ({"Ts": (1,)}, "Ts"),
                          ({"structure_cell": (7, 50)}, "structure_cell"), ({"num_kappas": 4}, "num_kappas"),
                          ({"Ts": (25,)}, "Ts"), ({"num_blocks": 1}, "num_blocks")]:
        with pytest.raises(ValueError, match=field):
            ScanConfig(**kwargs)


def test_swap_structure_on_tiny_blocks():
    blocks = rj.flat_normal(jax.random.key(3), (400, 8, 3, 3))
    out, alpha = study.swap_structure(blocks, 0.7, 0.02)
    assert alpha["star"].shape == alpha["half"].shape == (400,)
    keys = {f"swap_{k}_{tag}" for k in (*study.SWAP_STAR, "z_alpha", "z_min_alpha_head", "colsum_V_rel") for tag in ("star", "half")}
    assert set(out) == keys | {"swap_alpha_root_se"} and all(np.isfinite(list(out.values())))
    assert out["swap_colsum_V_rel_star"] < 1e-5 and out["swap_alpha_root_se"] > 0
    assert out["swap_z_max_V_offdiag_star"] < 4.5 and out["swap_z_max_k_half"] < 4.5  # zero at every eta
    assert out["swap_z_min_alpha_head_half"] <= out["swap_z_max_alpha_head_half"]

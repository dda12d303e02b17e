"""Tiny run of the regret.stationarity core: one (d, T) cell through sweep_map, root and exact values."""
import numpy as np
import pytest

from experiments.studies.regret_stationarity import ScanConfig, scan_cell, summarise_cell


def test_scan_cell_finds_single_root_and_exact_values():
    config = ScanConfig(ds=(3,), Ts=(10,), num_sequences=3000, num_kappas=16, chunk_size=1500)
    (R, dR), etas, _ = scan_cell(config, 3, 10)
    assert R.shape == (3000, 17) and etas[0] == 0.0
    row = summarise_cell(R, dR, etas, 3, 10)
    assert row["sign_changes"] == 1
    assert 0.5 < row["kappa_star"] < 4.0 and np.isfinite(row["se"])
    assert abs(row["z_F0"]) < 4.5 and abs(row["z_dF0"]) < 4.5 and row["z_mean_R"] < 4.5


def test_scan_config_validates():
    with pytest.raises(ValueError, match="ds"):
        ScanConfig(ds=(1,), Ts=(10,), num_sequences=1000)

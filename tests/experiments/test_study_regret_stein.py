"""regret.stein end to end at a tiny size through the CLI, the per-cell moments on planted samples, and the checks."""
import json

import jax

import numpy as np
import pytest

from experiments import checks, cli
from experiments.studies.regret.stein import (PER_BLOCK, PER_CELL, PER_ETA, TABLE_COLUMNS, SteinConfig, cell_moments,
                                              summarize)

TINY = ["--set", "ds=[2,3]", "--set", "Ts=[10]", "--set", "num_sequences=600", "--set", "num_kappas=10",
        "--set", "chunk_size=300"]


def _names(ds, Ts):
    return [f"{c}_d{d}_T{T}" for d in ds for T in Ts for c in ("stein_root_matches_pathwise_root", "curvature_positive_at_root")]


def test_tiny_run_through_cli(tmp_path):
    code = cli.main(["run", "regret.stein", "--quick", *TINY, "--out", str(tmp_path)])
    out = tmp_path / "regret.stein"
    assert code in (0, 1) and not (out / "error.txt").exists()  # checks may fail at this size; the run may not raise
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["ds"] == [2, 3] and result["config"]["num_sequences"] == 600
    assert [c["name"] for c in result["checks"]] == _names([2, 3], [10])
    assert all(c["n"] == 10 and c["unit"] == "block of sequences" for c in result["checks"])
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
    m = cell_moments(samples, etas, 0.0, 10)
    assert set(m) == set(PER_ETA) | set(PER_CELL) | {f"block_{k}" for k in PER_BLOCK}
    assert m["block_root_diff"].shape == (10,) and float(np.mean(m["block_root_diff"])) == pytest.approx(
        -float(np.mean(m["dF_stein"] - m["dF_path"], where=np.isclose(etas, 0.4))) / (0.4 * m["d2F_root"]), abs=0.02)
    # the wrong-root control reads the Stein F' (= eta - 0.4) at 1.1 eta* = 0.44: shift -0.04 / (0.4 F'') per block
    assert float(np.mean(m["block_root_diff_wrong"] - m["block_root_diff"])) == pytest.approx(-0.04 / (0.4 * m["d2F_root"]), rel=0.05)
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


def _arrays(config: SteinConfig, *, root_shift=0.0, curvature=0.03):
    """Arrays as ``compute`` returns them, with planted per-block claim values (10 blocks, spread 0.01)."""
    cells = [(d, T) for d in config.ds for T in config.Ts]
    C, E, wobble = len(cells), len(config.kappas) + 1, 0.01 * np.linspace(-1, 1, 10)
    T = np.asarray([c[1] for c in cells])
    terms = {k: np.ones((C, E)) for k in PER_ETA}
    terms["etas"] = np.concatenate([[0.0], config.kappas])[None] / np.sqrt(T)[:, None]
    root = {k: np.ones(C) for k in PER_CELL}
    root["eta_star"], root["eta_star_stein"] = 2 / np.sqrt(T), 2 / np.sqrt(T)
    blocks = {"root_diff": np.tile(root_shift + wobble, (C, 1)), "root_diff_wrong": np.tile(-0.09 + wobble, (C, 1)),
              "d2F_root": np.tile(curvature + wobble, (C, 1)), "d2F_kappa_max": np.tile(-0.003 + wobble / 10, (C, 1))}
    return {"cells": {"d": np.asarray([c[0] for c in cells]), "T": T}, "terms": terms, "root": root, "blocks": blocks}


def test_summarize_on_synthetic_cells():
    config = SteinConfig(ds=(2, 5), Ts=(25, 100))
    summary = summarize(config, _arrays(config))
    assert [c.name for c in summary.checks] == _names((2, 5), (25, 100))
    assert [c.verdict for c in summary.checks] == [checks.PASS] * 8
    assert summary.metrics["kappa_star_d5_T100"] == pytest.approx(2.0) and summary.checks[1].value == pytest.approx(0.03)
    assert list(summary.tables["table"]) == list(TABLE_COLUMNS) and len(summary.tables["table"]["d"]) == 4


def test_controls_fail_their_claims():
    """The wrong-root control (Stein F' read at 1.1 eta) and F'' at the largest eta fail their claims, as judged."""
    config = SteinConfig(ds=(2, 5), Ts=(25, 100))
    summary = summarize(config, _arrays(config))
    assert {c.control.verdict for c in summary.checks} == {checks.FAIL}
    assert summary.checks[0].control.value == pytest.approx(-0.09)


@pytest.mark.parametrize("kwargs, failing", [
    ({"root_shift": 0.08}, "stein_root_matches_pathwise_root"),  # a Stein root 8% high in every cell
    ({"curvature": -0.02}, "curvature_positive_at_root"),  # a concave F at its root
])
def test_summarize_fails_the_right_checks(kwargs, failing):
    config = SteinConfig(ds=(2, 5), Ts=(25, 100))
    summary = summarize(config, _arrays(config, **kwargs))
    assert {c.name.rsplit("_d", 1)[0] for c in summary.checks if c.verdict == checks.FAIL} == {failing}


def test_controls_fail_on_real_sequences():
    """At d = 2, T = 25 on real Gaussian sequences (2000, stream 1): the Stein root read at 1.1 eta and F'' at the largest
    eta fail their claims, while the claims themselves do not fail."""
    import regret_jax as rj
    from regret_jax.stein import stein_sample
    from experiments.studies.regret import stein

    config = SteinConfig(ds=(2,), Ts=(25,), num_sequences=2000)
    etas = rj.scan_etas(25, config.kappas)
    samples = jax.jit(jax.vmap(stein_sample(2, 25, etas)))(rj.scan_keys(2, 25, 2000, 1))
    m = cell_moments(samples, etas, 5.0 * rj.mu_d(2), 10)
    assert stein.ROOT_MATCH.judge(m["block_root_diff_wrong"], key="d2_T25").verdict != checks.PASS
    assert stein.CURVATURE.judge(m["block_d2F_kappa_max"], key="d2_T25").verdict == checks.FAIL
    assert stein.CURVATURE.judge(m["block_d2F_root"], key="d2_T25").verdict == checks.PASS


@pytest.mark.parametrize("kwargs, field", [({"ds": (1, 2)}, "ds"), ({"ds": (5, 2)}, "ds"), ({"Ts": (1,)}, "Ts"),
                                           ({"num_sequences": 50}, "num_sequences"), ({"kappa_min": 0.0}, "kappa_min"),
                                           ({"num_kappas": 4}, "num_kappas"), ({"chunk_size": 0}, "chunk_size"),
                                           ({"num_blocks": 1}, "num_blocks"),
                                           ({"stream": 2}, "stream")])
def test_stein_config_validates(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SteinConfig(**kwargs)

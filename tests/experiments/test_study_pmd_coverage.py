"""Study pmd.coverage at a tiny size: resume after a crash is bitwise identical; the table is complete."""
import numpy as np
import pytest

from experiments import checkpoint, sweep
from experiments.studies import pmd_coverage as cov


def _run(cfg, ckpt_dir, resume=False):
    return sweep.sweep_map(cov._runner_on_raw_keys(cfg), cov._mdps(cfg), chunk_size=cfg.chunk_size,
                           ckpt_dir=ckpt_dir, fingerprint={"cfg": repr(cfg)}, resume=resume)


def test_crash_and_resume_matches_and_table_is_complete(tmp_path, monkeypatch):
    cfg = cov.CoverageConfig(n_mdps=8, rounds=3, chunk_size=1, n_bootstrap=200)
    clean = _run(cfg, None).outputs

    calls = {"n": 0}
    save = checkpoint.ChunkCheckpointer.save

    def crash_after_first(self, step, state):
        save(self, step, state)
        calls["n"] += 1
        if calls["n"] == 1:
            self.close()
            raise KeyboardInterrupt("simulated kill after the first checkpoint")

    monkeypatch.setattr(checkpoint.ChunkCheckpointer, "save", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        _run(cfg, tmp_path / "ckpt")
    monkeypatch.setattr(checkpoint.ChunkCheckpointer, "save", save)
    resumed = _run(cfg, tmp_path / "ckpt", resume=True)
    assert resumed.resumed_chunks >= 1
    for k in clean:
        np.testing.assert_array_equal(resumed.outputs[k], clean[k])

    table, metrics, checks = cov.summarize(cfg, {k: np.asarray(v, np.float64) for k, v in clean.items()})
    assert len(table["arm"]) == len(cov.ARMS) and len(checks) == 6
    assert table["m"][-1] == "" and table["arm"][-1] == "exact_backup"
    assert np.all(np.isfinite(table["loss_median"])) and np.all(np.asarray(table["loss_lo"]) <= np.asarray(table["loss_hi"]))
    assert metrics["min_count_balanced_m6"] == 6.0 and metrics["unvisited_balanced_m24"] == 0.0


def test_bootstrap_median_against_known_sample():
    x = np.arange(101, dtype=float)
    med, lo, hi = cov.bootstrap_median(x, 2000, 0)
    assert med == 50.0 and lo < 50.0 < hi and hi - lo < 30

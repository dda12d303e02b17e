"""Study pmd.reversal: the result contract and the closed form, the summary on synthetic cells,
config overrides and errors, the vmapped gamma sweep and its report, kill-and-resume, devices."""
import csv
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from experiments import cli
from experiments.registry import RunContext
from experiments.studies.pmd import reversal as rev
from xla_env import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[2]
SHORT = ["--set", "eta_steps=60"]  # eta = 0, 0.05, ..., 3: the published points, a tenth of the grid


def _section14_numpy(eta, kappa, masked, c=1.0, gamma=0.8, nu=20.0):
    """Gains at s- and the s- row error, straight from section 14 (numpy, no JAX)."""
    v_minus, v_plus = -c / (2 * (1 - gamma)), c / (2 * (1 - gamma))
    q_minus = np.array([-c + gamma * v_minus, gamma * v_minus])
    q_plus = np.array([c + gamma * v_plus, gamma * v_plus])
    z_int = 0.5 * np.exp(kappa + eta * q_minus)
    z_wrong = 0.0 if masked else 0.5 * np.exp(eta * q_plus)
    z_q = np.exp(-nu)
    p_hat_a1 = (z_int[0] + np.sum(z_wrong * np.array([1.0, 0.0])) + 0.5 * z_q) / (z_int.sum() + np.sum(z_wrong) + z_q)
    p_a1 = 1.0 / (1.0 + np.exp(eta * c))
    gain = lambda p1: c * (0.5 - p1) / (1 - gamma)
    return gain(p_a1), gain(p_hat_a1), 2 * abs(p_hat_a1 - p_a1)


def _read_cells(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _run_cli(out, *extra, env_extra=None, prelude=""):
    """Run the CLI in a fresh interpreter (so XLA_FLAGS and patches apply)."""
    code = textwrap.dedent(prelude) + "\nimport sys\nfrom experiments.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-c", code, "run", "pmd.reversal", "--out", str(out), *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reversal")
    assert cli.main(["run", "pmd.reversal", "--out", str(out)]) == 0
    return out / "pmd.reversal"


def test_result_contract_and_closed_form(clean_run):
    result = json.loads((clean_run / "result.json").read_text())
    assert set(result) == {"study", "quick", "config", "overrides", "metrics", "checks", "paper", "provenance"}
    assert result["metrics"]["negative_cells_unmasked"] == 840 and result["metrics"]["negative_cells_masked"] == 0
    assert all(c["passed"] and c["kind"] == "exact" for c in result["checks"])
    assert {c["name"] for c in result["checks"]} == {c.name for c in rev.STUDY.claims}
    assert (clean_run / "reversal.png").stat().st_size > 10_000
    table = _read_cells(clean_run / "table.csv")
    assert [float(r["threshold_formula"]) for r in table] == pytest.approx([0.8, 1.6, 2.4])
    assert [float(r["first_negative_eta"]) for r in table] == pytest.approx([0.805, 1.605, 2.405])
    rows = _read_cells(clean_run / "cells.csv")
    assert len(rows) == 3606 and list(rows[0]) == ["eta", "kappa", "masked", "gain_ideal", "gain_implemented", "row_error"]
    further = _read_cells(clean_run / "further_cells.csv")
    assert len(further) == 2928 and list(further[0])[:5] == ["eta", "kappa", "masked", "c", "gamma"]
    worst = 0.0
    for row in rows[::7] + rows[-3:]:  # a spread of cells, both masks, all margins
        masked = row["masked"] in ("true", "True", "1")
        expected = _section14_numpy(float(row["eta"]), float(row["kappa"]), masked)
        got = (float(row["gain_ideal"]), float(row["gain_implemented"]), float(row["row_error"]))
        worst = max(worst, max(abs(g - e) for g, e in zip(got, expected)))
    assert worst <= 1e-9


def test_further_cells_against_section_14_and_a_planted_scale(clean_run):
    """Section 16's 2,928 further cells: the decoder's gains against the numpy section-14 formulas at the cell's own
    c and gamma; read with the paper's single c = 1, gamma = 0.8 instead (a planted bug), the identity and the sign
    law fail."""
    cfg = rev.QUICK
    arrays = rev.compute(cfg, RunContext(study="pmd.reversal", quick=True, out_dir=clean_run.parent / "further"))
    f = arrays["further"]
    g, impl = f["grid"], f["impl"]
    assert len(g["eta"]) == 2928 and not g["masked"].any()
    for i in range(0, 2928, 37):
        expected = _section14_numpy(g["eta"][i], g["kappa"][i], False, g["c"][i], g["gamma"][i], cfg.nu)
        got = (impl["gain_ideal"][i], impl["gain_implemented"][i], impl["row_error"][i])
        assert max(abs(a - b) for a, b in zip(got, expected)) <= 1e-9 * g["c"][i] / (1 - g["gamma"][i])
    exact = rev.exactness(g, impl, f["closed"], g["c"], g["gamma"], cfg.threshold_tol)
    assert exact["identity_relative"] < 1e-14 and exact["sign_violations"] == 0
    planted = rev.exactness(g, impl, f["closed"], 1.0, 0.8, cfg.threshold_tol)
    assert planted["identity_relative"] > 1e-3 and planted["sign_violations"] > 100


def _synthetic(cfg):
    """The arrays ``compute`` returns, from the section-14 formulas in numpy (decoder = closed form)."""
    grid = cfg.grid()
    cells = np.array([_section14_numpy(e, k, m, cfg.c, cfg.gamma, cfg.nu)
                      for e, k, m in zip(grid["eta"], grid["kappa"], grid["masked"])])
    impl = dict(zip(("gain_ideal", "gain_implemented", "row_error"), cells.T))
    return {"grid": grid, "impl": impl, "closed": {k: v.copy() for k, v in impl.items()}}


def test_summarize_on_synthetic_cells():
    cfg = dataclasses.replace(rev.QUICK, eta_steps=60)
    arrays = _synthetic(cfg)
    summary = rev.summarize(cfg, arrays)
    by_name = {c.name: c for c in summary.checks}
    # Past the threshold (1 - gamma) kappa / c = 0.8, 1.6, 2.4 (which counts as non-negative): 44 + 28 + 12 etas.
    assert summary.metrics["negative_cells_unmasked"] == 84 and summary.metrics["threshold_cells"] == 6
    assert summary.metrics["sign_law_violations_unmasked"] == 0
    assert summary.metrics["threshold_eta_kappa8"] == pytest.approx(1.65)
    assert not by_name["negative_cells_unmasked"].passed  # the paper's 840 is on the 601-eta grid
    assert by_name["published_points_kappa8"].passed
    assert by_name["masked_gain_positive"].passed
    assert summary.tables["table"]["negative_cells"] == [44.0, 28.0, 12.0]

    # One masked cell turned negative and one unmasked cell with the wrong sign: both are caught.
    i_masked = int(np.flatnonzero(arrays["grid"]["masked"] & (arrays["grid"]["eta"] == 1.0))[0])
    i_sign = int(np.flatnonzero(~arrays["grid"]["masked"] & (arrays["grid"]["eta"] == 0.5))[0])
    bad = {**arrays, "impl": {k: v.copy() for k, v in arrays["impl"].items()}}
    bad["impl"]["gain_implemented"][[i_masked, i_sign]] *= -1
    worse = rev.summarize(cfg, bad)
    worse_by_name = {c.name: c for c in worse.checks}
    assert worse.metrics["negative_cells_masked"] == 1 and worse.metrics["sign_law_violations_unmasked"] == 1
    assert not worse_by_name["negative_cells_masked"].passed
    assert not worse_by_name["identity_row_error_value"].passed
    assert not worse_by_name["decoder_equals_closed_form"].passed

    # Without kappa = 8 the published points cannot be compared: the check fails, it does not pass silently.
    cfg4 = dataclasses.replace(cfg, kappas=(4.0,))
    no8 = {c.name: c for c in rev.summarize(cfg4, _synthetic(cfg4)).checks}
    assert not no8["published_points_kappa8"].passed


def test_one_margin_writes_1202_cells(tmp_path):
    """--set kappas=[4.0]: the full 601-eta grid at one margin, unmasked and masked."""
    code = cli.main(["run", "pmd.reversal", "--quick", "--set", "kappas=[4.0]", "--out", str(tmp_path)])
    assert code == 1  # the paper's counts are for three margins: those checks fail, the laws still hold
    rows = _read_cells(tmp_path / "pmd.reversal" / "cells.csv")
    assert len(rows) == 1202 and {r["kappa"] for r in rows} == {"4.0"}
    result = json.loads((tmp_path / "pmd.reversal" / "result.json").read_text())
    assert result["config"]["kappas"] == [4.0] and result["overrides"] == [{"field": "kappas", "value": [4.0]}]
    failed = {c["name"] for c in result["checks"] if not c["passed"]}
    assert failed == {"negative_cells_unmasked", "published_points_kappa8"}


@pytest.mark.parametrize("argv, names", [
    (["--set", "no_such_field=1"], ["no_such_field"]),
    (["--set", "gamma=1.5"], ["gamma", "(0, 1)"]),
    (["--seeds", "3"], ["pmd.reversal", "no seeds"]),
])
def test_bad_requests_exit_2_before_work(tmp_path, capsys, argv, names):
    assert cli.main(["run", "pmd.reversal", *argv, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names), err
    assert not (tmp_path / "pmd.reversal").exists()


def test_show_prints_the_config(capsys):
    assert cli.main(["show", "pmd.reversal"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["gamma"] == 0.8 and shown["kappas"] == [4.0, 8.0, 12.0] and shown["eta_steps"] == 600


def test_gamma_sweep_is_vmapped_equals_single_run_and_is_reported(tmp_path, capsys):
    assert cli.main(["run", "pmd.reversal", *SHORT, "--sweep", "gamma=0.7,0.8,0.9", "--out", str(tmp_path / "sw")]) == 1
    root = tmp_path / "sw" / "pmd.reversal" / "sweep"
    results = {g: json.loads((root / f"gamma={g}" / "result.json").read_text()) for g in ("0.7", "0.8", "0.9")}
    for g, result in results.items():
        assert result["sweep"] == {"field": "gamma", "value": float(g), "vmapped": True} and result["config"]["gamma"] == float(g)
    negative = [r["metrics"]["negative_cells_unmasked"] for r in results.values()]
    assert negative[0] < negative[1] < negative[2]  # the threshold (1 - gamma) kappa / c falls as gamma grows
    assert cli.main(["run", "pmd.reversal", *SHORT, "--out", str(tmp_path / "one")]) == 1  # 84, not 840
    single = tmp_path / "one" / "pmd.reversal" / "cells.csv"
    assert (root / "gamma=0.8" / "cells.csv").read_bytes() == single.read_bytes()
    capsys.readouterr()
    assert cli.main(["report", "--out", str(tmp_path / "sw")]) == 0
    report = (tmp_path / "sw" / "REPORT.md").read_text()
    assert "### Sweep: pmd.reversal over `gamma`" in report
    assert all(f"| {g} |" in report for g in ("0.7", "0.8", "0.9"))


def test_kill_and_resume_is_byte_identical(clean_run, tmp_path):
    """SIGKILL after the first checkpoint, resume, and compare cells.csv byte for byte."""
    slow_saves = """
        import time
        from experiments import checkpoint
        _save = checkpoint.ChunkCheckpointer.save
        def save(self, step, state):
            _save(self, step, state)
            self._mngr.wait_until_finished()
            time.sleep(3.0)
        checkpoint.ChunkCheckpointer.save = save
    """
    proc = _run_cli(tmp_path, prelude=slow_saves)
    ckpt = tmp_path / "pmd.reversal" / "ckpt"
    saved = lambda: [p for p in ckpt.iterdir() if p.name.isdigit()] if ckpt.is_dir() else []
    deadline = time.time() + 240
    while not saved() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proc.poll() is None, proc.stdout.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    steps = saved()
    assert steps and not (tmp_path / "pmd.reversal" / "cells.csv").exists()
    # Without --resume the existing checkpoint is refused, not overwritten.
    refused = _run_cli(tmp_path)
    assert refused.wait() != 0 and saved() == steps
    resumed = _run_cli(tmp_path, "--resume")
    log = resumed.stdout.read().decode()
    assert resumed.wait() == 0, log
    assert (tmp_path / "pmd.reversal" / "cells.csv").read_bytes() == (clean_run / "cells.csv").read_bytes()
    assert not ckpt.exists()


def test_one_device_equals_four(clean_run, tmp_path):
    """The sweep is sharded over 4 fake devices in the suite; one device gives identical cells."""
    proc = _run_cli(tmp_path, env_extra={"XLA_FLAGS": xla_flags(1)})
    log = proc.stdout.read().decode()
    assert proc.wait() == 0, log
    result = json.loads((tmp_path / "pmd.reversal" / "result.json").read_text())
    assert result["provenance"]["devices"] == 1
    assert json.loads((clean_run / "result.json").read_text())["provenance"]["devices"] == 4
    assert (tmp_path / "pmd.reversal" / "cells.csv").read_bytes() == (clean_run / "cells.csv").read_bytes()


def test_foreign_checkpoint_is_a_clear_error(tmp_path):
    ckpt = tmp_path / "pmd.reversal" / "ckpt"
    ckpt.mkdir(parents=True)
    (ckpt / "notes.txt").write_text("not a checkpoint")
    proc = _run_cli(tmp_path, "--resume")
    log = proc.stdout.read().decode()
    assert proc.wait() != 0
    assert "not a checkpoint of ours" in log and (ckpt / "notes.txt").exists()

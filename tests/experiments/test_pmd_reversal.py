"""Study pmd.reversal end to end: the result contract, the closed form, kill-and-resume, devices."""
import csv
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

REPO = pathlib.Path(__file__).resolve().parents[2]


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
    assert set(result) == {"study", "quick", "config", "metrics", "checks", "paper", "provenance"}
    assert result["metrics"]["negative_cells_unmasked"] == 840 and result["metrics"]["negative_cells_masked"] == 0
    assert all(c["passed"] for c in result["checks"])
    assert (clean_run / "reversal.png").stat().st_size > 10_000
    rows = _read_cells(clean_run / "cells.csv")
    assert len(rows) == 3606 and list(rows[0]) == ["eta", "kappa", "masked", "gain_ideal", "gain_implemented", "row_error"]
    worst = 0.0
    for row in rows[::7] + rows[-3:]:  # a spread of cells, both masks, all margins
        masked = row["masked"] in ("true", "True", "1")
        expected = _section14_numpy(float(row["eta"]), float(row["kappa"]), masked)
        got = (float(row["gain_ideal"]), float(row["gain_implemented"]), float(row["row_error"]))
        worst = max(worst, max(abs(g - e) for g, e in zip(got, expected)))
    assert worst <= 1e-9


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
    proc = _run_cli(tmp_path, env_extra={"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
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

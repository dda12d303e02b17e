"""Issue 39 items 4 to 6 through the command line: one exit-code contract (``--debug``), a lock per
study folder naming the process that holds it, the flags of a run in provenance, and a gap in
one ticker's market data."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from test_harness_cli import toys  # noqa: F401 - the fixture of toy studies

from experiments import cli, io
from uat_jax import markets_data
from uat_jax.errors import DataError

HOLD = "import sys, time; from experiments import io\nwith io.lock_folder(sys.argv[1]):\n    print('held', flush=True)\n" \
       "    time.sleep(60)\n"


def test_an_input_error_in_a_study_is_one_line_unless_debug(toys, tmp_path, capsys):  # noqa: F811
    ckpt = tmp_path / "toy.train" / "train"
    ckpt.mkdir(parents=True)
    (ckpt / "junk").write_text("x")
    argv = ["run", "toy.train", "--resume", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and "is not a checkpoint of ours: it holds junk" in err
    assert "Traceback" in (tmp_path / "toy.train" / "error.txt").read_text()
    assert cli.main([*argv, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
    assert cli.main(["run", "toy.raises", "--out", str(tmp_path)]) == 1  # a fault of the code: traceback, exit 1
    assert "Traceback" in capsys.readouterr().err


def test_a_second_run_on_a_held_folder_names_the_holder(toys, tmp_path, capsys):  # noqa: F811
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "toy.train")], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cli.main(["run", "toy.train", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"in use by process {holder.pid}" in err and "pass another --out" in err
        assert not (tmp_path / "toy.train" / "result.json").exists()
        os.environ[io.HOLDER_ENV] = str(holder.pid)  # a parent lending its lock (run all --jobs)
        try:
            with io.lock_folder(tmp_path / "toy.train"):
                pass
        finally:
            del os.environ[io.HOLDER_ENV]
    finally:
        holder.send_signal(signal.SIGKILL)  # kill -9 leaves no stale lock
        holder.wait()
    assert cli.main(["run", "toy.train", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "toy.train" / io.LOCK).exists()


def test_provenance_records_resume_and_allow_code_change(toys, tmp_path):  # noqa: F811
    assert cli.main(["run", "toy.train", "--out", str(tmp_path)]) == 0
    prov = json.loads((tmp_path / "toy.train" / "result.json").read_text())["provenance"]
    assert prov["resume"] is False and prov["allow_code_change"] is False and "dirty" in prov["worktree"]
    assert cli.main(["run", "toy.train", "--resume", "--allow-code-change", "--out", str(tmp_path)]) == 0
    prov = json.loads((tmp_path / "toy.train" / "result.json").read_text())["provenance"]
    assert prov["resume"] is True and prov["allow_code_change"] is True


def _ticker(folder, name, dates):
    rows = [f"{d},10,11,9,{10 + i % 7 * 0.1:.1f},{10 + i % 7 * 0.1:.1f},{1000 + i}" for i, d in enumerate(dates)]
    (folder / name).write_text("\n".join(["Date,Open,High,Low,Close,Adj Close,Volume", *rows]) + "\n")


def test_a_long_gap_in_one_ticker_is_an_error_unless_accepted(tmp_path):
    days = np.arange(np.datetime64("2020-01-01"), np.datetime64("2020-03-01"))
    _ticker(tmp_path, "AAA.csv", days)
    _ticker(tmp_path, "BBB.csv", np.concatenate([days[:10], days[30:]]))  # 20 days missing
    with pytest.raises(DataError) as err:
        markets_data.load_market(tmp_path)
    text = str(err.value)
    for fragment in ("BBB.csv", "'BBB'", "20 consecutive trading days", "2020-01-11 .. 2020-01-30",
                     "between rows 11 and 12", "max_gap_days of at least 20"):
        assert fragment in text, (fragment, text)
    panel = markets_data.load_market(tmp_path, max_gap_days=20)
    assert len(panel.dates) == len(days) - 20 and panel.dropped_days == 20
    assert markets_data.load_market(tmp_path, max_gap_days=25).dropped_days == 20

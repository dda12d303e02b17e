"""scripts/gpu_check.py: the plan, its CPU dry run, and the budgeted execution on a planted clock."""
import importlib.util
import pathlib
import sys

import pytest

from experiments import registry

_PATH = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", _PATH)
gpu_check = sys.modules["gpu_check"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def test_plan_benches_then_every_full_preset_cheapest_first():
    studies = registry.load_all()
    steps = gpu_check.plan()
    benches = [s.study for s in steps if s.kind == "bench"]
    runs = [s.study for s in steps if s.kind == "run"]
    assert benches == [n for n, s in studies.items() if s.bench] and len(benches) >= 4
    assert sorted(runs) == sorted(studies) and steps[:len(benches)] == [gpu_check.Step("bench", n) for n in benches]
    hints = [studies[n].quick_s for n in runs]
    assert hints == sorted(hints)


def test_dry_run_checks_and_prints_the_plan(capsys):
    assert gpu_check.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "bench rate.tmaze" in lines and "run uat.sepsis" in lines and lines[-1].startswith("dry run: ")
    with pytest.raises(KeyError, match="no bench"):
        gpu_check.check([gpu_check.Step("bench", "regret.stein")])
    assert gpu_check.main(["--dry-run", "--budget-s", "0"]) == 2


def test_execute_stops_at_the_budget(tmp_path):
    """Steps of 100 s each on a planted clock, a 250 s budget, 30 s least: two finish, the third is stopped at
    its limit (50 s left), the rest are not reached."""
    now = [0.0]
    calls = []

    def call(argv, limit_s):
        calls.append((argv[3], argv[4], limit_s))
        now[0] += min(100.0, limit_s)
        return None if limit_s < 100 else (1 if argv[4] == "b" else 0)

    steps = [gpu_check.Step("run", name) for name in "abcd"] + [gpu_check.Step("bench", "e")]
    rows, skipped = gpu_check.execute(steps, 250.0, 30.0, call, tmp_path, "log.md", clock=lambda: now[0])
    assert [c[:2] for c in calls] == [("run", "a"), ("run", "b"), ("run", "c")] and calls[2][2] == 50.0
    assert rows == [("run a (FULL preset)", "1 min 40 s"), ("run b (FULL preset)", "1 min 40 s, exit 1"),
                    ("run c (FULL preset)", "stopped at 50.0 s (the budget's end)")]
    assert skipped == steps[3:]
    assert steps[4].argv(tmp_path, "log.md")[3:] == ["bench", "e", "--out", str(tmp_path / "bench"), "--perf-log", "log.md"]


def test_main_appends_one_row_per_command(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "plan", lambda: [gpu_check.Step("run", "pmd.reversal")])
    monkeypatch.setattr(gpu_check, "_subprocess_call", lambda argv, limit_s: 0)
    monkeypatch.setattr(gpu_check, "_device", lambda: "1 x NVIDIA H100 80GB HBM3")
    log = tmp_path / "perf.md"
    assert gpu_check.main(["--out", str(tmp_path), "--perf-log", str(log)]) == 0
    row = log.read_text().splitlines()[-1]
    assert row.startswith("| 1 x NVIDIA H100 80GB HBM3 |") and "| run pmd.reversal (FULL preset) |" in row

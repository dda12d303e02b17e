"""``run all --jobs N`` (experiments.jobs): at most N processes, ``after`` respected, results read back, errors kept."""
import json
import os
import subprocess
import sys
import time

import pytest

from experiments import cli, jobs, registry

# A stand-in for ``python -m experiments run STUDY``: logs its start and end times, sleeps, writes result.json
# (or exits with an error for a study named "*broken*").
FAKE = """
import json, pathlib, sys, time
name, out = sys.argv[1], pathlib.Path(sys.argv[2])
with open(out / "times.log", "a") as f:
    f.write(f"start {name} {time.time()}\\n")
time.sleep(0.6)
with open(out / "times.log", "a") as f:
    f.write(f"end {name} {time.time()}\\n")
if "broken" in name:
    print("Traceback: something broke in", name)
    sys.exit(1)
checks = [{"name": "c", "passed": True, "value": 1.0, "target": "> 0"}]
(out / name / "result.json").write_text(json.dumps({"checks": checks, "provenance": {"wall_s": 0.6}}))
"""


def _study(name, after=(), quick_s=0.0):
    return registry.Study(name=name, summary="s", config_type=dict, quick={}, full={}, compute=None,
                          summarize=None, after=after, quick_s=quick_s)


def _times(out):
    rows = [line.split() for line in (out / "times.log").read_text().splitlines()]
    return {(kind, name): float(t) for kind, name, t in rows}


def _run(tmp_path, studies, n):
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    seen = []
    done = jobs.run_studies(studies, lambda s: [sys.executable, str(script), s.name, str(tmp_path)], tmp_path, n,
                            seen.append)
    return done, seen


def test_jobs_overlap_and_after_waits(tmp_path):
    studies = [_study("t.a"), _study("t.b"), _study("t.c", after=("t.a",))]
    done, seen = _run(tmp_path, studies, 3)  # room for all three: only `after` holds c back
    t = _times(tmp_path)
    assert t[("start", "t.b")] < t[("end", "t.a")]  # a and b side by side
    assert t[("start", "t.c")] >= t[("end", "t.a")]  # c waits for a
    assert [d.study for d in done] == ["t.a", "t.b", "t.c"] and {d.study for d in seen} == {"t.a", "t.b", "t.c"}
    assert all(d.result["checks"][0]["passed"] for d in done)


def test_one_job_runs_one_at_a_time(tmp_path):
    _run(tmp_path, [_study("t.a"), _study("t.b")], 1)
    t = _times(tmp_path)
    assert t[("start", "t.b")] >= t[("end", "t.a")]


def test_the_longest_ready_study_starts_first(tmp_path):
    """Longest-first among the ready studies; a long study still waits for its ``after``; ties keep the order."""
    studies = [_study("t.a", quick_s=1), _study("t.b", quick_s=5), _study("t.c", after=("t.a",), quick_s=9),
               _study("t.d"), _study("t.e")]
    done, _ = _run(tmp_path, studies, 1)
    t = _times(tmp_path)
    assert sorted(("t.a", "t.b", "t.c", "t.d", "t.e"), key=lambda n: t[("start", n)]) == ["t.b", "t.a", "t.c", "t.d", "t.e"]
    assert [d.study for d in done] == ["t.a", "t.b", "t.c", "t.d", "t.e"]  # reported in the given order
    with pytest.raises(ValueError, match="quick_s must be >= 0"):
        _study("t.f", quick_s=-1)


def test_a_study_without_fresh_result_is_reported_with_its_log(tmp_path):
    (tmp_path / "t.x_broken").mkdir()
    (tmp_path / "t.x_broken" / "result.json").write_text(json.dumps({"checks": []}))  # stale, from an earlier run
    os.utime(tmp_path / "t.x_broken" / "result.json", (0, 0))
    done, _ = _run(tmp_path, [_study("t.x_broken")], 2)
    assert done[0].result is None
    assert "something broke in t.x_broken" in jobs.tail(done[0].log)


def test_bad_jobs_are_rejected(tmp_path, capsys):
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        jobs.run_studies([], lambda s: [], tmp_path, 0, print)
    assert cli.main(["run", "regret.stationarity", "--quick", "--jobs", "2", "--out", str(tmp_path)]) == 2
    assert "--jobs runs the studies of 'all'" in capsys.readouterr().err
    assert cli.main(["run", "all", "--quick", "--jobs", "0"]) == 2


# A study that hangs on its first attempt ("*hang_once*") or on every attempt ("*hang*"), then behaves as FAKE.
HANGING = """
import pathlib, sys, time
from experiments.jobs import dump_stacks_on_signal
dump_stacks_on_signal()
name, out = sys.argv[1], pathlib.Path(sys.argv[2])
marker = out / name / "attempted"
if "hang" in name and ("once" not in name or not marker.exists()):
    marker.touch()
    time.sleep(60)
""" + FAKE


def test_a_process_past_its_limit_is_killed_and_started_once_more(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "STACKS_WAIT_S", 0.3)
    script = tmp_path / "hanging.py"
    script.write_text(HANGING)
    studies = [_study("t.hang_once"), _study("t.hang"), _study("t.ok")]
    t0 = time.time()
    done = jobs.run_studies(studies, lambda s: [sys.executable, str(script), s.name, str(tmp_path)], tmp_path, 3,
                            lambda d: None, timeout_s=lambda s: 2.0)
    assert time.time() - t0 < 20  # not the 60 s a hang sleeps
    by = {d.study: d for d in done}
    assert by["t.hang_once"].result is not None and by["t.ok"].result is not None
    assert "started again" in jobs.tail(by["t.hang_once"].log)
    assert by["t.hang"].result is None  # past the limit on both attempts: an ERROR
    assert jobs.tail(by["t.hang"].log).count("killed after 2 s") == 2
    if jobs.STACKS_SIGNAL is not None:  # each hung attempt wrote where it was before it was killed
        log = by["t.hang"].log.read_text()
        assert log.count("most recent call first") == 2 and 'hanging.py", line 9' in log  # the line of time.sleep(60)


def test_quick_limit():
    assert jobs.quick_limit_s(_study("t.a", quick_s=10)) == jobs.HANG_FLOOR_S
    assert jobs.quick_limit_s(_study("t.b", quick_s=100)) == 100 * jobs.HANG_FACTOR


def test_one_study_process_imports_only_that_study():
    """``run STUDY`` loads the registry with registry.load: the study's own module, not the other studies'
    (their imports, such as pandas for the market and recommendation data, cost seconds per process)."""
    code = ("import sys; from experiments import registry; found = registry.load('rate.tmaze'); "
            "print(sorted(found), 'pandas' in sys.modules, 'experiments.studies.uat.darkroom' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["['rate.tmaze']", "False", "False"], done.stdout


@pytest.mark.parametrize("name", ["nope", "pmd.nope", "../pmd.audit", "pmd..audit"])
def test_loading_an_unknown_study_loads_every_study(name):
    assert name not in registry.load(name) and registry.load(name).keys() == registry.load_all().keys()

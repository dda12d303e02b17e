"""``run all --jobs N`` pins each job slot to its own cores (experiments.cores)."""
import os
import subprocess
import sys

import pytest

from experiments import cores, jobs, registry


def test_split_is_disjoint_contiguous_and_covers_the_cores():
    assert cores.split(2, [0, 1]) == ["0", "1"]
    assert cores.split(2, [0, 1, 2, 3, 4]) == ["0,1,2", "3,4"]
    assert cores.split(3, [2, 5, 7, 9]) == ["2,5", "7", "9"]  # the CPU numbers this process has, not 0..n-1
    assert cores.split(1, [0, 1]) is None  # one job keeps every core
    assert cores.split(3, [0, 1]) is None  # more jobs than cores: nothing to split


def test_parse_and_bad_values():
    assert cores.parse("0,3") == {0, 3}
    for bad in ("", "a", "0,,1", "-1"):
        with pytest.raises(ValueError, match=cores.VARIABLE):
            cores.parse(bad)


needs_affinity = pytest.mark.skipif(cores.available() is None, reason="no CPU affinity on this platform")


@needs_affinity
def test_a_process_pins_itself_to_the_named_cores():
    first = cores.available()[0]
    code = "from experiments import cores; cores.pin_from_environment(); import os; print(sorted(os.sched_getaffinity(0)))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, cores.VARIABLE: str(first)},
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"[{first}]"


@needs_affinity
def test_bad_cores_are_one_line_exit_2():
    for bad in ("x", "100000"):
        proc = subprocess.run([sys.executable, "-m", "experiments", "list"], env={**os.environ, cores.VARIABLE: bad},
                              capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"error: {cores.VARIABLE}")


# Records the cores its slot was given and when it ran.
RECORD = """
import os, pathlib, sys, time
name, out = sys.argv[1], pathlib.Path(sys.argv[2])
start = time.time()
time.sleep(0.5)
with open(out / "cores.log", "a") as f:
    f.write(f"{name} {os.environ.get('EXPERIMENTS_CORES')} {start} {time.time()}\\n")
"""


@pytest.mark.skipif(len(cores.available() or []) < 2, reason="needs 2 cores")
def test_side_by_side_studies_run_on_disjoint_cores(tmp_path):
    script = tmp_path / "record.py"
    script.write_text(RECORD)
    studies = [registry.Study(name=f"t.{c}", summary="s", config_type=dict, quick={}, full={}, compute=None,
                              summarize=None) for c in "abcde"]
    jobs.run_studies(studies, lambda s: [sys.executable, str(script), s.name, str(tmp_path)], tmp_path, 2,
                     lambda d: None)
    rows = [line.split() for line in (tmp_path / "cores.log").read_text().splitlines()]
    assert len(rows) == 5 and {r[1] for r in rows} == set(cores.split(2))
    for a in rows:  # any two studies that overlapped in time had different cores
        for b in rows:
            if a is not b and float(a[2]) < float(b[3]) and float(b[2]) < float(a[3]):
                assert a[1] != b[1]

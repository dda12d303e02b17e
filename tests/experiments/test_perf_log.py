"""experiments.perf_log: the rows a bench adds to docs/performance.md and how they are appended."""
import datetime

import pytest

from experiments import perf_log


@pytest.mark.parametrize("seconds, text", [(983.4, "16 min 23 s"), (42.06, "42.1 s"), (60.0, "1 min 0 s")])
def test_duration(seconds, text):
    assert perf_log.duration(seconds) == text


def test_bench_rows_keep_timings_and_drop_reference_numbers():
    timings = {"compile_s": {"forward": 36.2}, "forward_ms_per_batch": 18.21, "parameters": 1000,
               "eval_env_steps_per_s_100_episodes": 2.1e5, "speedup": 3.0, "goals": {"forward_backward_s": 4.2},
               "authors_pytorch_2core_cpu": {"forward_backward_s": 8.3}, "table": {"vt": {"paper_train_ms": 17.1}},
               "loop_s": float("nan"), "goals_met": {"evaluation_s": True}}
    assert perf_log.bench_rows("x.y", timings, 75.0) == [
        ("bench x.y: wall", "1 min 15 s"), ("bench x.y: compile_s.forward", "36.2"),
        ("bench x.y: forward_ms_per_batch", "18.21"), ("bench x.y: eval_env_steps_per_s_100_episodes", "2.1e+05")]


def test_append_creates_the_table_then_adds_rows(tmp_path):
    path = tmp_path / "docs" / "performance.md"
    day = datetime.date(2026, 1, 2)
    assert perf_log.append([("make run", "16 min 23 s")], "2 CPU cores", "abc1234", path, day) == 1
    path.write_text(path.read_text().rstrip("\n"))  # a file edited by hand, without its last newline
    perf_log.append([("a | b", "1")], "2 CPU cores", "abc1234+dirty", path, day)
    assert path.read_text().splitlines() == [*perf_log.HEADER,
                                             "| 2 CPU cores | 2026-01-02 | abc1234 | make run | 16 min 23 s |",
                                             "| 2 CPU cores | 2026-01-02 | abc1234+dirty | a \\| b | 1 |"]


def test_commit_marks_a_dirty_tree():
    assert perf_log.commit({"git": "0123456789abcdef", "worktree": {"dirty": True}}) == "0123456+dirty"
    assert perf_log.commit({"git": "0123456789abcdef", "worktree": {"dirty": False}}) == "0123456"

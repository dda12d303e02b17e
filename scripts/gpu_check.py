"""Every ``bench``, then the FULL presets that fit, in one timed call on an accelerator.

    python scripts/gpu_check.py --out $OUT --perf-log $OUT/performance.md   # on the GPU machine
    python scripts/gpu_check.py --dry-run                                   # here: the plan, checked

The plan: ``python -m experiments bench STUDY`` for every study with a bench, then
``python -m experiments run STUDY`` (the FULL preset) for every study, cheapest first (by its
``quick_s`` hint: no FULL preset has a measured time to order by). Each command runs in its own
process with what is left of ``--budget-s`` as its time limit, and the next starts only while at
least ``--min-step-s`` are left; a command stopped at its limit is written as such. Each bench
appends its own timings to the ``--perf-log`` table; this script appends one row per command
(its wall time, exit status, or "stopped at N s"), with the device named (``perf_log.device_machine``),
and lists what it did not reach.

``--dry-run`` resolves every step here instead (each study and bench exists, each config is
valid: what would otherwise stop the GPU call early), prints the plan, and runs nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import subprocess
import sys
import time
from typing import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# The commands run with this process's environment; this process itself plans on the CPU, so that it holds
# no accelerator memory (JAX takes most of a GPU's memory when it first uses it) while they run.
CHILD_ENV = dict(os.environ)
os.environ["JAX_PLATFORMS"] = "cpu"

from experiments import perf_log, registry, runner  # noqa: E402
from experiments.provenance import git_sha, worktree  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of the plan: ``kind`` "bench" or "run" (the FULL preset) of ``study``."""

    kind: str
    study: str

    def argv(self, out: pathlib.Path, perf_log_path: str) -> list[str]:
        if self.kind == "bench":
            return [sys.executable, "-m", "experiments", "bench", self.study, "--out", str(out / "bench"),
                    "--perf-log", perf_log_path]
        return [sys.executable, "-m", "experiments", "run", self.study, "--out", str(out / "full")]

    def measure(self) -> str:
        return f"gpu_check: bench {self.study}, wall" if self.kind == "bench" else f"run {self.study} (FULL preset)"


def plan() -> list[Step]:
    """Every bench, then every study's FULL preset, cheapest quick_s first (name breaks ties)."""
    studies = registry.load_all()
    benches = [Step("bench", name) for name, s in studies.items() if s.bench is not None]
    runs = [Step("run", name) for name, s in sorted(studies.items(), key=lambda kv: (kv[1].quick_s, kv[0]))]
    return benches + runs


def check(steps: list[Step]) -> None:
    """What a dry run verifies: each study is registered, has a bench where one is planned, and its FULL
    config resolves (ConfigError or KeyError otherwise)."""
    studies = registry.load_all()
    for step in steps:
        study = studies[step.study]
        if step.kind == "bench" and study.bench is None:
            raise KeyError(f"{step.study} has no bench")
        runner.resolve(study, runner.Request(quick=False))


def execute(steps: list[Step], budget_s: float, min_step_s: float, call: Callable[[list[str], float], int | None],
            out: pathlib.Path, perf_log_path: str, clock: Callable[[], float] = time.perf_counter
            ) -> tuple[list[tuple[str, str]], list[Step]]:
    """Run ``steps`` in order within ``budget_s``: ``call(argv, limit_s)`` returns the exit status, or
    None when it stopped the command at its limit. Returns the (measure, value) rows and the steps not reached."""
    rows, start = [], clock()
    for i, step in enumerate(steps):
        left = budget_s - (clock() - start)
        if left < min_step_s:
            return rows, steps[i:]
        t0 = clock()
        status = call(step.argv(out, perf_log_path), left)
        seconds = clock() - t0
        if status is None:
            rows.append((step.measure(), f"stopped at {perf_log.duration(seconds)} (the budget's end)"))
        else:
            rows.append((step.measure(), perf_log.duration(seconds) + (f", exit {status}" if status else "")))
    return rows, []


def _subprocess_call(argv: list[str], limit_s: float) -> int | None:
    print("+", " ".join(argv[1:]), flush=True)
    try:
        return subprocess.run(argv, cwd=REPO, env=CHILD_ENV, timeout=limit_s).returncode
    except subprocess.TimeoutExpired:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=480.0, help="seconds for the whole plan (default 480)")
    parser.add_argument("--min-step-s", type=float, default=30.0,
                        help="start no command with fewer seconds left (default 30)")
    parser.add_argument("--out", default="results-gpu", help="results folder (default: results-gpu)")
    parser.add_argument("--perf-log", default=str(perf_log.PATH), metavar="FILE",
                        help="the table to append to (default: docs/performance.md)")
    parser.add_argument("--dry-run", action="store_true", help="check and print the plan; run nothing")
    args = parser.parse_args(argv)
    if not args.budget_s > 0 or not args.min_step_s >= 0:
        print(f"error: --budget-s must be > 0 and --min-step-s >= 0, got {args.budget_s} and {args.min_step_s}",
              file=sys.stderr)
        return 2
    steps = plan()
    if args.dry_run:
        check(steps)
        for step in steps:
            print(step.kind, step.study)
        print(f"dry run: {len(steps)} steps checked; on an accelerator they run within {args.budget_s:g} s")
        return 0
    out = pathlib.Path(args.out)
    rows, skipped = execute(steps, args.budget_s, args.min_step_s, _subprocess_call, out, args.perf_log)
    commit = perf_log.commit({"git": git_sha(), "worktree": worktree()})
    perf_log.append(rows, _device(), commit, pathlib.Path(args.perf_log))
    for measure, value in rows:
        print(f"{measure}: {value}")
    if skipped:
        print("not reached within the budget: " + ", ".join(f"{s.kind} {s.study}" for s in skipped))
    return 0


def _device() -> str:
    """The machine the commands ran on (``perf_log.device_machine`` in a process with their environment)."""
    code = "from experiments import perf_log; print(perf_log.device_machine())"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=CHILD_ENV, capture_output=True, text=True)
    return done.stdout.strip() or "unknown machine"


if __name__ == "__main__":
    sys.exit(main())

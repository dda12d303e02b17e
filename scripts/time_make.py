"""Time ``make run`` and/or ``make test`` from a fresh clone and append the times to docs/performance.md.

    python scripts/time_make.py run test          # both, each in its own fresh clone of HEAD

Each target runs in a new ``git clone`` of this repository's HEAD in a temporary folder, so
the time includes creating ``.venv`` and installing the pinned dependencies, as a new user
would see it. The row names the target and, when make exits non-zero (``make run`` does when
a check fails), its exit status. The clone is removed afterwards.
"""
from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

from experiments import perf_log

REPO = pathlib.Path(__file__).resolve().parents[1]


def time_target(target: str) -> tuple[str, str, str]:
    """Clone HEAD, run ``make TARGET`` there; (short commit, measure, value)."""
    with tempfile.TemporaryDirectory(prefix="time-make-") as tmp:
        clone = pathlib.Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        sha = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=clone, check=True,
                             capture_output=True, text=True).stdout.strip()
        t0 = time.perf_counter()
        status = subprocess.run(["make", target], cwd=clone).returncode
        seconds = time.perf_counter() - t0
    measure = f"make {target} (fresh clone, install included)" + (f", exit {status}" if status else "")
    return sha, measure, perf_log.duration(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", choices=("run", "test"))
    parser.add_argument("--perf-log", default=str(perf_log.PATH), metavar="FILE",
                        help="the table to append to (default: docs/performance.md)")
    args = parser.parse_args(argv)
    for target in args.targets:
        sha, measure, value = time_target(target)
        perf_log.append([(measure, value)], perf_log.cpu_machine(), sha, pathlib.Path(args.perf_log))
        print(f"{measure}: {value} (appended to {args.perf_log})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``run all --jobs N``: every study in its own ``python -m experiments run STUDY`` process, at most N at once.

Much of a quick study's wall time is single-threaded (XLA compilation, small ops, Python),
so two studies side by side use two cores better than one study at a time. A study starts
only after the studies in its ``after`` that are part of the run have finished (they keep
the models it loads). Each process writes its output to ``DIR/STUDY/run.log``; when it ends
its checks are printed from its ``result.json``, so the console shows whole studies, not
interleaved progress bars. A study that wrote no fresh ``result.json`` is an ERROR and its
log's tail is printed.

A process that runs past its time limit (``timeout_s``; ``run all --quick`` gives each study
:func:`quick_limit_s`) is killed and started once more, resuming from its checkpoints; past the
limit again it is an ERROR. XLA's CPU runtime has been seen to hang a study forever (the main
thread waiting for an array no worker thread computes; a rerun passed), which would otherwise
stall its job slot and the whole run. Before the kill the process is sent ``STACKS_SIGNAL``, which
``python -m experiments`` answers (:func:`dump_stacks_on_signal`) by writing every thread's Python
stack to its log, so the log shows where it hung.
"""
from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Callable, Sequence

from experiments import io, registry, results

LOG = "run.log"
POLL_S = 0.5
TAIL_LINES = 30
HANG_FACTOR = 8.0  # a quick study is called hung after this many times its quick_s ...
HANG_FLOOR_S = 300.0  # ... and never before this many seconds
RESTARTS = 1
STACKS_SIGNAL = getattr(signal, "SIGUSR1", None)  # None where the platform has no SIGUSR1 (Windows)
STACKS_WAIT_S = 1.0  # how long a process past its limit has to write its stacks before it is killed


def dump_stacks_on_signal() -> None:
    """Make this process write every thread's Python stack to stderr on ``STACKS_SIGNAL``
    (``faulthandler``: from the signal handler, so also while the main thread waits inside XLA)."""
    if STACKS_SIGNAL is not None:
        faulthandler.register(STACKS_SIGNAL, all_threads=True)


def quick_limit_s(study: registry.Study) -> float:
    """Time limit of one ``--quick`` study's process: ``HANG_FACTOR`` x its ``quick_s``, at least ``HANG_FLOOR_S``."""
    return max(HANG_FACTOR * study.quick_s, HANG_FLOOR_S)


@dataclasses.dataclass
class Finished:
    """One study's process after it ended: its fresh result (``None`` if it wrote none), wall time and
    exit status."""

    study: str
    result: dict | None
    wall_s: float
    log: pathlib.Path
    returncode: int = 0


@dataclasses.dataclass
class _Running:
    study: str
    process: subprocess.Popen
    started: float
    log: pathlib.Path
    argv: list[str]
    limit_s: float | None
    attempt_started: float
    restarts: int = 0


def _fresh_result(study_dir: pathlib.Path, since: float) -> dict | None:
    """``result.json`` of ``study_dir`` if it was written at or after ``since`` (wall clock), else None."""
    path = study_dir / results.RESULT
    if not path.exists() or path.stat().st_mtime < since:
        return None
    return json.loads(path.read_text())


def tail(path: pathlib.Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` non-blank lines of a log (progress bars' carriage returns read as line breaks)."""
    text = path.read_text(errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def run_command(flags: Sequence[str], out: pathlib.Path) -> Callable[[registry.Study], list[str]]:
    """The command line of one study's process: ``python -m experiments run STUDY --out DIR FLAGS``."""
    return lambda study: [sys.executable, "-m", "experiments", "run", study.name, "--out", str(out), *flags]


def _start(argv: list[str], log: pathlib.Path, mode: str = "w") -> subprocess.Popen:
    """Start ``argv`` writing to ``log``, under this process's folder locks (``io.HOLDER_ENV``)."""
    with open(log, mode) as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT,
                                env={**os.environ, io.HOLDER_ENV: str(os.getpid())})


def _restart_or_stop(job: _Running) -> None:
    """Ask ``job`` (past its limit) for its stacks, kill it, and start it again unless it has used its
    ``RESTARTS``."""
    if STACKS_SIGNAL is not None:
        job.process.send_signal(STACKS_SIGNAL)
        time.sleep(STACKS_WAIT_S)
    job.process.kill()
    job.process.wait()
    again = job.restarts < RESTARTS
    with open(job.log, "a") as handle:
        handle.write(f"\n== killed after {job.limit_s:.0f} s, its time limit (a hang?)"
                     f"{'; started again' if again else ''}\n")
    if again:
        job.process, job.attempt_started, job.restarts = _start(job.argv, job.log, "a"), time.time(), job.restarts + 1


def run_studies(chosen: Sequence[registry.Study], command: Callable[[registry.Study], list[str]], out: pathlib.Path,
                jobs: int, on_finish: Callable[[Finished], None],
                timeout_s: Callable[[registry.Study], float | None] = lambda study: None) -> list[Finished]:
    """Run ``command(study)`` for every study of ``chosen`` with at most ``jobs`` processes at once,
    each study after its ``after``; among the studies ready to start, the one with the largest
    ``quick_s`` first (longest processing time first: the long studies overlap the short ones
    instead of running last), ties in :func:`experiments.registry.run_order` order.

    ``on_finish`` is called as each study ends. ``timeout_s(study)``: the time limit of each attempt of its
    process (None: none; see the module docstring). Returns the finished studies in the order of ``chosen``.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    names = {s.name for s in chosen}
    pending = sorted(chosen, key=lambda s: -s.quick_s)  # stable: ties keep the given order
    running: list[_Running] = []
    done: dict[str, Finished] = {}
    while pending or running:
        for study in list(pending):
            if len(running) >= jobs:
                break
            if all(a in done or a not in names for a in study.after):
                pending.remove(study)
                study_dir = out / study.name
                study_dir.mkdir(parents=True, exist_ok=True)
                log = study_dir / LOG
                argv = command(study)
                print(f"== started {study.name} -> {study_dir} (output in {log})", flush=True)
                now = time.time()
                running.append(_Running(study.name, _start(argv, log), now, log, argv, timeout_s(study), now))
        time.sleep(POLL_S)
        for job in running:
            if job.limit_s is not None and job.process.poll() is None and time.time() - job.attempt_started > job.limit_s:
                _restart_or_stop(job)
        for job in [j for j in running if j.process.poll() is not None]:
            running.remove(job)
            finished = Finished(job.study, _fresh_result(out / job.study, job.started), time.time() - job.started,
                                job.log, job.process.returncode)
            done[job.study] = finished
            on_finish(finished)
    return [done[s.name] for s in chosen]

"""``run all --jobs N`` gives each of its N job slots its own CPU cores.

XLA's CPU runtime sizes its thread pool by the cores a process may run on. Two studies side by
side, each with a pool as large as the machine, ask for twice the cores there are, and their
threads preempt each other. Measured on 2 idle cores (``uat.ablation`` beside ``uat.boundary``,
``--quick``, compilation cache off): 158.6 s for the pair unpinned, 139.2 s with each pinned to its
own core (``taskset``), 12% less.

:func:`split` divides the cores of this process into N disjoint groups; ``run all`` starts each
study's process with :data:`VARIABLE` naming its slot's group, and :func:`pin_from_environment`
(called by ``python -m experiments`` before anything imports JAX) restricts the process to them.
A training run's floats depend on how many threads share a matrix product (a sum split
another way rounds another way), so a study pinned to one core computes other bits than the
same study on two: to reproduce a row of ``run all --jobs 2`` on 2 cores, run the study with
``EXPERIMENTS_CORES=0`` (or ``taskset -c 0``). ``result.json`` records the cores a study ran on
(``provenance.cores``). With N = 1, more jobs than cores, or a platform without CPU affinity
(macOS), nothing is pinned.
"""
from __future__ import annotations

import os

VARIABLE = "EXPERIMENTS_CORES"
"""Comma-separated CPU numbers a study's process restricts itself to."""


def available() -> list[int] | None:
    """The CPUs this process may run on, sorted; None where the platform has no CPU affinity."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else None


def split(jobs: int, cores: list[int] | None = None) -> list[str] | None:
    """``jobs`` disjoint groups of ``cores`` (default :func:`available`) as :data:`VARIABLE` values,
    contiguous and as equal as possible (the first ``len(cores) % jobs`` one larger); None when
    ``jobs`` is 1, exceeds the cores, or there is no affinity to set."""
    cores = available() if cores is None else cores
    if cores is None or not 1 < jobs <= len(cores):
        return None
    size, extra = divmod(len(cores), jobs)
    groups, start = [], 0
    for i in range(jobs):
        end = start + size + (i < extra)
        groups.append(",".join(map(str, cores[start:end])))
        start = end
    return groups


def parse(value: str) -> set[int]:
    """The CPU numbers of a :data:`VARIABLE` value; a one-line ``ValueError`` for anything else."""
    try:
        cores = {int(part) for part in value.split(",")}
    except ValueError:
        raise ValueError(f"{VARIABLE} must be comma-separated CPU numbers, got {value!r}") from None
    if not cores or min(cores) < 0:
        raise ValueError(f"{VARIABLE} must be comma-separated CPU numbers, got {value!r}")
    return cores


def pin_from_environment(environ=os.environ) -> None:
    """Restrict this process to the CPUs in :data:`VARIABLE` when it is set (and the platform can)."""
    value = environ.get(VARIABLE)
    setter = getattr(os, "sched_setaffinity", None)
    if value and setter is not None:
        try:
            setter(0, parse(value))
        except OSError:
            raise ValueError(f"{VARIABLE}={value!r} names no CPU this process may run on "
                             f"(it may run on {available()})") from None

"""Transparent huge pages for XLA's CPU buffers: ``python -m experiments`` asks glibc's malloc to
back its large allocations with 2 MiB pages.

On a CPU, XLA allocates the buffers of each call of a compiled program with malloc. glibc serves
an allocation above its mmap threshold (at most 32 MiB) with fresh pages, which the kernel maps
and zeroes one 4 KiB page fault at a time on first touch, and unmaps at free: a call whose
temporary buffers total gigabytes spends much of its time in page faults. glibc's tunable
``glibc.malloc.hugetlb=1`` (glibc 2.35 and later) makes malloc advise transparent huge pages
(``madvise``) on such allocations, so the kernel maps 2 MiB at a time. Measured on 2 cores
(2026-12-04): the forward+backward of ``bench rate.tmaze`` (2.7 GiB of buffers) took 715k page
faults and 3.75 s per call, 2k faults and 2.73 s with the tunable; ``pmd.learned_critic --quick``
47.5 and 50.2 s against 54.5 and 53.5 s, with the same peak memory. Allocation only: the results are
the same bits (its metrics compared equal).

The tunable is read when a process starts, so :func:`reexec_with_huge_pages` (called first thing by
``python -m experiments``) replaces the process by the same command with ``GLIBC_TUNABLES``
extended (and :data:`REEXECUTED` set, so that happens at most once); the processes it starts
(``run all --jobs N``) inherit it. A user who sets
``glibc.malloc.hugetlb`` in ``GLIBC_TUNABLES`` (to any value; 0 turns it off) keeps theirs, and a
system without glibc 2.35 (macOS, musl) is left alone.
"""
from __future__ import annotations

import os
import sys
from typing import Mapping

TUNABLE = "glibc.malloc.hugetlb"
VARIABLE = "GLIBC_TUNABLES"
MIN_GLIBC = (2, 35)
REEXECUTED = "EXPERIMENTS_HUGE_PAGES_REEXECUTED"
"""Set in the re-executed process, which never re-executes again (even if something removed the tunable)."""


def glibc_version() -> tuple[int, int] | None:
    """(major, minor) of the C library when it is glibc, else None."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = version.split(".")[:2]
        return (int(major), int(minor)) if name == "glibc" else None
    except (AttributeError, OSError, ValueError):  # no confstr (not POSIX), no such name, or not "glibc X.Y"
        return None


def with_huge_pages(environ: Mapping[str, str], glibc: tuple[int, int] | None) -> str | None:
    """The ``GLIBC_TUNABLES`` value that adds ``glibc.malloc.hugetlb=1`` to ``environ``'s, or None
    when nothing is to change: ``glibc`` (the C library's version, None if not glibc) is older than
    2.35, or the tunable is already set (to any value)."""
    if glibc is None or glibc < MIN_GLIBC:
        return None
    current = environ.get(VARIABLE, "")
    if any(item.split("=")[0] == TUNABLE for item in current.split(":")):
        return None
    return f"{current}:{TUNABLE}=1" if current else f"{TUNABLE}=1"


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command line with :func:`with_huge_pages`'s
    ``GLIBC_TUNABLES`` when there is one to add, at most once (:data:`REEXECUTED`); if the
    interpreter cannot be executed again, go on without huge pages."""
    tunables = with_huge_pages(os.environ, glibc_version())
    if tunables is None or REEXECUTED in os.environ:
        return
    try:
        os.execve(sys.executable, sys.orig_argv, {**os.environ, VARIABLE: tunables, REEXECUTED: "1"})
    except OSError as err:
        print(f"note: running without huge pages ({VARIABLE}: cannot re-execute {sys.executable}: {err})",
              file=sys.stderr)

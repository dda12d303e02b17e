"""``docs/performance.md``: one table of measured times (machine, date, commit, measure, value).

Rows are appended, never edited: by ``python -m experiments bench`` (its timings) and by
``scripts/time_make.py`` (``make run`` / ``make test`` from a fresh clone). A bench's
timings are its numeric entries measured in seconds or milliseconds (a key part ``s`` or
``ms``: ``program_s``, ``forward_ms_per_batch``, ``compile_s.forward``, ``per_s`` rates);
entries under a key part starting with ``paper``, ``authors`` or ``goals`` are reference
numbers, not measurements, and are left out.
"""
from __future__ import annotations

import datetime
import math
import os
import pathlib
import re
from typing import Any, Iterable

from experiments import io

__all__ = ["PATH", "HEADER", "append", "bench_rows", "commit", "cpu_machine", "device_machine", "duration", "flat"]

PATH = pathlib.Path(__file__).resolve().parents[1] / "docs" / "performance.md"
HEADER = ("| machine | date | commit | measure | value |", "| --- | --- | --- | --- | --- |")
_TIMING = re.compile(r"(^|[_.])(s|ms)([_.]|$)")
_REFERENCE = re.compile(r"(^|\.)(paper|authors|goals)")


def cpu_machine() -> str:
    """``"N CPU cores"``: the cores this process may run on."""
    return f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} CPU cores"


def device_machine() -> str:
    """The machine JAX runs on: :func:`cpu_machine` on the CPU backend, else ``"N x <device kind>"``."""
    import jax

    if jax.default_backend() == "cpu":
        return cpu_machine()
    return f"{jax.device_count()} x {jax.devices()[0].device_kind}"


def commit(provenance: dict[str, Any]) -> str:
    """The short commit of a provenance record, ``+dirty`` when the working tree had changes."""
    dirty = (provenance.get("worktree") or {}).get("dirty")
    return str(provenance.get("git", "unknown"))[:7] + ("+dirty" if dirty else "")


def duration(seconds: float) -> str:
    """``"16 min 23 s"`` (whole seconds), or ``"42.1 s"`` under a minute."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s"


def flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` as ``[("a.b", 1)]``."""
    out = []
    for key, value in d.items():
        out += flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [(f"{prefix}{key}", value)]
    return out


def bench_rows(study: str, timings: dict[str, Any], wall_s: float) -> list[tuple[str, str]]:
    """(measure, value) rows of a bench: its wall time, then every timing entry (module docstring)."""
    rows = [(f"bench {study}: wall", duration(wall_s))]
    for key, value in flat(timings):
        if (_TIMING.search(key) and not _REFERENCE.search(key) and isinstance(value, (int, float))
                and not isinstance(value, bool) and math.isfinite(value)):
            rows.append((f"bench {study}: {key}", f"{value:.4g}"))
    return rows


def append(rows: Iterable[tuple[str, str]], machine: str, commit: str, path: pathlib.Path = PATH,
           date: datetime.date | None = None) -> int:
    """Append ``rows`` (measure, value) to the table in ``path`` (created with its header when
    missing); ``date`` defaults to today (UTC). Returns the number of rows appended."""
    date = date or datetime.datetime.now(datetime.UTC).date()
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"| {cell(machine)} | {date.isoformat()} | {cell(commit)} | {cell(m)} | {cell(v)} |" for m, v in rows]
    path = pathlib.Path(path)
    text = path.read_text() if path.exists() else "\n".join(HEADER) + "\n"
    if text and not text.endswith("\n"):
        text += "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    io.atomic_write_text(path, text + "".join(line + "\n" for line in lines))
    return len(lines)

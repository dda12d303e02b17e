"""Atomic result files: text, JSON, CSV, NPZ and PNG (DESIGN.md section 4), and the lock that
gives a result folder to one run at a time.

Every writer goes through :func:`_atomic_write`: the bytes go to a temporary file in
the target's own folder, are flushed and fsynced, and then ``os.replace`` renames the
temporary file over the target. A reader therefore sees either the old file or the
complete new one, never half a file, and a failed write leaves no temporary file.

:func:`lock_folder` holds an exclusive ``flock`` on ``FOLDER/.lock`` for as long as the
run uses the folder; the operating system releases it when the process ends, even by
``kill -9``, so a lock is never stale. The file names the holder (process id, host,
start time, command line) for the message a second run gets.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import fcntl
import io as _stdio
import json
import math
import os
import pathlib
import socket
import sys
import tempfile
from typing import Any, Callable, IO, Iterator, Mapping, Sequence

import numpy as np

__all__ = [
    "HOLDER_ENV",
    "LOCK",
    "FolderLocked",
    "lock_folder",
    "atomic_write_text",
    "atomic_write_json",
    "jsonable",
    "write_csv",
    "save_npz",
    "save_figure",
]


def _atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> pathlib.Path:
    """Call ``write(f)`` on a temporary binary file beside ``path``, then rename it."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return _atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def jsonable(obj: Any) -> Any:
    """Turn ``obj`` into plain JSON values.

    numpy/JAX scalars and arrays become Python numbers and (nested) lists, tuples
    become lists, paths become strings. JSON has no NaN or infinity, so every
    non-finite float becomes ``null`` (``None``); a reader must take ``null`` in a
    numeric field as "not a finite number". Anything else raises ``TypeError``.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        out = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be str, got {key!r}")
            out[key] = jsonable(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if hasattr(obj, "__array__") and hasattr(obj, "dtype"):
        return jsonable(np.asarray(obj).tolist())
    raise TypeError(f"cannot write {type(obj).__name__} {obj!r} as JSON")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> pathlib.Path:
    """Write ``jsonable(obj)`` as indented JSON to ``path`` atomically (NaN/inf -> null)."""
    text = json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n"
    return atomic_write_text(path, text)


def _csv_cell(value: Any) -> Any:
    """One CSV cell: floats in shortest round-trip form, bools as ``true``/``false``."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.floating):
        return str(value)  # numpy prints the shortest string that parses back to this value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_csv(path: str | os.PathLike, columns: Mapping[str, Sequence[Any]]) -> pathlib.Path:
    """Write ``columns`` (name -> 1-D sequence) as a CSV file with a header row.

    Floats are written in the shortest form that parses back to the same value
    (``repr`` for Python floats, numpy's own shortest form for numpy floats, so a
    float32 column round-trips through ``np.float32(text)``); ``nan``/``inf`` as
    such. Booleans are written ``true``/``false``. Reruns with equal data give
    byte-identical files. Raises ``ValueError`` naming the column when a column is
    not one-dimensional or its length differs from the first column's.
    """
    if not columns:
        raise ValueError("write_csv: no columns")
    names = list(columns)
    cols = []
    for name in names:
        col = columns[name]
        if hasattr(col, "__array__") and hasattr(col, "dtype"):
            col = np.asarray(col)
            if col.ndim != 1:
                raise ValueError(f"write_csv: column {name!r} must be 1-D, got shape {col.shape}")
        cols.append(list(col))
    n = len(cols[0])
    for name, col in zip(names, cols):
        if len(col) != n:
            raise ValueError(
                f"write_csv: column {name!r} has {len(col)} rows, column {names[0]!r} has {n}"
            )
    buf = _stdio.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for row in zip(*cols):
        writer.writerow([_csv_cell(v) for v in row])
    return atomic_write_text(path, buf.getvalue())


def save_npz(path: str | os.PathLike, **arrays: Any) -> pathlib.Path:
    """Write ``arrays`` to an uncompressed ``.npz`` file atomically (``np.load`` reads it)."""
    host = {name: np.asarray(a) for name, a in arrays.items()}
    return _atomic_write(path, lambda f: np.savez(f, **host))


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int = 120) -> pathlib.Path:
    """Render a matplotlib figure to PNG at ``path`` atomically, then close the figure.

    The figure is rendered with its own canvas; the CLI selects the Agg backend, so
    this works on a machine without a display.
    """
    import matplotlib.pyplot as plt

    try:
        return _atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
    finally:
        plt.close(fig)


LOCK = ".lock"
HOLDER_ENV = "EXPERIMENTS_LOCK_HOLDER"
"""A process that holds folder locks sets this to its pid in the environment of the processes it
starts to use those folders (``run all --jobs``): they run under its locks."""


class FolderLocked(RuntimeError):
    """Another run holds the folder (:func:`lock_folder`); the message names it."""


def _holder(path: pathlib.Path) -> dict[str, Any]:
    """What the lock file at ``path`` says of its holder (``{}`` when unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


@contextlib.contextmanager
def lock_folder(folder: str | os.PathLike) -> Iterator[None]:
    """Hold ``folder`` (created if missing) for this run until the block ends; the lock file is
    removed then (a file left by a killed run holds no lock).

    Raises :class:`FolderLocked` naming the holder when another process holds it, unless
    that process is the one :data:`HOLDER_ENV` names (a parent lending its lock); an
    ``OSError`` when the folder cannot be created or written.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    while True:
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            holder = _holder(path)
            if holder.get("pid") is not None and str(holder["pid"]) == os.environ.get(HOLDER_ENV):
                yield
                return
            raise FolderLocked(
                f"{folder} is in use by process {holder.get('pid', '?')} on {holder.get('host', '?')} since "
                f"{holder.get('since', '?')} ({holder.get('command', '?')}); wait for it to end, or pass another "
                "--out"
            ) from None
        if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()  # the holder removed the file between our open and our lock: take the new one
    try:
        handle.truncate(0)
        handle.write(json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "since": datetime.datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv),
        }))
        handle.flush()
        yield
    finally:
        path.unlink(missing_ok=True)
        handle.close()

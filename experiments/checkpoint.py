"""Chunk checkpoints of a sweep, over ``orbax.checkpoint.CheckpointManager``.

DESIGN.md section 3 ("Sweeps are chunked"): after each chunk the sweep saves its
state, and a killed sweep resumes from the last saved chunk. Each Orbax step ``k``
(the number of chunks done) holds two items: ``state`` (the pytree, written with
``StandardSave``) and ``meta`` (JSON: the format version and the run's
``fingerprint``, i.e. the study config and the sweep's shapes).

The rules, so that finished or foreign work is never lost silently:

(a) ``resume=True`` and no checkpoint in the folder: start fresh, with a note on stderr.
(b) ``resume=True`` and the saved fingerprint differs: :class:`CheckpointMismatch`
    naming the folder and the differing keys; nothing is overwritten. The run
    fingerprint holds a hash of every source file the study depends on under
    ``code`` (``experiments.codehash``), so resuming after a code change names the
    changed files; ``allow_code_change=True`` (``--allow-code-change``) resumes anyway
    when only ``code.*`` keys differ, with a warning.
(c) the folder is not a readable checkpoint of ours (foreign files, garbage,
    truncated arrays): :class:`CheckpointCorrupt` with the path and the cause.
(d) ``resume=False`` and the folder already holds files: :class:`CheckpointExists`,
    telling the user to pass ``--resume`` or remove the folder.
(e) :meth:`ChunkCheckpointer.finish` (called when a sweep completes) removes the
    folder, so rerunning a finished study starts fresh.

Orbax's own temporary folders (``*.orbax-checkpoint-tmp*``, left by a kill during a
save) do not count as a checkpoint; Orbax deletes them when the manager opens.
"""
from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
from typing import Any

import jax
import orbax.checkpoint as ocp

from experiments.distributed import barrier, is_writer
from experiments.io import jsonable

__all__ = [
    "FORMAT_VERSION",
    "CheckpointSpec",
    "CheckpointCorrupt",
    "CheckpointExists",
    "CheckpointMismatch",
    "ChunkCheckpointer",
]

FORMAT_VERSION = 1
_ORBAX_TMP = ".orbax-checkpoint-tmp"


@dataclasses.dataclass(frozen=True)
class CheckpointSpec:
    """Where one sweep checkpoints and what identifies its run (see ``RunContext.checkpoint``)."""

    directory: pathlib.Path
    fingerprint: dict[str, Any]
    resume: bool = False
    allow_code_change: bool = False

    def open(self, harness: dict[str, Any]) -> ChunkCheckpointer:
        """A checkpointer for this spec, with the sweep engine's own keys under ``harness``."""
        return ChunkCheckpointer(
            self.directory, {**self.fingerprint, "harness": harness},
            resume=self.resume, allow_code_change=self.allow_code_change,
        )


class CheckpointMismatch(RuntimeError):
    """The checkpoint was written by a run with a different fingerprint (rule b)."""


class CheckpointCorrupt(RuntimeError):
    """The folder is not a readable checkpoint written by this module (rule c)."""


class CheckpointExists(RuntimeError):
    """``resume=False`` but the folder already holds a checkpoint (rule d)."""


def _diff_keys(saved: dict, now: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the keys whose values differ between two nested dicts."""
    missing = object()
    out = []
    for key in sorted(set(saved) | set(now)):
        a, b = saved.get(key, missing), now.get(key, missing)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _diff_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


class ChunkCheckpointer:
    """Save and restore ``(chunks done, state)`` of one sweep in ``directory``.

    ``fingerprint`` is a JSON-able dict describing the run; a resumed run must
    present an equal one. Use as a context manager: leaving the block waits for
    pending (asynchronous) saves and closes the manager, keeping the checkpoints;
    call :meth:`finish` instead once the sweep has completed.
    """

    def __init__(
        self, directory: str | pathlib.Path, fingerprint: dict[str, Any], *, resume: bool, allow_code_change: bool = False
    ):
        self.directory = pathlib.Path(directory).absolute()
        self._allow_code_change = allow_code_change
        self._meta = {
            "format_version": FORMAT_VERSION,
            "fingerprint": json.loads(json.dumps(jsonable(fingerprint))),
        }
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointCorrupt(f"checkpoint path {self.directory} exists and is not a folder")
        entries = sorted(self.directory.iterdir()) if self.directory.is_dir() else []
        saved = [e for e in entries if _ORBAX_TMP not in e.name]
        if saved and not resume:
            raise CheckpointExists(
                f"{self.directory} already holds a checkpoint ({', '.join(e.name for e in saved)}); "
                "pass --resume to continue it, or remove the folder to start over"
            )
        if resume and not saved:
            print(f"note: no checkpoint in {self.directory}; starting fresh", file=sys.stderr)
        foreign = [e.name for e in saved if not (e.is_dir() and e.name.isdigit())]
        if foreign:
            raise CheckpointCorrupt(
                f"{self.directory} is not a checkpoint of ours: it holds {', '.join(foreign)}"
            )
        self._has_saved = bool(saved)
        barrier(f"checkpoint-open:{self.directory}")  # every process has looked before any writes
        try:
            self._mngr = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(max_to_keep=2, cleanup_tmp_directories=True),
            )
        except Exception as err:
            raise CheckpointCorrupt(f"cannot open checkpoint folder {self.directory}: {err!r}") from err
        self._closed = False

    def restore(self, template: Any) -> tuple[int, Any] | None:
        """Return ``(step, state)`` of the latest checkpoint, or ``None`` when there is none.

        ``template`` is a pytree like the saved state (e.g. the initial state); its
        shapes, dtypes and shardings define the restored arrays (numpy leaves come
        back as numpy).
        """
        step = self._mngr.latest_step()
        if step is None:
            if self._has_saved:
                raise CheckpointCorrupt(f"{self.directory} holds no readable checkpoint step")
            return None
        where = self.directory / str(step)
        try:
            meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as err:
            raise CheckpointCorrupt(f"cannot read checkpoint metadata in {where}: {err!r}") from err
        if not isinstance(meta, dict) or set(meta) != {"format_version", "fingerprint"}:
            raise CheckpointCorrupt(f"{where} was not written by experiments.checkpoint (meta {meta!r})")
        differing = _diff_keys(meta, self._meta)
        code = [k.removeprefix("fingerprint.code.") for k in differing if k.startswith("fingerprint.code.")]
        if code and len(code) == len(differing):
            if not self._allow_code_change:
                raise CheckpointMismatch(
                    f"checkpoint in {self.directory} was written by other code; changed since: "
                    f"{', '.join(code)}. Pass --allow-code-change to resume anyway (old and new chunks "
                    "would be mixed), or remove the folder to start over"
                )
            print(f"warning: resuming {self.directory} across a code change in {', '.join(code)}", file=sys.stderr)
        elif differing:
            raise CheckpointMismatch(
                f"checkpoint in {self.directory} was written by a different run; differing keys: "
                f"{', '.join(differing)}. Rerun with the original settings, or remove the folder "
                "to start over"
            )
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        try:
            state = self._mngr.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
            )["state"]
        except Exception as err:
            raise CheckpointCorrupt(f"cannot restore the state saved in {where}: {err!r}") from err
        return step, state

    def save(self, step: int, state: Any) -> None:
        """Save ``state`` as step ``step`` (asynchronously; host arrays are copied first)."""
        self._mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(self._meta)
            ),
        )

    def close(self) -> None:
        """Wait for pending saves and close the manager; the checkpoints stay on disk."""
        if not self._closed:
            self._closed = True
            self._mngr.wait_until_finished()
            self._mngr.close()

    def finish(self) -> None:
        """The sweep completed: close, then remove the checkpoint folder (rule e).

        With several processes, process 0 removes it once every process has closed.
        """
        self.close()
        barrier(f"checkpoint-finish:{self.directory}")
        if is_writer():
            shutil.rmtree(self.directory)
        barrier(f"checkpoint-removed:{self.directory}")

    def __enter__(self) -> ChunkCheckpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

"""Chunk checkpoints of a sweep, over ``orbax.checkpoint.CheckpointManager``.

DESIGN.md section 3 ("Sweeps are chunked"): after each chunk the sweep saves its
state, and a killed sweep resumes from the last saved chunk. Each Orbax step ``k``
(the number of chunks done) holds two items: ``state`` (the pytree, written with
``StandardSave``) and ``meta`` (JSON: the format version, the run's ``fingerprint``,
i.e. the study config and the sweep's shapes, and a SHA-256 ``checksums`` entry of every
saved array, keyed by its path in the state pytree).

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
    Every restored array is checked against its checksum before anything computes on
    it; a step that fails (unreadable, or an array whose bytes changed, named with its
    step) is passed over for the previous intact step, with a warning naming both steps,
    and deleted so the run can save it again. With no intact step the error names every
    step's fault.
(d) ``resume=False`` and the folder already holds files: :class:`CheckpointExists`,
    telling the user to pass ``--resume`` or remove the folder.
(e) :meth:`ChunkCheckpointer.finish` (called when a sweep completes) removes the
    folder, so rerunning a finished study starts fresh.

Orbax's own temporary folders (``*.orbax-checkpoint-tmp*``, left by a kill during a
save) do not count as a checkpoint; Orbax deletes them when the manager opens.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiments.distributed import barrier, is_writer, to_host
from experiments.io import jsonable

__all__ = [
    "FORMAT_VERSION",
    "CheckpointSpec",
    "CheckpointCorrupt",
    "CheckpointExists",
    "CheckpointMismatch",
    "ChunkCheckpointer",
    "checksums",
]

FORMAT_VERSION = 2
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


def _cause(err: BaseException) -> str:
    """A one-line account of ``err`` (Orbax's carry whole TensorStore specs): its type and first 160 characters."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:160]}{'...' if len(text) > 160 else ''}"


def checksums(state: Any) -> dict[str, str]:
    """``{path in the pytree: SHA-256 of the array's dtype, shape and bytes}`` of every leaf of
    ``state`` (gathered to the host; a typed PRNG key by its key data)."""
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        host = np.ascontiguousarray(to_host(leaf))
        digest = hashlib.sha256(f"{host.dtype}{list(host.shape)}".encode())
        digest.update(host.tobytes())
        out[jax.tree_util.keystr(path) or "state"] = digest.hexdigest()
    return out


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
            raise CheckpointCorrupt(f"cannot open checkpoint folder {self.directory}: {_cause(err)}") from err
        self._closed = False

    def restore(self, template: Any) -> tuple[int, Any] | None:
        """Return ``(step, state)`` of the latest intact checkpoint, or ``None`` when there is none.

        ``template`` is a pytree like the saved state (e.g. the initial state); its
        shapes, dtypes and shardings define the restored arrays (numpy leaves come
        back as numpy). Every array is verified against its saved checksum (rule c).
        """
        steps = sorted(self._mngr.all_steps(), reverse=True)
        if not steps:
            if self._has_saved:
                raise CheckpointCorrupt(f"{self.directory} holds no readable checkpoint step")
            return None
        faults = []
        for step in steps:
            try:
                state = self._restore_step(step, template)
            except CheckpointCorrupt as err:
                faults.append(str(err))
                continue
            if faults:
                print(f"warning: {'; '.join(faults)}; resuming from step {step} of {self.directory}, the latest "
                      "intact one (the corrupt steps are deleted)", file=sys.stderr)
                for bad in steps[: len(faults)]:
                    self._mngr.delete(bad)
            return step, state
        raise CheckpointCorrupt(f"no intact checkpoint in {self.directory}: {'; '.join(faults)}. Remove the folder "
                                "to start over")

    def _restore_step(self, step: int, template: Any) -> Any:
        """The verified state of ``step``; CheckpointMismatch for another run's, CheckpointCorrupt for damage."""
        where = self.directory / str(step)
        try:
            meta = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as err:
            raise CheckpointCorrupt(f"cannot read checkpoint metadata in {where}: {_cause(err)}") from err
        if not isinstance(meta, dict) or "format_version" not in meta:
            raise CheckpointCorrupt(f"{where} was not written by experiments.checkpoint (meta {meta!r})")
        if meta["format_version"] != FORMAT_VERSION:
            raise CheckpointMismatch(f"{where} was written in checkpoint format {meta['format_version']!r}, this "
                                     f"code writes {FORMAT_VERSION}; remove the folder to start over")
        if set(meta) != set(self._meta) | {"checksums"} or not isinstance(meta["checksums"], dict):
            raise CheckpointCorrupt(f"{where} was not written by experiments.checkpoint (meta keys {sorted(meta)})")
        self._check_fingerprint(meta["fingerprint"])
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        try:
            state = self._mngr.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
            )["state"]
        except Exception as err:
            raise CheckpointCorrupt(f"cannot restore the state saved in {where}: {_cause(err)}") from err
        got = checksums(state)
        bad = [k for k in sorted(set(got) | set(meta["checksums"])) if got.get(k) != meta["checksums"].get(k)]
        if bad:
            raise CheckpointCorrupt(f"checkpoint step {step} in {self.directory} is corrupt: array "
                                    f"{', '.join(bad)} does not match its saved checksum")
        return state

    def _check_fingerprint(self, saved: Any) -> None:
        """CheckpointMismatch (rule b) unless ``saved`` equals this run's fingerprint (up to allowed code changes)."""
        differing = _diff_keys({"fingerprint": saved}, {"fingerprint": self._meta["fingerprint"]})
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

    def save(self, step: int, state: Any) -> None:
        """Save ``state`` and its checksums as step ``step`` (asynchronously; host arrays are copied first)."""
        meta = {**self._meta, "checksums": checksums(state)}
        self._mngr.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
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

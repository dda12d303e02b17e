"""Kept model checkpoints: trained parameters a study leaves in its result folder for others to load.

Unlike the chunk checkpoints of :mod:`experiments.checkpoint` (removed once a sweep
completes), a kept model stays: ``DIR/STUDY/models/NAME/`` is one Orbax checkpoint
with two items, ``params`` (the pytree, ``StandardSave``; a leading axis over runs is
allowed) and ``meta`` (JSON: format version, the model's ``architecture`` dict and free
``info`` such as the runs' seeds and training config). Orbax writes into a temporary
folder and renames it, so a killed save never leaves a half-written model.

:func:`load` refuses a checkpoint whose architecture differs from the one the caller
will apply the parameters with, naming each differing field, and reports a missing or
unreadable folder with its path.
"""
from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from experiments.io import jsonable

__all__ = ["FORMAT_VERSION", "ModelMismatch", "ModelMissing", "load", "load_info", "load_meta", "save"]

FORMAT_VERSION = 1


class ModelMissing(FileNotFoundError):
    """No kept model at the path (or not a readable one)."""


class ModelMismatch(ValueError):
    """The kept model's architecture differs from the one asked for."""


def _checkpointer() -> ocp.Checkpointer:
    return ocp.Checkpointer(ocp.CompositeCheckpointHandler())


def save(directory: str | pathlib.Path, params: Any, architecture: dict, info: dict | None = None) -> pathlib.Path:
    """Write ``params`` with ``architecture`` and ``info`` to ``directory`` (replacing an older model there)."""
    directory = pathlib.Path(directory).absolute()
    directory.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format_version": FORMAT_VERSION, "architecture": jsonable(architecture), "info": jsonable(info or {})}
    meta = json.loads(json.dumps(meta))
    host = jax.tree.map(np.asarray, params)
    _checkpointer().save(directory, args=ocp.args.Composite(params=ocp.args.StandardSave(host),
                                                            meta=ocp.args.JsonSave(meta)), force=True)
    return directory


def load_meta(directory: str | pathlib.Path) -> dict:
    """The kept model's ``{"format_version", "architecture", "info"}``."""
    directory = pathlib.Path(directory).absolute()
    if not directory.is_dir():
        raise ModelMissing(f"no kept model at {directory}: run the study that trains it first")
    try:
        meta = _checkpointer().restore(directory, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    except Exception as err:
        raise ModelMissing(f"{directory} is not a readable kept model: {err!r}") from err
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION or "architecture" not in meta:
        raise ModelMissing(f"{directory} was not written by experiments.models (meta {meta!r})")
    return meta


def load_info(directory: str | pathlib.Path) -> dict:
    """The kept model's ``info``, or ``{}`` when there is no readable kept model at ``directory`` (for a
    study that trains the model itself when it finds none)."""
    try:
        return load_meta(directory)["info"]
    except ModelMissing:
        return {}


def load(directory: str | pathlib.Path, architecture: dict, template: Any) -> tuple[Any, dict]:
    """``(params, info)`` of the kept model, restored into the shapes of ``template``.

    ``ModelMismatch`` names every architecture field that differs from ``architecture``.
    """
    meta = load_meta(directory)
    want = json.loads(json.dumps(jsonable(architecture)))
    differing = sorted(k for k in set(want) | set(meta["architecture"]) if want.get(k) != meta["architecture"].get(k))
    if differing:
        detail = ", ".join(f"{k}: saved {meta['architecture'].get(k)!r}, expected {want.get(k)!r}" for k in differing)
        raise ModelMismatch(f"kept model at {directory} has a different architecture ({detail})")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
    try:
        params = _checkpointer().restore(pathlib.Path(directory).absolute(),
                                         args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract)))["params"]
    except Exception as err:
        raise ModelMissing(f"cannot restore the parameters kept in {directory}: {err!r}") from err
    saved = jax.tree_util.tree_flatten_with_path(params)[0]
    wanted = jax.tree_util.tree_flatten_with_path(abstract)[0]
    for (path, got), (_, want) in zip(saved, wanted):
        if np.shape(got) != tuple(want.shape) or np.asarray(got).dtype != want.dtype:
            raise ModelMissing(f"kept model at {directory}: parameter {jax.tree_util.keystr(path)} is "
                               f"{np.asarray(got).dtype}{list(np.shape(got))}, expected {want.dtype}{list(want.shape)}")
    return params, meta["info"]

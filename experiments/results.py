"""The result file ``DIR/STUDY/result.json``: its schema, built by ``run``, read by ``report``.

Keys: ``study, quick, config, overrides, metrics, checks, paper, provenance``, and
``sweep`` (``{"field", "value"}``, with ``"vmapped": true`` when every value ran in one
program, whose wall and compile seconds the provenance then gives) in a sweep's folders.
Each check is ``{name, value, target, passed, paper, claim}``; ``paper`` is the
paper's number for it or ``null``. JSON has no NaN or infinity: a non-finite number
is written as ``null`` and shown as ``non-finite`` in the report.
"""
from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from experiments.checks import Check
from experiments.configs import to_json

__all__ = ["InvalidResult", "RESULT", "build", "load", "wall_text"]

RESULT = "result.json"
_KEYS = {"study", "quick", "config", "overrides", "metrics", "checks", "paper", "provenance"}
_CHECK_KEYS = {"name", "value", "target", "passed", "paper", "claim"}


class InvalidResult(ValueError):
    """A study's output, or a result file, does not fit the schema; the message says where."""


def _number(value: Any, where: str) -> float:
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - any failure means "not a number"
        arr = None
    if arr is None or arr.shape != () or arr.dtype.kind not in "iufb":
        raise InvalidResult(f"{where} must be a real number, got {type(value).__name__} {value!r}")
    return float(arr)


def _numbers(values: Any, where: str) -> dict[str, float]:
    if not isinstance(values, dict):
        raise InvalidResult(f"{where} must be a dict, got {type(values).__name__}")
    for key in values:
        if not isinstance(key, str):
            raise InvalidResult(f"{where} keys must be str, got {key!r}")
    return {key: _number(value, f"{where}[{key!r}]") for key, value in values.items()}


def _check(check: Any, i: int, study: str, seen: set[str]) -> dict[str, Any]:
    where = f"study {study!r}: checks[{i}]"
    if not isinstance(check, Check):
        raise InvalidResult(f"{where} must be a Check, got {type(check).__name__}")
    if not isinstance(check.name, str) or not check.name or check.name in seen:
        raise InvalidResult(f"{where}.name must be a new non-empty str, got {check.name!r}")
    if not isinstance(check.target, str) or not isinstance(check.passed, (bool, np.bool_)):
        raise InvalidResult(f"{where} needs a str target and a bool passed, got {check.target!r}, {check.passed!r}")
    seen.add(check.name)
    return {
        "name": check.name,
        "value": _number(check.value, f"{where}.value"),
        "target": check.target,
        "passed": bool(check.passed),
        "paper": None if check.paper is None else _number(check.paper, f"{where}.paper"),
        "claim": str(check.claim),
    }


def build(
    study: str,
    quick: bool,
    config: Any,
    overrides: list[tuple[str, Any]],
    metrics: Any,
    checks: Any,
    paper: Any,
    provenance: dict[str, Any],
    sweep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate one run's pieces and assemble result.json (InvalidResult naming the bad field)."""
    if not isinstance(checks, (list, tuple)):
        raise InvalidResult(f"study {study!r}: checks must be a list of Check")
    seen: set[str] = set()
    result = {
        "study": study,
        "quick": bool(quick),
        "config": to_json(config),
        "overrides": [{"field": path, "value": to_json(value)} for path, value in overrides],
        "metrics": _numbers(metrics, f"study {study!r}: metrics"),
        "checks": [_check(c, i, study, seen) for i, c in enumerate(checks)],
        "paper": _numbers(dict(paper), f"study {study!r}: paper"),
        "provenance": provenance,
    }
    compile_s = provenance.get("compile_s", 0.0)
    if not (isinstance(compile_s, (int, float)) and math.isfinite(compile_s) and compile_s >= 0):
        raise InvalidResult(f"study {study!r}: compile_s must be finite and >= 0, got {compile_s}")
    if sweep is not None:
        result["sweep"] = {"field": sweep["field"], "value": to_json(sweep["value"])}
        if sweep.get("vmapped"):
            result["sweep"]["vmapped"] = True  # one program for every value: wall_s and compile_s are its totals
    return result


def load(path: pathlib.Path) -> dict[str, Any]:
    """Read a result.json and check its shape; InvalidResult says what is wrong."""
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidResult(f"cannot read {path}: {err}") from err
    if not isinstance(result, dict) or not _KEYS <= set(result):
        have = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise InvalidResult(f"{path} lacks result.json keys: needs {sorted(_KEYS)}, has {have}")
    for field in ("config", "metrics", "paper", "provenance"):
        if not isinstance(result[field], dict):
            raise InvalidResult(f"{path}: {field} is not an object")
    if not isinstance(result["checks"], list) or not all(
        isinstance(c, dict) and _CHECK_KEYS <= set(c) for c in result["checks"]
    ):
        raise InvalidResult(f"{path}: checks must be a list of {sorted(_CHECK_KEYS)} objects")
    return result


def wall_text(provenance: dict[str, Any]) -> str:
    """A result's wall time and the share of it spent compiling, for the console and the report:
    ``"163.5 s (96.1 s compiling, 59%)"``, ``"2.3 s"`` without ``compile_s``, ``"?"`` without ``wall_s``."""
    wall, compile_s = provenance.get("wall_s"), provenance.get("compile_s")
    if not isinstance(wall, (int, float)):
        return "?"
    if not isinstance(compile_s, (int, float)) or wall <= 0:
        return f"{wall:.1f} s"
    return f"{wall:.1f} s ({compile_s:.1f} s compiling, {compile_s / wall:.0%})"

"""The result file ``DIR/STUDY/result.json``: its schema, built by ``run``, read by ``report``.

Keys: ``study, quick, config, overrides, metrics, checks, paper, provenance``, and
``sweep`` (``{"field", "value"}``, with ``"vmapped": true`` when every value ran in one
program, whose wall and compile seconds the provenance then gives) in a sweep's folders.
Each check (:class:`experiments.checks.Check`) is ``{name, claim, kind, value, target,
verdict, passed, paper, n, unit, lo, hi, se, method, control, n_needed}``: ``kind`` is
``interval`` (``value`` the mean over ``n`` units, ``[lo, hi]`` its interval) or ``exact``;
``verdict`` is PASS, FAIL, INCONCLUSIVE or NO POWER and ``passed`` is ``verdict == PASS``;
``control`` is ``{arm, verdict, value, lo, hi, n}`` or ``null``; ``paper`` is the paper's
number for it or ``null``. JSON has no NaN or infinity: a non-finite number is written
as ``null`` and shown as ``non-finite`` in the report (an infinite interval edge: no
interval, one unit).
"""
from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from experiments.checks import VERDICTS, Check
from experiments.configs import to_json

__all__ = ["InvalidResult", "RESULT", "build", "load", "check_text", "verdict_counts", "wall_text"]

RESULT = "result.json"
_KEYS = {"study", "quick", "config", "overrides", "metrics", "checks", "paper", "provenance"}
_CHECK_KEYS = {"name", "claim", "kind", "value", "target", "verdict", "passed", "paper", "n", "unit", "lo", "hi",
               "se", "method", "control", "n_needed"}


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


def _optional(value: Any, where: str) -> float | None:
    return None if value is None else _number(value, where)


def _check(check: Any, i: int, study: str, seen: set[str], claims: tuple) -> dict[str, Any]:
    where = f"study {study!r}: checks[{i}]"
    if not isinstance(check, Check):
        raise InvalidResult(f"{where} must be a Check, got {type(check).__name__}")
    if not isinstance(check.name, str) or not check.name or check.name in seen:
        raise InvalidResult(f"{where}.name must be a new non-empty str, got {check.name!r}")
    if not isinstance(check.target, str) or check.verdict not in VERDICTS or check.kind not in ("exact", "interval"):
        raise InvalidResult(f"{where} needs a str target, a verdict in {VERDICTS} and kind exact or interval, "
                            f"got {check.target!r}, {check.verdict!r}, {check.kind!r}")
    if claims and not any(c.matches(check.name) for c in claims):
        raise InvalidResult(f"{where}: {check.name!r} judges no claim the study declares")
    seen.add(check.name)
    ctrl = check.control
    return {
        "name": check.name,
        "claim": str(check.claim),
        "kind": check.kind,
        "value": _number(check.value, f"{where}.value"),
        "target": check.target,
        "verdict": check.verdict,
        "passed": check.passed,
        "paper": _optional(check.paper, f"{where}.paper"),
        "n": int(check.n),
        "unit": str(check.unit),
        "lo": _optional(check.lo, f"{where}.lo"),
        "hi": _optional(check.hi, f"{where}.hi"),
        "se": _optional(check.se, f"{where}.se"),
        "method": str(check.method),
        "control": None if ctrl is None else {
            "arm": ctrl.arm, "verdict": ctrl.verdict, "value": _optional(ctrl.value, f"{where}.control.value"),
            "lo": _optional(ctrl.lo, f"{where}.control.lo"), "hi": _optional(ctrl.hi, f"{where}.control.hi"),
            "n": int(ctrl.n)},
        "n_needed": check.n_needed,
    }


def verdict_counts(checks: list[dict[str, Any]]) -> dict[str, int]:
    """``{verdict: count}`` over a result's checks, every verdict present (0 when none)."""
    return {v: sum(c.get("verdict") == v for c in checks) for v in VERDICTS}


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
    claims: tuple = (),
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
        "checks": [_check(c, i, study, seen, claims) for i, c in enumerate(checks)],
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


def _num(x: float | None) -> str:
    return "non-finite" if x is None else f"{x:.4g}"


def check_text(check: dict[str, Any]) -> str:
    """One check as text: ``0.12 [0.05, 0.19] (n=8 seeds) vs > 0.1; control UAT null: 0.01 [-0.02, 0.04] FAIL``."""
    if check["kind"] == "exact":
        return f"{_num(check['value'])} (exact) vs {check['target']}"
    interval = f"[{_num(check['lo'])}, {_num(check['hi'])}]" if check["lo"] is not None else "[no interval]"
    text = f"{_num(check['value'])} {interval} (n={check['n']} {check['unit']}) vs {check['target']}"
    ctrl = check.get("control")
    if ctrl:
        if ctrl["value"] is None:
            text += f"; control {ctrl['arm']}: {ctrl['verdict']}"
        else:
            text += f"; control {ctrl['arm']}: {_num(ctrl['value'])} {ctrl['verdict']}"
    if check.get("n_needed"):
        text += f"; about {check['n_needed']} {check['unit']} would decide it"
    return text


def wall_text(provenance: dict[str, Any]) -> str:
    """A result's wall time and the share of it spent compiling, for the console and the report:
    ``"163.5 s (96.1 s compiling, 59%)"``, ``"2.3 s"`` without ``compile_s``, ``"?"`` without ``wall_s``."""
    wall, compile_s = provenance.get("wall_s"), provenance.get("compile_s")
    if not isinstance(wall, (int, float)):
        return "?"
    if not isinstance(compile_s, (int, float)) or wall <= 0:
        return f"{wall:.1f} s"
    return f"{wall:.1f} s ({compile_s:.1f} s compiling, {compile_s / wall:.0%})"

"""Command line of the suite (DESIGN.md section 4): ``list``, ``run``, ``report``, ``bench``.

``python -m experiments run STUDY`` writes ``DIR/STUDY/result.json`` with the keys
``study, quick, config, metrics, checks, paper, provenance``. JSON has no NaN or
infinity, so a non-finite metric, paper number or check value is written as
``null`` and shown as ``non-finite`` in REPORT.md. Exit codes: 0 when every check
passed, 1 when a check failed or a study raised (the result, or ``error.txt`` with
the traceback, is still written), 2 for usage errors.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import pathlib
import sys
import time
import traceback
import urllib.parse
from typing import Any

import numpy as np

from experiments import io, registry
from experiments.provenance import provenance

__all__ = ["InvalidStudyOutput", "build_result", "main"]

_RESULT = "result.json"
_ERROR = "error.txt"
_TABLE = "table.csv"
_BENCH = "bench.json"


class InvalidStudyOutput(ValueError):
    """A study returned something that does not fit the result.json contract."""


@dataclasses.dataclass(frozen=True)
class _Row:
    """One line of the final ``run`` table."""

    study: str
    status: str  # PASS, FAIL or ERROR
    passed: int
    total: int
    wall_s: float


# ---------------------------------------------------------------- validation


def _number(value: Any, study: str, where: str) -> float:
    """``value`` as a float; it must be a real (int or float) scalar, NaN and inf allowed."""
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001 - any failure means "not a number"
        arr = None
    if arr is None or arr.shape != () or arr.dtype.kind not in "iuf":
        raise InvalidStudyOutput(
            f"study {study!r}: {where} must be a real number, got {type(value).__name__} {value!r}"
        )
    return float(arr)


def _numbers(values: Any, study: str, field: str) -> dict[str, float]:
    if not isinstance(values, dict):
        raise InvalidStudyOutput(f"study {study!r}: {field} must be a dict, got {type(values).__name__}")
    out = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise InvalidStudyOutput(f"study {study!r}: {field} keys must be str, got {key!r}")
        out[key] = _number(value, study, f"{field}[{key!r}]")
    return out


def build_result(study: str, quick: bool, output: Any, wall_s: float) -> dict[str, Any]:
    """Validate a study's :class:`~experiments.registry.StudyOutput` and build result.json.

    Raises :class:`InvalidStudyOutput` naming the study and the offending field.
    Non-finite numbers are kept as floats here and become ``null`` when written.
    """
    if not isinstance(output, registry.StudyOutput):
        raise InvalidStudyOutput(f"study {study!r} must return a StudyOutput, got {type(output).__name__}")
    if not isinstance(output.config, dict):
        raise InvalidStudyOutput(f"study {study!r}: config must be a dict, got {type(output.config).__name__}")
    try:
        config = io.jsonable(output.config)
    except TypeError as err:
        raise InvalidStudyOutput(f"study {study!r}: config is not JSON-able: {err}") from err
    if not isinstance(output.checks, (list, tuple)):
        raise InvalidStudyOutput(f"study {study!r}: checks must be a list of Check")
    checks, seen = [], set()
    for i, check in enumerate(output.checks):
        if not isinstance(check, registry.Check):
            raise InvalidStudyOutput(f"study {study!r}: checks[{i}] must be a Check, got {type(check).__name__}")
        if not isinstance(check.name, str) or not check.name or check.name in seen:
            raise InvalidStudyOutput(f"study {study!r}: checks[{i}].name must be a new non-empty str, got {check.name!r}")
        if not isinstance(check.target, str):
            raise InvalidStudyOutput(f"study {study!r}: checks[{i}].target must be a str, got {check.target!r}")
        if not isinstance(check.passed, (bool, np.bool_)):
            raise InvalidStudyOutput(
                f"study {study!r}: checks[{i}].passed must be a bool, got {type(check.passed).__name__}"
            )
        seen.add(check.name)
        checks.append(
            {
                "name": check.name,
                "value": _number(check.value, study, f"checks[{i}].value"),
                "target": check.target,
                "passed": bool(check.passed),
            }
        )
    compile_s = _number(output.compile_s, study, "compile_s")
    if not (math.isfinite(compile_s) and compile_s >= 0):
        raise InvalidStudyOutput(f"study {study!r}: compile_s must be finite and >= 0, got {compile_s}")
    return {
        "study": study,
        "quick": quick,
        "config": config,
        "metrics": _numbers(output.metrics, study, "metrics"),
        "checks": checks,
        "paper": _numbers(output.paper, study, "paper"),
        "provenance": {**provenance(), "wall_s": wall_s, "compile_s": compile_s},
    }


# ---------------------------------------------------------------- list / run


def _cmd_list(args: argparse.Namespace) -> int:
    studies = registry.load_all()
    if not studies:
        print("no studies registered")
    width = max((len(name) for name in studies), default=0)
    for name, study in studies.items():
        print(f"{name:<{width}}  {'bench' if study.bench else '-    '}  {study.summary}")
    return 0


def _unknown(name: str, studies: dict[str, registry.Study]) -> int:
    print(f"error: unknown study {name!r}; known studies: {', '.join(studies) or 'none'}", file=sys.stderr)
    return 2


def _run_one(study: registry.Study, out: pathlib.Path, args: argparse.Namespace) -> _Row:
    study_dir = out / study.name
    study_dir.mkdir(parents=True, exist_ok=True)
    ctx = registry.RunContext(
        study=study.name, quick=args.quick, seeds=args.seeds, out_dir=study_dir, resume=args.resume
    )
    print(f"== running {study.name} ({'quick' if args.quick else 'full'}) -> {study_dir}", flush=True)
    t0 = time.perf_counter()
    try:
        output = study.run(ctx)
        result = build_result(study.name, args.quick, output, time.perf_counter() - t0)
    except Exception:  # noqa: BLE001 - a failing study must not stop `run all`
        tb = traceback.format_exc()
        print(f"ERROR in study {study.name}:\n{tb}", file=sys.stderr, flush=True)
        io.atomic_write_text(study_dir / _ERROR, tb)
        return _Row(study.name, "ERROR", 0, 0, time.perf_counter() - t0)
    io.atomic_write_json(study_dir / _RESULT, result)
    (study_dir / _ERROR).unlink(missing_ok=True)
    passed = sum(c["passed"] for c in result["checks"])
    for c in result["checks"]:
        print(f"  {'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['value']:.6g} (target {c['target']})")
    wall = result["provenance"]["wall_s"]
    print(f"{study.name}: {passed}/{len(result['checks'])} checks passed in {wall:.1f} s", flush=True)
    status = "PASS" if passed == len(result["checks"]) else "FAIL"
    return _Row(study.name, status, passed, len(result["checks"]), wall)


def _cmd_run(args: argparse.Namespace) -> int:
    studies = registry.load_all()
    if args.study == "all":
        names = list(studies)
        if not names:
            print("error: no studies registered", file=sys.stderr)
            return 2
    elif args.study in studies:
        names = [args.study]
    else:
        return _unknown(args.study, studies)
    rows = [_run_one(studies[name], pathlib.Path(args.out), args) for name in names]
    if len(rows) > 1:
        width = max(len(r.study) for r in rows)
        print(f"\n{'study':<{width}}  status  checks  wall_s")
        for r in rows:
            print(f"{r.study:<{width}}  {r.status:<6}  {r.passed:>2}/{r.total:<3}  {r.wall_s:8.1f}")
    return 0 if all(r.status == "PASS" for r in rows) else 1


# ---------------------------------------------------------------- report


def _load_result(path: pathlib.Path) -> dict[str, Any]:
    """Read a result.json and check its shape; raises ValueError saying what is wrong."""
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from err
    keys = {"study", "quick", "config", "metrics", "checks", "paper", "provenance"}
    if not isinstance(result, dict) or not keys <= set(result):
        have = sorted(result) if isinstance(result, dict) else type(result).__name__
        raise ValueError(f"{path} lacks result.json keys: needs {sorted(keys)}, has {have}")
    for field in ("config", "metrics", "paper", "provenance"):
        if not isinstance(result[field], dict):
            raise ValueError(f"{path}: {field} is not an object")
    check_keys = {"name", "value", "target", "passed"}
    if not isinstance(result["checks"], list) or not all(
        isinstance(c, dict) and check_keys <= set(c) for c in result["checks"]
    ):
        raise ValueError(f"{path}: checks must be a list of {sorted(check_keys)} objects")
    return result


def _cell(value: Any) -> str:
    """A Markdown table cell: numbers to 6 significant digits, null as non-finite."""
    if value is None:
        return "non-finite"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"{value:.6g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _seconds(value: Any) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) else "?"


def _table_section(path: pathlib.Path, max_rows: int = 60) -> list[str]:
    """A study's headline table (``table.csv``, if it wrote one) as Markdown."""
    if not path.exists():
        return []
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        return [f"**{path.name} is unreadable:** {_cell(repr(err))}", ""]
    if not rows:
        return []

    def cell(text: str) -> str:
        try:
            return _cell(float(text)) if text.strip() else ""
        except ValueError:
            return _cell(text)

    header, body = rows[0], rows[1 : max_rows + 1]
    lines = [f"Table (`{path.name}`):", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    if len(rows) - 1 > max_rows:
        lines.append(f"({len(rows) - 1 - max_rows} more rows in `{path.name}`)")
    return lines + [""]


def _study_section(name: str, folder: pathlib.Path, result: dict[str, Any]) -> list[str]:
    lines = [f"## {name}", ""]
    mode = "quick" if result["quick"] else "full"
    lines += [f"Mode: {mode}. Config: `{json.dumps(result['config'], separators=(',', ':'))}`", ""]
    metrics, paper = result["metrics"], result["paper"]
    if metrics or paper:
        lines += ["| metric | ours | paper |", "| --- | --- | --- |"]
        for key in list(metrics) + [k for k in paper if k not in metrics]:
            ours = _cell(metrics[key]) if key in metrics else ""
            ref = _cell(paper[key]) if key in paper else ""
            lines.append(f"| {_cell(key)} | {ours} | {ref} |")
        lines.append("")
    if result["checks"]:
        lines += ["| check | value | target | result |", "| --- | --- | --- | --- |"]
        for c in result["checks"]:
            verdict = "PASS" if c["passed"] is True else "FAIL"
            lines.append(f"| {_cell(c['name'])} | {_cell(c['value'])} | {_cell(c['target'])} | {verdict} |")
        lines.append("")
    lines += _table_section(folder / _TABLE)
    for png in sorted(folder.glob("*.png")):
        link = urllib.parse.quote(f"{folder.name}/{png.name}")
        lines += [f"![{png.stem}]({link})", ""]
    if (folder / _BENCH).exists():
        lines += [f"Benchmark: [{_BENCH}]({urllib.parse.quote(f'{folder.name}/{_BENCH}')})", ""]
    p = result["provenance"]
    prov = " · ".join(
        f"{key} {_cell(p.get(key)) if key in p else '?'}" for key in ("git", "jax", "backend", "devices")
    )
    lines += [f"Provenance: {prov} · wall {_seconds(p.get('wall_s'))} · compile {_seconds(p.get('compile_s'))}", ""]
    return lines


def _cmd_report(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out)
    if not out.is_dir():
        print(f"error: results folder {out} does not exist; run `python -m experiments run ...` first", file=sys.stderr)
        return 2
    folders = sorted(d for d in out.iterdir() if d.is_dir() and ((d / _RESULT).exists() or (d / _ERROR).exists()))
    summary = ["| study | checks passed | wall time | mode |", "| --- | --- | --- | --- |"]
    body: list[str] = []
    for folder in folders:
        name = folder.name
        note = []
        if (folder / _ERROR).exists():
            note = [f"The last run of {name} raised; its traceback is in `{name}/{_ERROR}`.", ""]
        if not (folder / _RESULT).exists():
            summary.append(f"| {name} | raised, no result | | |")
            body += [f"## {name}", ""] + note
            continue
        try:
            result = _load_result(folder / _RESULT)
        except ValueError as err:
            print(f"warning: {err}", file=sys.stderr)
            summary.append(f"| {name} | unreadable result.json | | |")
            body += [f"## {name}", "", f"**result.json is unreadable:** {_cell(str(err))}", ""] + note
            continue
        checks = result["checks"]
        passed = sum(c["passed"] is True for c in checks)
        mode = "quick" if result["quick"] else "full"
        summary.append(f"| {name} | {passed}/{len(checks)} | {_seconds(result['provenance'].get('wall_s'))} | {mode} |")
        body += _study_section(name, folder, result) + note
    text = "\n".join(["# Results", "", f"From `{out}/*/{_RESULT}`.", ""] + summary + [""] + body)
    io.atomic_write_text(out / "REPORT.md", text.rstrip("\n") + "\n")
    print(f"wrote {out / 'REPORT.md'} ({len(folders)} studies)")
    return 0


# ---------------------------------------------------------------- bench


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows = []
    for key, value in d.items():
        if isinstance(value, dict):
            rows += _flat(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def _cmd_bench(args: argparse.Namespace) -> int:
    studies = registry.load_all()
    if args.study not in studies:
        return _unknown(args.study, studies)
    study = studies[args.study]
    if study.bench is None:
        with_bench = ", ".join(n for n, s in studies.items() if s.bench) or "none"
        print(f"error: study {study.name!r} has no bench; studies with one: {with_bench}", file=sys.stderr)
        return 2
    study_dir = pathlib.Path(args.out) / study.name
    study_dir.mkdir(parents=True, exist_ok=True)
    ctx = registry.RunContext(study=study.name, quick=False, seeds=None, out_dir=study_dir, resume=False)
    print(f"== benchmarking {study.name} -> {study_dir}", flush=True)
    t0 = time.perf_counter()
    try:
        timings = study.bench(ctx)
        if not isinstance(timings, dict):
            raise TypeError(f"bench of {study.name!r} must return a dict, got {type(timings).__name__}")
        payload = {
            "study": study.name,
            "bench": io.jsonable(timings),
            "provenance": {**provenance(), "wall_s": time.perf_counter() - t0},
        }
    except Exception:  # noqa: BLE001 - report, do not crash
        print(f"ERROR in bench of {study.name}:\n{traceback.format_exc()}", file=sys.stderr)
        return 1
    io.atomic_write_json(study_dir / _BENCH, payload)
    rows = _flat(timings)
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        shown = f"{value:.4g}" if isinstance(value, (float, np.floating)) else str(value)
        print(f"  {key:<{width}}  {shown}")
    print(f"wrote {study_dir / _BENCH}")
    return 0


# ---------------------------------------------------------------- entry point


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every registered study").set_defaults(handler=_cmd_list)
    run = sub.add_parser("run", help="run a study (or 'all') and write DIR/STUDY/result.json")
    run.add_argument("study", help="study name, or 'all' for every study")
    run.add_argument("--quick", action="store_true", help="CPU size that finishes in minutes")
    run.add_argument("--seeds", type=_positive_int, default=None, help="number of seeds (>= 1)")
    run.add_argument("--out", default="results", help="results folder (default: results)")
    run.add_argument("--resume", action="store_true", help="continue from the study's checkpoints")
    run.set_defaults(handler=_cmd_run)
    report = sub.add_parser("report", help="write DIR/REPORT.md from DIR/*/result.json")
    report.add_argument("--out", default="results", help="results folder (default: results)")
    report.set_defaults(handler=_cmd_report)
    bench = sub.add_parser("bench", help="time a study's vectorised program against loops")
    bench.add_argument("study")
    bench.add_argument("--out", default="results", help="results folder (default: results)")
    bench.set_defaults(handler=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the verb, return the exit code."""
    import matplotlib

    matplotlib.use("Agg")
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: 2 on usage errors, 0 for --help
        return exc.code if isinstance(exc.code, int) else 2
    return args.handler(args)

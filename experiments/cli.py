"""Command line of the suite: parse the verb and dispatch (``list, show, run, report, bench, docs``).

``python -m experiments run STUDY`` writes ``DIR/STUDY/result.json`` (schema in
``experiments.results``). Exit codes:

* 0 when no check failed;
* 1 when a check's verdict is FAIL or NO POWER (with ``--strict``, also INCONCLUSIVE), or a
  study raised an unexpected exception (the result, or ``error.txt`` with the traceback, is
  still written; the traceback is printed);
* 2 for the user's input, as one line ``error: what, where, how to fix``: an unknown study,
  a bad ``--set``/``--config``/``--sweep``/``--seeds``, an ``--out`` that is no writable
  folder, ``--allow-code-change`` without ``--resume``, a study folder another run holds
  (:func:`experiments.io.lock_folder`), bad multi-process flags (all caught before any
  computation), and, found while a study runs, a malformed data file or a checkpoint that
  cannot be resumed (:func:`_input_errors`). Their traceback goes to ``DIR/STUDY/error.txt``
  and, with ``--debug``, to the console.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import json
import pathlib
import signal
import sys
import time
import traceback
from typing import Any

import numpy as np

from experiments import (checks, configs, distributed, docs, estimate, io, jobs, perf_log, registry, report, results,
                         runner)
from experiments.provenance import provenance

__all__ = ["main"]

_INIT_TIMEOUT_S = 60


@dataclasses.dataclass(frozen=True)
class _Row:
    """One line of the final ``run`` table."""

    study: str
    counts: dict[str, int] | None  # verdict -> count; None when the study raised
    wall_s: float | None  # None: the totals line
    bad_input: bool = False  # the study stopped on the user's input (exit 2), not on a fault of the code

    @property
    def status(self) -> str:
        """ERROR, FAIL (a FAIL or NO POWER verdict), INCONCLUSIVE, or PASS."""
        if self.counts is None:
            return "ERROR"
        if self.counts[checks.FAIL] or self.counts[checks.NO_POWER]:
            return "FAIL"
        return "INCONCLUSIVE" if self.counts[checks.INCONCLUSIVE] else "PASS"

    def line(self, width: int) -> str:
        c = self.counts or dict.fromkeys(checks.VERDICTS, 0)
        tally = "  ".join(f"{c[v]:>3}" for v in checks.VERDICTS)
        wall = f"{self.wall_s:8.1f}" if self.wall_s is not None else " (pass, fail, inconclusive, no power)"
        return f"{self.study:<{width}}  {self.status:<12}  {tally}  {wall}"


def _counts(found: list[dict[str, Any]]) -> dict[str, int]:
    per = [results.verdict_counts(r["checks"]) for r in found]
    return {v: sum(c[v] for c in per) for v in checks.VERDICTS}


def _usage_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _input_errors() -> tuple[type[Exception], ...]:
    """Exceptions a study raises on the user's input (exit 2): configs, data files, checkpoints, locks."""
    from experiments import checkpoint
    from uat_jax.errors import DataError

    return (configs.ConfigError, DataError, io.FolderLocked, checkpoint.CheckpointExists,
            checkpoint.CheckpointMismatch, checkpoint.CheckpointCorrupt)


def _output_folder(text: str) -> pathlib.Path:
    """``--out`` as a folder that exists and is writable (created if missing); ConfigError otherwise."""
    out = pathlib.Path(text)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise configs.ConfigError(f"--out {text} is a file, not a folder; name a folder") from None
    except OSError as err:
        raise configs.ConfigError(f"--out {text}: cannot create the folder ({err.strerror}); name a writable "
                                  "folder") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise configs.ConfigError(f"--out {text} is not writable; name a writable folder")
    return out


def _lock_studies(out: pathlib.Path, chosen: list[registry.Study], stack: contextlib.ExitStack) -> None:
    """Hold the lock of every chosen study's folder until ``stack`` closes (the writing process only)."""
    if distributed.is_writer():
        for study in chosen:
            try:
                stack.enter_context(io.lock_folder(out / study.name))
            except OSError as err:
                raise configs.ConfigError(f"--out {out}: cannot use the study folder {out / study.name} "
                                          f"({err.strerror}); name another --out") from None


def _pick(name: str, studies: dict[str, registry.Study]) -> registry.Study:
    if name not in studies:
        raise configs.ConfigError(f"unknown study {name!r}; known studies: {', '.join(studies) or 'none'}")
    return studies[name]


def _cmd_list(args: argparse.Namespace) -> int:
    studies = registry.load_all()
    width = max((len(name) for name in studies), default=0)
    for name, study in studies.items():
        seeds = "seeds" if study.seeds_field else "-    "
        print(f"{name:<{width}}  {'bench' if study.bench else '-    '}  {seeds}  {study.summary}")
    return 0


def _request(args: argparse.Namespace) -> runner.Request:
    overrides: list[tuple[str, Any]] = []
    if args.config:
        overrides += configs.from_file(args.config)
    overrides += [configs.parse_assignment(text) for text in args.set]
    return runner.Request(
        quick=args.quick, overrides=tuple(overrides), seeds=getattr(args, "seeds", None),
        resume=getattr(args, "resume", False), allow_code_change=getattr(args, "allow_code_change", False),
        tensorboard=getattr(args, "tensorboard", False),
    )


def _resolve(study: registry.Study, request: runner.Request, config_file: str | None):
    try:
        return runner.resolve(study, request)
    except configs.ConfigError as err:
        raise configs.ConfigError(f"--config {config_file}: {err}" if config_file else str(err)) from None


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        study = _pick(args.study, registry.load(args.study))
        config, _ = _resolve(study, _request(args), args.config)
        if args.estimate:
            estimate.probe_fraction(config, study.cost_fields, args.probe_fraction)  # no valid probe: exit 2 now
    except configs.ConfigError as err:
        return _usage_error(str(err))
    if not args.estimate:
        print(json.dumps(configs.to_json(config), indent=2))
        return 0
    progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    # SIGTERM (a time limit) as SystemExit, so that the running probe is killed too (estimate.run_probe)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        est = estimate.estimate(study.name, config, study.cost_fields, args.probe_fraction, quick=args.quick,
                                progress=progress)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    from experiments.benchmark import matmul_peak_gflops

    print(estimate.text(study.name, "QUICK" if args.quick else "FULL", est, matmul_peak_gflops(),
                        perf_log.device_machine()))
    return 0


def _print_checks(name: str, result: dict[str, Any]) -> None:
    for c in result["checks"]:
        print(f"  {c['verdict']:<12}  {c['name']}: {results.check_text(c)}")
    tally = ", ".join(f"{n} {v.lower()}" for v, n in results.verdict_counts(result["checks"]).items() if n)
    print(f"{name}: {tally or 'no checks'} in {results.wall_text(result['provenance'])}", flush=True)


def _run_study(study: registry.Study, request: runner.Request, args: argparse.Namespace, out: pathlib.Path) -> _Row:
    study_dir = out / study.name
    print(f"== running {study.name} ({'quick' if request.quick else 'full'}) -> {study_dir}", flush=True)
    t0 = time.perf_counter()
    try:
        if args.sweep:
            field, values = configs.parse_sweep(args.sweep)
            found = runner.run_sweep(study, request, field, values, out)
            label = lambda r: f"{study.name} {runner.sweep_folder(field, r['sweep']['value'])}"  # noqa: E731
        else:
            config, overrides = runner.resolve(study, request)
            found = [runner.run_one(study, config, overrides, study_dir, request)]
            label = lambda r: study.name  # noqa: E731
    except Exception as err:  # noqa: BLE001 - a failing study must not stop `run all`
        tb = traceback.format_exc()
        bad_input = isinstance(err, _input_errors())
        if distributed.is_writer():
            study_dir.mkdir(parents=True, exist_ok=True)
            io.atomic_write_text(study_dir / "error.txt", tb)
        if bad_input and not args.debug:
            print(f"error: {study.name}: {err} (traceback in {study_dir / 'error.txt'}; --debug prints it)",
                  file=sys.stderr, flush=True)
        else:
            print(f"ERROR in study {study.name}:\n{tb}", file=sys.stderr, flush=True)
        return _Row(study.name, None, time.perf_counter() - t0, bad_input)
    for r in found:
        _print_checks(label(r), r)
    return _Row(study.name, _counts(found), time.perf_counter() - t0)


def _run_side_by_side(chosen: list[registry.Study], args: argparse.Namespace) -> list[_Row]:
    """``run all --jobs N`` (:mod:`experiments.jobs`): one process per study, the checks printed as each ends."""
    flags = [flag for flag, on in (("--quick", args.quick), ("--resume", args.resume),
                                   ("--allow-code-change", args.allow_code_change),
                                   ("--tensorboard", args.tensorboard), ("--debug", args.debug)) if on]

    def row(done: jobs.Finished) -> _Row:
        if done.result is None:
            bad_input = done.returncode == 2
            if bad_input and not args.debug:
                print(jobs.tail(done.log, 1), file=sys.stderr, flush=True)
            else:
                print(f"ERROR in study {done.study} (no result written); end of {done.log}:\n{jobs.tail(done.log)}",
                      file=sys.stderr, flush=True)
            return _Row(done.study, None, done.wall_s, bad_input)
        _print_checks(done.study, done.result)
        return _Row(done.study, _counts([done.result]), done.wall_s)

    rows: dict[str, _Row] = {}
    out = pathlib.Path(args.out)
    jobs.run_studies(chosen, jobs.run_command(flags, out), out, args.jobs, lambda done: rows.__setitem__(done.study, row(done)),
                     timeout_s=jobs.quick_limit_s if args.quick else lambda study: None)
    return [rows[s.name] for s in chosen]


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        distributed.check_arguments(args.coordinator, args.num_processes, args.process_id)
    except distributed.DistributedError as err:
        return _usage_error(str(err))
    if args.coordinator is not None:  # before anything touches a JAX backend
        try:
            distributed.initialize(args.coordinator, args.num_processes, args.process_id, args.init_timeout)
        except distributed.DistributedError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    try:
        studies = registry.load_all() if args.study == "all" else registry.load(args.study)
        if args.study == "all":
            if args.set or args.config or args.sweep or args.seeds is not None:
                raise configs.ConfigError("--set, --config, --sweep and --seeds apply to one study, not to 'all'")
            chosen = registry.run_order(list(studies.values()))
        else:
            chosen = [_pick(args.study, studies)]
        if args.allow_code_change and not args.resume:
            raise configs.ConfigError("--allow-code-change applies to --resume only; add --resume or drop it")
        if args.jobs > 1 and (args.study != "all" or args.coordinator is not None):
            raise configs.ConfigError("--jobs runs the studies of 'all' side by side; it takes neither one study "
                                      "nor --coordinator")
        request = _request(args)
        for study in chosen:  # every config is validated before any study runs
            _resolve(study, request, args.config)
            if args.sweep:
                runner.sweep_points(study, request, *configs.parse_sweep(args.sweep))
        out = _output_folder(args.out)
    except configs.ConfigError as err:
        return _usage_error(str(err))
    with contextlib.ExitStack() as stack:
        try:
            _lock_studies(out, chosen, stack)
        except (configs.ConfigError, io.FolderLocked) as err:
            return _usage_error(str(err))
        if args.jobs > 1:
            rows = _run_side_by_side(chosen, args)
        else:
            rows = [_run_study(study, request, args, out) for study in chosen]
    if len(rows) > 1:
        width = max(len(r.study) for r in rows)
        print(f"\n{'study':<{width}}  {'status':<12}  pass  fail  inc  n/p    wall_s")
        for r in rows:
            print(r.line(width))
        total = _Row("all", {v: sum((r.counts or {}).get(v, 0) for r in rows) for v in checks.VERDICTS}, None)
        print(total.line(width))
    if any(r.bad_input for r in rows):
        return 2
    bad = {"ERROR", "FAIL"} | ({"INCONCLUSIVE"} if args.strict else set())
    return 1 if any(r.status in bad for r in rows) else 0


def _cmd_report(args: argparse.Namespace) -> int:
    out = pathlib.Path(args.out)
    if not out.is_dir():
        return _usage_error(f"results folder {out} does not exist; run `python -m experiments run ...` first")
    path, count = report.write(out)
    print(f"wrote {path} ({count} studies)")
    return 0


def _cmd_docs(args: argparse.Namespace) -> int:
    paths = docs.write(pathlib.Path(args.out))
    print(f"wrote {len(paths)} pages to {args.out}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    studies = registry.load_all()
    try:
        study = _pick(args.study, studies)
    except configs.ConfigError as err:
        return _usage_error(str(err))
    if study.bench is None:
        with_bench = ", ".join(n for n, s in studies.items() if s.bench) or "none"
        return _usage_error(f"study {study.name!r} has no bench; studies with one: {with_bench}")
    try:
        study_dir = _output_folder(str(pathlib.Path(args.out) / study.name))
    except configs.ConfigError as err:
        return _usage_error(str(err))
    print(f"== benchmarking {study.name} -> {study_dir}", flush=True)
    t0 = time.perf_counter()
    try:
        timings = study.bench(study_dir)
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
    io.atomic_write_json(study_dir / "bench.json", payload)
    rows = perf_log.flat(timings)
    width = max((len(k) for k, _ in rows), default=0)
    for key, value in rows:
        shown = f"{value:.4g}" if isinstance(value, (float, np.floating)) else str(value)
        print(f"  {key:<{width}}  {shown}")
    print(f"wrote {study_dir / 'bench.json'}")
    if args.perf_log:
        prov = payload["provenance"]
        count = perf_log.append(perf_log.bench_rows(study.name, timings, prov["wall_s"]), perf_log.device_machine(),
                                perf_log.commit(prov), pathlib.Path(args.perf_log))
        print(f"appended {count} rows to {args.perf_log}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def _config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="CPU size that finishes in minutes")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a config field (dotted path; VALUE read as JSON, a bare word as a string)")
    parser.add_argument("--config", metavar="FILE.json", help="a partial config, applied before --set")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every registered study").set_defaults(handler=_cmd_list)
    show = sub.add_parser("show", help="print a study's effective config as JSON")
    show.add_argument("study")
    _config_flags(show)
    show.add_argument("--seeds", type=_positive_int, default=None, help="number of independent seeds")
    show.add_argument("--estimate", action="store_true",
                      help="instead: run two scaled-down probes and print the config's expected time and memory")
    show.add_argument("--probe-fraction", type=float, default=estimate.PROBE_FRACTION, metavar="F",
                      help=f"with --estimate: the probes' share of each cost field, F and 2F "
                           f"(default {estimate.PROBE_FRACTION})")
    show.set_defaults(handler=_cmd_show)
    run = sub.add_parser("run", help="run a study (or 'all') and write DIR/STUDY/result.json")
    run.add_argument("study", help="study name, or 'all' for every study")
    _config_flags(run)
    run.add_argument("--seeds", type=_positive_int, default=None, help="number of independent seeds (vmapped)")
    run.add_argument("--sweep", metavar="FIELD=V1,V2,...", help="run once per value into DIR/STUDY/sweep/FIELD=V/")
    run.add_argument("--out", default="results", help="results folder (default: results)")
    run.add_argument("--resume", action="store_true", help="continue from the study's checkpoints")
    run.add_argument("--allow-code-change", action="store_true",
                     help="with --resume: continue a checkpoint although the code it depends on changed")
    run.add_argument("--tensorboard", action="store_true", help="also write training curves as TensorBoard events")
    run.add_argument("--strict", action="store_true", help="exit 1 on an INCONCLUSIVE check too")
    run.add_argument("--debug", action="store_true",
                     help="print the traceback of an input error too (it is always in DIR/STUDY/error.txt)")
    run.add_argument("--jobs", type=_positive_int, default=1,
                     help="with 'all': run up to JOBS studies side by side, one process each (default 1)")
    run.add_argument("--coordinator", metavar="HOST:PORT", help="multi-process: address of process 0")
    run.add_argument("--num-processes", type=_positive_int, help="multi-process: number of processes")
    run.add_argument("--process-id", type=int, help="multi-process: this process's index, 0..N-1")
    run.add_argument("--init-timeout", type=_positive_int, default=_INIT_TIMEOUT_S,
                     help=f"multi-process: seconds to wait for every process (default {_INIT_TIMEOUT_S})")
    run.set_defaults(handler=_cmd_run)
    rep = sub.add_parser("report", help="write DIR/REPORT.md from DIR/*/result.json")
    rep.add_argument("--out", default="results", help="results folder (default: results)")
    rep.set_defaults(handler=_cmd_report)
    bench = sub.add_parser("bench", help="time a study's vectorised program against loops")
    bench.add_argument("study")
    bench.add_argument("--out", default="results", help="results folder (default: results)")
    bench.add_argument("--perf-log", default=str(perf_log.PATH), metavar="FILE",
                       help="append the timings to this table (default: docs/performance.md; '' for none)")
    bench.set_defaults(handler=_cmd_bench)
    pages = sub.add_parser("docs", help="write one reference page per study from the code (docs/studies/)")
    pages.add_argument("--out", default="docs/studies", help="pages folder (default: docs/studies)")
    pages.set_defaults(handler=_cmd_docs)
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

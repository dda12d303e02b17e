"""``REPORT.md`` from the result folders under DIR: the verdicts first, then the evidence.

Layout:

1. **the first screen**: one row per study: its paper, its check counts by verdict
   (pass / fail / inconclusive / no power) and its wall time;
2. **per paper**, each headline claim as one row (a check with a ``claim`` sentence;
   every check of a study that marks none), named by study and check so that no two
   rows read alike: the paper's number, ours with its 95% interval and unit count, the
   margin, the negative control's value and verdict, our verdict;
3. one table per sweep (``DIR/STUDY/sweep/FIELD=V/``): the check values against the
   swept value, and a figure of them (``DIR/STUDY/sweep/FIELD.png``);
4. per study: every check, its ``table.csv``, its figures, then the full metric list,
   config and provenance folded in ``<details>``.

A folder whose ``result.json`` is unreadable, or that holds only ``error.txt``, is
reported as such; the report never fails on one bad folder.
"""
from __future__ import annotations

import csv
import json
import math
import pathlib
import urllib.parse
from typing import Any

from experiments import checks, io, results

__all__ = ["write"]

_ERROR = "error.txt"


def cell(value: Any) -> str:
    """A Markdown table cell: numbers to 4 significant digits, ``None`` as non-finite."""
    if value is None:
        return "non-finite"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"{value:.4g}" if math.isfinite(value) else "non-finite"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _row(values: list[Any]) -> str:
    return "| " + " | ".join(values) + " |"


def _header(*names: str) -> list[str]:
    return [_row(list(names)), "|" + " --- |" * len(names)]


def headline_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks a study marks as headline claims (those with a claim), else all of them."""
    marked = [c for c in result["checks"] if c.get("claim")]
    return marked or result["checks"]


PAPERS = {
    "pmd": "PolicyAttention: softmax attention as policy mirror descent (arXiv 2609.30500)",
    "regret": "Training with (Swap) Regret Loss in a Single-Layer Self-Attention Model",
    "rate": "Recurrent Action Transformer with Memory (RATE, arXiv 2306.09459)",
    "uat": "Breaking Feedback-Blindness: Utility-Augmented Transformer (UAT, arXiv 2607.18910)",
}
_COUNT_HEADS = ("pass", "fail", "inconclusive", "no power")


def _verdict(check: dict[str, Any]) -> str:
    v = check["verdict"]
    return v if v == checks.PASS else f"**{v}**"


def _ours(check: dict[str, Any]) -> str:
    """``0.12 [0.05, 0.19] n=8 seed`` (interval) or ``840 (exact)``."""
    if check["kind"] == "exact":
        return f"{cell(check['value'])} (exact)"
    if check["lo"] is None or check["hi"] is None:
        return f"{cell(check['value'])} [no interval] n={check['n']} {check['unit']}"
    return f"{cell(check['value'])} [{cell(check['lo'])}, {cell(check['hi'])}] n={check['n']} {check['unit']}"


def _control(check: dict[str, Any]) -> str:
    ctrl = check.get("control")
    if not ctrl:
        return "—"
    if ctrl["value"] is None:
        return f"{cell(ctrl['arm'])}: {ctrl['verdict']}"
    return f"{cell(ctrl['arm'])}: {cell(ctrl['value'])}, {ctrl['verdict']}"


def _check_row(check: dict[str, Any], lead: list[str]) -> str:
    paper = cell(check.get("paper")) if check.get("paper") is not None else "—"
    verdict = _verdict(check)
    if check.get("n_needed"):
        verdict += f" (~{check['n_needed']} {check['unit']})"
    return _row(lead + [cell(check.get("claim") or check["name"]), paper, _ours(check), cell(check["target"]),
                        _control(check), verdict])


_CHECK_HEADS = ("claim", "paper", "ours [95% CI] n", "margin", "control", "verdict")


def _link(folder: pathlib.Path, out: pathlib.Path, name: str) -> str:
    return urllib.parse.quote(str((folder / name).relative_to(out)))


def _table_csv(path: pathlib.Path, max_rows: int = 40) -> list[str]:
    if not path.exists():
        return []
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        return [f"**{path.name} is unreadable:** {cell(repr(err))}", ""]
    if not rows:
        return []

    def value(text: str) -> str:
        try:
            return cell(float(text)) if text.strip() else ""
        except ValueError:
            return cell(text)

    lines = _header(*rows[0]) + [_row([value(c) for c in row]) for row in rows[1 : max_rows + 1]]
    if len(rows) - 1 > max_rows:
        lines.append(f"({len(rows) - 1 - max_rows} more rows in `{path.name}`)")
    return lines + [""]


def _details(result: dict[str, Any]) -> list[str]:
    metrics, paper = result["metrics"], result["paper"]
    lines = ["<details><summary>All metrics, config and provenance</summary>", ""]
    lines += _header("metric", "ours", "paper")
    for key in list(metrics) + [k for k in paper if k not in metrics]:
        lines.append(_row([cell(key), cell(metrics[key]) if key in metrics else "",
                           cell(paper[key]) if key in paper else ""]))
    overrides = ", ".join(f"`{o['field']}={json.dumps(o['value'])}`" for o in result.get("overrides", [])) or "none"
    p = result["provenance"]
    cpu = p.get("cpu") or {}
    cpu_text = [f"cpu {cpu['model']} ({' '.join(cpu['vector_features'] or ['?'])})"] if cpu else []
    prov = " · ".join([f"{k} {cell(p[k])}" for k in ("git", "jax", "backend", "devices", "processes") if k in p]
                      + cpu_text
                      + [f"`{name}={value}`" for name, value in p.get("environment", {}).items()])
    lines += ["", f"Overrides: {overrides}", "", "Config:", "", "```json",
              json.dumps(result["config"], indent=1), "```", "", f"Provenance: {prov}", "", "</details>", ""]
    return lines


def _counts_text(counts: dict[str, int]) -> str:
    return " · ".join(f"{counts[v]} {h}" for v, h in zip(checks.VERDICTS, _COUNT_HEADS) if counts[v]) or "no checks"


def _study_section(name: str, folder: pathlib.Path, out: pathlib.Path, result: dict[str, Any]) -> list[str]:
    mode = "quick" if result["quick"] else "full"
    wall = results.wall_text(result["provenance"])
    counts = results.verdict_counts(result["checks"])
    lines = [f"## {name}", "", f"{mode} size · {_counts_text(counts)} · {wall} wall", ""]
    lines += _header("check", *_CHECK_HEADS) + [_check_row(c, [f"`{c['name']}`"]) for c in result["checks"]] + [""]
    lines += _table_csv(folder / "table.csv")
    for png in sorted(folder.glob("*.png")):
        lines += [f"![{png.stem}]({_link(folder, out, png.name)})", ""]
    if (folder / "bench.json").exists():
        lines += [f"Benchmark: [bench.json]({_link(folder, out, 'bench.json')})", ""]
    return lines + _details(result)


def _sweep_figure(study: str, field: str, rows: list[tuple[Any, dict]], path: pathlib.Path) -> bool:
    """Each headline check's value against the swept value (numeric values only)."""
    xs = [v for v, _ in rows]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
        return False
    import matplotlib.pyplot as plt

    names = [c["name"] for c in headline_checks(rows[0][1])][:6]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 2.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        ys = [next((c["value"] for c in r["checks"] if c["name"] == name), None) for _, r in rows]
        ax.plot(xs, [math.nan if y is None else y for y in ys], "o-")
        paper = next((c.get("paper") for c in rows[0][1]["checks"] if c["name"] == name), None)
        if paper is not None:
            ax.axhline(paper, color="k", ls=":", lw=1, label="paper")
            ax.legend(fontsize=7)
        ax.set_title(name if len(name) < 40 else name[:37] + "...", fontsize=8)
        ax.set_xlabel(field)
    fig.suptitle(f"{study}: sweep over {field}", fontsize=9)
    fig.tight_layout()
    io.save_figure(fig, path)
    return True


def _sweep_sections(out: pathlib.Path) -> list[str]:
    lines: list[str] = []
    for root in sorted(out.glob("*/sweep")):
        study = root.parent.name
        by_field: dict[str, list[tuple[Any, dict]]] = {}
        for folder in sorted(root.iterdir()):
            if not (folder / results.RESULT).exists():
                continue
            try:
                result = results.load(folder / results.RESULT)
            except results.InvalidResult:
                lines += [f"**{folder.relative_to(out)}/result.json is unreadable.**", ""]
                continue
            if "sweep" in result:
                by_field.setdefault(result["sweep"]["field"], []).append((result["sweep"]["value"], result))
        for field, rows in by_field.items():
            rows.sort(key=lambda r: json.dumps(r[0]) if not isinstance(r[0], (int, float)) else r[0])
            names = [c["name"] for c in headline_checks(rows[0][1])]
            lines += [f"### Sweep: {study} over `{field}`", ""]
            lines += _header(field, *names, "verdicts")
            for value, result in rows:
                by_name = {c["name"]: c for c in result["checks"]}
                shown = [f"{cell(by_name[n]['value'])} {by_name[n]['verdict']}" if n in by_name else "" for n in names]
                lines.append(_row([cell(json.dumps(value) if not isinstance(value, (int, float)) else value), *shown,
                                   _counts_text(results.verdict_counts(result["checks"]))]))
            lines.append("")
            figure = root / f"{field}.png"
            if _sweep_figure(study, field, rows, figure):
                lines += [f"![sweep {field}]({_link(root, out, figure.name)})", ""]
    return lines


def write(out: pathlib.Path) -> tuple[pathlib.Path, int]:
    """Write ``out/REPORT.md``; returns its path and the number of study folders."""
    folders = sorted(d for d in out.iterdir() if d.is_dir() and ((d / results.RESULT).exists() or (d / _ERROR).exists()))
    first = _header("study", "paper", *_COUNT_HEADS, "wall")
    claims: dict[str, list[str]] = {}
    body, totals = [], dict.fromkeys(checks.VERDICTS, 0)
    for folder in folders:
        name = folder.name
        paper = name.split(".")[0]
        note = [f"The last run of {name} raised; its traceback is in `{name}/{_ERROR}`.", ""] \
            if (folder / _ERROR).exists() else []
        if not (folder / results.RESULT).exists():
            first.append(_row([f"[{name}](#{_anchor(name)})", paper, "raised, no result", "", "", "", ""]))
            body += [f"## {name}", ""] + note
            continue
        try:
            result = results.load(folder / results.RESULT)
        except results.InvalidResult as err:
            first.append(_row([f"[{name}](#{_anchor(name)})", paper, "unreadable result.json", "", "", "", ""]))
            body += [f"## {name}", "", f"**result.json is unreadable:** {cell(str(err))}", ""] + note
            continue
        counts = results.verdict_counts(result["checks"])
        totals = {v: totals[v] + counts[v] for v in checks.VERDICTS}
        wall = result["provenance"].get("wall_s")
        first.append(_row([f"[{name}](#{_anchor(name)})", paper, *(str(counts[v]) for v in checks.VERDICTS),
                           f"{wall:.0f} s" if isinstance(wall, (int, float)) else "?"]))
        claims.setdefault(paper, []).extend(_check_row(c, [f"`{name}` `{c['name']}`"]) for c in headline_checks(result))
        body += _study_section(name, folder, out, result) + note
    intro = ["# Results", "", f"From `{out}/*/{results.RESULT}`: {len(folders)} studies; checks "
             f"{_counts_text(totals)}. A verdict is PASS or FAIL when the whole 95% interval over the named "
             "units is on one side of the margin, INCONCLUSIVE otherwise; NO POWER when the negative control "
             "passes too.", ""]
    by_paper = ["", "## Headline claims, by paper", ""]
    for paper, rows in claims.items():
        by_paper += [f"### {PAPERS.get(paper, paper)}", ""] + _header("study · check", *_CHECK_HEADS) + rows + [""]
    text = "\n".join(intro + first + by_paper + _sweep_sections(out) + body)
    path = io.atomic_write_text(out / "REPORT.md", text.rstrip("\n") + "\n")
    return path, len(folders)


def _anchor(name: str) -> str:
    """The GitHub-style anchor of the ``## name`` heading."""
    return name.replace(".", "").lower()

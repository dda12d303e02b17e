"""Study checks, written once: each constructor tests a bound and writes its target from it.

A check is a claim of a paper measured on our run, so it must be able to come out
False. The constructors take the measured ``value``, the bound(s), and optionally the
paper's own number for the same quantity (taken from the study's ``PAPER`` table,
never retyped), which the report prints beside ours. The ``target`` text is built
from the same bound the comparison uses, so the two cannot disagree.

A non-finite value never passes (every comparison with NaN is False).
"""
from __future__ import annotations

import dataclasses
import math

__all__ = [
    "Check",
    "above",
    "at_least",
    "at_most",
    "below",
    "between",
    "close_to",
    "equals",
]


@dataclasses.dataclass(frozen=True)
class Check:
    """One claim: ``value`` measured, ``target`` the bound as text, ``passed`` the verdict.

    ``paper`` is the paper's number for the same quantity (``None`` when the paper
    gives none); ``claim`` is a sentence saying what is claimed, for the report.
    """

    name: str
    value: float
    target: str
    passed: bool
    paper: float | None = None
    claim: str = ""


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _make(name: str, value: float, target: str, passed: bool, paper: float | None, claim: str) -> Check:
    value = float(value)
    return Check(name, value, target, bool(passed) and math.isfinite(value), None if paper is None else float(paper), claim)


def at_most(name: str, value: float, bound: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``value <= bound``."""
    return _make(name, value, f"<= {_fmt(bound)}", value <= bound, paper, claim)


def below(name: str, value: float, bound: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``value < bound``."""
    return _make(name, value, f"< {_fmt(bound)}", value < bound, paper, claim)


def at_least(name: str, value: float, bound: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``value >= bound``."""
    return _make(name, value, f">= {_fmt(bound)}", value >= bound, paper, claim)


def above(name: str, value: float, bound: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``value > bound``."""
    return _make(name, value, f"> {_fmt(bound)}", value > bound, paper, claim)


def between(name: str, value: float, lo: float, hi: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``lo <= value <= hi``."""
    if lo > hi:
        raise ValueError(f"check {name!r}: between needs lo <= hi, got {lo} > {hi}")
    return _make(name, value, f"in [{_fmt(lo)}, {_fmt(hi)}]", lo <= value <= hi, paper, claim)


def close_to(name: str, value: float, target: float, tol: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``|value - target| <= tol``."""
    if tol < 0:
        raise ValueError(f"check {name!r}: close_to needs tol >= 0, got {tol}")
    return _make(name, value, f"{_fmt(target)} +- {_fmt(tol)}", abs(value - target) <= tol, paper, claim)


def equals(name: str, value: float, target: float, *, paper: float | None = None, claim: str = "") -> Check:
    """``value == target`` exactly (counts, integer-valued metrics)."""
    return _make(name, value, f"== {_fmt(target)}", value == target, paper, claim)

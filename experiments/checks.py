"""Study checks: a paper's claim, declared once, judged on our run with its uncertainty.

A study declares its claims at module level (:class:`Claim`, listed in the study's
registration as ``claims``) and judges them in ``summarize``; the generated study pages
(``python -m experiments docs``) read the same declarations, so a page cannot disagree
with the run. Two kinds:

* **interval** (a stochastic claim): ``claim.judge(values, control=...)`` takes the
  statistic's value per independent unit (per seed; per MDP, user or episode block where
  that is the unit). Paired arms (two models trained on the same seed) are passed as
  their per-unit difference (:func:`paired`). The check reports mean, standard error,
  n and a 95% interval, and its verdict:

  - ``PASS``: the whole interval is on the claim's side of the margin;
  - ``FAIL``: the whole interval is on the other side;
  - ``INCONCLUSIVE``: otherwise (the margin is inside the noise);
  - ``NO POWER``: the check passes, but so does its **negative control**: the same claim
    judged on an arm under which it must not hold (UAT fed null rewards, a uniform
    player, FTRL at a mistuned step ...). It counts as failed evidence.

  The interval is Student's t at n - 1 degrees of freedom. Our units are few (2 to 64
  seeds); a percentile bootstrap cannot be wider than the sample's range and undercovers
  badly below about 20 units, while the t interval is exact for normal units and close
  for the bounded, averaged statistics the studies report. One unit gives no interval
  (INCONCLUSIVE). Nor does a PASS rest on fewer than :data:`MIN_AGREEING_UNITS` units that
  agree exactly: with a discrete statistic (a success rate over 32 episodes) two seeds can
  coincide by chance, and their t interval, of width 0, would call the claim shown on no
  measure of the noise at all (``rate.minigrid_memory`` once passed at 0.406 [0.406, 0.406]
  on 2 seeds that had given +0.41 and +0.38 on another CPU); such a check is INCONCLUSIVE.
  Why 3: a success rate over 32 episodes at p = 0.4 puts at most 0.14 of its mass on one
  value, so two seeds agree exactly with probability about 0.10 and three about 0.012 (a
  paired difference of two such rates, less); two agreeing seeds are common, three rare.
  The rule is one-sided, as a PASS is the claim the evidence must carry: an arm that is
  exactly constant by construction (a uniform player, a model fed no rewards against
  itself) still FAILs a claim it cannot meet. An INCONCLUSIVE check records ``n_needed``, the unit count at which the
  observed spread would give an interval clear of the margin (the normal approximation
  n = (1.96 sd / |mean - margin|)^2, rounded up): an estimate, not a promise.

* **exact**: deterministic quantities (closed forms, grid computations, counts): the
  value against a bound, PASS or FAIL, no interval.

A non-finite value never passes. The ``target`` text is built from the same margin the
comparison uses, so the two cannot disagree.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import re
from typing import Any

import numpy as np

__all__ = ["Check", "Claim", "Control", "PASS", "FAIL", "INCONCLUSIVE", "NO_POWER", "VERDICTS", "paired"]

PASS, FAIL, INCONCLUSIVE, NO_POWER = "PASS", "FAIL", "INCONCLUSIVE", "NO POWER"
VERDICTS = (PASS, FAIL, INCONCLUSIVE, NO_POWER)
LEVEL = 0.95
MIN_AGREEING_UNITS = 3  # a PASS on fewer units needs some spread among them (module docstring)
_OPS = {">", ">=", "<", "<=", "within", "=="}
_INTERVAL_OPS = {">", "<", "within"}
_KEY = re.compile(r"<[a-z_]+>")
_COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq}


@dataclasses.dataclass(frozen=True)
class Control:
    """The negative control of a check: the arm, its mean and interval, and the verdict the
    claim gets on it (``None`` values when the control is not run here but in a test)."""

    arm: str
    verdict: str
    value: float | None = None
    lo: float | None = None
    hi: float | None = None
    n: int = 0


@dataclasses.dataclass(frozen=True)
class Check:
    """One judged claim (the result file's ``checks`` entry; see the module docstring).

    ``value`` is the mean over units (interval) or the value (exact); ``lo``, ``hi``,
    ``se``, ``n`` describe the interval (``None``/``1`` for exact checks).
    """

    name: str
    claim: str
    kind: str
    value: float
    target: str
    verdict: str
    paper: float | None = None
    n: int = 1
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    se: float | None = None
    method: str = "exact"
    control: Control | None = None
    n_needed: int | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


@dataclasses.dataclass(frozen=True)
class Claim:
    """A paper's claim as a check, declared before any run.

    ``name`` may hold one ``<key>`` placeholder (``uat_above_vt_at_sigma_<sigma>``), filled
    by ``judge(..., key=...)``. ``op`` is ``>``/``<`` (the value is above / below ``margin``)
    or ``within`` (``|value - margin| <= tol``); exact claims also take ``>=``, ``<=`` and
    ``==``. Interval claims name their ``control`` arm and ``unit``. ``fails_if`` says how
    the claim could come out false; ``paper`` is the paper's number for the same quantity.
    """

    name: str
    statement: str
    op: str
    margin: float
    tol: float = 0.0
    exact: bool = False
    unit: str = "seed"
    control: str = ""
    fails_if: str = ""
    paper: float | None = None

    def __post_init__(self):
        if self.op not in (_OPS if self.exact else _INTERVAL_OPS):
            raise ValueError(f"claim {self.name!r}: op {self.op!r} is not one of {sorted(_OPS if self.exact else _INTERVAL_OPS)}")
        if not self.statement or not self.fails_if:
            raise ValueError(f"claim {self.name!r} needs a statement and a fails_if")
        if not self.exact and not self.control:
            raise ValueError(f"claim {self.name!r}: an interval claim names its negative control arm")
        if self.op == "within" and not self.tol >= 0:
            raise ValueError(f"claim {self.name!r}: within needs tol >= 0, got {self.tol}")
        if len(_KEY.findall(self.name)) > 1:
            raise ValueError(f"claim {self.name!r}: at most one <key> placeholder")

    @property
    def target(self) -> str:
        if self.op == "within":
            return f"{_fmt(self.margin)} +- {_fmt(self.tol)}"
        return f"{self.op} {_fmt(self.margin)}"

    def matches(self, name: str) -> bool:
        """Whether a check called ``name`` judges this claim (placeholder filled)."""
        parts = _KEY.split(self.name)
        pattern = ".+".join(re.escape(p) for p in parts)
        return re.fullmatch(pattern, name) is not None

    def _name(self, key: Any) -> str:
        if _KEY.search(self.name) is None:
            if key is not None:
                raise ValueError(f"claim {self.name!r} has no <key> placeholder, got key={key!r}")
            return self.name
        if key is None:
            raise ValueError(f"claim {self.name!r} needs key=")
        return _KEY.sub(str(key), self.name)

    def judge(self, values: Any, control: Any = None, *, key: Any = None) -> Check:
        """The check of this claim on ``values`` (per-unit array; a scalar for exact claims).

        ``control``: the control arm's per-unit values, or ``None`` when the control runs
        only in the study's tests (the report then shows the arm without a value).
        """
        name = self._name(key)
        if self.exact:
            if control is not None:
                raise ValueError(f"claim {name!r} is exact: it takes no control values")
            value = float(np.asarray(values, dtype=float))
            verdict = PASS if self._holds(value) else FAIL
            return Check(name, self.statement, "exact", value, self.target, verdict, self.paper)
        est = estimate(values, name)
        verdict = self._verdict(est)
        ctrl = Control(self.control, "not run here")
        if control is not None:
            c = estimate(control, f"{name} control")
            ctrl = Control(self.control, self._verdict(c), c.mean, c.lo, c.hi, c.n)
            if verdict == PASS and ctrl.verdict == PASS:
                verdict = NO_POWER
        needed = self._needed(est) if verdict == INCONCLUSIVE else None
        return Check(name, self.statement, "interval", est.mean, self.target, verdict, self.paper, est.n, self.unit,
                     est.lo, est.hi, est.se, f"t{LEVEL:.0%}", ctrl, needed)

    def _holds(self, v: float) -> bool:
        if self.op == "within":
            return abs(v - self.margin) <= self.tol
        return _COMPARE[self.op](v, self.margin) and math.isfinite(v)

    def _verdict(self, est: Estimate) -> str:
        if not math.isfinite(est.mean):
            return FAIL
        lo, hi, m = est.lo, est.hi, self.margin
        if self.op == ">":
            verdict = PASS if lo > m else FAIL if hi <= m else INCONCLUSIVE
        elif self.op == "<":
            verdict = PASS if hi < m else FAIL if lo >= m else INCONCLUSIVE
        else:
            a, b = m - self.tol, m + self.tol
            verdict = PASS if a <= lo and hi <= b else FAIL if hi < a or lo > b else INCONCLUSIVE
        if verdict == PASS and est.sd == 0 and est.n < MIN_AGREEING_UNITS:
            return INCONCLUSIVE  # no measure of the noise (module docstring)
        return verdict

    def _needed(self, est: Estimate) -> int | None:
        edges = [self.margin] if self.op != "within" else [self.margin - self.tol, self.margin + self.tol]
        gap = min(abs(est.mean - e) for e in edges)
        if not (est.sd > 0 and gap > 0 and math.isfinite(est.sd)):
            return None
        from scipy import stats  # imported here: scipy.stats costs seconds, and every CLI process imports checks

        return max(est.n + 1, math.ceil((stats.norm.ppf(0.5 + LEVEL / 2) * est.sd / gap) ** 2))


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Mean, sample sd, standard error and the t interval of per-unit values."""

    mean: float
    sd: float
    se: float
    n: int
    lo: float
    hi: float


def estimate(values: Any, where: str = "values") -> Estimate:
    """The :class:`Estimate` of a 1-D array of per-unit values (ValueError on another shape)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{where}: per-unit values must be a non-empty 1-D array, got shape {x.shape}")
    n, mean = x.size, float(x.mean())
    if n == 1 or not np.all(np.isfinite(x)):
        return Estimate(mean, math.nan, math.nan, n, -math.inf, math.inf)
    from scipy import stats  # see Claim._needed

    sd = float(x.std(ddof=1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * se
    return Estimate(mean, sd, se, n, mean - half, mean + half)


def paired(a: Any, b: Any) -> np.ndarray:
    """``a - b`` unit by unit, for two arms that share their units (seeds); shapes must agree."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired arms need the same 1-D shape, got {a.shape} and {b.shape}")
    return a - b


def _fmt(x: float) -> str:
    return f"{x:.6g}"


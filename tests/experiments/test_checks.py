"""The verdict mechanism of experiments.checks: intervals against a hand computation, each verdict's edge,
the negative control's NO POWER, exact claims, and the declarations' validation."""
import math

import numpy as np
import pytest

from experiments import checks
from experiments.checks import FAIL, INCONCLUSIVE, NO_POWER, PASS, Claim

# t quantiles at 0.975 from printed tables (independent of scipy): df = 1, 2, 4, 9
T975 = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262}


def _above(margin=0.1, **kw):
    return Claim("gap", "a gap", ">", margin, control="null arm", fails_if="no gap", **kw)


@pytest.mark.parametrize("values", [[0.3, 0.5], [0.2, 0.4, 0.9], [1.0, 2.0, 2.5, 3.0, 7.0], list(np.linspace(-1, 2, 10))])
def test_interval_is_students_t_by_hand(values):
    x = np.array(values)
    n = len(x)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T975[n - 1] * sd / math.sqrt(n)
    c = _above(-100).judge(x)
    assert c.kind == "interval" and c.n == n and c.unit == "seed" and c.method == "t95%"
    assert c.value == pytest.approx(mean) and c.se == pytest.approx(sd / math.sqrt(n))
    assert c.lo == pytest.approx(mean - half, abs=2e-3 * sd) and c.hi == pytest.approx(mean + half, abs=2e-3 * sd)


@pytest.mark.parametrize("op, values, verdict", [
    (">", [0.30, 0.32, 0.31], PASS),
    (">", [0.02, 0.03, 0.01], FAIL),
    (">", [0.0, 0.2, 0.1], INCONCLUSIVE),
    ("<", [0.02, 0.03, 0.01], PASS),
    ("<", [0.30, 0.32, 0.31], FAIL),
    ("<", [0.0, 0.2, 0.1], INCONCLUSIVE),
])
def test_one_sided_verdicts(op, values, verdict):
    claim = Claim("c", "a claim", op, 0.1, control="ctrl", fails_if="f")
    assert claim.judge(values).verdict == verdict


def test_the_margin_inside_the_interval_is_inconclusive_on_either_side():
    # interval [mean - h, mean + h] with mean just above the margin: neither side decides
    values = [0.099, 0.102, 0.101]
    c = _above(0.1).judge(values)
    assert c.lo < 0.1 < c.hi and c.verdict == INCONCLUSIVE
    assert c.n_needed is not None and c.n_needed > 3


def test_within_verdicts():
    claim = Claim("same", "unchanged", "within", 0.0, tol=0.05, control="other arm", fails_if="f")
    assert claim.judge([0.01, -0.01, 0.0]).verdict == PASS
    assert claim.judge([0.3, 0.32, 0.31]).verdict == FAIL
    assert claim.judge([-0.31, -0.3, -0.32]).verdict == FAIL
    assert claim.judge([0.0, 0.1, 0.05]).verdict == INCONCLUSIVE
    assert claim.target == "0 +- 0.05"


def test_control_that_also_passes_is_no_power():
    c = _above().judge([0.3, 0.32, 0.31], control=[0.29, 0.3, 0.31])
    assert c.verdict == NO_POWER and not c.passed and c.control.verdict == PASS
    c = _above().judge([0.3, 0.32, 0.31], control=[0.0, 0.01, 0.02])
    assert c.verdict == PASS and c.passed and c.control.verdict == FAIL
    assert c.control.value == pytest.approx(0.01) and c.control.n == 3 and c.control.arm == "null arm"
    c = _above().judge([0.3, 0.32, 0.31], control=[0.0, 0.2, 0.1])  # an undecided control leaves the PASS
    assert c.verdict == PASS and c.control.verdict == INCONCLUSIVE
    c = _above().judge([0.02, 0.03, 0.01], control=[0.29, 0.3, 0.31])  # a FAIL stays a FAIL
    assert c.verdict == FAIL
    assert _above().judge([0.3, 0.32, 0.31]).control == checks.Control("null arm", "not run here")


def test_one_unit_and_non_finite_values():
    c = _above().judge([0.5])
    assert c.verdict == INCONCLUSIVE and c.lo == -math.inf and c.hi == math.inf and c.n_needed is None
    assert _above().judge([0.5, math.nan, 0.4]).verdict == FAIL
    assert Claim("e", "exact", ">", 0.0, exact=True, fails_if="f").judge(math.nan).verdict == FAIL


def test_a_few_units_that_agree_exactly_give_no_interval():
    # two seeds with the same success rate (13/32 each): a t interval of width 0 is no measure of the noise
    for values in ([0.40625, 0.40625], [0.5] * (checks.MIN_AGREEING_UNITS - 1)):
        c = _above().judge(values, control=[0.0] * len(values))
        assert c.verdict == INCONCLUSIVE and c.lo == c.hi == values[0] and c.n_needed is None, values
        assert c.control.verdict == FAIL  # one-sided: a constant arm below the margin still fails the claim
        assert _above().judge(values, control=values).verdict == INCONCLUSIVE  # not NO POWER: neither passes
    c = _above().judge([0.5] * checks.MIN_AGREEING_UNITS)  # enough agreeing units: the agreement is the evidence
    assert c.verdict == PASS and c.lo == c.hi == 0.5
    c = _above().judge([0.40625, 0.40626])  # any spread, however small: Student's t (half-width 12.7 x 5e-6)
    assert c.verdict == PASS and c.hi - c.lo == pytest.approx(2 * 12.706 * 5e-6, rel=1e-3)


def test_n_needed_from_the_normal_approximation():
    values = np.array([0.0, 0.2, 0.1, 0.3])
    c = _above(0.1).judge(values)
    assert c.verdict == INCONCLUSIVE
    sd, gap = values.std(ddof=1), values.mean() - 0.1
    assert c.n_needed == math.ceil((1.959964 * sd / gap) ** 2)


@pytest.mark.parametrize("op, margin, value, verdict", [
    (">", 1, 1, FAIL), (">=", 1, 1, PASS), ("<", 1, 1, FAIL), ("<=", 1, 1, PASS), ("==", 840, 840, PASS),
    ("==", 840, 839, FAIL), ("<=", 1.0, 1.0 + 1e-12, FAIL),
])
def test_exact_claims(op, margin, value, verdict):
    c = Claim("e", "exact", op, margin, exact=True, fails_if="f").judge(value)
    assert c.kind == "exact" and c.verdict == verdict and c.lo is None and c.control is None and c.n == 1


def test_exact_within_and_targets():
    claim = Claim("e", "close", "within", 8.74, tol=0.005, exact=True, fails_if="f", paper=8.74)
    assert claim.judge(8.744).verdict == PASS and claim.judge(8.746).verdict == FAIL
    assert claim.target == "8.74 +- 0.005" and claim.judge(8.744).paper == 8.74
    assert Claim("e", "s", "<=", 1e-9, exact=True, fails_if="f").target == "<= 1e-09"
    with pytest.raises(ValueError, match="exact: it takes no control"):
        claim.judge(8.74, control=[1.0])


def test_declarations_are_validated():
    with pytest.raises(ValueError, match="names its negative control"):
        Claim("c", "s", ">", 0.0, fails_if="f")
    with pytest.raises(ValueError, match="needs a statement and a fails_if"):
        Claim("c", "s", ">", 0.0, control="x")
    with pytest.raises(ValueError, match="op '>=' is not one of"):
        Claim("c", "s", ">=", 0.0, control="x", fails_if="f")  # an interval claim has no edge case
    with pytest.raises(ValueError, match="at most one <key>"):
        Claim("a_<x>_<y>", "s", ">", 0.0, control="x", fails_if="f")
    with pytest.raises(ValueError, match="per-unit values must be a non-empty 1-D array"):
        _above().judge([[0.1, 0.2]])


def test_placeholder_names():
    claim = Claim("above_vt_at_sigma_<sigma>", "s", ">", 0.1, control="x", fails_if="f")
    assert claim.judge([0.2, 0.3], key="2").name == "above_vt_at_sigma_2"
    assert claim.matches("above_vt_at_sigma_0p5") and not claim.matches("above_vt_at_sigma_") and not claim.matches("gap")
    with pytest.raises(ValueError, match="needs key="):
        claim.judge([0.2, 0.3])
    with pytest.raises(ValueError, match="has no <key> placeholder"):
        _above().judge([0.2, 0.3], key="x")


def test_paired_is_unit_by_unit():
    assert checks.paired([1.0, 2.0], [0.5, 0.0]).tolist() == [0.5, 2.0]
    with pytest.raises(ValueError, match="same 1-D shape"):
        checks.paired([1.0, 2.0], [1.0])

"""docs/analysis/markets_regime_power.py (docs/uat.md section 20): its linear discriminant by hand, and the
two findings the section draws from it at the quick regime drift and at six times it."""
import math

import numpy as np
import pytest
from doc_scripts import load


@pytest.fixture(scope="module")
def power():
    return load("markets_regime_power")


def test_lda_boundary_by_hand(power):
    """1-D, class 0 at -1, 0, 1 (twice), class 1 at 1, 2, 3: means 0 and 2, shared variance
    v = 6/9 (+ the 1e-3 ridge), priors 2/3 and 1/3. The classes tie where 2x/v - 2/v = ln 2,
    x* = 1 + v ln(2) / 2 = 1.2314; a dropped prior would put it at 1, a flipped one at 0.77."""
    x = np.array([-1.0, 0.0, 1.0, -1.0, 0.0, 1.0, 1.0, 2.0, 3.0])[:, None]
    y = np.array([0] * 6 + [1] * 3)
    boundary = 1 + (6 / 9 + 1e-3) * math.log(2) / 2
    predict = power.lda(x, y, 2)
    z = np.array([-5.0, boundary - 0.005, boundary + 0.005, 5.0])[:, None]
    assert predict(z).tolist() == [0, 0, 1, 1]
    # a third class never seen in training is never predicted
    assert set(power.lda(x, y, 3)(np.linspace(-5, 5, 101)[:, None]).tolist()) == {0, 1}


def test_the_regime_has_power_only_when_its_drift_is_scaled_up(power):
    """Section 20's findings: at the quick drift knowing the target day's regime lowers the expert KL
    by at most 0.01 on every market; at 6 times it, by more than 0.01 on every market and by more
    than 0.2 on HSI. Fails if the regimes' drift does not shape the expert allocation, or if the
    target day's regime is misaligned with its allocation (then even the oracle gains nothing)."""
    quick = {row["market"]: row for row in power.market_rows(1.0)}
    strong = {row["market"]: row for row in power.market_rows(6.0)}
    assert set(quick) == set(strong) == {"CSI300", "DJIA", "HSI"}
    for row in quick.values():
        assert row["constant"] - row["oracle"] <= 0.01, row
    for row in strong.values():
        assert row["constant"] - row["oracle"] > 0.01, row
        assert 0.0 <= row["indicators_acc"] <= 1.0 and 0.0 < row["base_acc"] <= 1.0
    assert strong["HSI"]["constant"] - strong["HSI"]["oracle"] > 0.2

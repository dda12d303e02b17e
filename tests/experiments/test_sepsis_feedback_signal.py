"""docs/analysis/sepsis_feedback_signal.py (docs/uat.md section 21): its separation d' by hand, and the
section's finding that one fed reward says little about the hidden regime."""
import math

import numpy as np
import pytest
from doc_scripts import load

from uat_jax import sepsis


@pytest.fixture(scope="module")
def signal():
    return load("sepsis_feedback_signal")


def test_separation_by_hand(signal):
    """Regime 0 rewards 0, 2 (mean 1, variance 1) and regime 1 rewards 3, 3 (mean 3, variance 0): d' =
    2 / sqrt((1 + 0) / 2) = 2 sqrt(2) (a pooled variance without the halving gives 2). With regime 2's
    1, 2, 0 (mean 1, variance 2/3) the widest pair is 1-2, 2 / sqrt(1/3) = 3.46 (0-1: 2.83, 0-2: 0)."""
    rewards = np.array([0.0, 2.0, 3.0, 3.0, 1.0, 2.0, 0.0])
    regimes = np.array([0, 0, 1, 1, 2, 2, 2])
    assert signal.separation(rewards, regimes) == pytest.approx(2 / math.sqrt(1 / 3))
    assert signal.separation(rewards[:4], regimes[:4]) == pytest.approx(2 * math.sqrt(2))


def test_a_fed_reward_separates_the_regimes_weakly_and_resistance_weakens_it(signal):
    """Section 21: under one cluster played throughout, no cluster's reward separates two regimes by d' 0.25
    or more (so about 64 or more steps to tell them apart at 2 standard deviations, against segments of
    8 or more steps), and with resistance off the expert's clusters separate them better than with it.
    Fails if the regimes' efficacy shaped the reward strongly, or if resistance did not act on it."""
    with_resistance = signal.cluster_rows(sepsis.make_params(horizon=signal.HORIZON), episodes=400)
    fresh = signal.cluster_rows(sepsis.make_params(horizon=signal.HORIZON, resistance_decay=1.0), episodes=400)
    assert max(row["d_whole"] for row in with_resistance) < 0.25
    for c in sepsis.EXPERT_CLUSTER[:2]:  # fluid-led and high: the clusters with the largest efficacy spread
        assert fresh[c]["d_whole"] > with_resistance[c]["d_whole"] + 0.1


def test_the_observations_hold_most_of_the_dense_reward(signal):
    """Section 21: a linear fit on two consecutive observations explains most of the dense reward out of
    sample (0.79 at 2,000 episodes), so the fed reward repeats what Vanilla-TF sees; with the observations
    drowned in noise (std 50) it explains almost nothing. Fails if the reward were not a function of the
    observed patient state, or if the fit missed the step's next observation (0.09 from o_t alone)."""
    clean, clean_quadratic = signal.reward_r2(sepsis.make_params(horizon=signal.HORIZON), episodes=300)
    noisy, _ = signal.reward_r2(sepsis.make_params(horizon=signal.HORIZON, obs_noise=50.0), episodes=300)
    assert clean > 0.6 and clean_quadratic >= clean - 0.02
    assert noisy < 0.1


def test_the_probe_names_its_knobs_on_a_bad_first_argument():
    """docs/analysis/sepsis_probe.py: another knob (the simulator's are study options now) or a missing value
    stops before any run, naming the one it takes."""
    probe = load("sepsis_probe")
    for argv in (["obs_noise=50", "run", "uat.sepsis"], ["ue_lr=", "run"], []):
        with pytest.raises(SystemExit, match="ue_lr=VALUE"):
            probe.main(argv)

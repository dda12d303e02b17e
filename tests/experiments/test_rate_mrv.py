"""The random-instance part of study rate.mrv at a tiny size (the trained part runs in the study)."""
import dataclasses

import numpy as np

from experiments.studies import rate_mrv


def test_random_instances_respect_the_bound_and_cover_the_grid():
    config = dataclasses.replace(rate_mrv.QUICK, ms=(1, 3), alphas=(0.0, 0.6, 1.0), d=4, instances=64)
    out = rate_mrv.random_instances(config)
    ratio, bound = out["ratio"], out["bound"]
    assert ratio.shape == bound.shape == (2, 3, 64)
    np.testing.assert_allclose(bound[1, :, 0], np.sqrt(2 * (1 - np.array([0.0, 0.6, 1.0]) / 3)), rtol=1e-6)
    assert (ratio <= bound + 1e-5).all()
    assert ratio[1, 0].max() > 0.3  # alpha = 0 instances are not trivially close
    assert ratio[0, 2].max() < 1e-3  # m = 1, alpha = 1: the update returns m_1 (bound 0)

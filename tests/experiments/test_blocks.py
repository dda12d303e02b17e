"""Monte-Carlo blocks (experiments.blocks) against hand computations."""
import numpy as np
import pytest

from experiments.blocks import block_means, block_roots, interpolate_at


def test_block_means_drop_the_remainder():
    x = np.arange(11.0)
    assert block_means(x, 3).tolist() == [1.0, 4.0, 7.0]  # blocks 0-2, 3-5, 6-8; 9 and 10 left out


def test_interpolate_at_matches_np_interp_per_draw():
    rng = np.random.default_rng(0)
    grid = np.array([0.0, 0.5, 1.5, 3.0])
    x = rng.normal(size=(5, 4))
    for at in (0.2, 0.5, 1.0, 2.9):
        assert np.allclose(interpolate_at(x, grid, at), [np.interp(at, grid, row) for row in x])


def test_block_roots_of_linear_derivatives():
    # draw n's derivative is f_n(eta) = a (eta - r_n): the block root is the block mean of r_n when the slope is shared
    grid = np.linspace(0.0, 4.0, 9)
    r = np.array([1.0, 1.2, 1.4, 1.6, 2.0, 2.2])
    samples = 3.0 * (grid[None, :] - r[:, None])
    roots = block_roots(samples, grid, float(r.mean()), 3)
    assert roots == pytest.approx([1.1, 1.5, 2.1])

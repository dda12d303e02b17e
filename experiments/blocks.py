"""Monte-Carlo blocks as the independent units of a check (``experiments.checks``).

A study whose statistic is an average over independent draws (sequences, samples) with no
seeds to repeat splits the draws into disjoint blocks; the per-block values are then
independent units, and a check's t interval over them is the Monte-Carlo error of the
whole estimate (scaled by sqrt(blocks)). A root of an averaged derivative is linearised
per block at the root of all draws (:func:`block_roots`), so each block gives a root
without a root find on its noisier mean.
"""
from __future__ import annotations

import numpy as np

__all__ = ["block_means", "block_roots", "interpolate_at"]


def interpolate_at(x: np.ndarray, grid: np.ndarray, at: float) -> np.ndarray:
    """Each draw's sample ``x`` [N, E] on ``grid`` [E] linearly interpolated at ``at`` between its two grid
    neighbours -> [N] (extrapolated from the end pair outside the grid)."""
    i = int(np.clip(np.searchsorted(grid, at) - 1, 0, len(grid) - 2))
    w = (at - grid[i]) / (grid[i + 1] - grid[i])
    return (1 - w) * x[:, i] + w * x[:, i + 1]


def block_means(x: np.ndarray, num_blocks: int) -> np.ndarray:
    """Means of ``x`` [N] over ``num_blocks`` disjoint contiguous blocks (the remainder N mod num_blocks is left out)."""
    n = x.shape[0] // num_blocks
    return x[: n * num_blocks].reshape(num_blocks, n).mean(axis=1)


def block_roots(samples: np.ndarray, grid: np.ndarray, root: float, num_blocks: int) -> np.ndarray:
    """The root of a derivative per disjoint block of its per-draw samples [N, E] on ``grid`` [E], linearised at
    the root of all draws: root - f_b(root) / f'(root) [num_blocks].

    f_b is the block mean of the samples read at ``root`` by :func:`interpolate_at`; f'(root) is the slope of the
    mean of all samples between the grid points around ``root``.
    """
    samples, grid = np.asarray(samples, np.float64), np.asarray(grid, np.float64)
    i = int(np.clip(np.searchsorted(grid, root) - 1, 0, len(grid) - 2))
    mean = samples.mean(axis=0)
    slope = (mean[i + 1] - mean[i]) / (grid[i + 1] - grid[i])
    return root - block_means(interpolate_at(samples, grid, root), num_blocks) / slope

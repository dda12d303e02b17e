"""Benchmarks of the regret studies: the vectorised Theorem-1 estimator against a plain numpy loop."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from experiments import benchmark
from experiments.registry import bench
from experiments.studies.regret import stationarity as _stationarity  # noqa: F401 - registers the study timed here


def _numpy_ray(losses: np.ndarray, etas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same estimator as :func:`regret_jax.ray_regret`, as a plain numpy loop over sequences, etas and rounds."""
    N, T, d = losses.shape
    R, dR = np.zeros((N, len(etas))), np.zeros((N, len(etas)))
    for n in range(N):
        for e, eta in enumerate(etas):
            cum = np.zeros(d)
            for t in range(T):
                pi = np.exp(-eta * (cum - cum.min()))
                pi /= pi.sum()
                R[n, e] += pi @ losses[n, t]
                dR[n, e] -= pi @ (cum * losses[n, t]) - (pi @ cum) * (pi @ losses[n, t])
                cum += losses[n, t]
            R[n, e] -= cum.min()
    return R, dR


@bench("regret.stationarity")
def stationarity(out_dir) -> dict:
    """(sequence, eta) evaluations of R and R' per second: ``jax.vmap(ray_regret)`` against :func:`_numpy_ray`."""
    d, T, N, E = 10, 100, 4096, 32
    etas = np.geomspace(0.25, 8, E) / np.sqrt(T)
    losses = np.random.default_rng(0).normal(size=(N, T, d)).astype(np.float32)
    fn = jax.vmap(rj.ray_regret, in_axes=(0, None))
    vec = benchmark.time_call(fn, jnp.asarray(losses), jnp.asarray(etas, jnp.float32))
    n_loop = 8
    t0 = time.perf_counter()
    _numpy_ray(losses[:n_loop].astype(np.float64), etas)
    loop_s = time.perf_counter() - t0
    vec_rate = N * E / vec["min_s"]
    loop_rate = n_loop * E / loop_s
    return {"d": d, "T": T, "sequences": N, "etas": E, "jax": vec, "numpy_loop_s_for_8_sequences": loop_s,
            "jax_evals_per_s": vec_rate, "numpy_evals_per_s": loop_rate, "speedup": vec_rate / loop_rate}

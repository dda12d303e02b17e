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


from experiments.studies.regret import limit as _limit  # noqa: E402,F401 - registers the study timed below
from regret_jax.limit import argmin_probs  # noqa: E402


def _numpy_argmin_probs(y: np.ndarray, num_nodes: int = 40) -> np.ndarray:
    """q(y) in the w-form of docs/regret.md §5.7, q_a = int phi(w) prod_{b != a} Phibar(y_a - y_b + w) dw:
    Gauss-Hermite in w, a plain loop over a and nodes, O(d^2) per node."""
    from scipy.special import ndtr

    x, w = np.polynomial.hermite.hermgauss(num_nodes)
    q = np.zeros(len(y))
    for a in range(len(y)):
        for node, weight in zip(np.sqrt(2) * x, w / np.sqrt(np.pi)):
            q[a] += weight * np.prod([1 - ndtr(y[a] - y[b] + node) for b in range(len(y)) if b != a])
    return q


@bench("regret.limit")
def limit(out_dir) -> dict:
    """Argmin probabilities q(y) per second at d = 100: the O(d) shared-survival ``argmin_probs`` (vmapped) against the
    O(d^2) w-form as a numpy loop (the form it replaces)."""
    d, n = 100, 1024
    ys = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    vec = benchmark.time_call(jax.vmap(argmin_probs), jnp.asarray(ys))
    n_loop = 2
    loop = benchmark.time_python(lambda: [_numpy_argmin_probs(y.astype(np.float64)) for y in ys[:n_loop]], repeats=1)
    vec_rate, loop_rate = n / vec["min_s"], n_loop / loop["min_s"]
    return {"d": d, "evaluations": n, "jax": vec, "numpy_loop_s_for_2": loop["min_s"],
            "jax_q_per_s": vec_rate, "numpy_q_per_s": loop_rate, "speedup": vec_rate / loop_rate}

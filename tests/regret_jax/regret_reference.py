"""Brute-force numpy references for the regret_jax tests (plain loops, float64, no JAX)."""
from __future__ import annotations

import itertools

import numpy as np


def softmax(u):
    e = np.exp(u - np.max(u))
    return e / e.sum()


def quadratic_attention(V, K, Q, v_c, k_c, q_c, c, losses):
    """Eq. (1) evaluated literally: for each round t, a fresh sum over i < t of value * score."""
    T, d = losses.shape
    out = np.zeros((T, V.shape[0]))
    for t in range(T):
        acc = np.zeros(V.shape[0])
        for i in range(t):
            acc += (V @ losses[i] + v_c) * np.dot(K @ losses[i] + k_c, Q @ c + q_c)
        out[t] = softmax(acc)
    return out


def hedge(losses, eta):
    """Entropic FTRL by an explicit loop over rounds."""
    T, d = losses.shape
    cum = np.zeros(d)
    out = np.zeros((T, d))
    for t in range(T):
        out[t] = softmax(-eta * cum)
        cum = cum + losses[t]
    return out


def external_regret(policies, losses):
    best = min(sum(losses[t, a] for t in range(len(losses))) for a in range(losses.shape[1]))
    return sum(float(policies[t] @ losses[t]) for t in range(len(losses))) - best


def swap_regret(policies, losses):
    """Max over all d^d swap maps phi of sum_t <l_t, pi_t - phi(pi_t)> (Eq. (5), first form)."""
    T, d = losses.shape
    best = -np.inf
    for phi in itertools.product(range(d), repeat=d):
        val = 0.0
        for t in range(T):
            moved = np.zeros(d)
            for a in range(d):
                moved[phi[a]] += policies[t, a]
            val += losses[t] @ (policies[t] - moved)
        best = max(best, val)
    return best


def stationary(Q):
    """Stationary distribution of a column-stochastic Q by an eigen-decomposition."""
    w, vecs = np.linalg.eig(Q)
    x = np.real(vecs[:, np.argmin(np.abs(w - 1))])
    return x / x.sum()


def blum_mansour(losses, eta, calibration=1.0):
    """Blum-Mansour with d Hedge copies; copy j sees c * x_t[j] * l_t (docs/regret.md §10.1)."""
    T, d = losses.shape
    cums = np.zeros((d, d))
    xs, qs = np.zeros((T, d)), np.zeros((T, d, d))
    for t in range(T):
        q = np.stack([softmax(-eta * cums[j]) for j in range(d)])
        x = stationary(q.T)
        xs[t], qs[t] = x, q
        for j in range(d):
            cums[j] += calibration * x[j] * losses[t]
    return xs, qs


def game_gaps(sigma, U1, U2):
    """(CCE, pairwise CE, full swap) gaps by loops over players, actions and all swap maps."""
    m, n = sigma.shape
    cce, ce, sw = -np.inf, -np.inf, -np.inf
    for player in range(2):
        k = m if player == 0 else n

        def util(own, other, player=player):
            return U1[own, other] if player == 0 else U2[other, own]

        def prob(own, other, player=player):
            return sigma[own, other] if player == 0 else sigma[other, own]

        k_other = n if player == 0 else m
        value = sum(prob(a, b) * util(a, b) for a in range(k) for b in range(k_other))
        for dev in range(k):
            cce = max(cce, sum(prob(a, b) * util(dev, b) for a in range(k) for b in range(k_other)) - value)
        for a in range(k):
            for dev in range(k):
                ce = max(ce, sum(prob(a, b) * (util(dev, b) - util(a, b)) for b in range(k_other)))
        for phi in itertools.product(range(k), repeat=k):
            sw = max(sw, sum(prob(a, b) * (util(phi[a], b) - util(a, b)) for a in range(k) for b in range(k_other)))
    return cce, ce, sw

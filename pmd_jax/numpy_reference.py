"""Plain numpy references: PMD, policy evaluation, one-step TD, the decoder's forward map, the simplex projection
and the fitted step.

Written with explicit loops and no JAX, as the independent side of the cross-check tests
(PolicyAttention, arXiv 2609.30500, section 16: "repository cross-check") and as the per-cell numpy baseline of
``bench pmd.reversal``. Nothing here is on a hot path.
"""
from __future__ import annotations

import numpy as np


def pmd_step(pi: np.ndarray, Q: np.ndarray, eta: float) -> np.ndarray:
    """``pi'(a|s) = pi(a|s) e^{eta Q(s,a)} / sum_b pi(b|s) e^{eta Q(s,b)}``, state by state."""
    out = np.empty_like(pi)
    for s in range(pi.shape[0]):
        w = pi[s] * np.exp(eta * (Q[s] - Q[s].max()))
        out[s] = w / w.sum()
    return out


def policy_evaluation(P: np.ndarray, R: np.ndarray, gamma: float, pi: np.ndarray) -> np.ndarray:
    """``Q^pi`` from the state-value linear system ``V = r_pi + gamma P_pi V``."""
    S, A = R.shape
    P_pi = np.einsum("sa,sat->st", pi, P)
    r_pi = (pi * R).sum(axis=1)
    V = np.linalg.solve(np.eye(S) - gamma * P_pi, r_pi)
    return R + gamma * P @ V


def td_targets_mean(Q: np.ndarray, s, a, r, s_next, a_next, gamma: float) -> np.ndarray:
    """Per-pair mean of the one-step TD targets ``r + gamma Q(s', a')`` (NaN for unvisited pairs)."""
    S, A = Q.shape
    total, count = np.zeros((S, A)), np.zeros((S, A))
    for i in range(len(s)):
        total[s[i], a[i]] += r[i] + gamma * Q[s_next[i], a_next[i]]
        count[s[i], a[i]] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count


def decoder_forward(params: dict, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The residual, normalization-free forward map, head by head, with numpy arrays."""
    x = np.array(tokens, dtype=np.float64)
    p = params["params"]
    b = 0
    while f"attn_{b}" in p:
        att, ffn = p[f"attn_{b}"], p[f"ffn_{b}"]
        update = np.zeros_like(x)
        for h in range(att["wq"].shape[0]):
            q, k, v = x @ att["wq"][h], x @ att["wk"][h], x @ att["wv"][h]
            for t in range(x.shape[0]):
                scores = np.array([q[t] @ k[j] if mask[t, j] else -np.inf for j in range(x.shape[0])])
                w = np.exp(scores - scores.max())
                w /= w.sum()
                update[t] += (w @ v) @ att["wo"][h]
        x = x + update
        hidden = np.maximum(x @ ffn["w_gate"], 0.0) * (x @ ffn["w_up"])
        x = x + hidden @ ffn["w_down"]
        b += 1
    return x


def project_simplex_np(v: np.ndarray, iters: int = 200) -> np.ndarray:
    """Euclidean projection of each last-axis vector onto the simplex, ``max(v - tau, 0)`` with the threshold
    ``tau`` found by bisection on ``sum_a max(v_a - tau, 0) = 1`` (decreasing in ``tau``; not the sort-based rule)."""
    v = np.asarray(v, dtype=np.float64)
    rows = v.reshape(-1, v.shape[-1])
    out = np.empty_like(rows)
    for i, row in enumerate(rows):
        lo, hi = row.min() - 1.0, row.max()  # mass >= 1 at lo, 0 at hi
        for _ in range(iters):
            tau = 0.5 * (lo + hi)
            if np.maximum(row - tau, 0.0).sum() > 1.0:
                lo = tau
            else:
                hi = tau
        out[i] = np.maximum(row - 0.5 * (lo + hi), 0.0)
    return out.reshape(v.shape)


def fitted_step_np(pi_out: np.ndarray, pi: np.ndarray, Q: np.ndarray, grid: np.ndarray) -> float:
    """The ``eta`` of ``grid`` minimising ``sum_rows KL(pi_out || pmd_step(pi, Q, eta))`` over every row of every
    leading axis, by brute force."""
    A = pi.shape[-1]
    p_out, p, q = (np.asarray(x, dtype=np.float64).reshape(-1, A) for x in (pi_out, pi, Q))
    best, best_kl = None, np.inf
    for eta in grid:
        kl = 0.0
        for s in range(p.shape[0]):
            w = p[s] * np.exp(eta * (q[s] - q[s].max()))
            model = w / w.sum()
            for a in range(A):
                if p_out[s, a] > 0:
                    kl += p_out[s, a] * (np.log(p_out[s, a]) - np.log(model[a]))
        if kl < best_kl:
            best, best_kl = float(eta), kl
    return best

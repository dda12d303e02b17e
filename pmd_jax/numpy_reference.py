"""Plain numpy references: PMD, policy evaluation, one-step TD, and the decoder's forward map.

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

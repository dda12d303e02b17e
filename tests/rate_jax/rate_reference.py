"""Independent numpy re-implementations used by the rate_jax tests.

Written from the papers' / authors' definitions with explicit loops, sharing no code
with rate_jax: the segment mask from token roles, a Transformer-XL forward pass, the
MRV, and the T-Maze of the authors (a boolean map, as their ``TMazeBase``).
"""
from __future__ import annotations

import numpy as np


def role_mask(num_mem: int, num_tokens: int, cache_len: int, read_mem_from_cache: bool = False) -> np.ndarray:
    """Mask [Q, C+Q] from the roles: prefix memory reads only the prefix; a segment token
    reads the whole cache, the prefix and the segment up to itself; a suffix memory
    token reads the prefix, the whole segment and the whole suffix (not the cache)."""
    q = 2 * num_mem + num_tokens
    out = np.zeros((q, cache_len + q), dtype=bool)
    for i in range(q):
        role = "prefix" if i < num_mem else ("suffix" if i >= num_mem + num_tokens else "token")
        for key in range(cache_len + q):
            if key < cache_len:
                out[i, key] = role == "token" or read_mem_from_cache
                continue
            j = key - cache_len
            if role == "prefix":
                out[i, key] = j < num_mem
            elif role == "token":
                out[i, key] = j <= i
            else:
                out[i, key] = True
    return out


def layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def sinusoid(dist: float, dim: int) -> np.ndarray:
    inv = np.array([1.0 / 10000.0 ** (k / dim) for k in range(0, dim, 2)])
    return np.concatenate([np.sin(dist * inv), np.cos(dist * inv)])


def softmax(z):
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


def attention_layer(p, x, cache, mask, u, v, n_head, d_head):
    """One relative-attention sub-layer for one example; x [Q, d], cache [C, d], mask [Q, C+Q]."""
    c_len, q_len, d = cache.shape[0], x.shape[0], x.shape[1]
    full = np.concatenate([cache, x], 0)
    qkv = full @ p["qkv"]["kernel"]
    hd = n_head * d_head
    qs, ks, vs = qkv[:, :hd], qkv[:, hd:2 * hd], qkv[:, 2 * hd:]
    out = np.zeros((q_len, hd))
    for h in range(n_head):
        sl = slice(h * d_head, (h + 1) * d_head)
        for i in range(q_len):
            qi = qs[c_len + i, sl]
            scores = np.full(c_len + q_len, -np.inf)
            for j in range(c_len + q_len):
                if not mask[i, j]:
                    continue
                rel = sinusoid(i + c_len - j, d) @ p["r_net"]["kernel"]
                scores[j] = ((qi + u[h]) @ ks[j, sl] + (qi + v[h]) @ rel[sl]) / np.sqrt(d_head)
            w = softmax(scores)
            out[i, sl] = w @ vs[:, sl]
    return out @ p["o_net"]["kernel"]


def mrv(p, old, new, n_heads, act):
    """MRV for one example: W_M(MultiHead(Q=old W_Q, K=act(new) W_K, V=act(new) W_V))."""
    new = act(new)
    m, d = old.shape
    depth = d // n_heads
    q = old @ p["w_q"]["kernel"] + p["w_q"]["bias"]
    k = new @ p["w_k"]["kernel"] + p["w_k"]["bias"]
    v = new @ p["w_v"]["kernel"] + p["w_v"]["bias"]
    out = np.zeros((m, d))
    for h in range(n_heads):
        sl = slice(h * depth, (h + 1) * depth)
        for i in range(m):
            out[i, sl] = softmax(k[:, sl] @ q[i, sl] / np.sqrt(depth)) @ v[:, sl]
    return out @ p["w_m"]["kernel"] + p["w_m"]["bias"]


def segment_forward(params, cfg, obs, actions, rtg, known, memory, cache, cache_valid, mask=None):
    """One segment for one example. Returns (logits [K, A], write [m, d], layer inputs [L, Q, d]).

    ``mask`` defaults to :func:`role_mask`; invalid cache entries are masked.
    """
    p = {k: np.asarray(v) if not isinstance(v, dict) else v for k, v in params.items()}
    m, k_steps = cfg.num_mem_tokens, cfg.segment_len
    tokens = []
    for t in range(k_steps):
        tokens.append(np.array([rtg[t]]) @ p["embed_rtg"]["kernel"] + p["embed_rtg"]["bias"])
        tokens.append(obs[t] @ p["embed_obs"]["kernel"] + p["embed_obs"]["bias"])
        idx = int(actions[t]) if known[t] else cfg.num_actions
        tokens.append(np.tanh(p["embed_act"]["embedding"][idx]))
    x = np.concatenate([memory, np.stack(tokens), memory], 0)
    c_len = cache.shape[1]
    if mask is None:
        mask = role_mask(m, 3 * k_steps, c_len, cfg.read_mem_from_cache)
    mask = mask & np.concatenate([cache_valid, np.ones(x.shape[0], bool)])[None, :]
    inputs = []
    for layer in range(cfg.n_layer):
        lp = p[f"layers_{layer}"]
        inputs.append(x)
        a = attention_layer(lp["attn"], x, cache[layer], mask, p["r_w_bias"], p["r_r_bias"], cfg.n_head, cfg.d_head)
        x = layer_norm(x + a, lp["ln_attn"]["scale"], lp["ln_attn"]["bias"])
        if cfg.d_inner:
            f = np.maximum(x @ lp["ff_in"]["kernel"] + lp["ff_in"]["bias"], 0.0)
            f = f @ lp["ff_out"]["kernel"] + lp["ff_out"]["bias"]
            x = layer_norm(x + f, lp["ln_ff"]["scale"], lp["ln_ff"]["bias"])
    logits = np.stack([x[m + 3 * t + 1] @ p["head"]["kernel"] for t in range(k_steps)])
    return logits, x[x.shape[0] - m:], np.stack(inputs)


class NumpyTMaze:
    """The authors' T-Maze (TMazeClassicPassive + their observation wrapper), on a boolean map."""

    MOVES = [(1, 0), (0, 1), (-1, 0), (0, -1)]

    def __init__(self, corridor_length: int, episode_length: int, goal_y: int):
        self.length, self.horizon, self.goal_y = corridor_length, episode_length, goal_y
        self.grid = np.zeros((5, corridor_length + 3), dtype=bool)  # rows y+2, columns x+1
        self.grid[2, 1:corridor_length + 2] = True
        self.grid[1, corridor_length + 1] = True
        self.grid[3, corridor_length + 1] = True
        self.x, self.y, self.t, self.visited = 0, 0, 0, False

    def obs(self):
        cue = 0
        if self.x == 0 and not self.visited:
            cue, self.visited = self.goal_y, True
        return np.array([self.y, cue, int(self.x == self.length)], dtype=np.float32)

    def step(self, action: int):
        self.t += 1
        dx, dy = self.MOVES[action]
        if self.grid[self.y + dy + 2, self.x + dx + 1]:
            self.x, self.y = self.x + dx, self.y + dy
        done = self.t >= self.horizon or (self.x == self.length and self.y in (1, -1))
        reward = float(done and self.y == self.goal_y)
        return self.obs(), reward, done

"""The attention mask of one RATE segment, concat(M_n, S_n, M_n) after a cache.

Paper: "Recurrent Action Transformer with Memory" (arXiv 2306.09459), method: memory
embeddings, one copy of M_n before and one after the segment. The read prefix M_n is
seen by every token of the segment, the write suffix M_n sees the whole segment (so its
outputs become M_{n+1}), and the decoder is causal. The authors' ``RATE_model._forward``
fixes the remaining details, which this module follows: the m prefix memory tokens see
each other (all of them), the m suffix memory tokens see each other, memory tokens do
not read the XL cache unless ``read_mem_from_cache``, and every ordinary token sees the
whole cache.
"""
from __future__ import annotations

import numpy as np


def segment_mask(num_tokens: int, num_mem: int, cache_len: int, read_mem_from_cache: bool = False) -> np.ndarray:
    """Boolean mask ``[Q, cache_len + Q]`` (True = query may attend key), Q = 2m + num_tokens.

    Keys are ordered [cache (cache_len) ; M_n prefix (m) ; segment tokens ; M_n suffix (m)],
    queries are the Q non-cache positions. Static (numpy), built once per configuration.
    """
    if min(num_tokens, num_mem, cache_len) < 0:
        raise ValueError("num_tokens, num_mem and cache_len must be >= 0")
    q = num_tokens + 2 * num_mem
    seq = np.tril(np.ones((q, q), dtype=bool))  # causal: key j <= query i
    cache = np.ones((q, cache_len), dtype=bool)
    if num_mem > 0:
        seq[:num_mem, :num_mem] = True  # prefix memory tokens see each other
        seq[-num_mem:, -num_mem:] = True  # suffix memory tokens see each other
        cache[:num_mem] = read_mem_from_cache
        cache[-num_mem:] = read_mem_from_cache
    return np.concatenate([cache, seq], axis=1)


def key_extent(mask: np.ndarray, lo: int, hi: int) -> int:
    """The number of leading keys that the query rows lo .. hi - 1 of a mask ``[Q, K]`` may attend
    to: every later key is masked in all of them (0 when they attend to none)."""
    return int(np.flatnonzero(mask[lo:hi].any(axis=0)).max(initial=-1)) + 1


def query_blocks(mask: np.ndarray, num_blocks: int) -> tuple[tuple[int, int, int], ...]:
    """Static query blocks of a mask ``[Q, K]``: ``num_blocks`` near-equal row ranges [lo, hi), each
    with its :func:`key_extent`, ``((lo, hi, num_keys), ...)``. Attention restricted to these
    blocks equals attention over every key, since a masked key has softmax weight exactly 0
    (``attention.py``)."""
    q = mask.shape[0]
    if mask.ndim != 2 or not 1 <= num_blocks <= q:
        raise ValueError(f"need a [Q, K] mask and 1 <= num_blocks <= Q, got shape {mask.shape} and {num_blocks}")
    bounds = np.linspace(0, q, num_blocks + 1).round().astype(int)
    return tuple((int(lo), int(hi), key_extent(mask, lo, hi)) for lo, hi in zip(bounds[:-1], bounds[1:]))

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

"""Model configuration of RATE and of its baselines as settings of the same code.

Paper: "Recurrent Action Transformer with Memory" (arXiv 2306.09459), method overview
(memory embeddings, hidden-state caching, Memory Retention Valve): a trajectory of
(R, o, a) tokens is cut into segments of ``K`` steps; each segment is processed as
concat(M_n, S_n, M_n) with ``m`` memory tokens, a Transformer-XL cache of ``mem_len``
hidden states per layer, and the Memory Retention Valve (MRV) with ``n_head_ca`` heads.
The baselines of the paper (DT, RMT, TrXL, RATE without MRV, RATE without cache) are the
same model with some of these switched off; :func:`variant` builds them, so no baseline
is a copy of the model code.
"""
from __future__ import annotations

import dataclasses

MRV_ACTIVATIONS = ("relu", "leaky_relu", "elu", "tanh", "none")
VARIANTS = ("RATE", "DT", "RMT", "TrXL", "RATE-noMRV", "RATE-nocache")


def _require(cond: bool, field: str, allowed: str, value) -> None:
    if not cond:
        raise ValueError(f"ModelConfig.{field} must be {allowed}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes of one RATE-family model (all static).

    Fields (shapes in the comments use B = batch):
      segment_len: K, environment steps per segment (3K tokens).
      num_mem_tokens: m, memory tokens M_n [B, m, d]; 0 switches memory off (DT, TrXL).
      mem_len: Transformer-XL cache length per layer [B, mem_len, d]; 0 switches it off.
      n_head_ca: MRV heads; 0 switches the MRV off (M_{n+1} = raw write outputs).
      mrv_act: activation applied to the write outputs before the MRV (authors' ``mrv_act``).
      d_inner: width of the per-layer feed-forward block; 0 skips it (the authors'
        ``skip_dec_ffn=True`` in their T-Maze RATE run).
      read_mem_from_cache: whether memory tokens may attend to the XL cache (authors'
        default False).
    """

    obs_dim: int = 4
    num_actions: int = 4
    segment_len: int = 10
    n_layer: int = 2
    d_model: int = 32
    n_head: int = 2
    d_head: int = 16
    d_inner: int = 0
    num_mem_tokens: int = 4
    mem_len: int = 0
    n_head_ca: int = 1
    mrv_act: str = "relu"
    dropout: float = 0.0
    dropatt: float = 0.0
    read_mem_from_cache: bool = False

    def __post_init__(self):
        for name in ("obs_dim", "num_actions", "segment_len", "n_layer", "d_model", "n_head", "d_head"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 1, name, "an integer >= 1", value)
        for name in ("d_inner", "num_mem_tokens", "mem_len", "n_head_ca"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 0, name, "an integer >= 0", value)
        _require(self.mrv_act in MRV_ACTIVATIONS, "mrv_act", f"one of {MRV_ACTIVATIONS}", self.mrv_act)
        if self.n_head_ca > 0:
            _require(self.num_mem_tokens > 0, "n_head_ca", "0 when num_mem_tokens == 0 (no memory to filter)",
                     self.n_head_ca)
            _require(self.d_model % self.n_head_ca == 0, "n_head_ca", f"a divisor of d_model={self.d_model}",
                     self.n_head_ca)
        for name in ("dropout", "dropatt"):
            value = getattr(self, name)
            _require(0.0 <= value < 1.0, name, "in [0, 1)", value)

    @property
    def tokens_per_segment(self) -> int:
        """3K + 2m: the length of concat(M_n, S_n, M_n)."""
        return 3 * self.segment_len + 2 * self.num_mem_tokens


DT_CONTEXTS = ("trajectory", "segment")


def variant(name: str, base: ModelConfig, num_segments: int, dt_context: str = "trajectory"
            ) -> tuple[ModelConfig, int]:
    """The paper's baselines as configurations of one model (the paper's baselines and ablations).

    Returns ``(config, training_segments)``. ``base`` is the RATE configuration and
    ``num_segments`` the N of RATE's training trajectories (length K*N).

    * ``RATE``: memory tokens + MRV + cache as in ``base``.
    * ``DT``: no memory, no MRV, no cache. ``dt_context="trajectory"``: one segment of length
      K*N (the authors' T-Maze ``model_mode=DT`` sets context_length = K*sections and
      sections = 1); ``"segment"``: context K, trained on the N segments of K steps as
      separate windows (nothing crosses a segment boundary), as the authors' POPGym scripts
      (repository CognitiveAISystems/RATE, ``run_experiments/POPGym/DT``: context_length = ceil(T / 3) = RATE's K, sections = 1).
    * ``RMT``: memory tokens, no MRV, no cache.
    * ``TrXL``: cache only (``mem_len`` = that of ``base`` or, if 0, K*N*3 tokens as in
      the authors' 450 = 3*150), no memory tokens, no MRV.
    * ``RATE-noMRV`` / ``RATE-nocache``: RATE with one component removed.
    """
    if name not in VARIANTS:
        raise ValueError(f"variant name must be one of {VARIANTS}, got {name!r}")
    if not (isinstance(num_segments, int) and num_segments >= 1):
        raise ValueError(f"num_segments must be an integer >= 1, got {num_segments!r}")
    if dt_context not in DT_CONTEXTS:
        raise ValueError(f"dt_context must be one of {DT_CONTEXTS}, got {dt_context!r}")
    rep = dataclasses.replace
    if name == "RATE":
        return base, num_segments
    if name == "DT" and dt_context == "segment":
        return rep(base, num_mem_tokens=0, mem_len=0, n_head_ca=0), num_segments
    if name == "DT":
        return rep(base, segment_len=base.segment_len * num_segments, num_mem_tokens=0, mem_len=0,
                   n_head_ca=0), 1
    if name == "RMT":
        return rep(base, mem_len=0, n_head_ca=0), num_segments
    if name == "TrXL":
        mem_len = base.mem_len or 3 * base.segment_len * num_segments
        return rep(base, num_mem_tokens=0, n_head_ca=0, mem_len=mem_len), num_segments
    if name == "RATE-noMRV":
        return rep(base, n_head_ca=0), num_segments
    return rep(base, mem_len=0), num_segments  # RATE-nocache

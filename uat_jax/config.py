"""Model configuration: UAT, its baselines and its ablations as one frozen dataclass.

Paper: "Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential
Decision Making" (UAT, arXiv 2607.18910), section 4, Table 3 (Domain A defaults), Table 4 (ablations), section 6.1 (baselines).
Baselines that share code with UAT are configurations of the same module: ``kind``
selects how tokens are built and which residual is used; the six ablations of
Table 4 are switches on ``kind="uat"``.

The switched family (``SWITCHED``: UAT, its six ablations, Vanilla-TF, which is UAT
with both modulated pathways off, and A-DT, which is Vanilla-TF with the fed pair
concatenated to its observation) can also be one model whose switches are traced:
``traced_variant=True`` builds the union of the family's parameters, and the
``variant`` index given to ``model.DecisionTransformer`` picks the member at run time
(its row of :func:`switch_table`), so a study trains every member in one program.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("uat", "vt", "adt", "dt", "gtrxl")
"""UAT; Vanilla-TF (observations only); A-DT (shifted (a, r) concatenated to o);
DT-style (interleaved return-to-go / observation / action tokens); GTrXL (Transformer-XL
memory, GRU-gated residual, identity-map reordering; ``uat_jax.gtrxl``)."""

ABLATIONS = ("no_action", "no_reward", "linear", "no_q", "no_kv", "no_bias")
"""Table 4 variants, in the order of Table 5."""

SWITCHED = ("uat",) + ABLATIONS + ("vt", "adt")
"""The models a ``traced_variant`` UAT can run as (index = the ``variant`` leaf)."""

SWITCHES = ("use_action", "use_reward", "linear", "modulate_q", "modulate_kv", "utility_bias", "input_feedback")
"""Columns of :func:`switch_table`: 1 where the member has the component, 0 where not
(``input_feedback``: the fed pair is part of the token's input, A-DT's channel)."""


def _check_positive(name: str, value: int | float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Sizes and switches of the decision Transformer family (Table 3, Domain A).

    Sizes are static. ``horizon`` is the episode length T (the context holds one whole
    episode; histories reset at episode boundaries, Appendix C.1).

    UAT switches (Table 4): ``use_action``/``use_reward`` zero f_a(a) or r before the
    utility encoder (no-action / no-reward); ``encoder="linear"`` replaces the MLP by
    u = W [f_a(a); r] (linear); ``modulate_q=False`` removes W_Q^(u), U_Q and rho_t
    (no-Q); ``modulate_kv=False`` removes W_K^(u), W_V^(u), U_K, U_V and g_j (no-KV);
    ``utility_bias=False`` removes U_Q, U_K, U_V (no-bias). The switches only matter for
    ``kind="uat"``.

    ``traced_variant`` (UAT with every switch on only): the union of the parameters of
    the ``SWITCHED`` family, with the switches read from a traced variant index (see
    the module docstring and ``model.DecisionTransformer``).

    ``gtrxl_mem_len`` (GTrXL only) is the segment length S of the Transformer-XL
    recurrence, equal to its memory length: a step of segment n = floor(t / S) attends
    to the steps of segments n - 1 and n, so each layer's span is S to 2S - 1 steps and
    L layers reach back L segments. S = 20 splits an episode of T = 60 into three
    segments (the memory matters), while the top layer of L = 3 still reaches step 0.
    ``gtrxl_gate_bias`` is b_g of the gate.
    """

    kind: str = "uat"
    obs_dim: int = 10
    n_actions: int = 5
    horizon: int = 60
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    n_layers: int = 3
    dropout: float = 0.05
    d_u: int = 16
    d_act: int = 8
    ue_hidden: int = 32
    ema_decay: float = 0.7
    w_u_init_std: float = 0.1
    encoder: str = "mlp"
    use_action: bool = True
    use_reward: bool = True
    modulate_q: bool = True
    modulate_kv: bool = True
    utility_bias: bool = True
    dt_target_return: float = 10.0
    gtrxl_gate_bias: float = 2.0
    gtrxl_mem_len: int = 20
    traced_variant: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.encoder not in ("mlp", "linear"):
            raise ValueError(f"encoder must be 'mlp' or 'linear', got {self.encoder!r}")
        for name in ("obs_dim", "horizon", "d_model", "n_heads", "d_ff", "n_layers",
                     "d_u", "d_act", "ue_hidden", "gtrxl_mem_len"):
            _check_positive(name, getattr(self, name))
        if self.n_actions < 2:
            raise ValueError(f"n_actions must be >= 2, got {self.n_actions}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model must be a multiple of n_heads={self.n_heads}, got {self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if not self.w_u_init_std >= 0.0:
            raise ValueError(f"w_u_init_std must be >= 0, got {self.w_u_init_std}")
        flags = ("use_action", "use_reward", "modulate_q", "modulate_kv", "utility_bias")
        if self.traced_variant and (self.kind != "uat" or self.encoder != "mlp"
                                    or not all(getattr(self, f) for f in flags)):
            raise ValueError("traced_variant needs kind='uat' with every Table 4 switch at its default, "
                             f"got kind={self.kind!r}, encoder={self.encoder!r}, "
                             + ", ".join(f"{f}={getattr(self, f)}" for f in flags))

    @property
    def d_head(self) -> int:
        """Per-head width d_m = d_model / H."""
        return self.d_model // self.n_heads

    @property
    def tokens_per_step(self) -> int:
        """Tokens per environment step: 3 for DT-style (a_{t-1}, R_t, o_t), else 1."""
        return 3 if self.kind == "dt" else 1

    @property
    def context(self) -> int:
        """Token context N = tokens_per_step * T."""
        return self.tokens_per_step * self.horizon

    @property
    def has_utility(self) -> bool:
        """Whether the utility encoder exists (UAT with at least one modulated pathway)."""
        return self.kind == "uat" and (self.modulate_q or self.modulate_kv)


def ablation(base: ModelConfig, name: str) -> ModelConfig:
    """The Table 4 variant ``name`` of the UAT configuration ``base``."""
    if base.kind != "uat":
        raise ValueError(f"ablations apply to kind='uat', got kind={base.kind!r}")
    switches = {
        "no_action": dict(use_action=False),
        "no_reward": dict(use_reward=False),
        "linear": dict(encoder="linear"),
        "no_q": dict(modulate_q=False),
        "no_kv": dict(modulate_kv=False),
        "no_bias": dict(utility_bias=False),
    }
    if name not in switches:
        raise ValueError(f"ablation name must be one of {ABLATIONS}, got {name!r}")
    return dataclasses.replace(base, **switches[name])


def member(base: ModelConfig, name: str) -> ModelConfig:
    """The static model ``name`` of ``SWITCHED`` at the sizes of ``base`` (a UAT config)."""
    if name not in SWITCHED:
        raise ValueError(f"member name must be one of {SWITCHED}, got {name!r}")
    uat = dataclasses.replace(base, traced_variant=False)
    if name == "uat":
        return uat
    return dataclasses.replace(uat, kind=name) if name in ("vt", "adt") else ablation(uat, name)


def variant_index(name: str) -> jax.Array:
    """[] int32 index of member ``name`` of ``SWITCHED``: the ``variant`` leaf of a task pytree
    (``train.Task``, ``recsys.RecsysTask``, ``markets.MarketsTask``) run by a ``traced_variant`` model."""
    if name not in SWITCHED:
        raise ValueError(f"variant must be one of {SWITCHED}, got {name!r}")
    return jnp.asarray(SWITCHED.index(name), jnp.int32)


def switch_table() -> np.ndarray:
    """[len(SWITCHED), len(SWITCHES)] float32: row i holds the ``SWITCHES`` of member i
    (Vanilla-TF and A-DT: neither pathway modulated, so the utility encoder is never read)."""
    rows = []
    for name in SWITCHED:
        cfg = member(ModelConfig(), name)
        rows.append([cfg.use_action, cfg.use_reward, cfg.encoder == "linear",
                     cfg.has_utility and cfg.modulate_q, cfg.has_utility and cfg.modulate_kv, cfg.utility_bias,
                     cfg.kind == "adt"])
    return np.asarray(rows, np.float32)

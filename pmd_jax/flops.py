"""Floating-point work of the frozen decoder's calls and of a closed-loop program (docs/pmd.md section 2.9).

The count is read off the decoder's layout (:mod:`pmd_jax.decoder`, section 2 of the
paper "PolicyAttention", arXiv 2609.30500): ``T`` tokens of width ``D = 5S + 5A + 11``,
``H = 2`` heads of width ``d_h = S + A + 3`` and ``U = 2`` feed-forward units per block,
``2`` blocks. Per block, in multiply-adds (1 multiply-add = 2 FLOPs):

=====================  ===================  ==============================================
term                   multiply-adds        product
=====================  ===================  ==============================================
Q, K, V projections    ``3 H T D d_h``      ``x W_Q``, ``x W_K``, ``x W_V`` per head
attention scores       ``H T^2 d_h``        ``q k^T`` over the full ``T x T`` (the causal and
                                            key masks act after the product, so masked
                                            entries are computed too)
weighted sums          ``H T^2 d_h``        ``softmax(.) v`` per head
output projection      ``H T d_h D``        ``(softmax(.) v) W_O`` per head
feed-forward           ``3 T D U``          ``x W_g``, ``x W_u`` and ``hidden W_d``
=====================  ===================  ==============================================

An actor call has ``T = S A + S`` tokens, a critic call ``T = 2 S A + n`` for a packet of
``n`` transition slots. Left out (elementwise, ``O(H T^2)`` or ``O(T D)`` per block, and
outside the matrix-multiply units): the masks (built by comparisons; the state-local
mask's ``T x S x T`` state match is only computed when ``state_local`` is not the
constant ``False``, and the coverage study never sets it), the ``where`` that applies
them, the softmax (max, subtract, exp, sum, divide), the ReLU and gating product, the
residual adds, building the token matrices and reading the outputs; outside the
decoder, sampling the packets, policy evaluation, the Bellman backups and the bound.
"""
from __future__ import annotations

from collections.abc import Sequence

from pmd_jax.decoder import FFN_UNITS, NUM_BLOCKS, NUM_HEADS, Layout

TERMS = ("qkv_projections", "scores", "weighted_sums", "output_projection", "feed_forward")


def decoder_macs(layout: Layout, num_tokens: int) -> dict[str, int]:
    """Multiply-adds of one forward pass over ``num_tokens`` tokens, per term of :data:`TERMS`, all blocks."""
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    T, D, dh, H, U = num_tokens, layout.width, layout.head_dim, NUM_HEADS, FFN_UNITS
    per_block = {
        "qkv_projections": 3 * H * T * D * dh,
        "scores": H * T * T * dh,
        "weighted_sums": H * T * T * dh,
        "output_projection": H * T * dh * D,
        "feed_forward": 3 * T * D * U,
    }
    return {k: NUM_BLOCKS * v for k, v in per_block.items()}


def actor_tokens_count(layout: Layout) -> int:
    """``S A`` memories and ``S`` policy queries."""
    return layout.S * layout.A + layout.S


def critic_tokens_count(layout: Layout, num_transitions: int) -> int:
    """``S A`` memories, ``n`` transition slots (valid or masked) and ``S A`` evaluation queries."""
    if num_transitions < 0:
        raise ValueError(f"num_transitions must be >= 0, got {num_transitions}")
    return 2 * layout.S * layout.A + num_transitions


def actor_call_flops(layout: Layout) -> int:
    """FLOPs (2 per multiply-add) of one actor call."""
    return 2 * sum(decoder_macs(layout, actor_tokens_count(layout)).values())


def critic_call_flops(layout: Layout, num_transitions: int) -> int:
    """FLOPs (2 per multiply-add) of one critic call on a packet of ``num_transitions`` slots."""
    return 2 * sum(decoder_macs(layout, critic_tokens_count(layout, num_transitions)).values())


def closed_loop_flops(layout: Layout, packet_slots: Sequence[int | None], rounds: int, num_mdps: int = 1) -> dict[str, int]:
    """FLOPs of ``num_mdps`` MDPs x arms x ``rounds`` rounds of :func:`pmd_jax.loop.closed_loop`.

    ``packet_slots``: per arm, the critic packet's slot count ``n``, or ``None`` for an arm
    without a decoder critic call (the exact backup). Every arm makes one actor call per
    round. Returns ``{"actor", "critic", "total"}``.
    """
    if rounds < 1 or num_mdps < 1:
        raise ValueError(f"rounds and num_mdps must be >= 1, got rounds={rounds}, num_mdps={num_mdps}")
    actor = len(packet_slots) * actor_call_flops(layout)
    critic = sum(critic_call_flops(layout, n) for n in packet_slots if n is not None)
    scale = rounds * num_mdps
    return {"actor": scale * actor, "critic": scale * critic, "total": scale * (actor + critic)}

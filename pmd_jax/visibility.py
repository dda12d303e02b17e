"""Visible and masked learned actors on a packet holding every state's memories (PolicyAttention,
arXiv 2609.30500, EvoRobust companion, section 10: "paired actors on a packet holding all 12 memories, with
and without a state-local mask"; derivations in ``docs/pmd.md`` section 10).

**Full packet of state s**: all ``S A`` memories ``(s', a', log pi(a'|s'), Q(s', a'), eta)`` in a fixed
state-major order (token ``s' A + a'``), then the query of ``s`` at position ``S A``: ``S A + 1`` tokens with
the channels of :func:`pmd_jax.learned.actor_tokens` (state one-hot, action one-hot, ``log pi`` floored at
-40, ``Q``, ``eta``, is_query). At ``S = 4``, ``A = 3`` the packet holds the paper's 12 memories. The new row
``pi'(.|s)`` is the log-softmax of the query's ``A`` output logits.

**One sequence for all S packets** (:func:`full_packet_tokens`). The ``S`` packets share their memories, and
under the causal mask a memory never reads a query, so the memories' hidden states are the same in every
packet. We therefore run ONE sequence, the ``S A`` memories then the ``S`` queries, with every query at
position ``S A`` (:func:`packet_positions`) and an extra mask by which no token reads a query but
that query itself (:func:`packet_mask`; memories read no query anyway, by causality). Each query then reads exactly what it reads in its own packet, so query ``s``'s output
is the output of state ``s``'s packet (tested against separate packets to 1e-12), at ``S A + S`` tokens
instead of ``S (S A + 1)``.

**State-local mask** (:func:`state_local_mask`): token ``i`` may attend to token ``j`` only when both carry
the same state one-hot (read from the tokens' own state channels), and-ed with the causal mask (it also
keeps queries apart, their states differ). The query of ``s`` and the memories of ``s`` then attend only to
tokens of state ``s`` in every layer, and the per-token parts (embedding, positions, LayerNorm, MLP,
read-out) never mix tokens, so the query's output is a function of state ``s``'s ``A`` memories (and
``eta``) alone. It is EXACTLY invariant to the other states' memories: a masked score becomes ``finfo.min``,
its softmax weight ``exp(finfo.min - max)`` is exactly ``0``, so every other-state value enters each sum as an
exact ``0`` product, and the query's output is the same float, bit for bit.

**The switch.** :class:`FullPacketActor` takes ``masked`` as a (possibly traced) per-run flag: the mask is
``state_local OR masked < 0.5`` (and the query separation), so a visible run (flag 0) is the plain causal
model on its packets. Both variants have the same parameters (a mask has none), so visible and masked runs
train in one vmapped program, pair members from the same initial weights and data.

**Replacement protocol** (:func:`replace_other_states`): state ``s``'s row is read from the input whose rows
``s' != s`` of ``(log pi, Q)`` are taken from another input and whose row ``s`` is kept. The PMD row of ``s``,
``softmax(log pi(.|s) + eta Q(s, .))``, depends on row ``s`` only, so the target is unchanged; an actor whose
row ``s`` moves reads the other states.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from pmd_jax.learned import actor_token_width, actor_tokens, check_actor_inputs
from pmd_jax.tasks import ETA_RANGE
from pmd_jax.transformer import ModelConfig, PreLNTransformer, architecture

ROLE = "full_packet_actor"


def packet_length(num_states: int, num_actions: int) -> int:
    """Tokens of one state's packet, ``S A + 1`` (the model's ``max_len``)."""
    return num_states * num_actions + 1


def packet_positions(num_states: int, num_actions: int) -> np.ndarray:
    """Positions of the shared sequence: memories ``0..S A - 1``, every query at ``S A`` (its packet's last)."""
    n = num_states * num_actions
    return np.concatenate([np.arange(n), np.full(num_states, n)])


def full_packet_tokens(pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
    """``[S A + S, S + A + 4]``: the ``S A`` memories (state-major, then action), then the ``S`` queries."""
    S, A = pi.shape
    per_state = actor_tokens(pi, Q, eta)  # [S, A + 1, F]: state s's A memories, then its query
    return jnp.concatenate([per_state[:, :A].reshape(S * A, -1), per_state[:, A]], axis=0)


def state_local_mask(tokens: jax.Array, num_states: int) -> jax.Array:
    """``[..., T, T]``: ``True`` where tokens ``i`` and ``j`` carry the same state one-hot (channels ``0..S-1``)."""
    state = tokens[..., :num_states]
    return jnp.einsum("...is,...js->...ij", state, state) > 0.5


def packet_mask(tokens: jax.Array, num_states: int, masked) -> jax.Array:
    """The extra mask of the shared sequence ``[..., T, T]``: a query is read by no token but itself; with
    ``masked >= 0.5`` also state-local (module docstring). The causal mask is the model's own."""
    is_query = tokens[..., -1] > 0.5
    T = tokens.shape[-2]
    separate = jnp.logical_or(~is_query[..., None, :], jnp.eye(T, dtype=bool))
    local = jnp.logical_or(state_local_mask(tokens, num_states), jnp.asarray(masked) < 0.5)
    return jnp.logical_and(separate, local)


def replace_other_states(pi: jax.Array, Q: jax.Array, pi_other: jax.Array, Q_other: jax.Array, s):
    """``(pi, Q)`` with every row ``s' != s`` taken from ``(pi_other, Q_other)``; row ``s`` kept."""
    keep = (jnp.arange(pi.shape[0]) == s)[:, None]
    return jnp.where(keep, pi, pi_other), jnp.where(keep, Q, Q_other)


@dataclasses.dataclass(frozen=True)
class FullPacketActor:
    """A pre-LN Transformer actor reading every state's memories, visible or state-locally masked."""

    config: ModelConfig
    num_states: int = 4
    num_actions: int = 3
    eta_range: tuple[float, float] = ETA_RANGE

    @property
    def max_len(self) -> int:
        return packet_length(self.num_states, self.num_actions)

    @property
    def model(self) -> PreLNTransformer:
        return PreLNTransformer(self.config, out_dim=self.num_actions, max_len=self.max_len)

    def architecture(self) -> dict:
        return architecture(self.config, ROLE, actor_token_width(self.num_states, self.num_actions),
                            self.num_actions, self.max_len)

    def init(self, key: jax.Array):
        """Parameters (the same for both variants: the mask has none)."""
        S, A = self.num_states, self.num_actions
        return self.model.init(key, jnp.zeros((self.max_len, actor_token_width(S, A))))

    def log_policy(self, params, pi: jax.Array, Q: jax.Array, eta, masked) -> jax.Array:
        """``log pi'(.|s)`` ``[S, A]`` for every state; concrete inputs are checked as for the learned actor."""
        if not any(isinstance(v, jax.core.Tracer) for v in (pi, Q, eta)):
            check_actor_inputs(pi, Q, eta, self.eta_range, self.num_states, self.num_actions)
        tokens = full_packet_tokens(pi, Q, eta)
        out = self.model.apply(params, tokens, packet_mask(tokens, self.num_states, masked),
                               packet_positions(self.num_states, self.num_actions))
        return jax.nn.log_softmax(out[-self.num_states:], axis=-1)

    def log_policy_replaced(self, params, pi, Q, eta, pi_other, Q_other, masked) -> jax.Array:
        """``[S, A]``: row ``s`` read with the other states' memories from ``(pi_other, Q_other)``.

        ``pi_other = pi, Q_other = Q`` gives :meth:`log_policy`'s rows through the same program, so a
        comparison of the two is bit-exact wherever the rows are (the masked actor's).
        """
        if not any(isinstance(v, jax.core.Tracer) for v in (pi, Q, eta, pi_other, Q_other)):
            check_actor_inputs(pi, Q, eta, self.eta_range, self.num_states, self.num_actions)
            check_actor_inputs(pi_other, Q_other, eta, self.eta_range, self.num_states, self.num_actions)

        def row(s):
            p, q = replace_other_states(pi, Q, pi_other, Q_other, s)
            return self.log_policy(params, p, q, eta, masked)[s]

        return jax.vmap(row)(jnp.arange(self.num_states))

    def policy(self, params, pi: jax.Array, Q: jax.Array, eta, masked) -> jax.Array:
        return jnp.exp(self.log_policy(params, pi, Q, eta, masked))

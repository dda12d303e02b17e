"""Sampling arms for the critic packet: the coverage relaxation (PolicyAttention, arXiv 2609.30500,
sections 8, 11, 15).

Every arm spends the same budget of ``S * A * m`` fresh transitions per round
``(s, a, r, s', a')`` with ``a' ~ pi_hat_{k+1}(.|s')`` and ``r = R(s, a)``. The packet has
a fixed declared size ``n_max``; slots past the budget are marked invalid and masked in
the critic call, so every arm and budget runs in one compiled program.

* ``balanced`` (the theorem's oracle): exactly ``m`` draws of ``s' ~ P(.|s, a)`` per pair.
* ``uniform_pairs``: each slot's pair drawn uniformly from the ``S * A`` pairs.
* ``on_policy``: one continuing trajectory under ``pi_hat_{k+1}``; the stream's state is
  carried from round to round, and the next action taken is the transition's ``a'``.
* ``on_policy_carry``: the same stream; pairs the packet did not visit keep their old
  ``Q_k`` (a patch outside the decoder and the theorem, section 8).
* ``exploring``: the stream with behaviour actions uniform with probability
  ``explore_eps`` (0.2); the transition's ``a'`` is still drawn from ``pi_hat_{k+1}``.
* ``exact_backup``: no samples; the critic is the exact ``F^{pi_hat_{k+1}} Q_k``.
"""
from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax.decoder import Transitions
from pmd_jax.mdp import FiniteMDP


class Arm(enum.IntEnum):
    BALANCED = 0
    UNIFORM_PAIRS = 1
    ON_POLICY = 2
    ON_POLICY_CARRY = 3
    EXPLORING = 4
    EXACT_BACKUP = 5


ARM_NAMES = {arm: arm.name.lower() for arm in Arm}


@struct.dataclass
class Packet:
    """A critic packet ``[n_max]`` slots, its per-pair visit counts ``[S, A]`` and the stream state."""

    transitions: Transitions
    counts: jax.Array
    stream_state: jax.Array


def _pair_draws(key, mdp: FiniteMDP, pi_next, s, a):
    ks, ka = jax.random.split(key)
    s_next = jax.random.categorical(ks, jnp.log(mdp.P[s, a]))
    a_next = jax.random.categorical(ka, jnp.log(pi_next[s_next]))
    return s_next, a_next


def _stream(key, mdp: FiniteMDP, pi_next, state0, valid, explore_eps):
    """A continuing trajectory over the packet's slots; invalid slots leave the state alone."""
    A = mdp.num_actions

    def behaviour(k, s, target_action):
        ku, kc = jax.random.split(k)
        uniform = jax.random.randint(ku, (), 0, A)
        return jnp.where(jax.random.uniform(kc) < explore_eps, uniform, target_action)

    k0, kscan = jax.random.split(key)
    ka0, kb0 = jax.random.split(k0)
    a0 = behaviour(kb0, state0, jax.random.categorical(ka0, jnp.log(pi_next[state0])))

    def step(carry, inputs):
        s, a = carry
        k, ok = inputs
        kd, kb = jax.random.split(k)
        s_next, a_next = _pair_draws(kd, mdp, pi_next, s, a)
        a_behave = behaviour(kb, s_next, a_next)
        new = (jnp.where(ok, s_next, s), jnp.where(ok, a_behave, a))
        return new, (s, a, s_next, a_next)

    (s_end, _), (s, a, s_next, a_next) = jax.lax.scan(step, (state0, a0), (jax.random.split(kscan, valid.shape[0]), valid))
    return s, a, s_next, a_next, s_end


def sample_packet(key, mdp: FiniteMDP, pi_next, arm, m, stream_state, n_max: int, explore_eps=0.2) -> Packet:
    """One round's packet for ``arm`` (an :class:`Arm` value, may be traced) at budget ``m`` per pair.

    All arms are drawn and the requested one selected, so ``arm`` and ``m`` can be
    vmapped. ``n_max`` (static) must be at least ``S * A * m``.
    """
    S, A = mdp.num_states, mdp.num_actions
    SA = S * A
    slots = jnp.arange(n_max)
    valid = slots < SA * m
    k_bal, k_uni, k_pairs, k_stream = jax.random.split(key, 4)

    balanced_pair = jnp.minimum(slots // jnp.maximum(m, 1), SA - 1)
    uniform_pair = jax.random.randint(k_pairs, (n_max,), 0, SA)
    draws = jax.vmap(lambda k, p: _pair_draws(k, mdp, pi_next, p // A, p % A))
    bal_next = draws(jax.random.split(k_bal, n_max), balanced_pair)
    uni_next = draws(jax.random.split(k_uni, n_max), uniform_pair)
    eps = jnp.where(arm == Arm.EXPLORING, explore_eps, 0.0)
    st_s, st_a, st_sn, st_an, st_end = _stream(k_stream, mdp, pi_next, stream_state, valid, eps)

    is_stream = (arm == Arm.ON_POLICY) | (arm == Arm.ON_POLICY_CARRY) | (arm == Arm.EXPLORING)
    pair = jnp.where(arm == Arm.UNIFORM_PAIRS, uniform_pair, balanced_pair)
    s = jnp.where(is_stream, st_s, pair // A)
    a = jnp.where(is_stream, st_a, pair % A)
    s_next = jnp.where(is_stream, st_sn, jnp.where(arm == Arm.UNIFORM_PAIRS, uni_next[0], bal_next[0]))
    a_next = jnp.where(is_stream, st_an, jnp.where(arm == Arm.UNIFORM_PAIRS, uni_next[1], bal_next[1]))
    valid = valid & (arm != Arm.EXACT_BACKUP)
    counts = jnp.zeros((S, A), jnp.int32).at[s, a].add(valid.astype(jnp.int32))
    tr = Transitions(s=s, a=a, r=mdp.R[s, a], s_next=s_next, a_next=a_next, valid=valid)
    return Packet(transitions=tr, counts=counts, stream_state=jnp.where(is_stream, st_end, stream_state))

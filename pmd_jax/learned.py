"""Learned actor and critic: their packets, objectives and checks of their inputs
(PolicyAttention, arXiv 2609.30500, sections 6, 9 and 11; derivations in ``docs/pmd.md`` §8).

**Actor packet** (one per state ``s``; the model sees nothing of other states, as in the
paper's learned actor, section 10: "this model's actor packet for a state holds only
that state's memories"). ``A`` memories, one per action ``a``, then a query:

====================  =========  =======  =========  ==========  =====  ========
token                 state      action   log pi     Q           eta    is_query
====================  =========  =======  =========  ==========  =====  ========
memory ``a``          one-hot s  one-hot  log pi(a|s)  Q(s, a)   eta    0
query                 one-hot s  0        0          0           eta    1
====================  =========  =======  =========  ==========  =====  ========

``log pi`` is floored at ``tasks.POLICY_LOG_FLOOR`` (-40, the prior's own floor), so a row
whose probability underflowed in a closed loop stays a finite input.

Why these inputs: the PMD row ``softmax(log pi + eta Q)`` is a function of exactly
``log pi(.|s)``, ``Q(s, .)`` and ``eta``; the action one-hot tells the read-out which
memory is which action, the state one-hot keeps the token layout of the frozen
decoder's memories (``mem_s``, ``mem_a``, ``log_pi``, ``q``, ``eta``), and the query
flag marks the token whose output (``A`` logits) is the new row. The step ``eta`` rides
on every token so that a memory can form ``eta Q`` before the query reads it.

**Critic packet** (one per MDP input): ``S A`` Q memories ``(s, a, Q(s, a))``, then
``n`` sampled transitions ``(s, a, r, s', a')``, then ``S A`` evaluation queries
``(s, a)`` whose outputs are ``Q_next(s, a)``. A transition can look up ``Q(s', a')``
in the memories before it; a query can average the transitions of its pair.

**Objectives.** The actor's KL-proximal objective per row,
``J(pi') = E_{a ~ pi'}[Q(s, a)] - (1/eta) KL(pi' || pi)``, is maximised by the PMD row;
in fact ``J(pi') = J(p*) - (1/eta) KL(pi' || p*)`` with ``p* = softmax(log pi + eta Q)``
(``docs/pmd.md`` §8.2), so the loss ``-J`` needs no PMD probabilities but has the PMD
row as its unique minimiser. The supervised variant minimises the cross-entropy to
``p*`` (labels). The critic regresses on sampled Bellman targets: per pair the mean of
``m_target`` fresh draws of ``r + gamma Q(s', a')``, ``s' ~ P(.|s, a)``,
``a' ~ pi(.|s')``, drawn apart from the packet (so the regression's optimum is the
conditional mean of ``F^pi Q`` given the packet, never an exact value the critic was shown).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from pmd_jax.decoder import Transitions
from pmd_jax.mdp import FiniteMDP
from pmd_jax.pmd import pmd_step
from pmd_jax.tasks import ETA_RANGE, POLICY_LOG_FLOOR
from pmd_jax.transformer import ModelConfig, PreLNTransformer, architecture


def actor_token_width(num_states: int, num_actions: int) -> int:
    return num_states + num_actions + 4


def critic_token_width(num_states: int, num_actions: int) -> int:
    return 3 + 2 * num_states + 2 * num_actions + 2


def actor_tokens(pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
    """The actor packets of every state, ``[S, A + 1, S + A + 4]`` (table in the module docstring)."""
    S, A = pi.shape
    eta = jnp.broadcast_to(jnp.asarray(eta, pi.dtype), (S, A + 1))
    state = jnp.broadcast_to(jnp.eye(S, dtype=pi.dtype)[:, None, :], (S, A + 1, S))
    action = jnp.concatenate([jnp.broadcast_to(jnp.eye(A, dtype=pi.dtype), (S, A, A)), jnp.zeros((S, 1, A), pi.dtype)], 1)
    zero = jnp.zeros((S, 1), pi.dtype)
    log_pi = jnp.concatenate([jnp.maximum(jnp.log(pi), POLICY_LOG_FLOOR), zero], axis=1)
    q = jnp.concatenate([Q, zero], axis=1)
    is_query = jnp.zeros((S, A + 1), pi.dtype).at[:, A].set(1.0)
    return jnp.concatenate([state, action, log_pi[..., None], q[..., None], eta[..., None], is_query[..., None]], -1)


def critic_tokens(Q: jax.Array, tr: Transitions) -> jax.Array:
    """The critic packet ``[2 S A + n, 3 + 2S + 2A + 2]``: Q memories, transitions, evaluation queries.

    Channels: role (memory, transition, query), ``s``, ``a``, ``s'``, ``a'`` one-hots, ``Q``, ``r``.
    """
    S, A = Q.shape
    dt = Q.dtype
    eS, eA = jnp.eye(S, dtype=dt), jnp.eye(A, dtype=dt)
    pair_s, pair_a = jnp.repeat(jnp.arange(S), A), jnp.tile(jnp.arange(A), S)
    n = tr.s.shape[0]

    def block(role, s, a, s2, a2, q, r, count):
        role = jnp.broadcast_to(jnp.eye(3, dtype=dt)[role], (count, 3))
        return jnp.concatenate([role, s, a, s2, a2, q[:, None], r[:, None]], axis=-1)

    zS, zA, zq = jnp.zeros((S * A, S), dt), jnp.zeros((S * A, A), dt), jnp.zeros(S * A, dt)
    memories = block(0, eS[pair_s], eA[pair_a], zS, zA, Q.reshape(-1), zq, S * A)
    transitions = block(1, eS[tr.s], eA[tr.a], eS[tr.s_next], eA[tr.a_next], jnp.zeros(n, dt), tr.r.astype(dt), n)
    queries = block(2, eS[pair_s], eA[pair_a], zS, zA, zq, zq, S * A)
    return jnp.concatenate([memories, transitions, queries], axis=0)


@dataclasses.dataclass(frozen=True)
class LearnedActor:
    """A pre-LN Transformer read as an actor: ``(pi, Q, eta) -> pi'`` row by row (module docstring)."""

    config: ModelConfig
    num_states: int = 4
    num_actions: int = 3
    eta_range: tuple[float, float] = ETA_RANGE  # the declared range of supplied steps

    @property
    def model(self) -> PreLNTransformer:
        return PreLNTransformer(self.config, out_dim=self.num_actions, max_len=self.num_actions + 1)

    def architecture(self) -> dict:
        return architecture(self.config, "actor", actor_token_width(self.num_states, self.num_actions),
                            self.num_actions, self.num_actions + 1)

    def init(self, key: jax.Array):
        S, A = self.num_states, self.num_actions
        return self.model.init(key, jnp.zeros((S, A + 1, actor_token_width(S, A))))

    def log_policy(self, params, pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
        """``log pi'(.|s)`` ``[S, A]``: the query token's ``A`` logits, log-softmaxed, for every state.

        Concrete (not traced) inputs are checked first (:func:`check_actor_inputs`), so a
        wrong packet, a ``pi`` that is not a policy or an ``eta`` outside ``eta_range`` is
        named; inside ``jit``/``vmap`` the caller answers for its inputs.
        """
        if not any(isinstance(v, jax.core.Tracer) for v in (pi, Q, eta)):
            check_actor_inputs(pi, Q, eta, self.eta_range, self.num_states, self.num_actions)
        logits = self.model.apply(params, actor_tokens(pi, Q, eta))[:, -1, :]
        return jax.nn.log_softmax(logits, axis=-1)

    def policy(self, params, pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
        return jnp.exp(self.log_policy(params, pi, Q, eta))


@dataclasses.dataclass(frozen=True)
class LearnedCritic:
    """A pre-LN Transformer read as a critic: ``(Q, transitions) -> Q_next [S, A]`` (module docstring)."""

    config: ModelConfig
    num_states: int = 4
    num_actions: int = 3
    num_transitions: int = 72  # n: S A m with m = 6 samples per pair

    @property
    def max_len(self) -> int:
        return 2 * self.num_states * self.num_actions + self.num_transitions

    @property
    def model(self) -> PreLNTransformer:
        return PreLNTransformer(self.config, out_dim=1, max_len=self.max_len)

    def architecture(self) -> dict:
        return architecture(self.config, "critic", critic_token_width(self.num_states, self.num_actions), 1, self.max_len)

    def init(self, key: jax.Array):
        return self.model.init(key, jnp.zeros((self.max_len, critic_token_width(self.num_states, self.num_actions))))

    def q_values(self, params, Q: jax.Array, tr: Transitions) -> jax.Array:
        S, A = self.num_states, self.num_actions
        if tr.s.shape != (self.num_transitions,):
            raise ValueError(f"critic packet: transitions must have shape ({self.num_transitions},), got {tr.s.shape}")
        out = self.model.apply(params, critic_tokens(Q, tr))[-S * A:, 0]
        return out.reshape(S, A)


def kl_proximal_objective(log_pi_new: jax.Array, pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
    """Per row ``E_{pi'}[Q] - (1/eta) KL(pi' || pi)`` (``[..., S]``); maximised by the PMD row."""
    p = jnp.exp(log_pi_new)
    kl = jnp.sum(p * (log_pi_new - jnp.log(pi)), axis=-1)
    return jnp.sum(p * Q, axis=-1) - kl / jnp.asarray(eta)[..., None]


def actor_loss(log_pi_new: jax.Array, pi: jax.Array, Q: jax.Array, eta, supervised) -> jax.Array:
    """Mean over rows of ``-J`` (``supervised = 0``) or of the cross-entropy to PMD (``supervised = 1``)."""
    label_free = -kl_proximal_objective(log_pi_new, pi, Q, eta)
    target = pmd_step(pi, Q, jnp.asarray(eta)[..., None, None])
    cross_entropy = -jnp.sum(target * log_pi_new, axis=-1)
    return jnp.mean(jnp.where(supervised > 0.5, cross_entropy, label_free))


def balanced_transitions(key: jax.Array, mdp: FiniteMDP, pi: jax.Array, m: int) -> Transitions:
    """``m`` fresh draws per pair ``(s, a)`` (pair-major): ``s' ~ P(.|s, a)``, ``a' ~ pi(.|s')``, ``r = R(s, a)``."""
    S, A = mdp.num_states, mdp.num_actions
    pair = jnp.repeat(jnp.arange(S * A), m)
    s, a = pair // A, pair % A
    ks, ka = jax.random.split(key)
    s_next = jax.random.categorical(ks, jnp.log(mdp.P[s, a]))
    a_next = jax.random.categorical(ka, jnp.log(pi[s_next]))
    return Transitions(s=s, a=a, r=mdp.R[s, a], s_next=s_next, a_next=a_next, valid=jnp.ones(s.shape, bool))


def td_targets(tr: Transitions, Q: jax.Array, gamma, m: int) -> jax.Array:
    """Per pair the mean of its ``m`` (pair-major) one-step targets ``r + gamma Q(s', a')``, ``[S, A]``."""
    S, A = Q.shape
    return jnp.mean((tr.r + gamma * Q[tr.s_next, tr.a_next]).reshape(S, A, m), axis=-1)


def check_actor_inputs(pi, Q, eta, eta_range: tuple[float, float], num_states: int, num_actions: int) -> None:
    """A clear error naming the field when concrete actor inputs do not fit the trained actor.

    ``pi`` and ``Q`` must be ``[S, A]`` (``A`` memories per state packet), ``pi``'s rows
    probability distributions (non-negative, strictly positive where ``log pi`` is read,
    summing to 1), ``Q`` finite, ``eta`` inside the declared training range.
    """
    pi, Q, eta = np.asarray(pi, np.float64), np.asarray(Q, np.float64), np.asarray(eta, np.float64)
    if pi.ndim != 2 or pi.shape[1] != num_actions:
        raise ValueError(f"pi: each state's packet needs {num_actions} memories (one per action), got pi of shape {pi.shape}")
    if pi.shape[0] != num_states:
        raise ValueError(f"pi: the actor was trained with {num_states} states, got pi of shape {pi.shape}")
    if Q.shape != pi.shape:
        raise ValueError(f"Q: shape {Q.shape} does not match pi's {pi.shape}")
    if not np.all(np.isfinite(Q)):
        raise ValueError("Q: entries must be finite")
    if not (np.all(pi > 0) and np.allclose(pi.sum(axis=1), 1.0, atol=1e-4)):
        raise ValueError(f"pi: rows must be distributions with positive entries summing to 1, got row sums "
                         f"{pi.sum(axis=1)} and minimum {pi.min()}")
    lo, hi = eta_range
    if eta.shape != () or not lo <= float(eta) <= hi:
        raise ValueError(f"eta: must be a scalar in the declared range [{lo}, {hi}], got {eta}")

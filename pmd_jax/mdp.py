"""Finite discounted MDPs as pytrees, with exact evaluation (PolicyAttention, arXiv 2609.30500, sections 6 and 13).

A :class:`FiniteMDP` holds the transition tensor ``P[s, a, s']``, the reward table
``R[s, a]`` and the discount ``gamma`` as array leaves, so one ``jax.vmap`` runs many
MDPs; the sizes ``S`` and ``A`` are read off the static shapes. Policies are arrays
``pi[s, a]`` whose rows lie on the simplex; action values are ``Q[s, a]``.

Exact evaluation solves ``(I - gamma M_pi) q = r`` (:func:`policy_evaluation`) with
:func:`solve_diagonally_dominant`, in XLA's own operations rather than a LAPACK call: jaxlib's
batched LU factorisation splits its batch over XLA's intra-op thread pool and blocks until the
parts are done, so two factorisations in flight in one program (an audit evaluates three policies
per input) can hold every worker of a 2-core pool while waiting for each other, and the program
never finishes.
"""
from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct
from jax import lax


@struct.dataclass
class FiniteMDP:
    """A finite discounted MDP.

    Fields:
      P: transition probabilities, ``[S, A, S]``, rows sum to one.
      R: expected rewards, ``[S, A]``.
      gamma: discount in (0, 1), scalar.
    """

    P: jax.Array  # [S, A, S]
    R: jax.Array  # [S, A]
    gamma: jax.Array  # []

    @property
    def num_states(self) -> int:
        return self.R.shape[-2]

    @property
    def num_actions(self) -> int:
        return self.R.shape[-1]

    def check(self) -> None:
        """Shape checks at API boundaries (eager or traced)."""
        S, A = self.num_states, self.num_actions
        chex.assert_shape(self.P, (S, A, S))
        chex.assert_shape(self.R, (S, A))
        chex.assert_rank(self.gamma, 0)


def policy_transition(mdp: FiniteMDP, pi: jax.Array) -> jax.Array:
    """State-action to state-action kernel under ``pi``: ``M[(s,a),(s',a')] = P(s'|s,a) pi(a'|s')``."""
    S, A = mdp.num_states, mdp.num_actions
    return jnp.einsum("xay,yb->xayb", mdp.P, pi).reshape(S * A, S * A)


def policy_evaluation(mdp: FiniteMDP, pi: jax.Array) -> jax.Array:
    """Exact ``Q^pi`` by one linear solve of ``(I - gamma M_pi) q = r`` over state-action pairs."""
    mdp.check()
    S, A = mdp.num_states, mdp.num_actions
    chex.assert_shape(pi, (S, A))
    M = policy_transition(mdp, pi)
    q = solve_diagonally_dominant(jnp.eye(S * A, dtype=M.dtype) - mdp.gamma * M, mdp.R.reshape(-1))
    return q.reshape(S, A)


def solve_diagonally_dominant(a: jax.Array, b: jax.Array) -> jax.Array:
    """``x`` with ``a x = b`` for a strictly row-diagonally-dominant ``a`` ``[n, n]``, ``b`` ``[n]``.

    Gaussian elimination without pivoting, then back substitution, as two ``fori_loop`` of ``n``
    vectorised row operations. Without pivoting it is stable for such matrices (the growth factor
    is at most 2; Golub & Van Loan, Matrix Computations, section 3.4.10). ``I - gamma M`` with
    ``gamma < 1`` and ``M`` row-stochastic is one: row ``i`` has ``1 - gamma M_ii`` on the diagonal
    and ``gamma (1 - M_ii)`` off it. Sums, not ``dot``, so no backend lowers the row products to a
    reduced-precision matrix unit.
    """
    n = a.shape[-1]
    rows = jnp.arange(n)

    def eliminate(k, ab):
        a, b = ab
        factor = jnp.where(rows > k, a[:, k] / a[k, k], 0.0)
        return a - factor[:, None] * a[k][None, :], b - factor * b[k]

    a, b = lax.fori_loop(0, n, eliminate, (a, b))

    def substitute(i, x):  # x holds the solved entries after row k, zeros elsewhere
        k = n - 1 - i
        return x.at[k].set((b[k] - jnp.sum(a[k] * x)) / a[k, k])

    return lax.fori_loop(0, n, substitute, jnp.zeros_like(b))


def state_values(pi: jax.Array, Q: jax.Array) -> jax.Array:
    """``V(s) = sum_a pi(a|s) Q(s, a)``."""
    return jnp.sum(pi * Q, axis=-1)


def bellman_operator(mdp: FiniteMDP, pi: jax.Array, Q: jax.Array) -> jax.Array:
    """One-step Bellman operator ``(F^pi Q)(s,a) = R(s,a) + gamma sum_s' P(s'|s,a) sum_a' pi(a'|s') Q(s',a')``."""
    return mdp.R + mdp.gamma * jnp.einsum("xay,y->xa", mdp.P, state_values(pi, Q))


def optimal_q(mdp: FiniteMDP, tol: float = 1e-12, max_iter: int = 100_000) -> jax.Array:
    """``Q*`` by value iteration until the sup-norm change is at most ``tol``.

    The contraction gives ``||Q_n - Q*|| <= gamma/(1-gamma) * ||Q_n - Q_{n-1}||``.
    """

    def backup(Q):
        return mdp.R + mdp.gamma * jnp.einsum("xay,y->xa", mdp.P, Q.max(axis=-1))

    def cond(carry):
        _, change, it = carry
        return (change > tol) & (it < max_iter)

    def body(carry):
        Q, _, it = carry
        Q_new = backup(Q)
        return Q_new, jnp.max(jnp.abs(Q_new - Q)), it + 1

    Q0 = jnp.zeros_like(mdp.R)
    Q, _, _ = jax.lax.while_loop(cond, body, (Q0, jnp.asarray(jnp.inf, mdp.R.dtype), 0))
    return Q


def uniform_policy(num_states: int, num_actions: int, dtype=jnp.float32) -> jax.Array:
    return jnp.full((num_states, num_actions), 1.0 / num_actions, dtype=dtype)


def policy_loss(mdp: FiniteMDP, Q_star: jax.Array, pi: jax.Array) -> jax.Array:
    """The returned-policy loss ``||Q* - Q^pi||_inf`` (paper section 6)."""
    return jnp.max(jnp.abs(Q_star - policy_evaluation(mdp, pi)))


def loss_normaliser(mdp: FiniteMDP) -> tuple[jax.Array, jax.Array]:
    """``(Q*, ||Q* - Q^{pi_0}||_inf)`` with ``pi_0`` uniform: the normalised loss of ``pi`` is
    ``policy_loss(mdp, Q*, pi)`` over the second (0 optimal, 1 no better than the uniform start; section 6).
    ``Q*`` to ``tol = 1e-6`` (:func:`optimal_q`)."""
    Q_star = optimal_q(mdp, tol=1e-6)
    return Q_star, policy_loss(mdp, Q_star, uniform_policy(mdp.num_states, mdp.num_actions, mdp.R.dtype))


@struct.dataclass
class RandomMDPFamily:
    """Dense random MDPs: ``P(.|s,a) ~ Dirichlet(concentration * 1)``, ``R ~ U[-r_max, r_max]``.

    Dense transitions (every successor reachable) mix quickly, as in the paper's coverage
    study (section 11: "its dense random transitions mix quickly"; the paper does not give
    its generator, this one is ours, ``docs/pmd.md`` section 5); bounded rewards give
    ``|Q| <= r_max / (1 - gamma)``. ``sample(key)`` is jit-safe, so ``jax.vmap(family.sample)``
    over keys draws a batch of MDPs.
    """

    gamma: jax.Array
    r_max: jax.Array
    concentration: jax.Array
    num_states: int = struct.field(pytree_node=False)
    num_actions: int = struct.field(pytree_node=False)

    def sample(self, key: jax.Array) -> FiniteMDP:
        kp, kr = jax.random.split(key)
        S, A = self.num_states, self.num_actions
        dtype = jnp.asarray(self.r_max).dtype
        alpha = jnp.full((S,), self.concentration, dtype)
        P = jax.random.dirichlet(kp, alpha, shape=(S, A)).astype(dtype)
        R = jax.random.uniform(kr, (S, A), dtype, -self.r_max, self.r_max)
        return FiniteMDP(P=P, R=R, gamma=jnp.asarray(self.gamma, dtype))


def two_state_family(c, gamma) -> FiniteMDP:
    """The family of section 14: states ``s-`` (index 0) and ``s+`` (index 1) loop on themselves;
    action rewards are ``(-c, 0)`` at ``s-`` and ``(c, 0)`` at ``s+``."""
    c = jnp.asarray(c)
    P = jnp.zeros((2, 2, 2), c.dtype).at[0, :, 0].set(1.0).at[1, :, 1].set(1.0)
    R = jnp.stack([jnp.stack([-c, 0.0 * c]), jnp.stack([c, 0.0 * c])])
    return FiniteMDP(P=P, R=R, gamma=jnp.asarray(gamma, c.dtype))


@struct.dataclass
class CombinationLockFamily:
    """Combination locks: a hard-exploration family (PolicyAttention, arXiv 2609.30500, section 11: "Hard-exploration
    MDPs are untested"; the family is ours, ``docs/pmd.md`` section 12).

    States ``0 .. S-1`` form a chain with one secret action ``c_s`` per state, drawn uniformly per MDP. At ``s``,
    ``c_s`` opens the next state, ``s + 1``, and every other action resets the chain to state 0; at the last state
    ``c_{S-1}`` pays reward 1 and restarts the chain at 0, and every other action resets it with reward 0. With
    probability ``slip`` any transition goes to a uniformly drawn state instead. Every other reward is 0, so
    ``|Q| <= 1 / (1 - gamma)`` (``B_Q = 5`` at ``gamma = 0.8``).

    Under the uniform policy the chain reaches state ``s`` about ``A^{-s}`` as often as state 0 (without slips), so an
    on-policy stream rarely sees the paying pair while a balanced packet sees it ``m`` times every round.
    ``sample(key)`` is jit-safe.
    """

    gamma: jax.Array
    slip: jax.Array
    num_states: int = struct.field(pytree_node=False)
    num_actions: int = struct.field(pytree_node=False)

    def sample(self, key: jax.Array) -> FiniteMDP:
        S, A = self.num_states, self.num_actions
        dtype = jnp.asarray(self.slip).dtype
        code = jax.random.randint(key, (S,), 0, A)
        opens = jnp.arange(A)[None, :] == code[:, None]  # [S, A]: the secret action of each state
        following = jnp.where(jnp.arange(S) < S - 1, jnp.arange(S) + 1, 0)  # the last state restarts the chain
        successor = jnp.where(opens, following[:, None], 0)  # [S, A]
        P = (1.0 - self.slip) * jax.nn.one_hot(successor, S, dtype=dtype) + self.slip / S
        R = (opens & (jnp.arange(S) == S - 1)[:, None]).astype(dtype)
        return FiniteMDP(P=P, R=R, gamma=jnp.asarray(self.gamma, dtype))

"""Two-player normal-form games with expected full-information feedback, and equilibrium gaps.

Environment in the gymnax style (pure ``reset(key, params)`` / ``step(key, state, action,
params)``): the action is the pair of mixed strategies (x_t, y_t); the observation is
each player's expected loss vector l^1_t = -A y_t, l^2_t = -B^T x_t (docs/regret.md §3.1, 9.3, "with
expected full-information loss feedback").  The state accumulates the joint mixed play
sum_t x_t y_t^T, whose average sigma_T is the time-averaged joint play of docs/regret.md §3.3.

Gaps of a joint distribution sigma [m, n] (docs/regret.md §9.3, 10.6), each a max over players:
* CCE:  max_{a'} E_sigma[u_i(a', a_-i)] - E_sigma[u_i];
* CE (pairwise):  max_{a, a'} sum_{a_-i} sigma(a, a_-i) (u_i(a', a_-i) - u_i(a, a_-i));
* swap:  sum_a max_{a'} of the same bracket (= max_i Swap-Regret_i / T under self-play).
"""
from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from regret_jax.learners import Learner

# Weighted rock-paper-scissors, instance (i) of docs/regret.md §9.2: scissors' wins and losses
# count double.  Skew-symmetric, unique equilibrium x* = y* = (0.4, 0.4, 0.2).
WEIGHTED_RPS = np.array([[0.0, -1.0, 2.0], [1.0, 0.0, -2.0], [-2.0, 2.0, 0.0]])


@struct.dataclass
class GameParams:
    """Payoffs (utilities) of a bimatrix game; row player picks a in [m], column player b in [n]."""

    row_payoff: jax.Array  # [m, n] u_1(a, b)
    col_payoff: jax.Array  # [m, n] u_2(a, b)


def zero_sum_game(A) -> GameParams:
    """u_1 = A, u_2 = -A."""
    A = jnp.asarray(A)
    chex.assert_rank(A, 2)
    return GameParams(row_payoff=A, col_payoff=-A)


@struct.dataclass
class JointPolicy:
    row: jax.Array  # [m]
    col: jax.Array  # [n]


@struct.dataclass
class Feedback:
    """Expected loss vectors of both players for the round just played."""

    row_loss: jax.Array  # [m]
    col_loss: jax.Array  # [n]


@struct.dataclass
class GameState:
    t: jax.Array  # rounds played
    joint_sum: jax.Array  # [m, n] sum_t x_t y_t^T


def reset(key: jax.Array, params: GameParams) -> tuple[Feedback, GameState]:
    """Empty history; the first observation is all-zero losses."""
    m, n = params.row_payoff.shape
    dtype = params.row_payoff.dtype
    obs = Feedback(row_loss=jnp.zeros(m, dtype), col_loss=jnp.zeros(n, dtype))
    return obs, GameState(t=jnp.zeros((), jnp.int32), joint_sum=jnp.zeros((m, n), dtype))


def step(key: jax.Array, state: GameState, action: JointPolicy, params: GameParams):
    """One round with expected feedback: returns (Feedback, GameState, rewards [2], done, info).

    Rewards are the expected utilities x^T u_i y; ``done`` is always False (the horizon
    belongs to the caller).  ``key`` is unused: feedback is expected, hence deterministic.
    """
    x, y = action.row, action.col
    obs = Feedback(row_loss=-params.row_payoff @ y, col_loss=-params.col_payoff.T @ x)
    rewards = jnp.stack([x @ params.row_payoff @ y, x @ params.col_payoff @ y])
    new_state = GameState(t=state.t + 1, joint_sum=state.joint_sum + jnp.outer(x, y))
    return obs, new_state, rewards, jnp.zeros((), bool), {}


def _deviation_gains(sigma: jax.Array, payoff: jax.Array) -> jax.Array:
    """G[a, a'] = sum_b sigma(a, b) (u(a', b) - u(a, b)) for the player indexing the rows."""
    return sigma @ payoff.T - jnp.sum(sigma * payoff, axis=1, keepdims=True)


def _both_players(sigma: jax.Array, params: GameParams) -> tuple[jax.Array, jax.Array]:
    chex.assert_equal_shape([sigma, params.row_payoff])
    return _deviation_gains(sigma, params.row_payoff), _deviation_gains(sigma.T, params.col_payoff.T)


def cce_gap(sigma: jax.Array, params: GameParams) -> jax.Array:
    """Maximum CCE-deviation gap of a joint distribution sigma [m, n] (docs/regret.md §9.3)."""
    return jnp.max(jnp.stack([jnp.max(jnp.sum(G, axis=0)) for G in _both_players(sigma, params)]))


def ce_gap(sigma: jax.Array, params: GameParams) -> jax.Array:
    """Pairwise CE-deviation gap max_i max_{a,a'} G_i[a, a'] (docs/regret.md §10.6)."""
    return jnp.max(jnp.stack([jnp.max(G) for G in _both_players(sigma, params)]))


def swap_gap(sigma: jax.Array, params: GameParams) -> jax.Array:
    """Full-swap gap max_i sum_a max_{a'} G_i[a, a'] (docs/regret.md §10.6)."""
    return jnp.max(jnp.stack([jnp.sum(jnp.max(G, axis=1)) for G in _both_players(sigma, params)]))


@struct.dataclass
class SelfPlay:
    """A self-play trajectory and the equilibrium gaps of the running average play."""

    row_policy: jax.Array  # [T, m]
    col_policy: jax.Array  # [T, n]
    row_loss: jax.Array  # [T, m] expected losses
    col_loss: jax.Array  # [T, n]
    gap_cce: jax.Array  # [T] gap of sigma_t = (1/t) sum_{s<=t} x_s y_s^T
    gap_ce: jax.Array  # [T]
    gap_swap: jax.Array  # [T]
    row_state: Any  # row learner's state after the last round (e.g. the swap learner's fixed-point report)
    col_state: Any  # column learner's state after the last round


def self_play(row: Learner, col: Learner, params: GameParams, T: int) -> SelfPlay:
    """Repeated play for T rounds with expected full-information feedback (docs/regret.md §9.3 protocol).

    One ``lax.scan``; the gaps are evaluated on the running average after every round.
    """

    def round_(carry, _):
        env_state, row_state, col_state = carry
        action = JointPolicy(row=row.act(row.params, row_state), col=col.act(col.params, col_state))
        obs, env_state, _, _, _ = step(None, env_state, action, params)
        row_state = row.observe(row.params, row_state, action.row, obs.row_loss)
        col_state = col.observe(col.params, col_state, action.col, obs.col_loss)
        sigma = env_state.joint_sum / env_state.t
        gaps = (cce_gap(sigma, params), ce_gap(sigma, params), swap_gap(sigma, params))
        return (env_state, row_state, col_state), (action, obs, gaps)

    _, env_state = reset(None, params)
    carry = (env_state, row.init(row.params), col.init(col.params))
    (_, row_state, col_state), (actions, feedback, gaps) = jax.lax.scan(round_, carry, None, length=T)
    return SelfPlay(
        row_policy=actions.row,
        col_policy=actions.col,
        row_loss=feedback.row_loss,
        col_loss=feedback.col_loss,
        gap_cce=gaps[0],
        gap_ce=gaps[1],
        gap_swap=gaps[2],
        row_state=row_state,
        col_state=col_state,
    )

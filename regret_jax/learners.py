"""Online learners as pure state machines, for regret curves and self-play (docs/regret.md §3.1, 9.3, 10.1).

A :class:`Learner` holds its parameters as pytree leaves and three static pure functions:
``init(params) -> state``, ``act(params, state) -> policy [d]`` and
``observe(params, state, policy, loss) -> state``.  Every learner here updates by a
running sum, so a length-T rollout is one ``lax.scan`` of O(T) steps.
"""
from __future__ import annotations

from typing import Any, Callable

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from regret_jax.attention import head_matrix, token_contributions
from regret_jax.fixed_point import fixed_point_with_residual


@struct.dataclass
class Learner:
    """An online learner: parameters (leaves) plus static init / act / observe functions."""

    params: Any
    init: Callable = struct.field(pytree_node=False)
    act: Callable = struct.field(pytree_node=False)
    observe: Callable = struct.field(pytree_node=False)


def _uniform_init(params):
    return jnp.zeros(())


def _uniform_act(params, state):
    return params["ones"] / params["ones"].shape[0]


def _uniform_observe(params, state, policy, loss):
    return state


def uniform_learner(d: int) -> Learner:
    """The non-adaptive uniform policy 1/d (baseline of docs/regret.md §8.3, 9.4, 10.6)."""
    return Learner({"ones": jnp.ones(d)}, _uniform_init, _uniform_act, _uniform_observe)


def _attention_init(params):
    return jnp.zeros_like(params["v"])


def _attention_act(params, logits):
    return jax.nn.softmax(logits)


def _attention_observe(params, logits, policy, loss):
    return logits + token_contributions(params, loss)


def attention_learner(head_params: dict) -> Learner:
    """Single-head Eq. (2) model run online: state u_t, policy softmax(u_{t-1}), u_t = u_{t-1} + (V l_t + v)(b + k^T l_t).

    With :func:`regret_jax.attention.ftrl_params` this is entropic FTRL at step eta.
    """
    return Learner(head_params, _attention_init, _attention_act, _attention_observe)


@struct.dataclass
class SwapState:
    """State of :func:`swap_learner`: the heads' running logits and the fixed point they define.

    ``x`` is FixedPoint(Q) for the current logits (the policy of the next round) and
    ``converged`` its :class:`regret_jax.FixedPointResult` flag; ``nonconverged`` counts the
    rounds played so far whose fixed point did not converge (a played x that is not a fixed point).
    """

    logits: jax.Array  # [d heads, d] u_{j,t-1}
    x: jax.Array  # [d] FixedPoint(Q_t), Q_t = [softmax(u_{1,t-1}), ...]
    converged: jax.Array  # bool, convergence flag of x
    nonconverged: jax.Array  # int32, played rounds whose fixed point did not converge


def _swap_state(logits: jax.Array, nonconverged: jax.Array) -> SwapState:
    res = fixed_point_with_residual(head_matrix(jax.nn.softmax(logits, axis=-1)))
    return SwapState(logits=logits, x=res.x, converged=res.converged, nonconverged=nonconverged)


def _swap_init(params):
    return _swap_state(jnp.zeros_like(params["heads"]["v"]), jnp.zeros((), jnp.int32))  # [d heads, d]


def _swap_act(params, state):
    return state.x


def _swap_observe(params, state, policy, loss):
    z = params["calibration"] * jnp.outer(policy, loss).reshape(-1)
    logits = state.logits + jax.vmap(token_contributions, in_axes=(0, None))(params["heads"], z)
    return _swap_state(logits, state.nonconverged + jnp.logical_not(state.converged).astype(jnp.int32))


def swap_learner(head_params: dict, calibration=1.0) -> Learner:
    """The d-head fixed-point model of Eq. (9) run through the Blum-Mansour recurrence (docs/regret.md §10.1, 10.6).

    ``head_params`` are stacked per head (layout of ``MultiHeadSimplexAttention``'s
    "heads").  Each round: q_{j,t} = softmax(u_{j,t-1}), x_t = FixedPoint(Q_t); after the
    loss, the token z_t = c_d (x_t (x) l_t) (block j = c_d x_t[j] l_t) is added to every
    head's running sum.  ``calibration`` c_d is the dimension-only calibration of
    section 4.1 (docs/regret.md §10.6: d, sqrt(d) or 1); it is a leaf, so it can be swept.
    With :func:`regret_jax.attention.bm_params` and c_d = 1 this is exact Blum-Mansour
    with Hedge copies, Eq. (56).  The state is a :class:`SwapState`; after T rounds its
    ``nonconverged`` counts the played fixed points that did not converge (callers must check it).
    """
    params = {"heads": head_params, "calibration": jnp.asarray(calibration, head_params["v"].dtype)}
    return Learner(params, _swap_init, _swap_act, _swap_observe)


def _buffer_init(params):
    return {"losses": jnp.zeros_like(params["buffer"]), "t": jnp.zeros((), jnp.int32)}


def _make_transformer_act(module: nn.Module) -> Callable:
    def act(params, state):
        policies = module.apply(params["variables"], state["losses"])
        return policies[state["t"]]

    return act


def _buffer_observe(params, state, policy, loss):
    return {"losses": state["losses"].at[state["t"]].set(loss), "t": state["t"] + 1}


def sequence_model_learner(module: nn.Module, variables: Any, horizon: int, d: int) -> Learner:
    """Any causal sequence model losses [T, d] -> policies [T, d] (e.g. the deep Transformer) run online.

    The state is a zero-padded loss buffer of length ``horizon``; round t reads row t of
    the model output, which by causality depends only on l_1..l_{t-1}.  Costs one full
    forward pass per round (O(T^2) per rollout), acceptable at the horizons used.
    """
    params = {"variables": variables, "buffer": jnp.zeros((horizon, d))}
    return Learner(params, _buffer_init, _make_transformer_act(module), _buffer_observe)


@struct.dataclass
class Rollout:
    """An online run against a fixed loss sequence."""

    policies: jax.Array  # [T, d] played policies
    states: Any  # learner state before each decision, stacked on a leading T axis
    final_state: Any  # learner state after the last loss


def run_online(learner: Learner, losses: jax.Array) -> Rollout:
    """Play ``learner`` against an oblivious loss sequence [T, d] with full information (docs/regret.md §3.1)."""
    chex.assert_rank(losses, 2)

    def round_(state, loss):
        policy = learner.act(learner.params, state)
        return learner.observe(learner.params, state, policy, loss), (policy, state)

    final, (policies, states) = jax.lax.scan(round_, learner.init(learner.params), losses)
    return Rollout(policies=policies, states=states, final_state=final)

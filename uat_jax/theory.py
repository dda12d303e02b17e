"""Numerical counterparts of the UAT paper's theory (sections 3.2, 4.2, 5; Appendix A, D.3).

- Zero degradation (section 4.2, Theorem 1 part 1): with W_s = W_rho = 0 every gate is
  0 and UAT computes exactly the Vanilla-TF with the same base weights
  (``backbone_params`` drops the utility parameters; ``zero_gates`` silences them).
- Proposition 1: an observation-only model is blind to feedback
  (``feedback_sensitivity`` measures how much the logits move when only (a, r) change).
- Theorem 1 part 2 (Appendix A.3): ``separating_uat`` builds the UAT of the proof for a
  pair of histories with equal observations and different feedback at step j*, and
  ``logit_gap`` is the closed form of the resulting layer-1 attention-logit gap.
- Appendix D.3: ``overhead_formula`` (3 L d^2, 3 L d_m d, (L + 1) H d_m d_u, |phi_u|)
  and ``overhead_counted`` (the same groups counted in a parameter tree).
- Trained probes (study ``uat.theory``): ``random_walks`` draws DarkRoom episodes of a
  uniform random behaviour policy with the expert label at every visited state and the
  rewards the same moves would have earned under a second goal (an observation-
  equivalent, feedback-distinct history, Definition 2); ``behaviour_cloning`` fits a model
  to fresh batches of them (Eq. 18, the dataset-supplied mode of section 4.3);
  ``imitation`` and ``policy_tv`` measure the fitted policy on held-out episodes.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct, traverse_util

from uat_jax import darkroom
from uat_jax.config import ModelConfig
from uat_jax.feedback import shift
from uat_jax.model import DecisionTransformer, init_cache, init_params, sequence_logits
from uat_jax.train import cross_entropy
from uat_jax.utility import UtilityEncoder

AFFINE = ("W_Q_u", "W_K_u", "W_V_u")
BIAS = ("U_Q", "U_K", "U_V")
GATES = ("local_gate", "regime_readout")
ENCODER = ("utility_encoder",)
UTILITY = AFFINE + BIAS + GATES + ENCODER


def _flat(params) -> dict:
    return traverse_util.flatten_dict(params)


def _in_group(path: tuple, names: tuple) -> bool:
    return any(name in path for name in names)


def backbone_params(params):
    """The UAT parameters without any utility parameter: a Vanilla-TF parameter tree."""
    flat = _flat(params)
    return traverse_util.unflatten_dict({p: v for p, v in flat.items() if not _in_group(p, UTILITY)})


def zero_gates(params):
    """``params`` with the gate readouts W_s (every layer) and W_rho set to zero."""
    flat = _flat(params)
    return traverse_util.unflatten_dict(
        {p: jnp.zeros_like(v) if _in_group(p, GATES) else v for p, v in flat.items()})


def count(params) -> int:
    """Number of scalars in a parameter tree."""
    return int(sum(np.size(leaf) for leaf in jax.tree.leaves(params)))


def param_count(cfg: ModelConfig) -> int:
    """Parameters of the model ``cfg``: :func:`count` of its parameter shapes (nothing is allocated)."""
    model = DecisionTransformer(cfg)
    return count(jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0)))


def overhead_formula(cfg: ModelConfig) -> dict[str, int]:
    """Appendix D.3: extra parameters of UAT over its Vanilla-TF backbone, by group.

    |phi_u| (given in D.3 only as "negligible") is f_a (n_actions x d_act) plus the
    two-layer MLP (d_act + 1 -> hidden -> d_u, with biases) of ``utility.py``."""
    L, d, H, dm, du = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.d_u
    encoder = (cfg.n_actions * cfg.d_act + (cfg.d_act + 1) * cfg.ue_hidden + cfg.ue_hidden
               + cfg.ue_hidden * du + du)
    return {"affine": 3 * L * d * d, "bias": 3 * L * dm * d, "gates": (L + 1) * H * dm * du,
            "encoder": encoder}


def overhead_counted(params) -> dict[str, int]:
    """Counted parameters of a UAT tree in the groups of ``overhead_formula``."""
    flat = _flat(params)
    groups = {"affine": AFFINE, "bias": BIAS, "gates": GATES, "encoder": ENCODER}
    return {g: int(sum(np.size(v) for p, v in flat.items() if _in_group(p, names)))
            for g, names in groups.items()}


def feedback_sensitivity(model: DecisionTransformer, params, obs, feedback_a, feedback_b) -> jax.Array:
    """max |logits(H) - logits(H')| over steps, for two histories with observations
    ``obs`` [T, obs_dim] and feedback (actions [T], rewards [T]) a and b (Prop. 1)."""
    la = sequence_logits(model, params, obs, *feedback_a)
    lb = sequence_logits(model, params, obs, *feedback_b)
    return jnp.max(jnp.abs(la - lb))


def attention_intermediates(model: DecisionTransformer, params, obs, actions, rewards):
    """(layer inputs [L, T, d], attention logits [L, H, T, T]) of the parallel pass."""
    prev_a, prev_r = shift(actions, rewards)
    _, state = model.apply(params, obs, prev_a, prev_r, init_cache(model.cfg),
                           mutable=["intermediates"])
    inter = state["intermediates"]["blocks"]["attn"]
    return inter["attn_input"][0], inter["attn_logits"][0]


def separating_uat(model: DecisionTransformer, params, key, obs, feedback_a, feedback_b,
                   j_star: int, t: int):
    """Theorem 1 part 2: the UAT of Appendix A.3 separating H and H'.

    H, H' share ``obs`` and differ only in the feedback (a_{j*}, r_{j*}) at step
    ``j_star`` (0-based), which the model sees at step j* + 1. Construction, in layer 1,
    head 1: every utility parameter is zero except W_s^(1,1) (drawn N(0, 1) from ``key``,
    so that g_{j*+1} != g'_{j*+1} by Assumption 2) and row k of W_K^(u,1), where
    k = argmax_m |g_{j*+1} - g'_{j*+1}|_m; that row is x_{j*+1} / |x_{j*+1}|^2 and row k of
    W_Q^(1) is x_t / |x_t|^2 with zero bias, x the layer-1 input. Then
    ell_{t,j*+1}(H) - ell_{t,j*+1}(H') = d_k / sqrt(d_m) (see ``logit_gap``) and every
    other logit of layer 1 is unchanged. Returns (params, k)."""
    cfg = model.cfg
    if not (cfg.kind == "uat" and cfg.modulate_kv):
        raise ValueError("separating_uat needs kind='uat' with modulate_kv=True")
    if not 0 <= j_star < t < cfg.horizon:
        raise ValueError(f"need 0 <= j_star < t < horizon, got j_star={j_star}, t={t}")
    flat = {p: (jnp.zeros_like(v) if _in_group(p, AFFINE + BIAS + GATES) else v)
            for p, v in _flat(params).items()}
    gate_path = next(p for p in flat if "local_gate" in p)
    w_s = jax.random.normal(key, flat[gate_path].shape[2:])
    flat[gate_path] = flat[gate_path].at[0, 0].set(w_s)
    probe = traverse_util.unflatten_dict(flat)
    gap = _local_gate(model, probe, feedback_a, j_star) - _local_gate(model, probe, feedback_b, j_star)
    k = int(jnp.argmax(jnp.abs(gap)))
    x = attention_intermediates(model, probe, obs, *feedback_a)[0][0]
    x_key, x_query = x[j_star + 1], x[t]
    wk_path = next(p for p in flat if "W_K_u" in p)
    flat[wk_path] = flat[wk_path].at[0, 0, k].set(x_key / jnp.sum(x_key ** 2))
    wq_kernel = next(p for p in flat if "W_Q" in p and p[-1] == "kernel")
    flat[wq_kernel] = flat[wq_kernel].at[0, :, 0, k].set(x_query / jnp.sum(x_query ** 2))
    wq_bias = wq_kernel[:-1] + ("bias",)
    flat[wq_bias] = flat[wq_bias].at[0, 0, k].set(0.0)
    return traverse_util.unflatten_dict(flat), k


def _local_gate(model: DecisionTransformer, params, feedback, j_star: int) -> jax.Array:
    """g^(1,1) at step j* + 1, the first step that sees the feedback of step j*."""
    cfg = model.cfg
    flat = _flat(params)
    enc = traverse_util.unflatten_dict({p[2:]: v for p, v in flat.items() if p[1] == "utility_encoder"})
    prev_a, prev_r = shift(*feedback)
    u = UtilityEncoder(cfg).apply({"params": enc}, prev_a, prev_r)
    w_s = next(v for p, v in flat.items() if "local_gate" in p)[0, 0]
    return jnp.tanh(w_s @ u[j_star + 1])


def logit_gap(model: DecisionTransformer, params, feedback_a, feedback_b, j_star: int, k: int) -> jax.Array:
    """Closed form of Appendix A.3 for the constructed UAT: d_k / sqrt(d_m), with d the
    layer-1, head-1 gate gap at step j* + 1."""
    d = _local_gate(model, params, feedback_a, j_star) - _local_gate(model, params, feedback_b, j_star)
    return d[k] / jnp.sqrt(model.cfg.d_head)


@struct.dataclass
class Probes:
    """DarkRoom episodes of a random behaviour policy; every field is [n, T, ...]."""

    obs: jax.Array  # [n, T, obs_dim]
    actions: jax.Array  # [n, T] int32, uniform random
    rewards: jax.Array  # [n, T] realised under the episode's goal
    alt_rewards: jax.Array  # [n, T] the same moves rewarded under a second, different goal
    expert: jax.Array  # [n, T] int32 expert action at the visited state (the label)
    positions: jax.Array  # [n, T, 2] int32 position before acting at step t
    goal: jax.Array  # [n, 2] int32
    alt_goal: jax.Array  # [n, 2] int32, != goal


def random_walks(key: jax.Array, n: int, horizon: int, size: int = 10) -> Probes:
    """``n`` episodes of ``horizon`` steps: goal uniform on the grid, the second goal
    uniform on the other cells, actions uniform; positions (hence observations, which
    are kept) do not depend on the goal, so (obs, actions, alt_rewards) is a history
    with the same observations and different feedback."""
    cells, n_actions = size * size, darkroom.MOVES.shape[0]
    to_pos = lambda i: jnp.stack([i // size, i % size]).astype(jnp.int32)  # noqa: E731

    def one(k):
        k_goal, k_alt, k_reset, k_act, k_env = jax.random.split(k, 5)
        goal = jax.random.randint(k_goal, (), 0, cells)
        alt = (goal + 1 + jax.random.randint(k_alt, (), 0, cells - 1)) % cells
        env = darkroom.EnvParams(goal=to_pos(goal), size=size, horizon=horizon)
        alt_env = env.replace(goal=to_pos(alt))
        actions = jax.random.randint(k_act, (horizon,), 0, n_actions).astype(jnp.int32)

        def body(carry, t):
            obs, state = carry
            k_t = jax.random.fold_in(k_env, t)
            nxt, new_state, reward, _, _ = darkroom.step(k_t, state, actions[t], env)
            _, _, alt_reward, _, _ = darkroom.step(k_t, state, actions[t], alt_env)
            expert = darkroom.expert_action(state.pos, env.goal)
            return (nxt, new_state), (obs, reward, alt_reward, expert, state.pos)

        _, (obs, rewards, alt_rewards, expert, positions) = jax.lax.scan(
            body, darkroom.reset(k_reset, env), jnp.arange(horizon))
        return Probes(obs=obs, actions=actions, rewards=rewards, alt_rewards=alt_rewards, expert=expert,
                      positions=positions, goal=env.goal, alt_goal=alt_env.goal)

    return jax.vmap(one)(jax.random.split(key, n))


def _batch_logits(model: DecisionTransformer, params, obs, actions, rewards, key=None) -> jax.Array:
    """Parallel-pass logits [n, T, A] of n episodes (dropout when ``key`` is given)."""
    if key is None:
        return jax.vmap(lambda o, a, r: sequence_logits(model, params, o, a, r))(obs, actions, rewards)
    keys = jax.random.split(key, obs.shape[0])
    return jax.vmap(lambda o, a, r, k: sequence_logits(model, params, o, a, r, k))(obs, actions, rewards, keys)


def behaviour_cloning(model: DecisionTransformer, optimizer: optax.GradientTransformation, key: jax.Array,
                      steps: int, batch: int, reward_scale: jax.Array = 1.0):
    """``steps`` optimiser steps on Eq. (18), each on ``batch`` fresh ``random_walks``
    (no episode is seen twice, so the fit cannot memorise), fed ``reward_scale`` times the
    rewards (0: null feedback), from ``init_params`` at ``key``; returns (params, losses [steps])."""
    k_init, k_data, k_drop = jax.random.split(key, 3)
    params = init_params(model, k_init)
    horizon = model.cfg.horizon

    def loss_fn(p, i):
        data = random_walks(jax.random.fold_in(k_data, i), batch, horizon)
        logits = _batch_logits(model, p, data.obs, data.actions, reward_scale * data.rewards,
                               jax.random.fold_in(k_drop, i))
        return cross_entropy(logits, data.expert)

    def step(carry, i):
        p, opt_state = carry
        loss, grads = jax.value_and_grad(loss_fn)(p, i)
        updates, opt_state = optimizer.update(grads, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), loss

    (params, _), losses = jax.lax.scan(step, (params, optimizer.init(params)), jnp.arange(steps))
    return params, losses


def imitation(model: DecisionTransformer, params, probes: Probes, rewards: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(cross-entropy, argmax accuracy) against the expert labels, without dropout."""
    logits = _batch_logits(model, params, probes.obs, probes.actions, rewards)
    return cross_entropy(logits, probes.expert), jnp.mean(logits.argmax(-1) == probes.expert)


def policy_tv(model: DecisionTransformer, params, probes: Probes, rewards_a: jax.Array,
              rewards_b: jax.Array) -> jax.Array:
    """Mean over episodes and steps of the total variation 0.5 |pi(.|H) - pi(.|H')|_1
    between the histories fed ``rewards_a`` and ``rewards_b`` (same obs and actions)."""
    pa, pb = (jax.nn.softmax(_batch_logits(model, params, probes.obs, probes.actions, r)) for r in (rewards_a, rewards_b))
    return 0.5 * jnp.abs(pa - pb).sum(-1).mean()

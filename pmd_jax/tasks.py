"""Task families, held-out splits and the input prior of the learned actor (PolicyAttention, arXiv 2609.30500,
sections 9 and 11: "all learned results use S=4, A=3, gamma=0.8 and generated task families with held-out splits").

The paper names its families but gives no generator; the families below are OUR declaration
(``docs/pmd.md`` section 7). Every family has ``S = 4``, ``A = 3``, ``gamma = 0.8`` by default and draws its
arrays in the default float dtype (float32, float64 under x64):

* ``"iid"`` -- exactly :class:`pmd_jax.mdp.RandomMDPFamily` with ``r_max = 1``, ``concentration = 1``:
  ``P(.|s,a) ~ Dirichlet(1, ..., 1)``, ``R(s,a) ~ U[-1, 1]`` iid;
* ``"reward_x2"`` -- the same with ``R(s,a) ~ U[-2, 2]`` (a different reward scale);
* ``"bimodal_rewards"`` -- Dirichlet(1) transitions, ``R(s,a) = sign * U[0.5, 1]`` with ``sign = +-1`` at
  probability 1/2 each (``0.5 <= |R| <= 1``: no reward mass near zero);
* ``"sparse_transitions"`` -- each ``(s,a)`` has exactly 2 distinct successors, the pair drawn uniformly among the
  ``S(S-1)/2`` pairs, with ``Dirichlet(1, 1)`` weights on them; ``R ~ U[-1, 1]``;
* ``"near_deterministic"`` -- ``P(.|s,a) = 0.9 onehot(s*) + 0.1 Dirichlet(1, ..., 1)`` with ``s*`` uniform over the
  states; ``R ~ U[-1, 1]``.

Splits (``"train"``, ``"val"``, ``"test"``) draw from separate key streams, ``split_key``; each family folds its
index into its split's stream, so different families on one split are different MDPs.

The actor's inputs (issue 12, part 1) are a policy from the stated prior ``sample_policy``, its exact ``Q^pi`` and
a step ``eta ~ U[ETA_RANGE]``, packed as :class:`ActorInputs`. All samplers are jit-safe in the key; family, split
and entropy names are static Python strings.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from pmd_jax.mdp import FiniteMDP, RandomMDPFamily, policy_evaluation

FAMILIES = ("iid", "reward_x2", "bimodal_rewards", "sparse_transitions", "near_deterministic")
SPLITS = ("train", "val", "test")
# Ranges of the inverse temperature beta of the policy prior (``sample_policy``).
POLICY_ENTROPY = {"any": (0.1, 10.0), "low": (4.0, 10.0), "high": (0.1, 0.3)}
# Floor on the prior's log-probabilities, so every probability is a normal float32 (e^-40 ~ 4e-18 > 1.2e-38).
POLICY_LOG_FLOOR = -40.0
ETA_RANGE = (0.4, 1.2)  # the actor's training range of step sizes


def _float_dtype():
    return jnp.asarray(1.0).dtype


def _check_name(field: str, value, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {tuple(allowed)}, got {value!r}")


def _check_shape(num_states, num_actions, family: str) -> None:
    min_states = 2 if family == "sparse_transitions" else 1
    if not isinstance(num_states, int) or num_states < min_states:
        raise ValueError(f"num_states must be an int >= {min_states} for family {family!r}, got {num_states!r}")
    if not isinstance(num_actions, int) or num_actions < 1:
        raise ValueError(f"num_actions must be an int >= 1, got {num_actions!r}")


def sample_mdp(family: str, key: jax.Array, num_states: int = 4, num_actions: int = 3, gamma=0.8) -> FiniteMDP:
    """One MDP of ``family`` (module docstring). jit-safe in ``key`` (and ``gamma``)."""
    _check_name("family", family, FAMILIES)
    _check_shape(num_states, num_actions, family)
    S, A = num_states, num_actions
    dtype = _float_dtype()
    r_max = 2.0 if family == "reward_x2" else 1.0
    dense = RandomMDPFamily(
        gamma=jnp.asarray(gamma, dtype), r_max=jnp.asarray(r_max, dtype), concentration=jnp.asarray(1.0, dtype),
        num_states=S, num_actions=A,
    )
    if family in ("iid", "reward_x2"):
        return dense.sample(key)
    k_dense, k_extra, k_weights = jax.random.split(key, 3)
    mdp = dense.sample(k_dense)
    if family == "bimodal_rewards":
        k_sign, k_mag = jax.random.split(k_extra)
        sign = jnp.where(jax.random.bernoulli(k_sign, 0.5, (S, A)), 1.0, -1.0).astype(dtype)
        return mdp.replace(R=sign * jax.random.uniform(k_mag, (S, A), dtype, 0.5, 1.0))
    if family == "sparse_transitions":
        # The first two entries of a uniform random permutation: a uniform pair of distinct successors.
        successors = jnp.argsort(jax.random.uniform(k_extra, (S, A, S)), axis=-1)[..., :2]
        w = jax.random.dirichlet(k_weights, jnp.ones((2,), dtype), shape=(S, A)).astype(dtype)
        P = jnp.einsum("xak,xaky->xay", w, jax.nn.one_hot(successors, S, dtype=dtype))
        return mdp.replace(P=P)
    successor = jax.random.randint(k_extra, (S, A), 0, S)
    return mdp.replace(P=0.9 * jax.nn.one_hot(successor, S, dtype=dtype) + 0.1 * mdp.P)


def split_key(split: str, seed: int = 0) -> jax.Array:
    """The key stream of ``split``: ``fold_in(key(seed), 1000 + SPLITS.index(split))``."""
    _check_name("split", split, SPLITS)
    return jax.random.fold_in(jax.random.key(seed), 1000 + SPLITS.index(split))


def split_mdps(family: str, split: str, n: int, seed: int = 0, **shape) -> FiniteMDP:
    """``n`` MDPs of ``family`` from ``split`` (leading axis ``n``); ``shape``: ``num_states, num_actions, gamma``.

    MDP ``i`` is drawn from key ``i`` of ``split(stream, n)`` (splitting is prefix-stable) by one compiled program
    per family and shape that draws blocks of :data:`MDP_BLOCK` keys, so MDP ``i`` is bitwise the same for every
    ``n > i`` and the studies' many small draws share one program per family."""
    _check_name("family", family, FAMILIES)
    _check_name("split", split, SPLITS)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    blocks = -(-n // MDP_BLOCK)
    keys = jax.random.split(jax.random.fold_in(split_key(split, seed), FAMILIES.index(family)), blocks * MDP_BLOCK)
    shape = tuple(sorted(shape.items()))
    drawn = [_draw_block(family, shape, keys[i * MDP_BLOCK:(i + 1) * MDP_BLOCK]) for i in range(blocks)]
    return jax.tree.map(lambda *x: jnp.concatenate(x)[:n], *drawn)


MDP_BLOCK = 64


@functools.partial(jax.jit, static_argnums=(0, 1))
def _draw_block(family: str, shape: tuple, keys: jax.Array) -> FiniteMDP:
    return jax.vmap(lambda k: sample_mdp(family, k, **dict(shape)))(keys)


def sample_policy(key: jax.Array, num_states: int, num_actions: int, entropy: str = "any") -> jax.Array:
    """A policy ``pi [S, A]`` from the stated prior over policies.

    ``pi(.|s) = softmax(beta g_s)`` with ``g_{s,a} ~ N(0, 1)`` iid and ONE ``beta ~ LogUniform(POLICY_ENTROPY[entropy])``
    per policy: ``"low"`` entropy (``beta in [4, 10]``) gives near-deterministic rows, ``"high"``
    (``beta in [0.1, 0.3]``) near-uniform rows, ``"any"`` spans both. The log-probabilities are floored at
    ``POLICY_LOG_FLOOR = -40`` and renormalised, so every probability is strictly positive and finite in float32
    (the floor binds only on rows with a log-probability below -40, roughly ``beta`` times a gap of ``g_s`` above 40).
    """
    _check_name("entropy", entropy, POLICY_ENTROPY)
    _check_shape(num_states, num_actions, "iid")
    dtype = _float_dtype()
    lo, hi = POLICY_ENTROPY[entropy]
    k_beta, k_g = jax.random.split(key)
    beta = jnp.exp(jax.random.uniform(k_beta, (), dtype, jnp.log(lo), jnp.log(hi)))
    g = jax.random.normal(k_g, (num_states, num_actions), dtype)
    log_pi = jnp.maximum(jax.nn.log_softmax(beta * g, axis=-1), POLICY_LOG_FLOOR)
    return jax.nn.softmax(log_pi, axis=-1)


@struct.dataclass
class ActorInputs:
    """One input of the actor: an MDP, a policy ``pi [S, A]``, its exact ``Q [S, A] = Q^pi`` and a step ``eta []``."""

    mdp: FiniteMDP
    pi: jax.Array
    Q: jax.Array
    eta: jax.Array


def sample_actor_inputs(key: jax.Array, mdp: FiniteMDP, entropy: str = "any", eta=None) -> ActorInputs:
    """``pi ~ sample_policy(entropy)``, ``Q = policy_evaluation(mdp, pi)``, ``eta ~ U[ETA_RANGE]`` unless given.

    ``eta`` may be a traced scalar; vmap over ``(key, mdp)`` draws a batch.
    """
    k_pi, k_eta = jax.random.split(key)
    dtype = mdp.R.dtype
    pi = sample_policy(k_pi, mdp.num_states, mdp.num_actions, entropy).astype(dtype)
    if eta is None:
        eta = jax.random.uniform(k_eta, (), dtype, *ETA_RANGE)
    return ActorInputs(mdp=mdp, pi=pi, Q=policy_evaluation(mdp, pi), eta=jnp.asarray(eta, dtype))

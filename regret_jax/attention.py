"""Single-layer linear self-attention on the simplex, Eqs. (1)-(2) and the d-head Eq. (9).

Reduced form (docs/regret.md section 2.2, Eq. (2)) of one head, on input tokens z_i in R^n:

    u_t = sum_{i<=t} (V z_i + v) (b + k^T z_i),        pi_{t+1} = softmax(u_t),

with V in R^{d x n}, v in R^d, k in R^n, b a scalar.  The attention score of token i
against the fixed query is b + k^T z_i, so every token contributes a term that does not
depend on the other tokens; the causal logits are therefore the *exclusive* running sum
of per-token contributions (O(T) work, no quadratic loop).  Causal reading (docs/regret.md §2.1):
the policy of round t sees z_1..z_{t-1}; round 1 sees the empty sum, u_0 = 0, so
pi_1 = softmax(0) is uniform.  No 1/t normalisation is applied (docs/regret.md §2.1), which keeps
the FTRL correspondence of Theorem 1 exact.
"""
from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

Params = dict  # {"V": [d, n], "k": [n], "v": [d], "b": []}


def full_to_reduced(V, K, Q, v_c, k_c, q_c, c) -> Params:
    """Map the Eq. (1) parameters (V, K, Q, v_c, k_c, q_c) and placeholder c to Eq. (2).

    Expanding <K z + k_c, Q c + q_c> = k^T z + b gives k = K^T (Q c + q_c) and
    b = k_c^T (Q c + q_c); the value bias becomes v = v_c (docs/regret.md section 2.2).  The map
    is onto, which is the paper's "same representation power".
    """
    query = Q @ c + q_c
    return {"V": V, "k": K.T @ query, "v": v_c, "b": k_c @ query}


def token_contributions(params: Params, z: jax.Array) -> jax.Array:
    """Per-token summand (V z + v)(b + k^T z) of Eq. (2); z [..., n] -> [..., d]."""
    chex.assert_equal(z.shape[-1], params["V"].shape[1])
    value = z @ params["V"].T + params["v"]
    score = z @ params["k"] + params["b"]
    return value * score[..., None]


def causal_logits(params: Params, z: jax.Array) -> jax.Array:
    """Logits u_{t-1} used at rounds t = 1..T of Eq. (2); z [T, n] -> [T, d].

    Row t-1 (0-based) is sum_{i<t} of :func:`token_contributions`, an exclusive running
    sum, so row 0 is zero (uniform first policy).
    """
    chex.assert_rank(z, 2)
    contrib = token_contributions(params, z)
    inclusive = jnp.cumsum(contrib, axis=0)
    return jnp.concatenate([jnp.zeros_like(contrib[:1]), inclusive[:-1]], axis=0)


def _zero_sum_projector(d: int) -> jax.Array:
    """P = I - 11^T/d, the projector orthogonal to the all-ones vector (docs/regret.md section 1)."""
    return jnp.eye(d) - jnp.ones((d, d)) / d


def ftrl_params(d: int, eta) -> Params:
    """The Theorem-1 stationary configuration k = 0, v = 0, b = 1, V = -eta P (docs/regret.md §2.3).

    Its forward pass is softmax(-eta P L_{t-1}) = softmax(-eta L_{t-1}), entropic FTRL.
    ``eta`` may be a traced scalar.
    """
    return {"V": -eta * _zero_sum_projector(d), "k": jnp.zeros(d), "v": jnp.zeros(d), "b": jnp.ones(())}


def bm_params(d: int, eta) -> Params:
    """The Theorem-2 configuration of all d heads, stacked on a leading head axis (docs/regret.md §10.4).

    V_j = e_j^T (x) (-eta P) in R^{d x d^2} (head j reads only input block j), k_j = 0,
    v_j = 0, b_j = 1.  Layout matches :class:`MultiHeadSimplexAttention`'s "heads".
    """
    blocks = jnp.einsum("ji,ac->jaic", jnp.eye(d), -eta * _zero_sum_projector(d))
    return {
        "V": blocks.reshape(d, d, d * d),
        "k": jnp.zeros((d, d * d)),
        "v": jnp.zeros((d, d)),
        "b": jnp.ones((d,)),
    }


class AttentionLogits(nn.Module):
    """One head of Eq. (2) as a flax module: z [T, n] -> causal logits [T, d].

    Initialisation (engineer's choice, docs/regret.md §7.1): V, k, v ~ N(0, init_scale^2), b = 1.
    """

    d: int
    init_scale: float = 0.1

    @nn.compact
    def __call__(self, z: jax.Array) -> jax.Array:
        n = z.shape[-1]
        init = nn.initializers.normal(self.init_scale)
        params = {
            "V": self.param("V", init, (self.d, n)),
            "k": self.param("k", init, (n,)),
            "v": self.param("v", init, (self.d,)),
            "b": self.param("b", nn.initializers.ones, ()),
        }
        return causal_logits(params, z)


class SimplexAttention(nn.Module):
    """Single-head model of Eqs. (1)-(2) with Operator = softmax: losses [T, d] -> pi [T, d]."""

    d: int
    init_scale: float = 0.1

    @nn.compact
    def __call__(self, losses: jax.Array) -> jax.Array:
        chex.assert_shape(losses, (None, self.d))
        return jax.nn.softmax(AttentionLogits(self.d, self.init_scale, name="head")(losses), axis=-1)


class MultiHeadSimplexAttention(nn.Module):
    """The d-head module of Eq. (9): tokens z [T, d*d] -> head policies q [T, d, d].

    Head j has its own reduced-form parameters (V_j in R^{d x d^2}, k_j in R^{d^2},
    v_j, b_j) and output q_{j,t} = softmax(u_{j,t-1}); ``q[t, j]`` is column j of the
    column-stochastic matrix Q_t (see :func:`head_matrix`).
    """

    d: int
    init_scale: float = 0.1

    @nn.compact
    def __call__(self, z: jax.Array) -> jax.Array:
        chex.assert_shape(z, (None, self.d * self.d))
        heads = nn.vmap(
            AttentionLogits,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=None,
            out_axes=1,
            axis_size=self.d,
        )(self.d, self.init_scale, name="heads")
        return jax.nn.softmax(heads(z), axis=-1)


def head_matrix(q: jax.Array) -> jax.Array:
    """Q = [q_1, ..., q_d] with head policies as columns (Eq. (9)); q [..., d, d] -> Q."""
    return jnp.swapaxes(q, -1, -2)

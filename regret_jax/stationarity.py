"""Theorem 1 numerics: the ray function F(eta) = E[R(eta)^2] along V = -eta P (docs/regret.md §5-6).

Along the ray (k = 0, v = 0, b = 1, V = -eta P) the policy is pi_t = softmax(-eta L_{t-1})
and, with l_t ~ N(0, I_d) i.i.d. (Eq. (23)),

    R(eta)  = sum_t <pi_t, l_t> - min_a L_{T,a}
    R'(eta) = - sum_t L_{t-1}^T J_t l_t,   J_t = diag(pi_t) - pi_t pi_t^T        (Eq. (24))
    F'(eta) = 2 E[R R'].

The scan evaluates every eta of a grid on the *same* sequences (common random numbers).
Exact small-eta values (docs/regret.md §5.4, re-derived here).  Write L_T = sqrt(T) Z, Z ~ N(0, I).
At eta = 0, R = mean_a(L_T) - min_a L_T = sqrt(T) g(PZ) with g(y) = max_a(-y_a).

* F(0): R/sqrt(T) = max_a W_a - mean(W) with W = -Z; mean(W) is independent of PW and
  E[max W mean W] = E[mean(W)^2] = 1/d, so F(0) = T (E[(max_a Z_a)^2] - 1/d).
* F'(0): J = P/d, so F'(0) = -(2/d) sum_t E[R L_{t-1}^T P l_t].  Given L_T the increments
  are l_s = L_T/T + xi_s with a Gaussian bridge Cov(xi_s, xi_r) = (delta_sr - 1/T) I, hence
  E[L_{t-1}^T P l_t | L_T] = (t-1)(|P L_T|^2/T^2 - (d-1)/T).  Summing over t and using
  Stein's lemma with Euler's identity for the 1-homogeneous g on the (d-1)-dimensional
  range of P, E[g(Y)(|Y|^2 - (d-1))] = E[Y.grad g(Y)] = E[g(Y)] = mu_d, which gives
  F'(0) = -(T-1) sqrt(T) mu_d / d.
Both identities are tested against Monte-Carlo in tests/regret_jax.
"""
from __future__ import annotations

from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from scipy.special import ndtr

from regret_jax.attention import MultiHeadSimplexAttention, bm_params, causal_logits, ftrl_params
from regret_jax.regret import external_regret
from regret_jax.regret_loss import flat_normal, swap_regrets


def _max_gaussian_moment(d: int, power: int) -> float:
    """E[(max_a Z_a)^power] for Z ~ N(0, I_d) by quadrature of the density d phi Phi^{d-1} (float64)."""
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    x = np.linspace(-14.0, 14.0, 280_001)
    density = d * np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi) * ndtr(x) ** (d - 1)
    return float(np.trapezoid(x**power * density, x))


def mu_d(d: int) -> float:
    """mu_d = E[max of d i.i.d. N(0,1)] (docs/regret.md §4.4); E[Regret] = sqrt(T) mu_d for every eta."""
    return _max_gaussian_moment(d, 1)


def exact_F0(d: int, T: int) -> float:
    """F(0) = T (E[(max_a Z_a)^2] - 1/d), docs/regret.md §5.4 (derivation in the module docstring)."""
    return T * (_max_gaussian_moment(d, 2) - 1.0 / d)


def exact_dF0(d: int, T: int) -> float:
    """F'(0) = -(T-1) sqrt(T) mu_d / d < 0, docs/regret.md §5.4: the comparator term dominates at small eta."""
    return -(T - 1) * np.sqrt(T) * mu_d(d) / d


def ray_regret(losses: jax.Array, etas: jax.Array) -> tuple[jax.Array, jax.Array]:
    """R(eta) and R'(eta) of Eqs. (23)-(24) for one sequence [T, d] and a grid of etas [E].

    A ``lax.scan`` over rounds carries L_{t-1}, so memory is O(E d) per sequence; every
    eta uses the same sequence (common random numbers).  Returns (R [E], dR [E]).
    """
    chex.assert_rank(losses, 2)
    chex.assert_rank(etas, 1)
    d = losses.shape[1]
    zeros = jnp.zeros(etas.shape, losses.dtype)

    def round_(carry, loss):
        cum, R, dR = carry
        pi = jax.nn.softmax(-etas[:, None] * cum, axis=-1)  # [E, d]
        pi_loss = pi @ loss
        # L^T J l = sum_a pi_a L_a l_a - (pi.L)(pi.l)
        jac_term = pi @ (cum * loss) - (pi @ cum) * pi_loss
        return (cum + loss, R + pi_loss, dR - jac_term), None

    (cum, R, dR), _ = jax.lax.scan(round_, (jnp.zeros(d, losses.dtype), zeros, zeros), losses)
    return R - jnp.min(cum), dR


@struct.dataclass
class RayEstimate:
    """Monte-Carlo moments on an eta grid [E] from N sequences (docs/regret.md §6.1 step 3)."""

    F: jax.Array  # [E] mean R^2
    dF: jax.Array  # [E] mean 2 R R'
    dF_se: jax.Array  # [E] standard error of dF
    mean_R: jax.Array  # [E] mean R (should be sqrt(T) mu_d at every eta)
    mean_R_se: jax.Array  # [E]


def ray_estimate(R: jax.Array, dR: jax.Array) -> RayEstimate:
    """Sample moments of (R, R') [N, E] over the sequence axis: F, F', se(F'), E[R] and its se."""
    chex.assert_equal_shape([R, dR])
    n = R.shape[0]
    g = 2 * R * dR
    return RayEstimate(
        F=jnp.mean(R**2, axis=0),
        dF=jnp.mean(g, axis=0),
        dF_se=jnp.std(g, axis=0, ddof=1) / jnp.sqrt(n),
        mean_R=jnp.mean(R, axis=0),
        mean_R_se=jnp.std(R, axis=0, ddof=1) / jnp.sqrt(n),
    )


@struct.dataclass
class Root:
    """The - to + sign change of F' on a grid (docs/regret.md §6.1 step 4)."""

    eta: jax.Array  # root eta*, NaN if F' never goes from - to +
    se: jax.Array  # se(F' at the root) / |slope|
    sign_changes: jax.Array  # number of sign changes of the estimated F' on the grid


def find_root(etas: jax.Array, dF: jax.Array, dF_se: jax.Array, window: int = 2) -> Root:
    """Root of F' from its estimates on an increasing eta grid [E] (jittable, vmappable).

    Locates the first - to + sign change between grid points i and i+1, fits a straight
    line by least squares to the ``2*window`` points i-window+1..i+window (clipped to the
    grid), and returns its zero with standard error se_interp(F') / |slope| (delta
    method, docs/regret.md §6.1).  ``sign_changes`` counts every sign change of the estimated F'.
    """
    chex.assert_equal_shape([etas, dF, dF_se])
    E = etas.shape[0]
    if E < 2 * window:
        raise ValueError(f"grid must have at least 2*window = {2 * window} points, got {E}")
    sign = jnp.sign(dF)
    changes = sign[1:] != sign[:-1]
    up = (sign[:-1] < 0) & (sign[1:] > 0)
    found = jnp.any(up)
    i = jnp.argmax(up)
    start = jnp.clip(i - window + 1, 0, E - 2 * window)
    xs = jax.lax.dynamic_slice(etas, (start,), (2 * window,))
    ys = jax.lax.dynamic_slice(dF, (start,), (2 * window,))
    xm, ym = jnp.mean(xs), jnp.mean(ys)
    slope = jnp.sum((xs - xm) * (ys - ym)) / jnp.sum((xs - xm) ** 2)
    root = xm - ym / slope
    # standard error of F' at the root, interpolated between the bracketing points
    w = jnp.clip((root - etas[i]) / (etas[i + 1] - etas[i]), 0.0, 1.0)
    se_root = (1 - w) * dF_se[i] + w * dF_se[i + 1]
    nan = jnp.full((), jnp.nan, etas.dtype)
    return Root(
        eta=jnp.where(found, root, nan),
        se=jnp.where(found, se_root / jnp.abs(slope), nan),
        sign_changes=jnp.sum(changes),
    )


def swap_ray_regret(blocks: jax.Array, etas: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Sum over heads of (R_j, R_j') at the Theorem-2 configuration, one block input [T, d, d].

    Head j at V_j = e_j^T (x) (-eta P) is smoothed FP on block j (docs/regret.md §10.4), so
    Phi(eta) = E[(sum_j R_j)^2] and Phi'(eta) = 2 E[(sum_j R_j)(sum_j R_j')] are the
    :func:`ray_estimate` moments of the returned sums.  docs/regret.md §10.5 (Eqs. (59)-(60)):
    the R_j are i.i.d. with eta-independent mean sqrt(T) mu_d, hence Phi' = d F'.
    """
    chex.assert_rank(blocks, 3)
    R, dR = jax.vmap(ray_regret, in_axes=(1, None))(blocks, etas)
    return jnp.sum(R, axis=0), jnp.sum(dR, axis=0)


def block_gradients(losses: jax.Array, eta) -> dict:
    """Gradient of R^2 for one sequence [T, d] w.r.t. (V, k, v, b) at k = 0, v = 0, b = 1, V = -eta P.

    docs/regret.md §5.3 (paper Eq. (11)): in expectation grad_V = alpha P with alpha = -F'/(d-1),
    grad_v = grad_k = 0 and grad_b = eta F'; pointwise the columns of grad_V and the
    entries of grad_v sum to zero (shift invariance, J 1 = 0).  Computed by autodiff
    through the attention forward pass, independently of Eq. (24).
    """
    chex.assert_rank(losses, 2)

    def squared_regret(params):
        policies = jax.nn.softmax(causal_logits(params, losses), axis=-1)
        return external_regret(policies, losses) ** 2

    return jax.grad(squared_regret)(ftrl_params(losses.shape[1], eta))


# --- The Monte-Carlo scan of F' for its root eta* (docs/regret.md §6.1) -------------------------------------------
# A scan is: the grid eta = 0 and eta = kappa / sqrt(T) (:func:`scan_etas`), N sequence keys (:func:`scan_keys`),
# one (R, R') row per key (:func:`ray_sample`, a pure function of the key, so any batched map over the keys
# - ``jax.vmap``, a chunked and checkpointed sweep - computes it), and the moments and root of the rows
# (:func:`scan_moments`). The Theorem-1 root eta* at (d, T) is :func:`scan_moments`' ``eta_star``.

SCAN_KAPPAS = np.geomspace(0.25, 8.0, 40)  # default grid of kappa = eta sqrt(T)
SCAN_CHUNK = 4000  # default sequences per batch of the scan (a size that does not depend on the device count)


def scan_kappas(kappa_min: float = 0.25, kappa_max: float = 8.0, num_kappas: int = 40) -> np.ndarray:
    """The geometric grid of kappa = eta sqrt(T) (default: :data:`SCAN_KAPPAS`)."""
    return np.geomspace(kappa_min, kappa_max, num_kappas)


def scan_etas(T: int, kappas=SCAN_KAPPAS) -> np.ndarray:
    """The scan's eta grid [1 + K] (float32): eta = 0 (for the exact values of docs/regret.md §5.4), then kappa / sqrt(T)."""
    return np.asarray(np.concatenate([[0.0], np.asarray(kappas) / np.sqrt(T)]), np.float32)


def scan_keys(d: int, T: int, num_sequences: int, seed: int = 0) -> np.ndarray:
    """Raw key data [N, 2] (uint32) of the N sequences of cell (d, T): ``split(fold_in(key(seed), 1000 d + T), N)``."""
    if num_sequences < 1:
        raise ValueError(f"num_sequences must be >= 1, got {num_sequences}")
    cell = jax.random.fold_in(jax.random.key(seed), 1000 * d + T)
    return np.asarray(jax.random.key_data(jax.random.split(cell, num_sequences)))


def ray_sample(d: int, T: int, etas) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """``fn(key_data [2]) -> (R [E], R' [E])``: one N(0, I_d) sequence of length T through :func:`ray_regret`."""
    etas = jnp.asarray(etas, jnp.float32)

    def one_sequence(key_data):
        return ray_regret(flat_normal(jax.random.wrap_key_data(key_data), (T, d)), etas)

    return one_sequence


def scan_moments(R, dR, etas) -> dict[str, np.ndarray]:
    """Moments and root of one scan: (R, R') [N, 1 + K] on :func:`scan_etas` -> numpy values.

    Per eta [1 + K]: ``etas``, ``F`` = mean R^2 and its standard error ``F_se``, ``dF`` =
    mean 2 R R' and ``dF_se``, ``mean_R`` and ``mean_R_se`` (:func:`ray_estimate`). The
    root of F' on the grid without eta = 0 (:func:`find_root`): ``eta_star``, its standard
    error ``se`` and ``sign_changes`` (0-d arrays).
    """
    R, dR, etas = np.asarray(R), np.asarray(dR), np.asarray(etas)
    est = jax.tree.map(np.asarray, ray_estimate(jnp.asarray(R), jnp.asarray(dR)))
    root = jax.tree.map(np.asarray, find_root(jnp.asarray(etas[1:]), jnp.asarray(est.dF[1:]), jnp.asarray(est.dF_se[1:])))
    return {
        "etas": etas, "F": est.F, "F_se": np.std(R**2, axis=0, ddof=1) / np.sqrt(R.shape[0]),
        "dF": est.dF, "dF_se": est.dF_se, "mean_R": est.mean_R, "mean_R_se": est.mean_R_se,
        "eta_star": root.eta, "se": root.se, "sign_changes": root.sign_changes,
    }


def scan(d: int, T: int, num_sequences: int, map_fn=None, *, kappas=SCAN_KAPPAS, seed: int = 0,
         chunk_size: int = SCAN_CHUNK) -> dict[str, np.ndarray]:
    """The Theorem-1 scan of cell (d, T): :func:`scan_moments` of :func:`ray_sample` over :func:`scan_keys`.

    ``map_fn(fn, keys, chunk_size) -> (R, R')`` runs ``fn`` over the keys' leading axis
    (default: one ``jax.vmap``); the harness passes its chunked, checkpointed sweep.
    """
    etas = scan_etas(T, kappas)
    keys = scan_keys(d, T, num_sequences, seed)
    run = map_fn or (lambda fn, xs, chunk: jax.jit(jax.vmap(fn))(xs))
    return scan_moments(*run(ray_sample(d, T, etas), keys, min(chunk_size, num_sequences)), etas)


def swap_block_gradients(blocks: jax.Array, eta, offset=0.0) -> dict:
    """Gradient of (sum_j R_j - offset)^2 for one block input [T, d, d] w.r.t. every head parameter at ``bm_params(d, eta)``.

    docs/regret.md §10.4 (Theorem 2, the Eq. (11) block structure of the swap loss Eq. (10)):
    by autodiff through :class:`~regret_jax.attention.MultiHeadSimplexAttention` on the
    Gaussian block input z_t = (l^{(1)}_t, ..., l^{(d)}_t) (``blocks[t, j]`` = l^{(j)}_t), as in
    ``train.make_regrets`` for ``model = "multihead"``. Returns the "heads" parameter tree
    {V [d, d, d^2], k [d, d^2], v [d, d], b [d]}; with ``V[j].reshape(d, d, d)[:, k, :]`` the
    block of head j that reads input block k, in expectation

        V_j[:, block j] = alpha P with alpha = -F'(eta)/(d - 1) for every head j,
        V_j[:, block k != j] = 0,  k_j = 0,  v_j = 0,  b_j = eta F'(eta),

    so the gradient vanishes at eta = eta* of Theorem 1. Pointwise, the columns of each V_j and
    the entries of each v_j sum to zero (J 1 = 0), and sum_j <V_j[:, block j], -P> =
    2 (sum_j R_j - offset) sum_j R_j', the per-sequence Phi' sample of :func:`swap_ray_regret`
    for ``offset = 0``. ``offset = d sqrt(T) mu_d`` (= E[sum_j R_j]) leaves the expectation
    unchanged and lowers the variance (the centred gradient of docs/regret.md §4.4).
    """
    chex.assert_rank(blocks, 3)
    T, d, _ = blocks.shape
    chex.assert_shape(blocks, (T, d, d))
    model = MultiHeadSimplexAttention(d)
    tokens = blocks.reshape(T, d * d)

    def swap_loss(heads):
        q = model.apply({"params": {"heads": heads}}, tokens)
        return (swap_regrets(q[None], blocks[None])[0] - offset) ** 2

    return jax.grad(swap_loss)(bm_params(d, eta))

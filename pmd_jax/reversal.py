"""The two-state reversal family (PolicyAttention, arXiv 2609.30500, sections 3, 7 and 14).

States ``s-`` (index 0) and ``s+`` (index 1) loop on themselves with action rewards
``(-c, 0)`` and ``(c, 0)``. From the uniform prior and its exact ``Q^pi`` one actor call
of the frozen decoder gives ``pi_hat``; the study compares the value gain at ``s-``,
``Delta V(s-) = V^{pi_hat}(s-) - V^{pi}(s-)``, with ideal PMD's. Two independent routes:

* :func:`decoder_cell`: the decoder's own forward map (:func:`pmd_jax.decoder.actor_call`)
  and exact policy evaluation by linear solve;
* :func:`closed_form_cell`: the partition sums of section 14 written out by hand, with
  ``V^pi(s-+) = -+c / (2 (1 - gamma))`` and the self-loop gain
  ``Delta V(s-) = c (1/2 - pi_hat(a_1|s-)) / (1 - gamma)``.

Section 14's laws: ``Z_wrong / Z_intended = exp(-kappa + eta c / (1 - gamma))`` at ``s-``,
``sgn Delta V(s-) = sgn[(1 - gamma) kappa - eta c]`` without the mask, and
``Delta V_impl = Delta V_PMD - c zeta / (2 (1 - gamma))``.

The surface (EvoRobust companion, section 11; ``docs/pmd.md`` section 9) generalises the family
by a prior tilt ``t`` (:func:`tilted_prior`: both rows ``(1/2 + t, 1/2 - t)``) and a cross-state
leak ``epsilon`` (:func:`leaky_family`); :func:`surface_cell` runs it through the same
:func:`actor_cell` as :func:`decoder_cell`. :func:`first_negative_step`, :func:`bisect_negative`
and :func:`negative_step` extract a row's first negative step on the grid and refine it by
bisection on the decoder's gain; :func:`tilt_threshold` and :func:`leak_threshold` are its closed
forms on the two slices ``epsilon = 0`` and ``t = 0``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from pmd_jax import decoder
from pmd_jax.mdp import FiniteMDP, policy_evaluation, state_values, two_state_family, uniform_policy
from pmd_jax.pmd import pmd_step


@struct.dataclass
class ReversalCell:
    """One grid cell's outcome (scalars): the gains at ``s-`` and the row error there.

    ``row_error`` is ``||pi_hat(.|s-) - PMD(.|s-)||_1``, the error of the row whose gain
    is reported; it equals the routing error ``zeta`` (max over both rows) whenever the
    wrong-state group is visible. With the mask both rows' errors are ~1e-12 and the
    ``s+`` row can be the larger; the identity of section 14 is about the ``s-`` row.
    """

    gain_ideal: jax.Array
    gain_implemented: jax.Array
    row_error: jax.Array


def actor_cell(mdp: FiniteMDP, pi: jax.Array, eta, kappa, masked, nu) -> ReversalCell:
    """One actor call of the frozen decoder on a two-state ``mdp`` from prior ``pi`` (jittable, vmappable).

    ``Q = Q^pi`` by exact policy evaluation (linear solve), ``pi_hat`` from the decoder's
    own forward map (:func:`pmd_jax.decoder.apply_actor`), gains at ``s-`` by exact
    evaluation of ``pi_hat`` and of PMD's ``softmax(log pi + eta Q)`` in the same ``mdp``.
    """
    Q = policy_evaluation(mdp, pi)
    params = decoder.construct_params(2, 2, mdp.gamma, kappa, nu, Q.dtype)
    pi_hat = decoder.apply_actor(params, decoder.Layout(2, 2), pi, Q, eta, state_local=masked)
    p = pmd_step(pi, Q, eta)
    V = state_values(pi, Q)
    gain = lambda new: state_values(new, policy_evaluation(mdp, new))[0] - V[0]
    row_error = jnp.sum(jnp.abs(pi_hat[0] - p[0]))
    return ReversalCell(gain_ideal=gain(p), gain_implemented=gain(pi_hat), row_error=row_error)


def decoder_cell(eta, kappa, masked, c, gamma, nu) -> ReversalCell:
    """One cell through the decoder's forward map (jittable and vmappable in every argument):
    :func:`actor_cell` on the self-loop family from the uniform prior."""
    mdp = two_state_family(c, gamma)
    return actor_cell(mdp, uniform_policy(2, 2, mdp.R.dtype), eta, kappa, masked, nu)


def closed_form_cell(eta, kappa, masked, c, gamma, nu) -> ReversalCell:
    """The same cell from section 14's partition sums, without tokens, weights or solves."""
    eta, kappa, c, gamma, nu = (jnp.asarray(x, jnp.result_type(float)) for x in (eta, kappa, c, gamma, nu))
    V_minus, V_plus = -c / (2 * (1 - gamma)), c / (2 * (1 - gamma))
    Q = jnp.stack([jnp.stack([-c + gamma * V_minus, gamma * V_minus]), jnp.stack([c + gamma * V_plus, gamma * V_plus])])
    keep_other = 1.0 - jnp.asarray(masked, Q.dtype)

    def row(s):
        other = 1 - s
        w_own = 0.5 * jnp.exp(kappa + eta * Q[s])  # [2] intended group
        w_other = keep_other * 0.5 * jnp.exp(eta * Q[other])  # [2] wrong-state group
        z_query = (s + 1) * jnp.exp(-nu)  # queries 0..s are visible, each with uniform value
        total = w_own.sum() + w_other.sum() + z_query
        return (w_own + w_other + 0.5 * z_query) / total

    pi_hat = jnp.stack([row(0), row(1)])
    p_minus_a1 = jax.nn.sigmoid(-eta * c)  # PMD at s-: the better action a_2 gets sigma(eta c)
    p = jnp.stack([jnp.stack([p_minus_a1, 1 - p_minus_a1]), jnp.stack([1 - p_minus_a1, p_minus_a1])])
    row_error = jnp.sum(jnp.abs(pi_hat[0] - p[0]))
    gain = lambda prob_a1: c * (0.5 - prob_a1) / (1 - gamma)
    return ReversalCell(gain_ideal=gain(p_minus_a1), gain_implemented=gain(pi_hat[0, 0]), row_error=row_error)


def eta_grid(eta_max: float, eta_steps: int) -> np.ndarray:
    """The step-size grid ``i * eta_max / eta_steps``, ``i = 0..eta_steps`` (exact values, no accumulated rounding)."""
    return np.arange(eta_steps + 1) * eta_max / eta_steps


def reversal_threshold(kappa, c, gamma):
    """The step at which the unmasked gain changes sign: ``eta = (1 - gamma) kappa / c``."""
    return (1 - gamma) * kappa / c


# --- The generalised family: prior tilt and cross-state leak (EvoRobust companion, section 11) ---


def leaky_family(c, gamma, epsilon) -> FiniteMDP:
    """:func:`pmd_jax.mdp.two_state_family` with a cross-state leak: every action at state ``s``
    moves to the other state with probability ``epsilon_s`` and stays with ``1 - epsilon_s``.

    ``epsilon`` is a scalar (the same leak out of both states: the family of the surface) or
    ``[2]`` (leak out of ``s-``, out of ``s+``: the one-state readings). Rewards are unchanged,
    so the leak is action-independent: within a state the action gap of ``Q`` stays ``-c``
    (``s-``) and ``+c`` (``s+``). ``epsilon = 0`` is the self-loop family exactly.
    """
    mdp = two_state_family(c, gamma)
    eps = jnp.broadcast_to(jnp.asarray(epsilon, mdp.R.dtype), (2,))[:, None, None]
    return mdp.replace(P=(1 - eps) * mdp.P + eps * mdp.P[:, :, ::-1])


def tilted_prior(tilt, dtype=jnp.float64) -> jax.Array:
    """The tilted prior: both states' rows ``(1/2 + t, 1/2 - t)`` for ``tilt = t`` in ``(-1/2, 1/2)``.

    ``t = 0`` is the uniform prior. The same row at both states is a state-blind action bias
    (``a_1`` is the worse action at ``s-`` and the better one at ``s+``), so at ``eta = 0`` the
    wrong-state group carries the intended row and the leak of prior mass is harmless: the tilt
    acts on the reversal only through ``Q^pi`` and the prior weights inside the PMD rows. On this
    family the first negative step has the closed form :func:`tilt_threshold`, and ``t = -+0.2``
    (priors ``(0.3, 0.7)``, ``(0.7, 0.3)``) give the companion's ``2.36`` and ``1.22`` at ``kappa = 8``
    to its printed digits (``docs/pmd.md`` section 9.1).
    """
    t = jnp.asarray(tilt, dtype)
    row = jnp.stack([0.5 + t, 0.5 - t])
    return jnp.stack([row, row])


def surface_cell(eta, kappa, c, gamma, tilt, epsilon, nu, masked=False) -> ReversalCell:
    """One cell of the reversal surface: :func:`actor_cell` on :func:`leaky_family` from :func:`tilted_prior`.

    At ``tilt = epsilon = 0`` it is :func:`decoder_cell` (the same numbers, bitwise in our tests).
    Jittable and vmappable in every argument.
    """
    mdp = leaky_family(c, gamma, epsilon)
    return actor_cell(mdp, tilted_prior(tilt, mdp.R.dtype), eta, kappa, masked, nu)


def tilt_threshold(kappa, c, gamma, tilt):
    """No leak, prior tilt ``t``: the gain at ``s-`` changes sign at ``eta = (1 - gamma) kappa / (c (1 + 2 gamma t))``.

    Section 9.2 of ``docs/pmd.md``: with ``p = 1/2 + t`` at both states the gain is zero where
    ``kappa = eta c + eta gamma (V+ - V-)`` and ``V+ - V- = 2 c p / (1 - gamma)``. The query
    token's ``e^{-nu}`` mass (uniform value, not the prior) shifts the true zero by ``~e^{-nu - kappa}``.
    Plain arithmetic (numpy or jax). ``t = 0`` is :func:`reversal_threshold`.
    """
    return (1 - gamma) * kappa / (c * (1 + 2 * gamma * tilt))


def row_reversal_threshold(kappa, c, gamma, epsilon=0.0):
    """Uniform prior, leak ``epsilon`` out of both states: the step at which the ``s-`` row turns towards ``a_1``.

    There ``Z_wrong / Z_int = exp(-kappa + eta c / m) = 1`` with ``m = 1 - gamma + 2 gamma epsilon``,
    i.e. ``eta = kappa m / c`` (``docs/pmd.md`` section 9.3). It equals :func:`reversal_threshold` at
    ``epsilon = 0``; with a leak the gain at ``s-`` changes sign later (:func:`leak_threshold`),
    because the improved ``s+`` row feeds ``V(s-)`` through the leak.
    """
    return kappa * (1 - gamma + 2 * gamma * epsilon) / c


def leak_threshold(kappa, c, gamma, epsilon):
    """Uniform prior, leak ``epsilon`` out of both states: the step at which the gain at ``s-`` changes sign.

    ``docs/pmd.md`` section 9.3: with ``m = 1 - gamma + 2 gamma epsilon`` the wrong-state ratio
    of the ``s-`` row is ``rho = exp(-kappa + eta c / m)`` and that of the ``s+`` row is
    ``e^{-2 kappa} / rho``; the gain is zero at the root ``rho > 0`` of
    ``(1 - gamma) rho^2 - m (1 - e^{-2 kappa}) rho - (1 - gamma) e^{-2 kappa} = 0``, so
    ``eta = m (kappa + log rho) / c``. Neglects only the query tokens' ``e^{-nu}`` mass (no
    effect on the numerator at the uniform prior). Host numpy.
    """
    kappa, c, gamma, epsilon = (np.asarray(x, float) for x in (kappa, c, gamma, epsilon))
    m, e, g = 1 - gamma + 2 * gamma * epsilon, np.exp(-2 * kappa), 1 - gamma
    rho = (m * (1 - e) + np.sqrt((m * (1 - e)) ** 2 + 4 * g * g * e)) / (2 * g)
    return m * (kappa + np.log(rho)) / c


@struct.dataclass
class NegativeStep:
    """The first negative step of one row of etas (scalars; NaN where the row never turns negative).

    ``eta_grid``: the first grid eta > 0 whose gain is below ``-zero_tol``; ``eta_refined``: the
    zero of the gain inside ``[previous grid eta, eta_grid]`` by bisection; ``negative_cells``: the
    row's count of cells with gain below ``-zero_tol`` (eta > 0); ``returns_positive``: 1 if a grid
    eta after ``eta_grid`` has gain above ``zero_tol`` again (a second crossing), else 0.
    """

    eta_grid: jax.Array
    eta_refined: jax.Array
    negative_cells: jax.Array
    returns_positive: jax.Array


def first_negative_step(etas, gains, zero_tol=0.0):
    """``(eta_neg, index)``: the first grid eta > 0 with ``gain < -zero_tol`` and its index (NaN, -1 if none).

    ``eta = 0`` is no step and is skipped: its gain is the query token's ``e^{-nu}`` pull
    towards the uniform row (``~1e-9`` of either sign under a tilt), not a reversal. Cells with
    ``|gain| <= zero_tol`` count as zero, so a threshold that lies on the grid is not counted as
    negative by rounding. Jittable; ``etas`` and ``gains`` are ``[n]``.
    """
    etas, gains = jnp.asarray(etas), jnp.asarray(gains)
    negative = (gains < -zero_tol) & (etas > 0)
    found = negative.any()
    index = jnp.argmax(negative)
    return jnp.where(found, etas[index], jnp.nan), jnp.where(found, index, -1)


def bisect_negative(gain_fn, lo, hi, iters: int):
    """Bisection for the zero of ``gain_fn`` in ``[lo, hi]`` with ``gain_fn(hi) < 0`` (fixed ``iters``).

    Keeps ``hi`` on the negative side (``gain < 0``) and ``lo`` on the other; returns the midpoint
    after ``iters`` halvings (width ``(hi - lo) / 2^iters``). Jittable and vmappable (lax.fori_loop).
    If ``gain_fn(lo) < 0`` too, the result converges to ``lo``.
    """

    def body(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        neg = gain_fn(mid) < 0
        return jnp.where(neg, lo, mid), jnp.where(neg, mid, hi)

    lo, hi = jax.lax.fori_loop(0, iters, body, (jnp.asarray(lo), jnp.asarray(hi)))
    return 0.5 * (lo + hi)


def negative_step(gain_fn, etas, zero_tol=0.0, iters: int = 40) -> NegativeStep:
    """:class:`NegativeStep` of the scalar map ``eta -> gain`` on the grid ``etas`` (``[n]``, increasing).

    The grid gains are one ``vmap`` of ``gain_fn``; the refinement bisects ``gain_fn`` itself in
    the bracketing grid interval ``[etas[i - 1], etas[i]]`` of the grid answer ``etas[i]``.
    Jittable and vmappable over the parameters ``gain_fn`` closes over.
    """
    etas = jnp.asarray(etas)
    gains = jax.vmap(gain_fn)(etas)
    eta_grid, index = first_negative_step(etas, gains, zero_tol)
    found = index >= 0
    hi = etas[jnp.maximum(index, 0)]
    lo = etas[jnp.maximum(index - 1, 0)]
    refined = bisect_negative(gain_fn, lo, hi, iters)
    after = jnp.arange(etas.shape[0]) > index
    counted = (gains < -zero_tol) & (etas > 0)
    return NegativeStep(
        eta_grid=eta_grid,
        eta_refined=jnp.where(found, refined, jnp.nan),
        negative_cells=jnp.sum(counted),
        returns_positive=(found & jnp.any(after & (gains > zero_tol))).astype(etas.dtype),
    )

"""MDP tools, the PMD step, the reversal family and the returned-policy bound."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import bound, decoder
from pmd_jax import numpy_reference as ref
from pmd_jax.loop import closed_loop, exact_critic
from pmd_jax.mdp import (
    FiniteMDP,
    RandomMDPFamily,
    bellman_operator,
    optimal_q,
    policy_evaluation,
    solve_diagonally_dominant,
    two_state_family,
    uniform_policy,
)
from pmd_jax.pmd import pmd_step
from pmd_jax.reversal import closed_form_cell, decoder_cell, reversal_threshold


def _family(S=3, A=2, gamma=0.9):
    return RandomMDPFamily(gamma=gamma, r_max=1.0, concentration=1.0, num_states=S, num_actions=A)


def _np(mdp):
    return np.asarray(mdp.P), np.asarray(mdp.R), float(mdp.gamma)


def test_random_family_samples_valid_distinct_mdps():
    mdps = jax.vmap(_family().sample)(jax.random.split(jax.random.key(0), 4))
    P, R = np.asarray(mdps.P), np.asarray(mdps.R)
    assert P.shape == (4, 3, 2, 3) and R.shape == (4, 3, 2)
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-12)
    assert P.min() > 0 and np.abs(R).max() <= 1.0
    assert not np.allclose(P[0], P[1]) and not np.allclose(R[2], R[3])


def test_policy_evaluation_against_truncated_neumann_series():
    mdp = _family().sample(jax.random.key(1))
    P, R, gamma = _np(mdp)
    pi = np.random.default_rng(0).dirichlet(np.ones(2), size=3)
    # Q = sum_t gamma^t M^t r, summed by an explicit loop until gamma^t is negligible.
    S, A = R.shape
    q, term = np.zeros(S * A), R.reshape(-1).copy()
    M = np.array([[P[s, a, s2] * pi[s2, a2] for s2 in range(S) for a2 in range(A)] for s in range(S) for a in range(A)])
    for _ in range(600):
        q += term
        term = gamma * M @ term
    np.testing.assert_allclose(policy_evaluation(mdp, jnp.asarray(pi)), q.reshape(S, A), atol=1e-10)


@pytest.mark.parametrize("n", [1, 2, 7, 24])
def test_diagonally_dominant_solve_against_lapack(n):
    """Random strictly row-diagonally-dominant systems (off-diagonal of either sign), against numpy's LU."""
    rng = np.random.default_rng(n)
    a = rng.normal(size=(n, n))
    np.fill_diagonal(a, 0.0)
    a[np.arange(n), np.arange(n)] = (np.abs(a).sum(1) + rng.uniform(0.05, 1.0, n)) * rng.choice([-1, 1], n)
    b = rng.normal(size=n)
    with jax.enable_x64(True):
        x = np.asarray(jax.jit(solve_diagonally_dominant)(jnp.asarray(a), jnp.asarray(b)))
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-11, atol=1e-12)


def test_exact_evaluation_calls_no_lapack_kernel():
    """Three policy evaluations in one vmapped program (as an audit does) compile to XLA operations only: jaxlib's
    batched LU blocks on XLA's thread pool, and two in flight deadlocked a 2-core machine (pmd_jax.mdp docstring)."""
    mdps = jax.vmap(_family().sample)(jax.random.split(jax.random.key(3), 8))
    pis = jnp.full((3, 8, 3, 2), 0.5)
    program = jax.jit(jax.vmap(jax.vmap(policy_evaluation), in_axes=(None, 0)))
    hlo = program.lower(mdps, pis).compile().as_text()
    assert "custom_call_target" not in hlo  # LAPACK kernels are custom calls


def test_bellman_operator_by_loops_and_fixed_point():
    mdp = _family().sample(jax.random.key(2))
    P, R, gamma = _np(mdp)
    rng = np.random.default_rng(1)
    pi, Q = rng.dirichlet(np.ones(2), size=3), rng.normal(size=(3, 2))
    want = np.array([[R[s, a] + gamma * sum(P[s, a, t] * pi[t, b] * Q[t, b] for t in range(3) for b in range(2))
                      for a in range(2)] for s in range(3)])
    np.testing.assert_allclose(bellman_operator(mdp, jnp.asarray(pi), jnp.asarray(Q)), want, atol=1e-12)
    Qpi = policy_evaluation(mdp, jnp.asarray(pi))
    np.testing.assert_allclose(bellman_operator(mdp, jnp.asarray(pi), Qpi), Qpi, atol=1e-10)


def test_optimal_q_against_brute_force_over_deterministic_policies():
    mdp = _family(S=3, A=3).sample(jax.random.key(3))
    P, R, gamma = _np(mdp)
    best = None
    for actions in itertools.product(range(3), repeat=3):
        pi = np.eye(3)[list(actions)]
        Q = ref.policy_evaluation(P, R, gamma, pi)
        best = Q if best is None else np.maximum(best, Q)
    np.testing.assert_allclose(optimal_q(mdp), best, atol=1e-9)


def test_pmd_step_against_numpy_and_hand_case():
    rng = np.random.default_rng(2)
    pi, Q = rng.dirichlet(np.ones(4), size=3), rng.normal(size=(3, 4))
    np.testing.assert_allclose(pmd_step(jnp.asarray(pi), jnp.asarray(Q), 0.7), ref.pmd_step(pi, Q, 0.7), atol=1e-14)
    # Hand case: pi = (1/2, 1/2), Q = (0, log 3), eta = 1 -> (1/4, 3/4).
    np.testing.assert_allclose(pmd_step(jnp.array([[0.5, 0.5]]), jnp.array([[0.0, np.log(3.0)]]), 1.0), [[0.25, 0.75]], atol=1e-15)


def test_two_state_family_exact_values():
    mdp = two_state_family(1.0, 0.8)
    Q = policy_evaluation(mdp, uniform_policy(2, 2, jnp.float64))
    # V(s-+) = -+c / (2 (1 - gamma)) = -+2.5, Q = r + gamma V.
    np.testing.assert_allclose(Q, [[-1 - 2.0, -2.0], [1 + 2.0, 2.0]], atol=1e-12)


@pytest.mark.parametrize("eta,gain_impl,gain_ideal,row_error", [(0.8, 0.916, 0.950, 0.014), (1.6, 0.000, 1.660, 0.664), (2.4, -2.009, 2.084, 1.637)])
def test_witness_replay_of_published_points(eta, gain_impl, gain_ideal, row_error):
    """Section 7's three kappa = 8 points, printed to 3 decimals in the paper."""
    cell = decoder_cell(eta, 8.0, False, 1.0, 0.8, 20.0)
    assert abs(float(cell.gain_implemented) - gain_impl) <= 5e-4
    assert abs(float(cell.gain_ideal) - gain_ideal) <= 5e-4
    assert abs(float(cell.row_error) - row_error) <= 5e-4


def test_witness_replay_matches_closed_form_on_a_grid():
    etas = jnp.linspace(0.0, 3.0, 31)
    for kappa in (4.0, 12.0):
        for masked in (False, True):
            a = jax.vmap(lambda e, k=kappa, m=masked: decoder_cell(e, k, m, 1.0, 0.8, 20.0))(etas)
            b = jax.vmap(lambda e, k=kappa, m=masked: closed_form_cell(e, k, m, 1.0, 0.8, 20.0))(etas)
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
                np.testing.assert_allclose(x, y, atol=1e-12)


@pytest.mark.parametrize("c, gamma, kappa", [(2.0, 0.9, 8.0), (0.5, 0.7, 4.0), (1.0, 0.8, 12.0)])
def test_reversal_threshold_is_the_sign_change_of_the_closed_form_gain(c, gamma, kappa):
    """(1 - gamma) kappa / c against the root of the section-14 gain found by bisection (nu large, so the
    query tokens do not move it); c != 1 and gamma != 0.8 tell kappa / c from kappa c and the (1 - gamma) factor."""
    gain = lambda eta: float(closed_form_cell(eta, kappa, False, c, gamma, 60.0).gain_implemented)
    lo, hi = 1e-6, 60.0
    assert gain(lo) > 0 > gain(hi)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gain(mid) > 0 else (lo, mid)
    assert float(reversal_threshold(kappa, c, gamma)) == pytest.approx(lo, rel=1e-9)


def test_affine_weight_construction_equals_direct_numpy():
    """construct_params relies on every weight being affine in (gamma, kappa, nu)."""
    got = decoder.construct_params(3, 2, 0.7, 9.5, 13.0)
    want = decoder.weights_numpy(3, 2, 0.7, 9.5, 13.0)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(x, y, atol=1e-13)


def test_returned_policy_bound_recursion_by_hand():
    zeta, delta, dbar, eta = [0.1, 0.2, 0.0], [0.3, 0.0, 0.5], [1.0, 0.5, 0.25], [0.5, 0.5, 1.0]
    gamma, BQ, b0 = 0.5, 2.0, 4.0
    out = bound.returned_policy_bound(jnp.array(zeta), jnp.array(delta), jnp.array(dbar), jnp.array(eta), gamma, BQ, b0)
    h = [1.0 / 0.5 + 2.0 * 0.1, 0.5 / 0.5 + 2.0 * 0.2, 0.25 / 1.0]  # 2.2, 1.4, 0.25
    b = [4.0, 0.5 * 4.0 + 0.3 + 0.5 * 2.2, 0.5 * 3.4 + 0.0 + 0.5 * 1.4]  # 4, 3.4, 2.4
    np.testing.assert_allclose(out.h, h, atol=1e-14)
    np.testing.assert_allclose(out.b, b, atol=1e-14)
    np.testing.assert_allclose(out.bound, 0.5 / 0.5 * (2 * 2.4 + 0.25), atol=1e-14)


def test_greedy_defect_by_hand():
    P = jnp.zeros((2, 1, 2)).at[0, 0, 1].set(1.0).at[1, 0, 0].set(0.5).at[1, 0, 1].set(0.5)
    mdp = FiniteMDP(P=jnp.broadcast_to(P, (2, 2, 2)), R=jnp.zeros((2, 2)), gamma=jnp.asarray(0.9))
    pi = jnp.array([[0.25, 0.75], [0.5, 0.5]])
    Q = jnp.array([[1.0, 0.0], [2.0, 2.0]])  # greedy sets {0} and {0, 1} (a tie)
    # D = (-log 0.25, -log 1) = (log 4, 0); E_{S'} D from (s=0): D(1) = 0, from (s=1): log(4)/2.
    np.testing.assert_allclose(bound.greedy_defect(mdp, pi, Q), np.log(4.0) / 2, atol=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_returned_policy_bound_holds_in_the_decoder_loop(seed):
    """Decoder actor, exact critic, random MDPs: the section-13 bound holds (delta_k = 0)."""
    S, A, gamma, eta, rounds = 4, 3, 0.8, 0.8, 12
    kappa, nu = 6.0, 6.0  # small margins, so zeta_k is far from zero and enters the bound
    cfg = decoder.DecoderConfig(S, A, gamma, kappa, nu)
    params = decoder.construct_params(S, A, gamma, kappa, nu)
    mdp = _family(S, A, gamma).sample(jax.random.key(100 + seed))
    actor = lambda pi, Q, e: decoder.apply_actor(params, cfg.layout, pi, Q, e)
    pi0, Q0 = uniform_policy(S, A, jnp.float64), jnp.zeros((S, A))
    trace = closed_loop(jax.random.key(seed), mdp, actor, exact_critic(mdp), pi0, Q0, 0, eta, rounds)
    assert float(trace.zeta.max()) > 1e-4 and float(trace.delta.max()) < 1e-12
    Q_star = np.asarray(optimal_q(mdp))
    loss = np.max(np.abs(Q_star - np.asarray(policy_evaluation(mdp, trace.policy))))
    b0 = np.max(np.abs(Q_star))  # >= ||Q* - Q_0|| with Q_0 = 0
    out = bound.returned_policy_bound(trace.zeta, trace.delta, trace.dbar, jnp.full(rounds, eta), gamma, cfg.q_bound, b0)
    assert loss <= float(out.bound)


def _lock_by_hand(code, S, A, slip):
    """The combination lock of ``code`` built entry by entry from its definition (CombinationLockFamily's docstring)."""
    P, R = np.zeros((S, A, S)), np.zeros((S, A))
    for s in range(S):
        for a in range(A):
            if a == code[s]:
                target = s + 1 if s < S - 1 else 0
                R[s, a] = 1.0 if s == S - 1 else 0.0
            else:
                target = 0
            P[s, a, :] = slip / S
            P[s, a, target] += 1.0 - slip
    return P, R


@pytest.mark.parametrize("S,A,slip", [(4, 3, 0.05), (5, 2, 0.0)])
def test_combination_lock_against_its_definition(S, A, slip):
    from pmd_jax.mdp import CombinationLockFamily

    family = CombinationLockFamily(gamma=0.8, slip=slip, num_states=S, num_actions=A)
    mdps = jax.vmap(family.sample)(jax.random.split(jax.random.key(3), 200))
    P, R = np.asarray(mdps.P), np.asarray(mdps.R)
    codes = []
    for i in range(200):
        # the secret action of state s is the one that does not reset to 0 (at the last state: the paying one)
        code = [int(np.argmax(R[i, s])) if s == S - 1 else int(np.argmax(P[i, s, :, s + 1])) for s in range(S)]
        P_hand, R_hand = _lock_by_hand(code, S, A, slip)
        np.testing.assert_allclose(P[i], P_hand, atol=1e-12)
        np.testing.assert_array_equal(R[i], R_hand)
        codes.append(code)
    counts = np.bincount(np.asarray(codes).reshape(-1), minlength=A) / (200 * S)
    np.testing.assert_allclose(counts, 1.0 / A, atol=0.05)  # each secret action uniform over the actions


def test_combination_lock_values_against_the_cycle_closed_form():
    """Without slips the optimal policy walks the chain and is paid once every S steps, first at step S - 1:
    V*(s) = gamma^(S-1-s) / (1 - gamma^S), and a wrong action is worth gamma V*(0)."""
    from pmd_jax.mdp import CombinationLockFamily

    S, A, gamma = 4, 3, 0.8
    mdp = CombinationLockFamily(gamma=gamma, slip=0.0, num_states=S, num_actions=A).sample(jax.random.key(7))
    Q = np.asarray(optimal_q(mdp, tol=1e-13))
    V = gamma ** (S - 1 - np.arange(S)) / (1 - gamma ** S)
    np.testing.assert_allclose(Q.max(axis=1), V, rtol=1e-10)
    wrong = np.sort(Q, axis=1)[:, :-1]  # the A - 1 reset actions of each state
    np.testing.assert_allclose(wrong, gamma * V[0], rtol=1e-10)
    # under the uniform policy the chain visits state s about A^-s as often as state 0 (stationary distribution)
    M = np.einsum("xay,yb->xayb", np.asarray(mdp.P), np.full((S, A), 1 / A)).reshape(S * A, S * A)
    w, v = np.linalg.eig(M.T)
    d = np.real(v[:, np.argmin(np.abs(w - 1))])
    d = (d / d.sum()).reshape(S, A).sum(axis=1)
    np.testing.assert_allclose(d / d[0], float(A) ** -np.arange(S), rtol=1e-8)

"""The reversal surface's library (pmd_jax/reversal.py, docs/pmd.md section 9): the tilted, leaky two-state cell
against a brute-force numpy computation (section-14 partition sums generalised by hand, numpy linear solves), the
reduction to the old cell, the closed forms, and the first-negative-step extraction and bisection on hand examples."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import numpy_reference
from pmd_jax.mdp import two_state_family, uniform_policy
from pmd_jax import reversal as rv


def _family_np(c, gamma, eps_minus, eps_plus):
    """P[s, a, s'] and R[s, a] written entry by entry."""
    P = np.zeros((2, 2, 2))
    for s, eps in ((0, eps_minus), (1, eps_plus)):
        for a in range(2):
            P[s, a, s] = 1 - eps
            P[s, a, 1 - s] = eps
    R = np.array([[-c, 0.0], [c, 0.0]])
    return P, R


def _values_np(P, R, gamma, pi):
    """V^pi by a numpy solve of V = r_pi + gamma P_pi V, with P_pi and r_pi from loops."""
    P_pi, r_pi = np.zeros((2, 2)), np.zeros(2)
    for s in range(2):
        for a in range(2):
            r_pi[s] += pi[s, a] * R[s, a]
            for t in range(2):
                P_pi[s, t] += pi[s, a] * P[s, a, t]
    return np.linalg.solve(np.eye(2) - gamma * P_pi, r_pi)


def _decoder_row_np(pi, Q, eta, kappa, nu, s):
    """Row s of the unmasked actor call from the partition sums: memories (s', a) weigh pi(a|s') e^{eta Q(s',a)}
    times e^{kappa} on the own state; queries 0..s (causal) weigh e^{-nu} each and carry the uniform row."""
    num, den = np.zeros(2), 0.0
    for s2 in range(2):
        for a in range(2):
            w = pi[s2, a] * np.exp(eta * Q[s2, a] + (kappa if s2 == s else 0.0))
            num[a] += w
            den += w
    for _ in range(s + 1):
        num += np.exp(-nu) * 0.5
        den += np.exp(-nu)
    return num / den


def _cell_np(eta, kappa, c, gamma, tilt, eps, nu, eps_plus=None):
    """(gain_ideal, gain_implemented, row_error) of one surface cell, without JAX."""
    P, R = _family_np(c, gamma, eps, eps if eps_plus is None else eps_plus)
    pi = np.array([[0.5 + tilt, 0.5 - tilt]] * 2)
    Q = numpy_reference.policy_evaluation(P, R, gamma, pi)
    pi_hat = np.stack([_decoder_row_np(pi, Q, eta, kappa, nu, s) for s in range(2)])
    p = numpy_reference.pmd_step(pi, Q, eta)
    v0 = _values_np(P, R, gamma, pi)[0]
    gain = lambda new: _values_np(P, R, gamma, new)[0] - v0
    return gain(p), gain(pi_hat), np.abs(pi_hat[0] - p[0]).sum()


def _root_np(f, lo, hi, iters=80):
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if f(mid) < 0 else (mid, hi)
    return 0.5 * (lo + hi)


POINTS = [  # eta, kappa, c, gamma, tilt, (eps out of s-, eps out of s+), nu: small nu makes the query mass count
    (0.3, 2.0, 1.0, 0.8, 0.15, (0.05, 0.05), 20.0),
    (1.7, 8.0, 1.0, 0.8, -0.2, (0.0, 0.0), 20.0),
    (2.9, 8.0, 2.5, 0.9, 0.2, (0.2, 0.2), 3.0),
    (1.1, 4.0, 1.5, 0.7, -0.3, (0.1, 0.1), 3.0),
    (2.2, 1.0, 1.0, 0.95, 0.4, (0.02, 0.02), 2.0),
    (2.1, 8.0, 1.0, 0.8, 0.1, (0.05, 0.0), 20.0),  # leak out of s- only
    (2.1, 8.0, 1.0, 0.8, 0.1, (0.0, 0.05), 20.0),  # leak out of s+ only
]


def test_leaky_family_and_tilted_prior_entries():
    mdp = rv.leaky_family(2.0, 0.9, 0.1)
    P, R = _family_np(2.0, 0.9, 0.1, 0.1)
    np.testing.assert_array_equal(np.asarray(mdp.P), P)
    np.testing.assert_array_equal(np.asarray(mdp.R), R)
    assert float(mdp.gamma) == 0.9
    per_state = rv.leaky_family(1.0, 0.8, jnp.array([0.05, 0.0]))  # leak out of s- only
    np.testing.assert_array_equal(np.asarray(per_state.P), _family_np(1.0, 0.8, 0.05, 0.0)[0])
    np.testing.assert_array_equal(np.asarray(rv.tilted_prior(0.2)), [[0.7, 0.3], [0.7, 0.3]])
    np.testing.assert_array_equal(np.asarray(rv.tilted_prior(0.0)), np.full((2, 2), 0.5))


GRID = np.array(list(itertools.product(np.arange(0, 601, 7) * 3.0 / 600, (4.0, 8.0), (1.0, 2.0), (0.8, 0.9),
                                       (0.0, 1.0))))  # eta, kappa, c, gamma, masked: the old family's cells


@pytest.fixture(scope="module")
def decoder_runs():
    """Every decoder computation of this file in one jitted program (one compile): the surface cell at POINTS and
    at GRID (tilt = eps = 0, masked and not), the section-14 closed form at GRID, and the negative steps at
    kappa = 8, eps = 0 and 0.05 (grid, then bisection on the decoder's gain)."""
    with jax.enable_x64(True):  # a module fixture is set up outside the conftest's per-test float64
        return _decoder_program()


def _decoder_program():
    n = len(GRID)
    cells = [np.concatenate([[p[i] for p in POINTS], x]) for i, x in enumerate(
        (GRID[:, 0], GRID[:, 1], GRID[:, 2], GRID[:, 3], np.zeros(n)))]
    eps = np.concatenate([[p[5] for p in POINTS], np.zeros((n, 2))])
    nu = np.concatenate([[p[6] for p in POINTS], np.full(n, 20.0)])
    masked = np.concatenate([np.zeros(len(POINTS), bool), GRID[:, 4] > 0.5])
    etas = jnp.arange(601) * 3.0 / 600

    @jax.jit
    def program(eta, kappa, c, gamma, tilt, eps, nu, masked):
        surface = jax.vmap(rv.surface_cell)(eta, kappa, c, gamma, tilt, eps, nu, masked)
        grid = slice(len(POINTS), None)
        closed = jax.vmap(rv.closed_form_cell)(eta[grid], kappa[grid], masked[grid], c[grid], gamma[grid], nu[grid])
        steps = jax.vmap(lambda e: rv.negative_step(
            lambda x: rv.surface_cell(x, 8.0, 1.0, 0.8, 0.0, e, 20.0).gain_implemented, etas, 1e-12, 40))(
            jnp.array([0.0, 0.05]))
        return jax.tree.map(lambda x: x[: len(POINTS)], surface), jax.tree.map(lambda x: x[grid], surface), closed, steps

    return program(*(jnp.asarray(x) for x in (*cells, eps, nu, masked)))


def test_surface_cell_matches_brute_force_numpy(decoder_runs):
    got = decoder_runs[0]
    for i, (eta, kappa, c, gamma, tilt, (e_minus, e_plus), nu) in enumerate(POINTS):
        want = _cell_np(eta, kappa, c, gamma, tilt, e_minus, nu, eps_plus=e_plus)
        np.testing.assert_allclose([float(got.gain_ideal[i]), float(got.gain_implemented[i]), float(got.row_error[i])],
                                   want, rtol=0, atol=1e-12, err_msg=str(POINTS[i]))


def test_reduces_to_the_old_cell_at_no_tilt_no_leak(decoder_runs):
    # decoder_cell and surface_cell are both actor_cell; at t = eps = 0 its inputs are the old ones, bitwise
    for c, gamma in itertools.product((1.0, 2.5), (0.8, 0.9)):
        old, new = two_state_family(c, gamma), rv.leaky_family(c, gamma, 0.0)
        for f in ("P", "R", "gamma"):
            np.testing.assert_array_equal(getattr(new, f), getattr(old, f))
    np.testing.assert_array_equal(rv.tilted_prior(0.0), uniform_policy(2, 2, jnp.float64))
    _, new, closed, _ = decoder_runs  # and the cell is section 14's closed form, with and without the mask
    for f in ("gain_ideal", "gain_implemented", "row_error"):
        np.testing.assert_allclose(getattr(new, f), getattr(closed, f), rtol=0, atol=1e-12)


def test_negative_step_of_the_decoder_at_the_reference_and_the_leak(decoder_runs):
    step = decoder_runs[3]
    np.testing.assert_allclose(step.eta_grid, [1.605, 2.335], rtol=0, atol=1e-12)
    np.testing.assert_allclose(step.eta_refined, [1.6, float(rv.leak_threshold(8.0, 1.0, 0.8, 0.05))], rtol=0, atol=1e-10)


def test_tilt_law_against_brute_force_root():
    for kappa, c, gamma, tilt in ((8.0, 1.0, 0.8, 0.2), (8.0, 1.0, 0.8, -0.2), (3.0, 2.0, 0.9, 0.35), (1.0, 1.5, 0.85, -0.4)):
        law = rv.tilt_threshold(kappa, c, gamma, tilt)
        f = lambda eta, k=kappa, c=c, g=gamma, t=tilt: _cell_np(eta, k, c, g, t, 0.0, 20.0)[1]
        assert f(0.9 * law) > 0 > f(1.1 * law)
        assert abs(_root_np(f, 0.9 * law, 1.1 * law) - law) < 1e-8
    assert rv.tilt_threshold(8.0, 1.0, 0.8, 0.2) == pytest.approx(40 / 33, abs=1e-14)  # 1.6 / (1 + 0.32)
    assert rv.tilt_threshold(8.0, 1.0, 0.8, 0.0) == rv.reversal_threshold(8.0, 1.0, 0.8)


def test_leak_law_and_row_turn_against_brute_force():
    for kappa, c, gamma, eps in ((8.0, 1.0, 0.8, 0.05), (1.0, 1.0, 0.8, 0.2), (2.0, 3.0, 0.95, 0.1)):
        law = float(rv.leak_threshold(kappa, c, gamma, eps))
        f = lambda eta, k=kappa, c=c, g=gamma, e=eps: _cell_np(eta, k, c, g, 0.0, e, 20.0)[1]
        assert f(0.9 * law) > 0 > f(1.1 * law)
        assert abs(_root_np(f, 0.9 * law, 1.1 * law) - law) < 1e-9
        turn = rv.row_reversal_threshold(kappa, c, gamma, eps)  # the s- row is uniform there
        P, R = _family_np(c, gamma, eps, eps)
        Q = numpy_reference.policy_evaluation(P, R, gamma, np.full((2, 2), 0.5))
        assert abs(_decoder_row_np(np.full((2, 2), 0.5), Q, turn, kappa, 20.0, 0)[0] - 0.5) < 1e-9
    assert float(rv.leak_threshold(8.0, 1.0, 0.8, 0.0)) == pytest.approx(1.6, abs=1e-14)
    # kappa = 1: the s+ row's e^{-2 kappa} term moves the zero visibly (dropping it fails the loop above)
    assert float(rv.leak_threshold(1.0, 1.0, 0.8, 0.2)) != pytest.approx(0.52 * (1 + np.log(0.52 / 0.2)), abs=1e-3)


def test_first_negative_step_hand_examples():
    etas = jnp.arange(6) * 0.5
    eta, i = rv.first_negative_step(etas, jnp.array([0.0, 1.0, 0.5, -1e-13, -0.2, -0.3]), 1e-12)
    assert (float(eta), int(i)) == (2.0, 4)  # -1e-13 is inside the zero band
    eta, i = rv.first_negative_step(etas, jnp.array([0.0, 1.0, 0.5, -1e-13, -0.2, -0.3]))
    assert (float(eta), int(i)) == (1.5, 3)  # no band: strictly negative counts
    eta, i = rv.first_negative_step(etas, jnp.array([-1.0, 1.0, -0.1, 0.2, -0.5, -0.3]), 1e-12)
    assert (float(eta), int(i)) == (1.0, 2)  # eta = 0 is no step
    eta, i = rv.first_negative_step(etas, jnp.array([0.0, 1.0, 0.5, 0.0, 0.2, 0.3]), 1e-12)
    assert np.isnan(float(eta)) and int(i) == -1


def test_bisection_hand_examples():
    root = rv.bisect_negative(lambda x: 1.234 - x, 1.2, 1.25, 40)
    assert abs(float(root) - 1.234) < 1e-12
    # fixed iteration count: [0, 1] with root 0.3 -> [0, .5] -> [.25, .5] -> [.25, .375]: midpoint 0.3125
    assert float(rv.bisect_negative(lambda x: 0.3 - x, 0.0, 1.0, 3)) == 0.3125
    roots = jnp.array([0.1, 0.77, 2.5])
    got = jax.vmap(lambda r: rv.bisect_negative(lambda x: r - x, r - 0.004, r + 0.001, 45))(roots)
    np.testing.assert_allclose(got, roots, rtol=0, atol=1e-13)


def test_negative_step_hand_examples():
    etas = jnp.arange(601) * 3.0 / 600
    step = lambda f: jax.jit(lambda: rv.negative_step(f, etas, 1e-12, 45))()  # noqa: E731
    one = step(lambda x: (1.2345 - x) * (x + 1.0))
    assert float(one.eta_grid) == pytest.approx(1.235, abs=1e-12)
    assert float(one.eta_refined) == pytest.approx(1.2345, abs=1e-12)
    assert int(one.negative_cells) == 601 - 247 and float(one.returns_positive) == 0.0
    two = step(lambda x: (x - 1.0021) * (x - 2.0))  # negative on (1.0021, 2) only
    assert float(two.eta_grid) == pytest.approx(1.005, abs=1e-12)
    assert float(two.eta_refined) == pytest.approx(1.0021, abs=1e-12)
    assert int(two.negative_cells) == 199 and float(two.returns_positive) == 1.0  # 1.005 .. 1.995
    none = step(lambda x: 1.0 + x)
    assert np.isnan(float(none.eta_grid)) and np.isnan(float(none.eta_refined)) and int(none.negative_cells) == 0

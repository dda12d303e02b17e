"""Tests aimed at specific plausible bugs: silent non-convergence of the fixed point,
transposed loss blocks in the swap loss, and an off-by-one in T in the closed-form F'(0).

Every reference here is brute-force numpy, independent of the code under test.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from regret_reference import external_regret, stationary, swap_regret

import regret_jax as rj

# ---------------------------------------------------------------- fixed point: convergence report


def test_fixed_point_reports_convergence_on_a_contraction(x64):
    rng = np.random.default_rng(0)
    Q = np.asarray(rj.head_matrix(jax.nn.softmax(jnp.asarray(rng.normal(size=(4, 4))), axis=-1)))
    res = rj.fixed_point_with_residual(jnp.asarray(Q))
    assert bool(res.converged)
    assert float(res.residual) < 8 * 4 * np.finfo(np.float64).eps
    assert 0 < int(res.num_iters) < 1000
    np.testing.assert_allclose(np.asarray(res.x), stationary(Q), atol=1e-12)
    # the plain entry point is unchanged: same x
    np.testing.assert_array_equal(np.asarray(rj.fixed_point(jnp.asarray(Q))), np.asarray(res.x))
    # jittable and vmappable, and the gradient of x is the implicit one of fixed_point
    batch = jnp.stack([jnp.asarray(Q), jnp.asarray(Q.T @ Q / (Q.T @ Q).sum(0))])
    out = jax.jit(jax.vmap(rj.fixed_point_with_residual))(batch)
    assert np.all(np.asarray(out.converged))
    w = jnp.asarray(rng.normal(size=4))
    g1 = jax.grad(lambda M: w @ rj.fixed_point_with_residual(M).x)(jnp.asarray(Q))
    g2 = jax.grad(lambda M: w @ rj.fixed_point(M))(jnp.asarray(Q))
    np.testing.assert_allclose(np.asarray(g1), np.asarray(g2), atol=1e-14)


def test_fixed_point_reports_non_convergence(x64):
    # slowly mixing chain: Dobrushin rate 1 - 2e-6, a 20-step budget cannot reach tolerance
    eps = 1e-6
    slow = jnp.asarray([[1 - eps, 3 * eps], [eps, 1 - 3 * eps]])
    res = rj.fixed_point_with_residual(slow, max_iters=20)
    assert not bool(res.converged)
    assert int(res.num_iters) == 20
    assert float(res.residual) > 1e-8
    # periodic chain (period 2, stationary (1/2, 1/4, 1/4) != start): no budget is enough
    periodic = jnp.asarray([[0.0, 1.0, 1.0], [0.5, 0.0, 0.0], [0.5, 0.0, 0.0]])
    res = rj.fixed_point_with_residual(periodic, max_iters=1000)
    assert not bool(res.converged)
    assert int(res.num_iters) == 1000
    assert float(res.residual) == pytest.approx(2 / 3)
    # a loose tolerance is honoured: converged and flag agree with the reported residual
    res = rj.fixed_point_with_residual(slow, tol=1.0, max_iters=20)
    assert bool(res.converged) and float(res.residual) < 1.0


# ---------------------------------------------------------------- swap loss (Eq. (10)): block orientation


def _random_heads(rng, B, T, d):
    q = rng.random(size=(B, T, d, d)) + 0.05
    return q / q.sum(-1, keepdims=True)


def test_swap_regrets_matches_per_head_reference_on_nonsymmetric_blocks(x64):
    """sum_j R_j with head j scored on block j = blocks[..., t, j, :] (not blocks[..., t, :, j])."""
    rng = np.random.default_rng(3)
    B, T, d = 3, 6, 3
    q = _random_heads(rng, B, T, d)
    blocks = rng.normal(size=(B, T, d, d)) + np.arange(d)[:, None] * 1.5  # strongly non-symmetric
    assert not np.allclose(blocks, np.swapaxes(blocks, -1, -2))
    ref = np.array([sum(external_regret(q[b, :, j, :], blocks[b, :, j, :]) for j in range(d)) for b in range(B)])
    wrong = np.array([sum(external_regret(q[b, :, j, :], blocks[b, :, :, j]) for j in range(d)) for b in range(B)])
    assert np.min(np.abs(ref - wrong)) > 0.1  # the example distinguishes the orientations
    got = np.asarray(rj.swap_regrets(jnp.asarray(q), jnp.asarray(blocks)))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_swap_regrets_equals_brute_force_swap_regret_at_the_fixed_point(x64):
    """Eq. (8) end to end: with blocks l_t^{(j)} = x_t[j] l_t and x_t = FixedPoint(Q_t), sum_j R_j is
    the swap regret of x (docs/regret.md §10.1), checked against the max over all d^d maps phi."""
    rng = np.random.default_rng(4)
    T, d = 7, 3
    q = _random_heads(rng, 1, T, d)[0]  # [T, d, d], q[t, j] = q_{j,t}
    losses = rng.normal(size=(T, d)) + np.array([0.0, 0.7, -0.4])
    x = np.stack([stationary(np.asarray(rj.head_matrix(jnp.asarray(q[t])))) for t in range(T)])
    blocks = x[:, :, None] * losses[:, None, :]  # [T, j, a] = x_t[j] l_t[a], non-symmetric
    assert not np.allclose(blocks, np.swapaxes(blocks, -1, -2))
    brute = swap_regret(x, losses)
    got = float(rj.swap_regrets(jnp.asarray(q[None]), jnp.asarray(blocks[None]))[0])
    assert got == pytest.approx(brute, rel=1e-10, abs=1e-10)
    assert float(rj.swap_regret(jnp.asarray(x), jnp.asarray(losses))) == pytest.approx(brute, rel=1e-10, abs=1e-10)
    transposed = float(rj.swap_regrets(jnp.asarray(q[None]), jnp.asarray(np.swapaxes(blocks, -1, -2)[None]))[0])
    assert abs(transposed - brute) > 1e-3  # the example distinguishes the orientations


# ---------------------------------------------------------------- F'(0): exact, Monte-Carlo free


def _learner_term(losses, eta):
    """sum_t <softmax(-eta L_{t-1}), l_t> (complex eta allowed, for the complex-step derivative)."""
    cum = np.zeros(losses.shape[1], dtype=complex)
    total = 0.0
    for loss in losses:
        w = np.exp(-eta * cum)
        total = total + (w / w.sum()) @ loss
        cum = cum + loss
    return total


def _dR0_matrix(T, d):
    """Symmetric A [T d, T d] with R'(0)(l) = vec(l)^T A vec(l), by complex-step derivatives and polarisation."""
    n, h = T * d, 1e-30

    def q(v):
        return np.imag(_learner_term(v.reshape(T, d), 1j * h)) / h  # the min term does not depend on eta

    e = np.eye(n)
    diag = np.array([q(e[i]) for i in range(n)])
    A = np.diag(diag)
    for i in range(n):
        for j in range(i + 1, n):
            A[i, j] = A[j, i] = (q(e[i] + e[j]) - diag[i] - diag[j]) / 2
    return A


def _reference_dF0(d, T, n_grid):
    """F'(0) = 2 E[R(0) R'(0)] for l_t ~ N(0, I_d), without Monte-Carlo.

    Rotate each action's loss column with an orthonormal U whose first column is 1/sqrt(T):
    l[:, a] = U c[:, a], c ~ N(0, I).  Then R(0) = sqrt(T)(mean z - min z) with z = c[0] and
    R'(0) is a quadratic form, whose conditional mean given z is tr(A_yy) + z^T A_zz z.  The
    remaining d-dimensional Gaussian integral over z is a tensor trapezoid rule.
    """
    A = _dR0_matrix(T, d)
    U, _ = np.linalg.qr(np.column_stack([np.ones(T), np.random.default_rng(0).normal(size=(T, T - 1))]))
    U = U * np.sign(U[0, 0])
    Bm = np.kron(U, np.eye(d))  # vec(l) = Bm vec(c), vec index t*d + a
    Ac = Bm.T @ A @ Bm
    c0, Azz = np.trace(Ac[d:, d:]), Ac[:d, :d]
    g = np.linspace(-9.0, 9.0, n_grid)
    w = np.exp(-0.5 * g**2) / np.sqrt(2 * np.pi) * (g[1] - g[0])
    Z = np.stack(np.meshgrid(*([g] * d), indexing="ij"), axis=-1).reshape(-1, d)
    W = np.prod(np.stack(np.meshgrid(*([w] * d), indexing="ij"), axis=-1).reshape(-1, d), axis=-1)
    R0 = np.sqrt(T) * (Z.mean(-1) - Z.min(-1))
    dR0 = c0 + np.einsum("ni,ij,nj->n", Z, Azz, Z)
    return float(2 * np.sum(W * R0 * dR0))


@pytest.mark.parametrize("d, T, n_grid", [(2, 1, 801), (2, 2, 1601), (2, 3, 1601), (2, 6, 1601), (3, 2, 161), (3, 5, 161)])
def test_exact_dF0_matches_monte_carlo_free_reference(d, T, n_grid):
    ref = _reference_dF0(d, T, n_grid)
    exact = rj.exact_dF0(d, T)
    if T == 1:
        assert ref == 0.0 and exact == 0.0
        return
    # the reference separates T from T - 1 and T + 1 in the closed form by far more than its error
    scale = np.sqrt(T) * rj.mu_d(d) / d
    assert abs(ref - exact) < 2e-3 * abs(exact)  # trapezoid error on the kink of min: < 6e-4 relative
    assert abs(ref - (-T * scale)) > 0.5 * scale and abs(ref - (-(T - 2) * scale)) > 0.5 * scale

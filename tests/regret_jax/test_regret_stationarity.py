"""Theorem 1 numerics: Eqs. (23)-(24), exact small-eta values, block gradients (docs/regret.md §5.3), Phi' = d F'."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from regret_reference import external_regret, hedge, softmax

import regret_jax as rj
from regret_jax.stationarity import swap_block_gradients


def test_mu_d_and_max_square_closed_forms():
    assert abs(rj.mu_d(2) - 1 / np.sqrt(np.pi)) < 1e-10  # E max of 2 = 1/sqrt(pi)
    assert abs(rj.mu_d(3) - 3 / (2 * np.sqrt(np.pi))) < 1e-10  # E max of 3 = 3/(2 sqrt(pi))
    assert abs(rj.exact_F0(2, 10) - 10 * 0.5) < 1e-9  # E[max^2] = 1 for d = 2
    assert abs(rj.mu_d(1)) < 1e-12


def test_ray_regret_matches_loop_and_finite_differences(x64):
    rng = np.random.default_rng(0)
    d, T = 3, 15
    etas = jnp.array([0.0, 0.2, 0.9])
    losses = rng.normal(size=(2, T, d))
    ray = jax.jit(jax.vmap(rj.ray_regret, in_axes=(0, None)))  # one compile for the three calls
    R, dR = ray(jnp.asarray(losses), etas)
    h = 1e-6
    Rp, _ = ray(jnp.asarray(losses), etas + h)
    Rm, _ = ray(jnp.asarray(losses), etas - h)
    for b in range(2):
        for e, eta in enumerate(np.asarray(etas)):
            np.testing.assert_allclose(float(R[b, e]), external_regret(hedge(losses[b], eta), losses[b]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(dR), np.asarray((Rp - Rm) / (2 * h)), rtol=1e-6, atol=1e-8)


def test_block_gradients_pointwise_identities(x64):
    # autodiff through the attention model vs the pathwise formula (24), per sequence
    rng = np.random.default_rng(1)
    d, T, eta = 4, 12, 0.35
    losses = jnp.asarray(rng.normal(size=(3, T, d)))
    grads = jax.jit(jax.vmap(rj.block_gradients, in_axes=(0, None)))(losses, eta)
    R, dR = jax.jit(jax.vmap(rj.ray_regret, in_axes=(0, None)))(losses, jnp.array([eta]))
    P = np.eye(d) - 1.0 / d
    np.testing.assert_allclose(np.asarray(grads["b"]), eta * np.asarray(2 * R * dR)[:, 0], rtol=1e-10)
    along_ray = -np.einsum("nij,ij->n", np.asarray(grads["V"]), P)
    np.testing.assert_allclose(along_ray, np.asarray(2 * R * dR)[:, 0], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(grads["V"]).sum(axis=1), 0.0, atol=1e-10)  # 1^T grad_V = 0
    np.testing.assert_allclose(np.asarray(grads["v"]).sum(axis=1), 0.0, atol=1e-10)  # 1^T grad_v = 0


def test_monte_carlo_exact_values_and_structure():
    d, T, N = 4, 20, 20_000
    losses = jax.random.normal(jax.random.key(0), (N, T, d))
    etas = jnp.array([0.0, 0.5 / np.sqrt(T), 2.0 / np.sqrt(T)])
    R, dR = jax.jit(jax.vmap(rj.ray_regret, in_axes=(0, None)))(losses, etas)
    est = rj.ray_estimate(R, dR)
    # E[R] = sqrt(T) mu_d at every eta (Proposition 5)
    z_mean = (np.asarray(est.mean_R) - np.sqrt(T) * rj.mu_d(d)) / np.asarray(est.mean_R_se)
    assert np.all(np.abs(z_mean) < 4), z_mean
    F0_se = float(jnp.std(R[:, 0] ** 2) / np.sqrt(N))
    assert abs(float(est.F[0]) - rj.exact_F0(d, T)) < 4 * F0_se
    assert abs(float(est.dF[0]) - rj.exact_dF0(d, T)) < 4 * float(est.dF_se[0])
    # the estimator can tell F'(0) from a 10% wrong value
    assert abs(float(est.dF[0]) - 1.1 * rj.exact_dF0(d, T)) > 4 * float(est.dF_se[0])


def test_gradient_structure_in_expectation():
    d, T, N = 3, 16, 6000
    eta = 1.0 / np.sqrt(T)
    losses = jax.random.normal(jax.random.key(1), (N, T, d))
    g = jax.jit(jax.vmap(rj.block_gradients, in_axes=(0, None)))(losses, eta)
    for name in ("v", "k"):
        z = np.asarray(g[name].mean(0) / (g[name].std(0) / np.sqrt(N)))
        assert np.all(np.abs(z) < 4.5), (name, z)
    gV = np.asarray(g["V"].mean(0))
    P = np.eye(d) - 1.0 / d
    alpha = np.sum(gV * P) / (d - 1)
    se = np.asarray(g["V"].std(0)) / np.sqrt(N)
    assert np.all(np.abs(gV - alpha * P) < 4.5 * se)


def test_multihead_ray_identity():
    d, T, N = 3, 12, 8000
    etas = jnp.array([0.1, 0.6])
    blocks = jax.random.normal(jax.random.key(2), (N, T, d, d))
    phi = rj.ray_estimate(*jax.jit(jax.vmap(rj.swap_ray_regret, in_axes=(0, None)))(blocks, etas))
    R, dR = jax.jit(jax.vmap(jax.vmap(rj.ray_regret, in_axes=(0, None)), in_axes=(2, None)))(blocks, etas)  # [d, N, E]
    single = rj.ray_estimate(R.reshape(d * N, -1), dR.reshape(d * N, -1))
    # Phi'_hat - d F'_hat = 2 sum_{j != k} mean(R_j R_k'), mean zero; bound by its own standard error
    S_dR = dR.sum(0)
    cross = 2 * (R.sum(0) * S_dR - jnp.sum(R * dR, axis=0))
    cross_se = np.asarray(jnp.std(cross, axis=0) / np.sqrt(N))
    np.testing.assert_allclose(np.asarray(phi.dF - d * single.dF), np.asarray(cross.mean(0)), rtol=1e-4, atol=1e-3)
    assert np.all(np.abs(np.asarray(cross.mean(0))) < 4 * cross_se)


def test_find_root_on_known_line():
    etas = jnp.linspace(0.1, 2.0, 12)
    root = rj.find_root(etas, 3.0 * (etas - 0.77), jnp.full(12, 0.3))
    assert abs(float(root.eta) - 0.77) < 1e-5 and int(root.sign_changes) == 1
    assert abs(float(root.se) - 0.1) < 1e-5  # se 0.3 / slope 3
    bumpy = jnp.array([-3.0, -1.0, 1.0, -1.0, 2.0, 4.0])
    r2 = rj.find_root(jnp.arange(6.0), bumpy, jnp.ones(6))
    assert int(r2.sign_changes) == 3
    r3 = rj.find_root(etas, -jnp.ones(12), jnp.ones(12))
    assert np.isnan(float(r3.eta)) and int(r3.sign_changes) == 0
    with pytest.raises(ValueError):
        rj.find_root(jnp.arange(3.0), jnp.arange(3.0), jnp.ones(3))


def test_scan_pieces():
    etas = rj.scan_etas(25)
    assert etas.dtype == np.float32 and etas[0] == 0.0 and np.allclose(etas[1:], rj.SCAN_KAPPAS / 5)
    keys = rj.scan_keys(3, 25, 4)
    assert keys.shape == (4, 2) and keys.dtype == np.uint32
    np.testing.assert_array_equal(keys, rj.scan_keys(3, 25, 6)[:4])  # a key does not depend on N
    assert not np.array_equal(keys, rj.scan_keys(3, 50, 4)) and not np.array_equal(keys, rj.scan_keys(3, 25, 4, seed=1))
    R, dR = jax.vmap(rj.ray_sample(3, 25, etas))(keys)
    losses = jax.random.normal(jax.random.wrap_key_data(keys[2]), (25, 3))
    np.testing.assert_array_equal(R[2], rj.ray_regret(losses, jnp.asarray(etas))[0])


def test_scan_moments_root_of_a_known_line():
    etas = np.concatenate([[0.0], np.linspace(0.1, 1.0, 10)]).astype(np.float32)
    noise = np.random.default_rng(0).normal(size=(500, 11)) * 1e-3
    R, dR = np.ones((500, 11)), (etas - 0.43) / 2 + noise  # F' = 2 E[R R'] = etas - 0.43
    out = rj.scan_moments(R, dR, etas)
    assert out["eta_star"] == pytest.approx(0.43, abs=1e-3) and out["sign_changes"] == 1
    assert out["se"] == pytest.approx(2e-3 / np.sqrt(500), rel=0.2)  # se(F') / |slope 1|
    np.testing.assert_allclose(out["F"], 1.0)
    np.testing.assert_allclose(out["F_se"], 0.0)
    assert out["dF"].shape == out["mean_R_se"].shape == (11,)


def _swap_loss_loop(heads, blocks, offset):
    """(sum_j R_j - offset)^2 of the Eq. (9) heads on Gaussian block input [T, d, d] by plain loops (docs/regret.md §10.3)."""
    T, d, _ = blocks.shape
    total = 0.0
    for j in range(d):
        u, policies = np.zeros(d), np.zeros((T, d))
        for t in range(T):
            policies[t] = softmax(u)
            z = blocks[t].reshape(-1)
            u = u + (heads["V"][j] @ z + heads["v"][j]) * (heads["b"][j] + heads["k"][j] @ z)
        total += external_regret(policies, blocks[:, j, :])
    return (total - offset) ** 2


def test_swap_block_gradients_match_finite_differences_of_a_loop(x64):
    rng = np.random.default_rng(4)
    d, T, eta, offset, h = 3, 6, 0.45, 1.7, 1e-6
    blocks = rng.normal(size=(T, d, d))
    grads = jax.jit(swap_block_gradients)(jnp.asarray(blocks), eta, offset)
    base = jax.tree.map(np.asarray, rj.bm_params(d, eta))
    for _ in range(2):  # random directions through every block
        direction = {k: rng.normal(size=v.shape) for k, v in base.items()}
        shifted = [{k: base[k] + s * h * direction[k] for k in base} for s in (1, -1)]
        fd = (_swap_loss_loop(shifted[0], blocks, offset) - _swap_loss_loop(shifted[1], blocks, offset)) / (2 * h)
        along = sum(float(np.sum(np.asarray(grads[k]) * direction[k])) for k in base)
        np.testing.assert_allclose(along, fd, rtol=1e-6)
    # off-diagonal value blocks alone (head j reading block k != j)
    direction = {k: np.zeros_like(v) for k, v in base.items()}
    direction["V"] = np.einsum("jk,ac->jakc", 1.0 - np.eye(d), rng.normal(size=(d, d))).reshape(d, d, d * d)
    shifted = [{k: base[k] + s * h * direction[k] for k in base} for s in (1, -1)]
    fd = (_swap_loss_loop(shifted[0], blocks, offset) - _swap_loss_loop(shifted[1], blocks, offset)) / (2 * h)
    np.testing.assert_allclose(float(np.sum(np.asarray(grads["V"]) * direction["V"])), fd, rtol=1e-6)


def test_swap_block_gradients_pointwise_identities(x64):
    rng = np.random.default_rng(5)
    d, T, eta = 4, 9, 0.3
    blocks = jnp.asarray(rng.normal(size=(3, T, d, d)))

    @jax.jit
    def per_sequence(blocks):
        ray = jax.vmap(rj.ray_regret, in_axes=(1, None))(blocks, jnp.array([eta]))  # head j on block j: ([d, 1], [d, 1])
        return swap_block_gradients(blocks, eta), ray, rj.swap_ray_regret(blocks, jnp.array([eta]))

    g, (R, dR), (S, dS) = jax.vmap(per_sequence)(blocks)
    V = np.asarray(g["V"]).reshape(3, d, d, d, d)  # [sequence, head j, row, input block k, column]
    np.testing.assert_allclose(V.sum(axis=2), 0.0, atol=1e-10)  # every column of every V_j sums to 0
    np.testing.assert_allclose(np.asarray(g["v"]).sum(axis=-1), 0.0, atol=1e-10)
    # head j's ray derivative <V_j[:, block j], -P> = 2 (sum_k R_k) R_j', and b_j = eta times it
    P = np.eye(d) - 1.0 / d
    want = 2 * np.asarray(R[..., 0]).sum(axis=1, keepdims=True) * np.asarray(dR[..., 0])  # [3, heads]
    diag = np.stack([V[:, j, :, j, :] for j in range(d)], axis=1)
    ray_derivative = -np.einsum("njac,ac->nj", diag, P)
    np.testing.assert_allclose(ray_derivative, want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(g["b"]), eta * want, rtol=1e-10)
    # summed over heads: the per-sequence Phi' sample 2 S S' of swap_ray_regret
    np.testing.assert_allclose(ray_derivative.sum(axis=1), np.asarray(2 * S * dS)[:, 0], rtol=1e-10)

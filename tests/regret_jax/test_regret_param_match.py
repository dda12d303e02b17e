"""regret_jax.param_match: invariants of Eq. (2) and the ray / block distances, on hand-built parameters."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import regret_jax as rj
from regret_jax import param_match as pm

D = 3


def _proj(d):
    return np.eye(d) - np.ones((d, d)) / d


def _rescale_shift(params, c, w, s):
    """(V, v, k, b) -> (V/c + 1 w^T, v/c + s 1, c k, c b): no policy changes (shift and scale freedom)."""
    d = params["V"].shape[-2]
    return {"V": params["V"] / c + np.ones((d, 1)) * w, "v": params["v"] / c + s, "k": c * params["k"], "b": c * params["b"]}


def _random_head(key, d=D, n=D):
    k = jax.random.split(key, 3)
    return {"V": jax.random.normal(k[0], (d, n)), "k": 0.3 * jax.random.normal(k[1], (n,)),
            "v": jax.random.normal(k[2], (d,)), "b": jnp.asarray(0.7)}


def test_invariants_do_not_change_under_shift_and_scale():
    head = _random_head(jax.random.key(0))
    moved = _rescale_shift(head, -2.5, np.array([0.3, -1.0, 2.0]), 0.8)
    z = jax.random.normal(jax.random.key(1), (7, D))
    np.testing.assert_allclose(jax.nn.softmax(rj.causal_logits(moved, z)), jax.nn.softmax(rj.causal_logits(head, z)), atol=1e-5)
    for name, value in pm.invariants(head).items():
        np.testing.assert_allclose(pm.invariants(moved)[name], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("c", [0.5, 3.0, -2.0])
def test_ftrl_params_scaled_and_shifted_sit_on_the_ray(c):
    eta = 0.37
    head = _rescale_shift(rj.ftrl_params(D, eta), c, np.array([1.0, -0.5, 0.25]), -1.5)
    inv = pm.invariants(head)
    fit, offray = pm.ray_fit(inv["W"])
    assert fit == pytest.approx(eta, rel=1e-6) and offray == pytest.approx(0.0, abs=1e-6)
    assert pm.ray_distance(inv["W"], eta) == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(inv["kappa"], 0.0, atol=1e-7)
    np.testing.assert_allclose(inv["omega"], 0.0, atol=1e-6)


def test_planted_off_ray_perturbation_hand_values():
    """V = -eta P + eps e_1 e_2^T, d = 3: W = P V, <P e_1 e_2^T, P> = P_21 = -1/3, so eta_fit = eta + eps / 6; the
    residual eps (P e_1 e_2^T + P / 6) has squared norm eps^2 (2/3 - 1/18) = 11 eps^2 / 18, and
    ||W||^2 = 2 eta^2 + 2 eta eps / 3 + 2 eps^2 / 3."""
    eta, eps = 0.4, 0.1
    V = -eta * _proj(D)
    V[0, 1] += eps
    head = _rescale_shift({"V": V, "k": np.zeros(D), "v": np.zeros(D), "b": 1.0}, 1.7, np.array([0.2, 0.1, -0.3]), 0.4)
    fit, offray = pm.ray_fit(pm.invariants(head)["W"])
    assert fit == pytest.approx(eta + eps / 6, rel=1e-5)
    expected = eps * np.sqrt(11 / 18) / np.sqrt(2 * eta**2 + 2 * eta * eps / 3 + 2 * eps**2 / 3)
    assert offray == pytest.approx(expected, rel=1e-5)
    assert pm.ray_distance(jnp.asarray(-2 * eta * _proj(D)), eta) == pytest.approx(1.0, rel=1e-6)  # ||-eta P|| / ||eta P||


def test_logit_terms_sum_to_the_projected_logits_and_match_a_loop():
    head = _random_head(jax.random.key(2), n=4)
    z = np.asarray(jax.random.normal(jax.random.key(3), (6, 4)))
    inv = {k: np.asarray(v) for k, v in pm.invariants(head).items()}
    value, key, bias = pm.logit_terms(inv, jnp.asarray(z))
    np.testing.assert_allclose(value + key + bias, rj.causal_logits(head, jnp.asarray(z)) @ _proj(D), rtol=1e-5, atol=1e-5)
    for t in range(6):  # round t + 1 sees z_0 .. z_{t-1}
        L, S = z[:t].sum(0), sum((np.outer(x, x) for x in z[:t]), np.zeros((4, 4)))
        np.testing.assert_allclose(value[t], inv["W"] @ L, atol=1e-5)
        np.testing.assert_allclose(key[t], inv["W"] @ S @ inv["kappa"], atol=1e-5)
        np.testing.assert_allclose(bias[t], inv["omega"] * (t + inv["kappa"] @ L), atol=1e-5)
    zs = jax.random.normal(jax.random.key(4), (5, 6, 4))
    terms = jax.vmap(pm.logit_terms, in_axes=(None, 0))(inv, zs)
    rms = [np.sqrt(np.mean(np.asarray(x) ** 2)) for x in terms]
    ratios = pm.term_ratios(inv, zs)
    assert ratios["key"] == pytest.approx(rms[1] / rms[0], rel=1e-5) and ratios["bias"] == pytest.approx(rms[2] / rms[0], rel=1e-5)
    at_ftrl = pm.term_ratios(pm.invariants(rj.ftrl_params(4, 0.3)), zs)
    assert float(at_ftrl["key"]) == 0.0 and float(at_ftrl["bias"]) == 0.0


def test_swap_head_match_on_bm_params_and_a_planted_off_diagonal_block():
    eta = 0.3
    heads = jax.tree.map(np.array, rj.bm_params(D, eta))
    c = np.array([0.5, 2.0, -1.0])  # a different scale per head, and a shift
    heads = {"V": heads["V"] / c[:, None, None] + 0.7, "v": heads["v"] / c[:, None] - 0.2, "k": heads["k"] * c[:, None],
             "b": heads["b"] * c}
    W = jax.vmap(pm.invariants)(heads)["W"]
    blocks = pm.head_blocks(W[1])
    np.testing.assert_allclose(blocks[1], -eta * _proj(D), atol=1e-6)  # head 1 reads input block 1 only
    np.testing.assert_allclose(blocks[0], 0.0, atol=1e-6)
    np.testing.assert_allclose(blocks[2], W[1][:, 2 * D:], atol=0)
    match = pm.swap_head_match(heads)
    np.testing.assert_allclose(match["eta"], eta, rtol=1e-5)
    np.testing.assert_allclose(match["offray"], 0.0, atol=1e-5)
    np.testing.assert_allclose(match["offdiag"], 0.0, atol=1e-5)
    eps = 0.05  # plant eps e_1 e_1^T in head 0's block for input 2: ||P e_1 e_1^T|| = sqrt(2/3), ||W_00|| = eta sqrt(2)
    heads["V"][0, 0, 2 * D] += eps / c[0]
    match = pm.swap_head_match(heads)
    np.testing.assert_allclose(match["offdiag"], [eps / (eta * np.sqrt(3)), 0.0, 0.0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(match["eta"], eta, rtol=1e-5)

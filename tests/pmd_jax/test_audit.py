"""The matched audit (``pmd_jax.audit``) against brute-force numpy values and hand-made critics."""
import jax
import jax.numpy as jnp
import numpy as np

from pmd_jax import audit
from pmd_jax import numpy_reference as ref
from pmd_jax.mdp import FiniteMDP
from pmd_jax.tasks import sample_mdp, sample_policy


def _input(seed, family="iid"):
    k_mdp, k_pi, k_new = jax.random.split(jax.random.key(seed), 3)
    mdp = sample_mdp(family, k_mdp)
    pi, pi_new = sample_policy(k_pi, 4, 3), sample_policy(k_new, 4, 3)
    return mdp, np.asarray(pi), np.asarray(pi_new)


def _gain_np(mdp, pi, new):
    P, R, g = np.asarray(mdp.P), np.asarray(mdp.R), float(mdp.gamma)
    v = lambda p: (p * ref.policy_evaluation(P, R, g, p)).sum(-1)  # noqa: E731
    return float(np.mean(v(new) - v(pi)))


def test_value_gain_is_the_uniform_state_mean_of_exact_value_differences():
    for seed in range(3):
        mdp, pi, new = _input(seed)
        np.testing.assert_allclose(float(audit.value_gain(mdp, pi, new)), _gain_np(mdp, pi, new), rtol=1e-12, atol=1e-13)


def test_audit_call_against_numpy():
    mdp, pi, new = _input(5, "bimodal_rewards")
    P, R, g = np.asarray(mdp.P), np.asarray(mdp.R), float(mdp.gamma)
    Q = ref.policy_evaluation(P, R, g, pi)
    eta = 0.8
    ideal = ref.pmd_step(pi, Q, eta)
    out = audit.audit_call(mdp, pi, Q, eta, new)
    np.testing.assert_allclose(float(out.gain_ideal), _gain_np(mdp, pi, ideal), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(float(out.gain_implemented), _gain_np(mdp, pi, new), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(float(out.max_row_error), np.abs(new - ideal).sum(1).max(), rtol=1e-12)
    assert float(out.gain_ideal) >= 0.0  # PMD improves every state


def test_two_state_gain_by_hand():
    """Self-loops with rewards (-1, 0) and (1, 0), gamma = 0.5: V^pi(s) = r_pi(s) / (1 - gamma)."""
    mdp = FiniteMDP(P=jnp.asarray(np.stack([np.tile([1.0, 0.0], (2, 1)), np.tile([0.0, 1.0], (2, 1))])),
                    R=jnp.asarray([[-1.0, 0.0], [1.0, 0.0]]), gamma=jnp.asarray(0.5))
    pi = np.full((2, 2), 0.5)
    new = np.array([[0.1, 0.9], [0.7, 0.3]])
    # V^pi = (-1, 1); V^new = (-0.2, 1.4): gain = ((-0.2 + 1) + (1.4 - 1)) / 2 = 0.6
    np.testing.assert_allclose(float(audit.value_gain(mdp, pi, new)), 0.6, rtol=1e-13)


def _deterministic_input():
    """Deterministic transitions and one-hot policies: every sampled TD target equals its exact one."""
    P = np.zeros((4, 3, 4))
    for s in range(4):
        for a in range(3):
            P[s, a, (s + a + 1) % 4] = 1.0
    R = np.arange(12.0).reshape(4, 3) / 12.0
    mdp = FiniteMDP(P=jnp.asarray(P), R=jnp.asarray(R), gamma=jnp.asarray(0.8))
    eye = np.eye(3)
    returned, ideal = eye[[0, 1, 2, 0]], eye[[2, 2, 1, 1]]
    Q = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    return mdp, Q, returned, ideal


def _backup_np(mdp, pi, Q):
    P, R, g = np.asarray(mdp.P), np.asarray(mdp.R), float(mdp.gamma)
    return R + g * P @ (pi * Q).sum(-1)


def test_critic_errors_score_the_returned_and_the_ideal_policy():
    mdp, Q, returned, ideal = _deterministic_input()
    seen = {}

    def critic(q, tr):  # a critic that answers 0 and records the packet it was given
        seen["a_next"], seen["s_next"] = tr.a_next, tr.s_next
        return jnp.zeros_like(q)

    out = audit.critic_errors(critic, jax.random.key(0), mdp, jnp.asarray(Q), jnp.asarray(returned), jnp.asarray(ideal), 2, 3)
    # The packet follows the returned policy (a' is its one-hot action at s').
    np.testing.assert_array_equal(np.asarray(seen["a_next"]), returned.argmax(1)[np.asarray(seen["s_next"])])
    np.testing.assert_allclose(np.asarray(out["exact_returned"]), np.abs(_backup_np(mdp, returned, Q)), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(out["sampled_returned"]), np.abs(_backup_np(mdp, returned, Q)), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(out["sampled_ideal"]), np.abs(_backup_np(mdp, ideal, Q)), rtol=1e-13)
    assert not np.allclose(_backup_np(mdp, ideal, Q), _backup_np(mdp, returned, Q))  # the two scorings differ here


def test_exact_critic_has_zero_exact_error():
    mdp, Q, returned, ideal = _deterministic_input()

    def exact(q, tr):
        return mdp.R + mdp.gamma * jnp.einsum("xay,y->xa", mdp.P, jnp.sum(jnp.asarray(returned) * q, -1))

    out = audit.critic_errors(exact, jax.random.key(1), mdp, jnp.asarray(Q), jnp.asarray(returned), jnp.asarray(ideal), 6, 6)
    np.testing.assert_allclose(np.asarray(out["exact_returned"]), 0.0, atol=1e-13)


def test_ideal_pmd_gain_is_never_negative():
    """PMD improves every state (docs/pmd.md section 11.3), so its uniform-state gain is >= 0 on any input."""
    from pmd_jax.tasks import sample_actor_inputs

    def one(k):
        k_mdp, k_in = jax.random.split(k)
        x = sample_actor_inputs(k_in, sample_mdp("bimodal_rewards", k_mdp), "low", eta=1.2)
        return audit.audit_call(x.mdp, x.pi, x.Q, x.eta, x.pi).gain_ideal

    gains = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(3), 256)))
    assert gains.min() >= -1e-12 and gains.max() > 0.1

"""Guards against two easy-to-make errors in the section-13 bound (PolicyAttention, arXiv 2609.30500;
``docs/pmd.md`` section 4), each against an independent numpy computation:

1. the routing envelope ``R = (S-1) e^{-kappa + 2 eta B_Q} + S e^{-(kappa+nu) + eta B_Q}``,
   ``zeta <= 2R/(1+R)`` (section 4.2) with a term dropped, a sign flipped or ``S`` off by one;
2. the greedy defect ``Dbar_k`` of round ``k`` computed from the new policy ``pi_hat_{k+1}``
   instead of the old one ``pi_k`` (section 4.5: ``D_k(s) = -log pi_k(G_k(s)|s)``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import bound, decoder
from pmd_jax import numpy_reference as ref
from pmd_jax.loop import closed_loop, exact_critic
from pmd_jax.mdp import FiniteMDP, RandomMDPFamily
from pmd_jax.pmd import pmd_step


# ----------------------------------------------------------------------------- routing envelope


def _np_routing_ratio(S, eta, kappa, nu, B):
    """docs/pmd.md 4.2: S-1 wrong-state groups, each Z <= e^{eta B}, against Z_int >= e^{kappa - eta B};
    at most S query tokens of weight e^{-nu}, against the same Z_int."""
    wrong_groups = (S - 1) * np.exp(eta * B) / np.exp(kappa - eta * B)
    query_tokens = S * np.exp(-nu) / np.exp(kappa - eta * B)
    return wrong_groups + query_tokens


# (S, eta, kappa, nu, q_bound): both terms matter at rtol 1e-10 in every case, and S = 1 has
# only the query-token (margin nu) term.
ENVELOPE_CASES = [
    (1, 0.5, 4.0, 1.0, 5.0),
    (1, 0.0, 2.0, 0.5, 1.0),
    (2, 0.3, 6.0, 2.0, 5.0),
    (3, 1.2, 9.0, 0.7, 2.5),
    (4, 0.1, 3.0, 3.0, 10.0),
    (7, 2.0, 20.0, 1.5, 4.0),
    (5, 0.8, 12.0, 6.0, 5.0),
]


@pytest.mark.parametrize("S,eta,kappa,nu,q_bound", ENVELOPE_CASES)
def test_routing_envelope_closed_form(S, eta, kappa, nu, q_bound):
    with jax.enable_x64(True):
        args = (jnp.float64(eta), jnp.float64(kappa), jnp.float64(nu), jnp.float64(q_bound))
        R = np.asarray(bound.routing_ratio_bound(S, *args))
        zeta_cap = np.asarray(bound.routing_error_bound(S, *args))
    assert R.dtype == np.float64
    want_R = _np_routing_ratio(S, eta, kappa, nu, q_bound)
    np.testing.assert_allclose(R, want_R, rtol=1e-10, atol=0)
    np.testing.assert_allclose(zeta_cap, 2 * want_R / (1 + want_R), rtol=1e-10, atol=0)
    # The cases are discriminating: each term alone is far from the sum at rtol 1e-10.
    margin_term = S * np.exp(-(kappa + nu) + eta * q_bound)
    assert margin_term / want_R > 1e-6
    if S > 1:
        assert (want_R - margin_term) / want_R > 1e-6


def test_routing_envelope_vectorised():
    """Array-valued (eta, kappa, nu) broadcast elementwise to the same closed form."""
    S, B = 3, 5.0
    eta = np.array([0.0, 0.4, 1.0, 2.5])
    kappa = np.array([3.0, 8.0, 11.0, 18.0])
    nu = np.array([0.5, 4.0, 1.0, 2.0])
    with jax.enable_x64(True):
        R = np.asarray(bound.routing_ratio_bound(S, jnp.asarray(eta), jnp.asarray(kappa), jnp.asarray(nu), B))
        Z = np.asarray(bound.routing_error_bound(S, jnp.asarray(eta), jnp.asarray(kappa), jnp.asarray(nu), B))
    want = _np_routing_ratio(S, eta, kappa, nu, B)
    np.testing.assert_allclose(R, want, rtol=1e-10, atol=0)
    np.testing.assert_allclose(Z, 2 * want / (1 + want), rtol=1e-10, atol=0)


def _random_instance(seed, S, A, q_bound):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(A), size=S), rng.uniform(-q_bound, q_bound, size=(S, A))


@pytest.mark.parametrize(
    "S,A,eta,kappa,nu",
    [(1, 3, 0.5, 2.0, 0.5), (1, 2, 0.0, 1.0, 1.0), (2, 3, 0.3, 4.0, 1.0), (3, 2, 0.2, 5.0, 0.8)],
)
def test_routing_envelope_bounds_decoder(S, A, eta, kappa, nu):
    """The decoder's measured routing error lies under the envelope, and is far from zero where the
    only leak is through the query tokens (S = 1), so an envelope without that term fails."""
    with jax.enable_x64(True):
        cfg = decoder.DecoderConfig(S, A, 0.8, kappa, nu)
        params = decoder.construct_params(S, A, cfg.gamma, kappa, nu)
        envelope = float(bound.routing_error_bound(S, eta, kappa, nu, cfg.q_bound))
        for seed in range(3):
            pi, Q = _random_instance(seed, S, A, cfg.q_bound)
            got = np.asarray(decoder.actor_call(params, cfg, jnp.asarray(pi), jnp.asarray(Q), eta))
            zeta = np.max(np.abs(got - ref.pmd_step(pi, Q, eta)).sum(axis=1))
            assert zeta <= envelope + 1e-12
            if S == 1:
                assert zeta > 1e-3


# ----------------------------------------------------------------------------- greedy defect


def _np_greedy_defect(P, pi, Q, tie_tol=1e-12):
    """max_{s,a} sum_{s'} P(s'|s,a) [-log sum_{b in G(s')} pi(b|s')], with explicit loops."""
    S, A, _ = P.shape
    D = np.empty(S)
    for s in range(S):
        top = max(Q[s])
        D[s] = -np.log(sum(pi[s, b] for b in range(A) if Q[s, b] >= top - tie_tol))
    return max(sum(P[s, a, t] * D[t] for t in range(S)) for s in range(S) for a in range(A))


def test_greedy_defect_hand_example():
    # Two states, two actions. From (0, 0) go to 1; from (0, 1) go to 0; from state 1 split evenly.
    P = np.zeros((2, 2, 2))
    P[0, 0, 1] = 1.0
    P[0, 1, 0] = 1.0
    P[1, :, :] = 0.5
    mdp = FiniteMDP(P=jnp.asarray(P), R=jnp.zeros((2, 2)), gamma=jnp.asarray(0.9))
    pi = np.array([[0.1, 0.9], [0.25, 0.75]])
    Q = np.array([[3.0, -1.0], [0.0, 2.0]])  # greedy sets {0} at s=0, {1} at s=1
    # D = (-log 0.1, -log 0.75); rows: (0,0) -> D(1), (0,1) -> D(0), (1,.) -> mean = (log 10 + log 4/3)/2
    D0, D1 = np.log(10.0), np.log(4.0 / 3.0)
    want = max(D1, D0, (D0 + D1) / 2)  # = log 10
    got = float(bound.greedy_defect(mdp, jnp.asarray(pi), jnp.asarray(Q)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got, _np_greedy_defect(P, pi, Q), rtol=1e-12)
    # The defect of the PMD-updated policy is different (smaller): the function reads the pi it is given.
    pi_new = ref.pmd_step(pi, Q, 1.0)
    assert abs(float(bound.greedy_defect(mdp, jnp.asarray(pi_new), jnp.asarray(Q))) - want) > 0.5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_defect_brute_force(seed):
    rng = np.random.default_rng(seed)
    S, A = 4, 3
    P = rng.dirichlet(np.ones(S), size=(S, A))
    pi = rng.dirichlet(np.ones(A), size=S)
    Q = rng.uniform(-2, 2, size=(S, A))
    Q[1, 2] = Q[1].max()  # make sure a tie is present
    Q[1, 0] = Q[1, 2]
    mdp = FiniteMDP(P=jnp.asarray(P), R=jnp.zeros((S, A)), gamma=jnp.asarray(0.9))
    got = float(bound.greedy_defect(mdp, jnp.asarray(pi), jnp.asarray(Q)))
    np.testing.assert_allclose(got, _np_greedy_defect(P, pi, Q), rtol=1e-12)


def _np_replay(P, R, gamma, pi0, Q0, eta, rounds):
    """The loop with the ideal PMD actor and the exact critic, in numpy: the old policies and Q tables."""
    pis, Qs = [pi0], [Q0]
    for _ in range(rounds):
        pi_hat = ref.pmd_step(pis[-1], Qs[-1], eta)
        V_next = (pi_hat * Qs[-1]).sum(axis=1)
        Qs.append(R + gamma * np.einsum("sat,t->sa", P, V_next))
        pis.append(pi_hat)
    return pis, Qs


@pytest.mark.parametrize("seed", [0, 1])
def test_loop_defect_uses_old_policy(seed):
    """closed_loop's Dbar_k equals the defect of (pi_k, Q_k), recomputed from a numpy replay, and not
    that of (pi_hat_{k+1}, Q_k): with a large step the two differ by far more than the tolerance."""
    S, A, gamma, eta, rounds = 4, 3, 0.8, 2.0, 6
    with jax.enable_x64(True):
        family = RandomMDPFamily(gamma=gamma, r_max=1.0, concentration=1.0, num_states=S, num_actions=A)
        mdp = family.sample(jax.random.key(50 + seed))
        rng = np.random.default_rng(seed)
        pi0 = rng.dirichlet(np.ones(A), size=S)
        Q0 = rng.uniform(-1, 1, size=(S, A))
        trace = closed_loop(
            jax.random.key(seed), mdp, pmd_step, exact_critic(mdp), jnp.asarray(pi0), jnp.asarray(Q0), 0, eta, rounds
        )
        dbar = np.asarray(trace.dbar)
        policy = np.asarray(trace.policy)
    P, R = np.asarray(mdp.P), np.asarray(mdp.R)
    pis, Qs = _np_replay(P, R, gamma, pi0, Q0, eta, rounds)
    np.testing.assert_allclose(policy, pis[rounds], rtol=1e-10, atol=1e-13)  # the replay is the loop
    want = np.array([_np_greedy_defect(P, pis[k], Qs[k]) for k in range(rounds)])
    wrong = np.array([_np_greedy_defect(P, pis[k + 1], Qs[k]) for k in range(rounds)])
    np.testing.assert_allclose(dbar, want, rtol=1e-9, atol=1e-12)
    assert np.max(np.abs(want - wrong)) > 1e-3  # the check discriminates the two readings


def _np_leak_by_enumeration(S, A, kappa, nu, n, m_min):
    """The two leaked-mass bounds of section 13 by enumerating the tokens a row sees, with the score each gets
    (docs/pmd.md section 4): a lookup row for (s', a') scores memory (x, b) at kappa [x = s'] + kappa [b = a'] and
    each of the n transitions at -nu; an evaluation row for (s, a) has at least m_min matching transitions at
    2 kappa, at worst every other transition at kappa, and the S A memories and S A evaluation queries at -nu."""
    target = (0, 0)
    lookup_leak = sum(np.exp(kappa * (x == target[0]) + kappa * (b == target[1]))
                      for x in range(S) for b in range(A) if (x, b) != target)
    lookup_leak += n * np.exp(-nu)
    eval_leak = n * np.exp(kappa) + 2 * S * A * np.exp(-nu)
    return lookup_leak / np.exp(2 * kappa), eval_leak / (m_min * np.exp(2 * kappa))


@pytest.mark.parametrize("S,A,kappa,nu,n,m_min", [(4, 3, 2.0, 1.0, 10, 3), (2, 5, 0.5, 3.0, 40, 1), (6, 2, 4.0, 0.2, 7, 2)])
def test_critic_leak_bounds_by_enumeration(S, A, kappa, nu, n, m_min):
    """Every term of lambda_1 and lambda_2 matters at these sizes (a dropped term or factor moves them by > 1e-6)."""
    with jax.enable_x64(True):
        lam1, lam2 = bound.critic_leak_bounds(S, A, jnp.float64(kappa), jnp.float64(nu), n, m_min)
    want1, want2 = _np_leak_by_enumeration(S, A, kappa, nu, n, m_min)
    np.testing.assert_allclose([float(lam1), float(lam2)], [want1, want2], rtol=1e-10, atol=0)

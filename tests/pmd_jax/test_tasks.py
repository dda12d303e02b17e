"""Task families, splits and the actor's input prior (``pmd_jax.tasks``; docs/pmd.md section 7)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pmd_jax import numpy_reference as ref
from pmd_jax import tasks
from pmd_jax.mdp import RandomMDPFamily

N = 64


@pytest.fixture(scope="module")
def train_mdps():
    with jax.enable_x64(True):
        return {f: tasks.split_mdps(f, "train", N) for f in tasks.FAMILIES}


def _entropy(pi):
    return -np.sum(pi * np.log(pi), axis=-1)


@pytest.mark.parametrize("family", tasks.FAMILIES)
def test_family_shapes_and_transition_rows_on_simplex(family, train_mdps):
    mdps = train_mdps[family]
    P, R = np.asarray(mdps.P), np.asarray(mdps.R)
    assert P.shape == (N, 4, 3, 4) and R.shape == (N, 4, 3) and P.dtype == np.float64
    np.testing.assert_allclose(np.asarray(mdps.gamma), 0.8)
    assert P.min() >= 0.0
    np.testing.assert_allclose(P.sum(-1), 1.0, atol=1e-12)


def test_iid_is_random_mdp_family(train_mdps):
    keys = jax.random.split(jax.random.fold_in(tasks.split_key("train"), tasks.FAMILIES.index("iid")), N)
    want = jax.jit(jax.vmap(RandomMDPFamily(gamma=0.8, r_max=1.0, concentration=1.0, num_states=4, num_actions=3).sample))(keys)
    got = train_mdps["iid"]
    for a, b in zip((got.P, got.R, got.gamma), (want.P, want.R, want.gamma)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_reward_bounds(train_mdps):
    R = {f: np.asarray(train_mdps[f].R) for f in tasks.FAMILIES}
    for f in ("iid", "sparse_transitions", "near_deterministic"):
        assert np.abs(R[f]).max() <= 1.0 and np.abs(R[f]).max() > 0.9
    assert np.abs(R["reward_x2"]).max() <= 2.0
    assert np.mean(np.abs(R["reward_x2"]) > 1.0) > 0.4  # U[-2, 2]: half the mass beyond 1
    absb = np.abs(R["bimodal_rewards"])
    assert absb.min() >= 0.5 and absb.max() <= 1.0
    assert absb.min() < 0.52 and absb.max() > 0.98  # the whole magnitude range [0.5, 1] is used
    assert 0.4 < np.mean(R["bimodal_rewards"] > 0) < 0.6  # both signs, about equally often


def test_sparse_transitions_two_uniform_successors(train_mdps):
    P = np.asarray(train_mdps["sparse_transitions"].P)
    support = P > 0
    assert np.all(support.sum(-1) == 2)
    # Each successor is in a row's pair with probability 2/S = 1/2; the weights are Dirichlet(1, 1) = U[0, 1].
    np.testing.assert_allclose(support.reshape(-1, 4).mean(0), 0.5, atol=0.07)
    pairs = {tuple(np.flatnonzero(row)) for row in support.reshape(-1, 4)}
    assert pairs == set(itertools.combinations(range(4), 2))
    w = np.sort(P.reshape(-1, 4), axis=-1)[:, -1]  # the larger weight ~ U[1/2, 1]
    assert abs(w.mean() - 0.75) < 0.03


def test_near_deterministic_rows(train_mdps):
    P = np.asarray(train_mdps["near_deterministic"].P).reshape(-1, 4)
    assert P.max(-1).min() >= 0.9 and P.min() > 0.0
    np.testing.assert_allclose(np.bincount(P.argmax(-1), minlength=4) / len(P), 0.25, atol=0.06)
    # the dense 0.1 share: E[max] = 0.9 + 0.1 E[Dirichlet(1) at s*] = 0.9 + 0.1/4
    assert abs(P.max(-1).mean() - 0.925) < 0.005


def test_splits_disjoint_and_reproducible(train_mdps):
    train = np.asarray(train_mdps["iid"].P)
    for split in ("val", "test"):
        other = np.asarray(tasks.split_mdps("iid", split, N).P)
        same = np.all(np.isclose(other[:, None], train[None]), axis=(2, 3, 4))
        assert not same.any(), split
    again = tasks.split_mdps("iid", "train", N)
    np.testing.assert_array_equal(np.asarray(again.P), train)
    np.testing.assert_array_equal(np.asarray(again.R), np.asarray(train_mdps["iid"].R))
    other_seed = np.asarray(tasks.split_mdps("iid", "train", N, seed=1).P)
    assert not np.isclose(other_seed, train).all(axis=(1, 2, 3)).any()
    keys = [jax.random.key_data(tasks.split_key(s)) for s in tasks.SPLITS]
    assert all(not np.array_equal(a, b) for a, b in itertools.combinations(keys, 2))


def test_families_differ_on_one_split(train_mdps):
    for f, g in itertools.combinations(tasks.FAMILIES, 2):
        Pf, Pg = np.asarray(train_mdps[f].P), np.asarray(train_mdps[g].P)
        assert not np.isclose(Pf, Pg).all(axis=(2, 3)).any(), (f, g)


def test_sample_mdp_is_jit_safe(train_mdps):
    key = jax.random.split(jax.random.fold_in(tasks.split_key("train"), tasks.FAMILIES.index("sparse_transitions")), N)[3]
    got = jax.jit(lambda k: tasks.sample_mdp("sparse_transitions", k))(key)
    np.testing.assert_allclose(np.asarray(got.P), np.asarray(train_mdps["sparse_transitions"].P[3]), rtol=1e-12)


def _numpy_prior_entropy(lo, hi, n, rng):
    """Mean row entropy and the within-policy row-0/row-1 entropy correlation of the stated prior, by numpy."""
    beta = np.exp(rng.uniform(np.log(lo), np.log(hi), size=(n, 1, 1)))
    z = beta * rng.standard_normal((n, 4, 3))
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    H = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return H.mean(), H.mean(1).std() / np.sqrt(n), np.corrcoef(H[:, 0], H[:, 1])[0, 1]


def test_policy_prior():
    n = 4000
    keys = jax.random.split(jax.random.key(11), n)
    rng = np.random.default_rng(0)
    mean_H = {}
    for entropy, (lo, hi) in tasks.POLICY_ENTROPY.items():
        pi = np.asarray(jax.vmap(lambda k, e=entropy: tasks.sample_policy(k, 4, 3, e))(keys))
        assert pi.shape == (n, 4, 3) and np.all(np.isfinite(pi)) and pi.min() > 0
        np.testing.assert_allclose(pi.sum(-1), 1.0, atol=1e-12)
        H = _entropy(pi)
        mean_H[entropy] = H.mean()
        want, se, want_corr = _numpy_prior_entropy(lo, hi, n, rng)
        assert abs(H.mean() - want) < 5 * se * np.sqrt(2) + 1e-3, (entropy, H.mean(), want)
        if entropy == "any":  # one beta per policy: the rows of one policy share their temperature
            corr = np.corrcoef(H[:, 0], H[:, 1])[0, 1]
            assert corr > 0.3 and abs(corr - want_corr) < 0.1, (corr, want_corr)
    assert mean_H["low"] < 0.25 * mean_H["high"]
    assert mean_H["high"] > 0.97 * np.log(3)
    assert mean_H["low"] < mean_H["any"] < mean_H["high"]


def test_policy_prior_positive_in_float32():
    with jax.enable_x64(False):
        keys = jax.random.split(jax.random.key(2), 20000)
        pi = jax.vmap(lambda k: tasks.sample_policy(k, 4, 3, "low"))(keys)
        assert pi.dtype == jnp.float32
        pi = np.asarray(pi)
    assert np.all(np.isfinite(pi)) and pi.min() > 0
    assert pi.min() >= 0.99 * np.exp(tasks.POLICY_LOG_FLOOR)  # the floor binds on some draws, and holds
    assert pi.min() < 1.01 * np.exp(tasks.POLICY_LOG_FLOOR)
    np.testing.assert_allclose(pi.sum(-1), 1.0, atol=1e-6)


def test_actor_inputs(train_mdps):
    n = 32
    mdps = jax.tree.map(lambda x: x[:n], train_mdps["sparse_transitions"])
    keys = jax.random.split(jax.random.key(7), n)

    @jax.jit
    def draw(keys, mdps, eta):  # one program: eta drawn, and eta given as a traced scalar
        drawn = jax.vmap(tasks.sample_actor_inputs)(keys, mdps)
        given = jax.vmap(lambda k, m: tasks.sample_actor_inputs(k, m, "high", eta))(keys, mdps)
        return drawn, given

    inp, fixed = jax.tree.map(np.asarray, draw(keys, mdps, 0.8))
    P, R = np.asarray(mdps.P), np.asarray(mdps.R)
    assert inp.eta.shape == (n,) and inp.eta.min() >= tasks.ETA_RANGE[0] and inp.eta.max() <= tasks.ETA_RANGE[1]
    assert inp.eta.max() - inp.eta.min() > 0.5
    for i in range(n):
        np.testing.assert_allclose(inp.Q[i], ref.policy_evaluation(P[i], R[i], 0.8, inp.pi[i]), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(fixed.Q[i], ref.policy_evaluation(P[i], R[i], 0.8, fixed.pi[i]), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(inp.mdp.P, P)
    np.testing.assert_array_equal(fixed.eta, 0.8)
    assert _entropy(fixed.pi).min() > 0.9 * np.log(3)


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: tasks.sample_mdp("gaussian", jax.random.key(0)), "family"),
        (lambda: tasks.split_mdps("iid_x", "train", 4), "family"),
        (lambda: tasks.split_key("dev"), "split"),
        (lambda: tasks.split_mdps("iid", "dev", 4), "split"),
        (lambda: tasks.split_mdps("iid", "train", 0), "n"),
        (lambda: tasks.sample_policy(jax.random.key(0), 4, 3, "medium"), "entropy"),
        (lambda: tasks.sample_mdp("sparse_transitions", jax.random.key(0), num_states=1), "num_states"),
        (lambda: tasks.sample_policy(jax.random.key(0), 4, 0), "num_actions"),
    ],
)
def test_bad_names_raise(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_bad_family_lists_families():
    with pytest.raises(ValueError) as info:
        tasks.sample_mdp("gaussian", jax.random.key(0))
    assert all(f in str(info.value) for f in tasks.FAMILIES)


def test_a_small_draw_is_the_prefix_of_a_larger_one():
    small, large = tasks.split_mdps("sparse_transitions", "test", 5), tasks.split_mdps("sparse_transitions", "test", 300)
    for a, b in zip(jax.tree.leaves(small), jax.tree.leaves(large)):
        assert a.shape[0] == 5 and b.shape[0] == 300
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[:5])

"""``pmd.stress``: its summary against numpy on hand-made arrays, and its negative controls failing their claims
(the iid condition for the low-entropy claims, high entropy for the "above iid" claims, and the exact-target scoring
for the scoring gap, the last on a real critic computation)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import checks
from experiments.studies.pmd import stress, training
from pmd_jax import audit, tasks
from pmd_jax.mdp import bellman_operator, policy_evaluation
from pmd_jax.pmd import pmd_step
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig


def _arrays(cfg, rng, actors=6, critics=5, N=8):
    C = len(cfg.conditions)
    row = rng.uniform(0.0, 0.1, (actors, C, N, 4))
    critic = {k: rng.uniform(0.0, 0.2, (critics, C, N, 4, 3)) for k in stress.SCORINGS}
    return {"row_l1": row, "critic": critic, "origin": {"actor": "trained here", "critic": "loaded from x"}}


def _checks(cfg, arrays):
    s = stress.summarize(cfg, arrays)
    return s, {c.name: c for c in s.checks}


def test_stress_summary_against_numpy():
    cfg = stress.QUICK
    arrays = _arrays(cfg, np.random.default_rng(0))
    c = {name: i for i, name in enumerate(cfg.conditions)}
    s, found = _checks(cfg, arrays)
    m, row = s.metrics, arrays["row_l1"]
    assert m["row_l1_mean_iid"] == pytest.approx(np.median(row[:, c["iid"]].mean(axis=(1, 2))))
    assert m["row_l1_max_low_entropy"] == pytest.approx(np.median(row[:, c["low_entropy"]].max(axis=(1, 2))))
    td = arrays["critic"]["sampled_ideal"][:, c["reward_x2"]]
    assert m["td_mean_ideal_scoring_reward_x2"] == pytest.approx(np.median(td.mean(axis=(1, 2, 3))))
    assert m["td_max_exact_iid"] == pytest.approx(np.median(arrays["critic"]["exact_returned"][:, 0].max(axis=(1, 2, 3))))
    assert set(found) == {claim.name for claim in stress.CLAIMS}
    low = found["low_entropy_row_error_above_iid"]
    diff = row[:, c["low_entropy"]].mean(axis=(1, 2)) - row[:, c["iid"]].mean(axis=(1, 2))
    assert (low.value, low.n, low.unit) == (pytest.approx(diff.mean()), 6, "actor seed")
    ret = arrays["critic"]["sampled_returned"][:, c["iid"]].mean(axis=(1, 2, 3))
    ideal = arrays["critic"]["sampled_ideal"][:, c["iid"]].mean(axis=(1, 2, 3))
    gap = found["ideal_scoring_within_10pct_iid"]
    assert gap.value == pytest.approx(np.mean(np.abs(ideal - ret) / ret)) and gap.n == 5
    assert s.tables["models"]["origin"] == ["trained here", "loaded from x"]


def test_low_entropy_claims_pass_only_with_large_low_entropy_errors_and_their_controls_fail():
    """Large low-entropy errors in every actor seed pass both low-entropy claims; the iid condition (the max
    claim's control) and high entropy minus iid (the mean claim's control) fail them. Equal conditions fail."""
    cfg = stress.QUICK
    c = {name: i for i, name in enumerate(cfg.conditions)}
    arrays = _arrays(cfg, np.random.default_rng(1))
    arrays["row_l1"][:, c["low_entropy"], :2] = 1.6 + 0.1 * np.random.default_rng(2).uniform(size=(6, 2, 4))
    arrays["row_l1"][:, c["reward_x2"]] += 0.05
    arrays["critic"]["sampled_returned"][:, c["reward_x2"]] += 0.1
    _, found = _checks(cfg, arrays)
    for name in ("low_entropy_max_row_error_large", "low_entropy_row_error_above_iid", "reward_x2_row_error_above_iid",
                 "reward_x2_td_error_above_iid"):
        assert found[name].verdict == checks.PASS and found[name].control.verdict != checks.PASS, name
    # the paper's failure mode absent (every condition drawn alike): no claim passes
    _, found = _checks(cfg, _arrays(cfg, np.random.default_rng(3)))
    assert found["low_entropy_max_row_error_large"].verdict == checks.FAIL
    for name in ("low_entropy_row_error_above_iid", "reward_x2_row_error_above_iid", "reward_x2_td_error_above_iid"):
        assert found[name].verdict != checks.PASS, name


def test_exact_target_scoring_is_a_change_of_scoring_the_10pct_gap_sees():
    """A perfect one-step critic (``F^{pi_new} Q``) read after an exact PMD step: ideal-PMD and returned-policy
    scorings agree within 10% over MDP blocks, while the exact-target scoring (the control) is 100% away."""
    mdps = tasks.split_mdps("iid", "test", 256, 0)
    keys = jax.random.split(jax.random.key(0), 256)

    def one(key, mdp):
        k_pi, k_err = jax.random.split(key)
        pi = tasks.sample_policy(k_pi, 4, 3)
        Q = policy_evaluation(mdp, pi)
        new = pmd_step(pi, Q, 0.8)
        perfect = lambda q, _packet: bellman_operator(mdp, new, q)  # noqa: E731
        return audit.critic_errors(perfect, k_err, mdp, Q, new, new, 6, 6)

    err = jax.jit(jax.vmap(one))(keys, mdps)
    td = {k: np.asarray(v).reshape(8, -1).mean(axis=1) for k, v in err.items()}  # 8 blocks of 32 MDPs
    gap = np.abs(td["sampled_ideal"] - td["sampled_returned"]) / td["sampled_returned"]
    control = np.abs(td["exact_returned"] - td["sampled_returned"]) / td["sampled_returned"]
    np.testing.assert_allclose(control, 1.0)
    check = dataclasses.replace(stress.SCORING_GAP, unit="MDP block").judge(gap, control=control)
    assert check.verdict == checks.PASS and check.control.verdict == checks.FAIL
    assert float(jnp.max(err["exact_returned"])) == 0.0



def test_critic_outputs_per_run_equal_a_single_run_call():
    """Critic runs are evaluated one compiled call at a time (memory); run ``c`` reads actor run ``c mod runs``."""
    tcfg = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2))
    x = training.condition_inputs(("iid",), 2, 2, 0.8, 0)
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(1), 3)))
    params = training.initial_params(tcfg, "critic", keys)
    pi_new = np.stack([training.ideal_policies(x), np.full(x.pi.shape, 1 / 3)])  # two actor runs
    both = training.critic_outputs(tcfg, params, x, pi_new, 5, 6)
    one = training.critic_outputs(tcfg, jax.tree.map(lambda a: a[2:], params), x, pi_new[:1], 5, 6)
    assert both["exact_returned"].shape == (3, 1, 4, 4, 3)
    for k in both:
        np.testing.assert_allclose(both[k][2], one[k][0], rtol=1e-6, atol=1e-6)

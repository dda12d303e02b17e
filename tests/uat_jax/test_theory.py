"""Theory checks: Theorem 1 part 2 (the constructed separating UAT), Proposition 1 for a
trained-shape observation-only model, and the Appendix D.3 overhead formulas."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import episode, model_and_params
from uat_jax import theory
from uat_jax.config import ModelConfig, ablation
from uat_jax.model import DecisionTransformer, init_cache, sequence_logits


intermediates = jax.jit(theory.attention_intermediates, static_argnums=0)
sensitivity = jax.jit(theory.feedback_sensitivity, static_argnums=0)
logits_at = jax.jit(sequence_logits, static_argnums=0)


def histories():
    """H, H': equal observations, feedback differing only at step j* = 1."""
    obs, actions, rewards = episode(11)
    return obs, (actions, rewards), (actions.at[1].set((actions[1] + 2) % 5), rewards.at[1].set(-rewards[1] - 1.0))


def test_theorem1_part2_construction_separates_the_histories():
    model, params, _ = model_and_params("uat")
    obs, fa, fb = histories()
    j_star, t = 1, 4
    sep, k = theory.separating_uat(model, params, jax.random.key(0), obs, fa, fb, j_star, t)
    _, la = intermediates(model, sep, obs, *fa)
    _, lb = intermediates(model, sep, obs, *fb)
    gap = np.asarray(la[0, 0] - lb[0, 0])  # layer 1, head 1, [query, key]
    expected = float(theory.logit_gap(model, sep, fa, fb, j_star, k))
    assert abs(expected) > 1e-3
    np.testing.assert_allclose(gap[t, j_star + 1], expected, rtol=1e-4)
    # only the key j* + 1 moves in layer 1 (keys <= query row), as in the proof
    mask = np.tril(np.ones_like(gap, bool))
    mask[:, j_star + 1] = False
    assert np.abs(gap[mask]).max() < 1e-6
    # ... and the policies differ, while before the construction's feedback pathway
    # (all gates zero) they are equal: Vanilla-TF cannot separate H and H' (Prop. 1)
    pa, pb = (jax.nn.softmax(logits_at(model, sep, obs, *f)[t]) for f in (fa, fb))
    assert float(jnp.abs(pa - pb).max()) > 1e-4
    assert float(sensitivity(model, theory.zero_gates(sep), obs, fa, fb)) == 0.0


def test_construction_validates_its_arguments():
    model, params, _ = model_and_params("uat")
    obs, fa, fb = histories()
    with pytest.raises(ValueError, match="j_star"):
        theory.separating_uat(model, params, jax.random.key(0), obs, fa, fb, 4, 2)
    no_kv = DecisionTransformer(ablation(tiny("uat"), "no_kv"))
    with pytest.raises(ValueError, match="modulate_kv"):
        theory.separating_uat(no_kv, params, jax.random.key(0), obs, fa, fb, 1, 4)


@pytest.mark.parametrize("cfg", [ModelConfig(), tiny("uat"), ModelConfig(d_model=32, n_heads=2, n_layers=4, d_u=8)])
def test_overhead_formulas_of_appendix_d3_match_counted_parameters(cfg):
    model = DecisionTransformer(cfg)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((cfg.horizon, cfg.obs_dim)),
                            jnp.zeros(cfg.horizon, jnp.int32), jnp.zeros(cfg.horizon), init_cache(cfg))
    counted = theory.overhead_counted(shapes)
    assert counted == theory.overhead_formula(cfg)
    vt = DecisionTransformer(ModelConfig(**{**cfg.__dict__, "kind": "vt"}))
    vt_shapes = jax.eval_shape(vt.init, jax.random.key(0), jnp.zeros((cfg.horizon, cfg.obs_dim)),
                               jnp.zeros(cfg.horizon, jnp.int32), jnp.zeros(cfg.horizon), init_cache(cfg))
    assert theory.count(shapes) - theory.count(vt_shapes) == sum(counted.values())
    if cfg == ModelConfig():  # Table 3 sizes: 3Ld^2 = 36,864 and 3L d_m d = 9,216 by hand
        assert counted["affine"] == 36864 and counted["bias"] == 9216 and counted["gates"] == 4096


def test_random_walks_match_a_brute_force_replay():
    """Positions, rewards under both goals and expert labels of ``random_walks`` against a
    Python replay of C.1's dynamics and reward (independent of ``darkroom.step``)."""
    n, T = 6, 9
    p = jax.tree.map(np.asarray, theory.random_walks(jax.random.key(3), n, T))
    moves = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]
    assert (np.abs(p.goal - p.alt_goal).sum(-1) > 0).all()
    for e in range(n):
        pos = tuple(int(v) for v in p.positions[e, 0])
        assert pos != tuple(p.goal[e])
        for t in range(T):
            assert tuple(p.positions[e, t]) == pos
            dr, dc = moves[p.actions[e, t]]
            new = (min(max(pos[0] + dr, 0), 9), min(max(pos[1] + dc, 0), 9))
            for goal, rewards in ((p.goal[e], p.rewards), (p.alt_goal[e], p.alt_rewards)):
                d_old = int(abs(pos[0] - goal[0]) + abs(pos[1] - goal[1]))
                d_new = int(abs(new[0] - goal[0]) + abs(new[1] - goal[1]))
                expected = 2.0 * (d_new == 0) + 0.5 * (int(d_new < d_old) - int(d_new > d_old)) - 0.01
                np.testing.assert_allclose(rewards[e, t], expected, rtol=1e-6, atol=1e-7)
            g = p.goal[e]
            gap = (g[0] - pos[0], g[1] - pos[1])
            label = 0 if gap == (0, 0) else ((1 if gap[0] < 0 else 2) if abs(gap[0]) >= abs(gap[1])
                                             else (3 if gap[1] < 0 else 4))
            assert p.expert[e, t] == label
            pos = new
    assert np.abs(p.rewards - p.alt_rewards).max() > 0.4


def test_policy_tv_against_per_episode_softmax():
    model, params, _ = model_and_params("uat")
    probes = theory.random_walks(jax.random.key(4), 3, 6)
    tv = float(theory.policy_tv(model, params, probes, probes.rewards, probes.alt_rewards))
    expected = np.mean([0.5 * np.abs(jax.nn.softmax(logits_at(model, params, probes.obs[e], probes.actions[e], ra))
                                      - jax.nn.softmax(logits_at(model, params, probes.obs[e], probes.actions[e], rb))
                                      ).sum(-1) for e, (ra, rb) in enumerate(zip(probes.rewards, probes.alt_rewards))])
    np.testing.assert_allclose(tv, expected, rtol=1e-5)
    assert tv > 1e-3
    vt, vt_params, _ = model_and_params("vt")
    assert float(theory.policy_tv(vt, vt_params, probes, probes.rewards, probes.alt_rewards)) == 0.0

"""Study ``uat.theory``: the theory checks of the UAT paper (arXiv 2607.18910) in float64.

- zero degradation (section 4.2): UAT with zero gates vs Vanilla-TF with the same base
  weights, Table 3 sizes, random base and utility weights: max |logit difference|;
- Proposition 1: Vanilla-TF and GTrXL on two histories with the same observations and
  different feedback: max |logit difference|;
- Theorem 1 part 2: the constructed UAT of Appendix A.3: measured layer-1 logit gap vs
  its closed form, and the policy difference it causes;
- Appendix D.3: overhead formulas vs counted parameters at Table 3 sizes.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import uat_jax as uat
from experiments.registry import Check, RunContext, StudyOutput, study

PAPER = {"params_vt_table6": 109828.0, "params_uat_table6": 155972.0}


def _shapes(model):
    return jax.eval_shape(lambda k: uat.init_params(model, k), jax.random.key(0))


def _random(model, seed):
    """Every parameter N(0, 0.3^2) in float64 (gates and U included, so they act)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), jnp.float64), _shapes(model))


@study("uat.theory", "zero degradation, Proposition 1, Theorem 1 construction, D.3 overhead (float64)")
def run(ctx: RunContext) -> StudyOutput:
    with jax.enable_x64(True):
        return _run(ctx)


def _run(ctx: RunContext) -> StudyOutput:
    cfg = uat.ModelConfig() if not ctx.quick else uat.ModelConfig(horizon=20)
    T = cfg.horizon
    key = jax.random.key(0)
    obs = jax.random.bernoulli(key, 0.3, (T, cfg.obs_dim)).astype(jnp.float64)
    actions = jax.random.randint(jax.random.fold_in(key, 1), (T,), 0, 5)
    rewards = jax.random.normal(jax.random.fold_in(key, 2), (T,), jnp.float64)
    fb_a = (actions, rewards)
    fb_b = (actions.at[3].set((actions[3] + 1) % 5), rewards.at[3].set(-rewards[3] - 1.0))
    logits = jax.jit(uat.sequence_logits, static_argnums=0)

    model = uat.DecisionTransformer(cfg)
    params = _random(model, 0)
    vt = uat.DecisionTransformer(uat.ModelConfig(**{**cfg.__dict__, "kind": "vt"}))
    zero_deg = float(jnp.max(jnp.abs(logits(model, uat.theory.zero_gates(params), obs, *fb_a)
                                     - logits(vt, uat.theory.backbone_params(params), obs, *fb_a))))
    gated = float(jnp.max(jnp.abs(logits(model, params, obs, *fb_a)
                                  - logits(vt, uat.theory.backbone_params(params), obs, *fb_a))))
    prop1 = {}
    for kind in ("vt", "gtrxl"):
        m = uat.DecisionTransformer(uat.ModelConfig(**{**cfg.__dict__, "kind": kind}))
        p = _random(m, 1)
        prop1[kind] = float(jnp.max(jnp.abs(logits(m, p, obs, *fb_a) - logits(m, p, obs, *fb_b))))
    j_star, t = 3, T - 1
    sep, k = uat.theory.separating_uat(model, params, jax.random.key(5), obs, fb_a, fb_b, j_star, t)
    _, la = uat.theory.attention_intermediates(model, sep, obs, *fb_a)
    _, lb = uat.theory.attention_intermediates(model, sep, obs, *fb_b)
    measured = float(la[0, 0, t, j_star + 1] - lb[0, 0, t, j_star + 1])
    closed = float(uat.theory.logit_gap(model, sep, fb_a, fb_b, j_star, k))
    pa = jax.nn.softmax(logits(model, sep, obs, *fb_a)[t])
    pb = jax.nn.softmax(logits(model, sep, obs, *fb_b)[t])
    policy_gap = float(jnp.max(jnp.abs(pa - pb)))
    table3 = uat.ModelConfig()
    shapes = lambda c: _shapes(uat.DecisionTransformer(c))
    counted = uat.theory.overhead_counted(shapes(table3))
    formula = uat.theory.overhead_formula(table3)
    n_uat = uat.theory.count(shapes(table3))
    n_vt = uat.theory.count(shapes(uat.ModelConfig(kind="vt")))
    metrics = {"zero_degradation_max_abs": zero_deg, "gated_vs_vt_max_abs": gated,
               "prop1_vt_max_abs": prop1["vt"], "prop1_gtrxl_max_abs": prop1["gtrxl"],
               "thm1_logit_gap_measured": measured, "thm1_logit_gap_closed_form": closed,
               "thm1_policy_gap": policy_gap, "params_vt": float(n_vt), "params_uat": float(n_uat),
               **{f"overhead_{g}_counted": float(v) for g, v in counted.items()},
               **{f"overhead_{g}_formula": float(v) for g, v in formula.items()}}
    rel = abs(measured - closed) / abs(closed)
    checks = [Check("zero_degradation_exact", zero_deg, "== 0", zero_deg == 0.0),
              Check("gates_change_outputs", gated, "> 1e-6", gated > 1e-6),
              Check("prop1_vt_feedback_blind", prop1["vt"], "== 0", prop1["vt"] == 0.0),
              Check("prop1_gtrxl_feedback_blind", prop1["gtrxl"], "== 0", prop1["gtrxl"] == 0.0),
              Check("thm1_closed_form", rel, "< 1e-9 relative", rel < 1e-9 and abs(closed) > 1e-6),
              Check("thm1_policies_differ", policy_gap, "> 1e-9", policy_gap > 1e-9),
              Check("d3_overhead_formulas", float(sum(abs(counted[g] - formula[g]) for g in formula)),
                    "== 0", counted == formula and n_uat - n_vt == sum(formula.values()))]
    return StudyOutput(config={"model": cfg.__dict__, "j_star": j_star, "t": t, "x64": True},
                       metrics=metrics, checks=checks, paper=dict(PAPER))

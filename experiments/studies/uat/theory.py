"""Study ``uat.theory``: the theory of "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910), checked in float64.

- zero degradation (section 4.2, Theorem 1 part 1): UAT with zero gates against
  Vanilla-TF with the same base weights, random base and utility weights: max |logit
  difference| over one episode;
- Proposition 1: Vanilla-TF and GTrXL on two histories with the same observations and
  different feedback: max |logit difference|;
- Theorem 1 part 2: the constructed UAT of Appendix A.3 (``uat_jax.theory.separating_uat``):
  measured layer-1 logit gap against its closed form, and the policy difference it causes;
- Appendix D.3: the overhead formulas against the parameters counted at Table 3 sizes.

The probes run at ``model`` (Table 3 widths; ``--quick`` shortens the episode to T = 20),
the D.3 count at ``counted`` (Table 3). Derivations: ``docs/uat.md``. No training, no seeds.

Checks, and how each could fail:

* ``zero_degradation_exact`` (== 0): any utility term that leaks past a zero gate (a
  bias or affine term not multiplied by its gate) makes it nonzero.
* ``gates_change_outputs`` (> 1e-6): with nonzero gates UAT must differ from VT; fails if
  the utility pathway is disconnected (then the first check would pass vacuously).
* ``prop1_vt_feedback_blind``, ``prop1_gtrxl_feedback_blind`` (== 0): an observation-only
  model must not read (a, r); fails if the baselines' tokens leak feedback.
* ``thm1_closed_form`` (relative error < 1e-9; non-finite if the closed-form gap is below
  1e-6, so a degenerate construction fails): the measured gap of the construction must
  be d_k / sqrt(d_m); fails if the attention logits are not what Appendix A.3 derives.
* ``thm1_policies_differ`` (> 1e-9): the separated logit must move the policy at step t.
* ``d3_overhead_formulas`` (== 0): sum over groups of |counted - formula| plus
  |(UAT - VT parameters) - total formula|; fails if a group is missing or extra.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks
from experiments.registry import RunContext, Study, Summary, register
from uat_jax import theory
from uat_jax.config import ModelConfig
from uat_jax.model import DecisionTransformer, init_params, sequence_logits

PAPER = {"params_vt": 109828.0, "params_uat": 155972.0}  # Table 6 parameter counts


@dataclasses.dataclass(frozen=True)
class TheoryConfig:
    """The probed model, the D.3 counted model, the feedback step j* and the weight scale."""

    model: ModelConfig = ModelConfig()  # probes; the episode length T is model.horizon, t = T - 1
    counted: ModelConfig = ModelConfig()  # the D.3 count (Table 3 sizes)
    j_star: int = 3  # the step (0-based) where the two histories' feedback differ
    init_std: float = 0.3  # every probed parameter N(0, init_std^2), gates included

    def __post_init__(self):
        if self.model.kind != "uat" or not self.model.modulate_kv:
            raise ValueError(f"model must be kind 'uat' with modulate_kv (Theorem 1's construction), got {self.model}")
        if self.counted.kind != "uat":
            raise ValueError(f"counted.kind must be 'uat', got {self.counted.kind!r}")
        if not 0 <= self.j_star < self.model.horizon - 1:
            raise ValueError(f"j_star must lie in [0, model.horizon - 1 = {self.model.horizon - 1}), got {self.j_star}")
        if not self.init_std > 0:
            raise ValueError(f"init_std must be > 0, got {self.init_std}")


FULL = TheoryConfig()
QUICK = TheoryConfig(model=ModelConfig(horizon=20))


def _shapes(model: DecisionTransformer):
    return jax.eval_shape(lambda k: init_params(model, k), jax.random.key(0))


def _random(model: DecisionTransformer, seed: int, std: float):
    """Every parameter N(0, std^2) in float64 (gates and U included, so they act)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(std * rng.normal(size=s.shape), jnp.float64), _shapes(model))


def compute(cfg: TheoryConfig, ctx: RunContext) -> dict:
    """The measured quantities (float64 scalars) and the D.3 counts by group."""
    with jax.enable_x64(True):
        return _compute(cfg)


def _compute(cfg: TheoryConfig) -> dict:
    T = cfg.model.horizon
    key = jax.random.key(0)
    obs = jax.random.bernoulli(key, 0.3, (T, cfg.model.obs_dim)).astype(jnp.float64)
    actions = jax.random.randint(jax.random.fold_in(key, 1), (T,), 0, cfg.model.n_actions)
    rewards = jax.random.normal(jax.random.fold_in(key, 2), (T,), jnp.float64)
    j = cfg.j_star  # histories a and b differ only in the feedback (a_j, r_j)
    fb_a = (actions, rewards)
    fb_b = (actions.at[j].set((actions[j] + 1) % cfg.model.n_actions), rewards.at[j].set(-rewards[j] - 1.0))
    logits = jax.jit(sequence_logits, static_argnums=0)
    max_abs = lambda x, y: float(jnp.max(jnp.abs(x - y)))  # noqa: E731

    model = DecisionTransformer(cfg.model)
    params = _random(model, 0, cfg.init_std)
    vt = DecisionTransformer(dataclasses.replace(cfg.model, kind="vt"))
    vt_logits = logits(vt, theory.backbone_params(params), obs, *fb_a)
    out = {"zero_degradation_max_abs": max_abs(logits(model, theory.zero_gates(params), obs, *fb_a), vt_logits),
           "gated_vs_vt_max_abs": max_abs(logits(model, params, obs, *fb_a), vt_logits)}
    for kind in ("vt", "gtrxl"):
        m = DecisionTransformer(dataclasses.replace(cfg.model, kind=kind))
        p = _random(m, 1, cfg.init_std)
        out[f"prop1_{kind}_max_abs"] = max_abs(logits(m, p, obs, *fb_a), logits(m, p, obs, *fb_b))

    t = T - 1
    sep, k = theory.separating_uat(model, params, jax.random.key(5), obs, fb_a, fb_b, j, t)
    _, la = theory.attention_intermediates(model, sep, obs, *fb_a)
    _, lb = theory.attention_intermediates(model, sep, obs, *fb_b)
    out["thm1_logit_gap_measured"] = float(la[0, 0, t, j + 1] - lb[0, 0, t, j + 1])
    out["thm1_logit_gap_closed_form"] = float(theory.logit_gap(model, sep, fb_a, fb_b, j, k))
    pa = jax.nn.softmax(logits(model, sep, obs, *fb_a)[t])
    pb = jax.nn.softmax(logits(model, sep, obs, *fb_b)[t])
    out["thm1_policy_gap"] = max_abs(pa, pb)

    shapes = lambda c: _shapes(DecisionTransformer(c))  # noqa: E731
    out["counted"] = {g: float(v) for g, v in theory.overhead_counted(shapes(cfg.counted)).items()}
    out["formula"] = {g: float(v) for g, v in theory.overhead_formula(cfg.counted).items()}
    out["params_uat"] = float(theory.count(shapes(cfg.counted)))
    out["params_vt"] = float(theory.count(shapes(dataclasses.replace(cfg.counted, kind="vt"))))
    return {k: (v if isinstance(v, dict) else np.float64(v)) for k, v in out.items()}


def summarize(cfg: TheoryConfig, arrays: dict) -> Summary:
    """The measured quantities as metrics, and the seven theory checks."""
    scalars = {k: float(v) for k, v in arrays.items() if not isinstance(v, dict)}
    counted, formula = arrays["counted"], arrays["formula"]
    metrics = {**scalars, **{f"overhead_{g}_counted": float(v) for g, v in counted.items()},
               **{f"overhead_{g}_formula": float(v) for g, v in formula.items()}}
    measured, closed = scalars["thm1_logit_gap_measured"], scalars["thm1_logit_gap_closed_form"]
    rel = abs(measured - closed) / abs(closed) if abs(closed) > 1e-6 else float("nan")
    d3 = (sum(abs(float(counted.get(g, np.nan)) - float(formula[g])) for g in formula)
          + sum(abs(float(counted[g])) for g in counted if g not in formula)
          + abs(scalars["params_uat"] - scalars["params_vt"] - sum(float(v) for v in formula.values())))
    found = [
        checks.equals("zero_degradation_exact", scalars["zero_degradation_max_abs"], 0.0,
                      claim="with zero gates UAT computes exactly its Vanilla-TF backbone (zero degradation)"),
        checks.above("gates_change_outputs", scalars["gated_vs_vt_max_abs"], 1e-6),
        checks.equals("prop1_vt_feedback_blind", scalars["prop1_vt_max_abs"], 0.0,
                      claim="Proposition 1: an observation-only Transformer is blind to feedback"),
        checks.equals("prop1_gtrxl_feedback_blind", scalars["prop1_gtrxl_max_abs"], 0.0),
        checks.below("thm1_closed_form", rel, 1e-9,
                     claim="Theorem 1: the constructed UAT separates the histories by the closed-form logit gap"),
        checks.above("thm1_policies_differ", scalars["thm1_policy_gap"], 1e-9),
        checks.equals("d3_overhead_formulas", d3, 0.0,
                      claim="Appendix D.3: the overhead formulas count UAT's extra parameters exactly"),
    ]
    groups = list(formula)
    table = {"group": groups + ["total"],
             "counted": [float(counted.get(g, np.nan)) for g in groups] + [scalars["params_uat"] - scalars["params_vt"]],
             "formula": [float(formula[g]) for g in groups] + [sum(float(v) for v in formula.values())]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


STUDY = register(Study(
    name="uat.theory",
    summary="zero degradation, Proposition 1, Theorem 1 construction, D.3 overhead (float64)",
    config_type=TheoryConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=None,
    paper=PAPER, seeds_field=None,
))

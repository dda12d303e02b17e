"""Study ``uat.theory``: the theory of "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910), measured on fitted
models, and the Table 6 parameter counts.

The identities of the theory hold by construction and are tests, not checks:
zero degradation (UAT with zero gates is bitwise its Vanilla-TF backbone,
``tests/uat_jax/test_model.py``), Proposition 1 for Vanilla-TF and GTrXL (bitwise
feedback-blind, same file), the Theorem 1 part 2 construction and its closed-form logit
gap, and the Appendix D.3 overhead formulas (``tests/uat_jax/test_theory.py``). What a
study can measure is whether the claims built on them hold for models that were *fitted*:

Per seed, DarkRoom episodes of a uniform random behaviour policy
(``uat_jax.theory.random_walks``; goal uniform, expert label at every visited state):
``batch`` fresh ones per optimiser step for training, ``eval_episodes`` held out. UAT (fed
the clean rewards), UAT fed null rewards (r~ = 0; uninformative feedback) and Vanilla-TF
are fitted by behaviour cloning on Eq. (18) (``behaviour_cloning``, the dataset-supplied
mode of section 4.3; Table 3 optimiser: AdamW, lr 2e-3, UE & regime lr 2e-2, clip 1) from
the section-4.3 initialisation, where UAT equals its Vanilla-TF. Each held-out episode
also carries the rewards its moves would have earned under a second goal: a history with
the same observations and different feedback (Definition 2).

Checks (held-out; interval claims over seeds, the fits of a seed paired: they share its init and data keys),
each with its negative control computed in the same program, and how each could fail:

* ``uat_lower_imitation_loss`` (CE_VT - CE_UAT > 0.2 nats; control: UAT fed null rewards in
  UAT's place, which must not reach the margin): the corollary of Theorems 1 and 2 (Appendix A.3)
  — on a feedback-informative task some UAT has strictly lower imitation loss than every
  observation-only Transformer — for the UAT that training finds. Fails if training does not
  switch the feedback pathway on from its zero gates (e.g. a W^(u) initialised to zero makes the
  all-zero gates stationary), or if the goal were recoverable from the observations alone (then
  VT would match UAT).
* ``uat_policy_reads_feedback`` (mean total variation between pi(.|H) and pi(.|H') > 0.1;
  Vanilla-TF's is 0 by Proposition 1, reported as ``tv_vt``; control ``tv_uat_null``: the UAT
  fitted on null rewards fed H and H', a pathway that never learned what a reward means):
  Definition 3 read on the fitted UAT — its retrieval is not feedback-blind in a way that moves
  its policy. Fails if the fitted UAT ignores the rewards (gates left near zero) or reads only
  actions; its control would pass if any untrained sensitivity to the rewards cleared 0.1.
* ``null_feedback_no_degradation`` (CE_UAT,null - CE_VT < 0.02 nats; control: the unfitted
  model at its section-4.3 initialisation in UAT-null's place, a backbone degraded as far as it
  goes, a sanity control that the comparison sees degradation at all): section 4.2,
  "uninformative feedback can be ignored without altering the observation-only backbone": UAT
  fed null rewards must not fit worse than Vanilla-TF. (Its actions are still fed; with a random
  behaviour policy they carry dead-reckoning information, so UAT may also do better.) Fails if
  the extra pathway, fed a constant, disturbs or overfits the backbone.

The controls are tested in ``tests/experiments/test_uat_theory_study.py``.
Reported beside the paper, not checked (they are properties of the code, the same on
every run, so the tests hold them: ``tests/uat_jax/test_gtrxl.py`` against the hand
formula, within 5% of Table 6): ``params_{vt,gtrxl,uat}`` at Table 3 sizes (``counted``;
Table 6: 109,828, 146,884, 155,972; ours 105,541, 142,597, 156,605, i.e. -3.9%, -2.9%,
+0.4%; docs/uat.md section 6 gives the arithmetic, our previous GTrXL with Parisotto's
six-matrix GRU gate on both residuals had 253,381). Table 6's UAT - VT difference,
46,144, is below the D.3 formulas' own total at these sizes (51,064 with our encoder,
50,176 without it), so no implementation of Eqs. (14)-(16) reproduces it; the overhead
and the ratio UAT / VT (paper 1.420) are metrics too.

The fitted sizes are ``model`` (``--quick``: d_model 32, 2 layers, T = 20).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks
from experiments.seeds import JUDGED, check_stream, train_over_seeds
from experiments.registry import RunContext, Study, Summary, register
from uat_jax import theory
from uat_jax.config import ModelConfig
from uat_jax.model import DecisionTransformer, init_params
from uat_jax.train import TrainConfig, make_optimizer

PAPER_PARAMS = {"vt": 109828.0, "gtrxl": 146884.0, "uat": 155972.0}  # Table 6
PAPER = {f"params_{k}": v for k, v in PAPER_PARAMS.items()}
LOSS_MARGIN = 0.2  # nats, CE_VT - CE_UAT
TV_MIN = 0.1
NULL_SLACK = 0.02  # nats, CE_UAT,null - CE_VT
FITTED = ("uat", "uat_null", "vt")


UAT_LOWER_IMITATION_LOSS = checks.Claim(
    "uat_lower_imitation_loss", "Theorems 1-2 corollary: UAT reaches strictly lower held-out imitation loss than "
    "observation-only (CE_VT - CE_UAT, paired by seed)", ">", LOSS_MARGIN,
    control="UAT fed null rewards (uat_null) in UAT's place",
    fails_if="training does not switch the feedback pathway on from its zero gates, or the goal is recoverable "
             "from the observations alone")
UAT_POLICY_READS_FEEDBACK = checks.Claim(
    "uat_policy_reads_feedback", "Definition 3: the fitted UAT's policy moves with the feedback (mean total "
    "variation between pi(.|H) and pi(.|H'); VT's is 0 by Proposition 1)", ">", TV_MIN,
    control="UAT fitted on null rewards, fed H and H' (its pathway never learned what a reward means)",
    fails_if="the fitted UAT ignores the rewards (gates left near zero) or reads only actions")
NULL_NO_DEGRADATION = checks.Claim(
    "null_feedback_no_degradation", "section 4.2: uninformative feedback is ignored without degrading the "
    "backbone (CE_UAT,null - CE_VT, paired by seed)", "<", NULL_SLACK,
    control="the unfitted model (section-4.3 initialisation) in UAT-null's place: a degraded backbone",
    fails_if="the extra pathway, fed a constant, disturbs or overfits the backbone")
CLAIMS = (UAT_LOWER_IMITATION_LOSS, UAT_POLICY_READS_FEEDBACK, NULL_NO_DEGRADATION)


@dataclasses.dataclass(frozen=True)
class TheoryConfig:
    """The fitted model, the counted (Table 3) model, the data and the fit budget."""

    model: ModelConfig = ModelConfig()  # fitted UAT; VT is the same with kind "vt"
    counted: ModelConfig = ModelConfig()  # the Table 6 counts (Table 3 sizes)
    batch: int = 256  # fresh training episodes per optimiser step
    eval_episodes: int = 256  # held-out episodes per seed
    steps: int = 400  # optimiser steps
    seeds: int = 3
    stream: int = JUDGED  # JUDGED = 0 (the checks), SCREENING = 1 (sizing)

    def __post_init__(self):
        if self.model.kind != "uat" or not self.model.has_utility:
            raise ValueError(f"model must be kind 'uat' with a utility pathway, got {self.model}")
        if self.counted.kind != "uat":
            raise ValueError(f"counted.kind must be 'uat', got {self.counted.kind!r}")
        for name in ("batch", "eval_episodes", "steps", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        check_stream(self.stream)


FULL = TheoryConfig()
# Screened on SCREENING-stream seeds 0-1 (--set stream=1), thresholds fixed beforehand.
# First screen: a fixed set of 256 training episodes, 150 full-batch steps: the fits
# memorised it (train CE 0.23-0.77, held-out 1.70-2.49), CE gap 0.12 (FAIL), null gap
# +0.66 (FAIL). Then fresh episodes every step (this preset, 200 steps of 64): CE VT 1.164,
# UAT 0.738, UAT-null 1.134, gap 0.43, null gap -0.03, TV 0.35; the judged seeds were run
# once after. Re-screened after commit 42a4f86 (new random streams): gap 0.42,
# null gap -0.036, every check passing; judged after: gap 0.47, null gap -0.030.
# Per-seed intervals and controls (issue "Verdicts with power"), screened on 6 seeds of stream 1: CE gap 0.421
# [0.391, 0.451] (control UAT-null 0.022: FAIL), TV 0.334 [0.313, 0.355] (control 0.0014: FAIL), null gap -0.022
# [-0.040, -0.005] (control unfitted 0.85: FAIL), every check PASS. The seed sds (0.028, 0.020, 0.017) give
# intervals clear of every margin at 4 seeds (widest: the null gap's upper end near +0.005 against 0.02), so 4.
# Judged once (stream 0, 4 seeds): CE gap 0.450 [0.408, 0.492], TV 0.340 [0.321, 0.360], null gap -0.041
# [-0.069, -0.013]: 3 PASS; controls 0.041, 0.0012, 0.79: each FAIL.
QUICK = TheoryConfig(model=ModelConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, horizon=20),
                     batch=64, eval_episodes=128, steps=200, seeds=4)


def _models(cfg: TheoryConfig) -> dict[str, DecisionTransformer]:
    vt = DecisionTransformer(dataclasses.replace(cfg.model, kind="vt"))
    return {"uat": DecisionTransformer(cfg.model), "vt": vt}


def make_fit(cfg: TheoryConfig):
    """``fit(key) -> dict`` of held-out scalars and training losses for one seed; UAT
    clean and UAT null are one program vmapped over the reward scale (1, 0), and all
    three fits share the seed's init and data keys."""
    models = _models(cfg)
    optimizer = make_optimizer(TrainConfig(model=cfg.model))
    fit_one = lambda m, k, scale: theory.behaviour_cloning(m, optimizer, k, cfg.steps, cfg.batch, scale)  # noqa: E731

    def fit(key):
        k_fit, k_eval = jax.random.split(key)
        held = theory.random_walks(k_eval, cfg.eval_episodes, cfg.model.horizon)
        scales = jnp.array([1.0, 0.0])
        uat_params, uat_losses = jax.vmap(lambda s: fit_one(models["uat"], k_fit, s))(scales)
        vt_params, vt_losses = fit_one(models["vt"], k_fit, 1.0)
        out = {"loss_uat": uat_losses[0], "loss_uat_null": uat_losses[1], "loss_vt": vt_losses}
        evaluate = lambda m, p, scale: theory.imitation(m, p, held, scale * held.rewards)  # noqa: E731
        out["ce_uat"], out["acc_uat"] = evaluate(models["uat"], jax.tree.map(lambda a: a[0], uat_params), 1.0)
        out["ce_uat_null"], out["acc_uat_null"] = evaluate(models["uat"], jax.tree.map(lambda a: a[1], uat_params), 0.0)
        out["ce_vt"], out["acc_vt"] = evaluate(models["vt"], vt_params, 1.0)
        out["tv_uat"] = theory.policy_tv(models["uat"], jax.tree.map(lambda a: a[0], uat_params), held,
                                         held.rewards, held.alt_rewards)
        out["tv_vt"] = theory.policy_tv(models["vt"], vt_params, held, held.rewards, held.alt_rewards)
        out["tv_uat_null"] = theory.policy_tv(models["uat"], jax.tree.map(lambda a: a[1], uat_params), held,
                                              held.rewards, held.alt_rewards)
        unfitted = init_params(models["vt"], jax.random.fold_in(key, 1))
        out["ce_unfitted"], out["acc_unfitted"] = evaluate(models["vt"], unfitted, 1.0)
        return out

    return fit


def compute(cfg: TheoryConfig, ctx: RunContext) -> dict:
    """Fitted-model measurements [seeds] and the Table 3 parameter counts."""
    out = train_over_seeds(ctx, "fit", make_fit(cfg), cfg.seeds, stream=cfg.stream,
                                 loss_of=lambda o: np.concatenate([o[f"loss_{m}"] for m in FITTED], -1))
    out = {k: np.asarray(v) for k, v in out.items()}
    for kind in PAPER_PARAMS:
        model = DecisionTransformer(dataclasses.replace(cfg.counted, kind=kind))
        shapes = jax.eval_shape(lambda k, m=model: init_params(m, k), jax.random.key(0))
        out[f"params_{kind}"] = np.float64(theory.count(shapes))
    return out


def summarize(cfg: TheoryConfig, arrays: dict) -> Summary:
    """Seed means and stds, the parameter counts and the three fitted-model checks."""
    metrics = {}
    for name in [f"{q}_{m}" for q in ("ce", "acc") for m in (*FITTED, "unfitted")] + ["tv_uat", "tv_vt",
                                                                                          "tv_uat_null"]:
        values = np.asarray(arrays[name], np.float64)
        metrics[name], metrics[f"{name}_std"] = float(values.mean()), float(values.std())
    for m in FITTED:
        metrics[f"final_train_loss_{m}"] = float(np.asarray(arrays[f"loss_{m}"])[..., -1].mean())
    params = {k: float(arrays[f"params_{k}"]) for k in PAPER_PARAMS}
    metrics.update({f"params_{k}": v for k, v in params.items()})
    metrics["overhead_uat_over_vt"] = params["uat"] - params["vt"]
    metrics["ratio_uat_over_vt"] = params["uat"] / params["vt"]
    loss_gap = metrics["ce_vt"] - metrics["ce_uat"]
    null_gap = metrics["ce_uat_null"] - metrics["ce_vt"]
    metrics.update(ce_gap_vt_minus_uat=loss_gap, ce_gap_uat_null_minus_vt=null_gap)
    ce = {m: np.asarray(arrays[f"ce_{m}"], np.float64) for m in (*FITTED, "unfitted")}
    found = [UAT_LOWER_IMITATION_LOSS.judge(checks.paired(ce["vt"], ce["uat"]), checks.paired(ce["vt"], ce["uat_null"])),
             UAT_POLICY_READS_FEEDBACK.judge(arrays["tv_uat"], arrays["tv_uat_null"]),
             NULL_NO_DEGRADATION.judge(checks.paired(ce["uat_null"], ce["vt"]), checks.paired(ce["unfitted"], ce["vt"]))]
    table = {"model": list(FITTED),
             "held_out_ce": [metrics[f"ce_{m}"] for m in FITTED],
             "held_out_acc": [metrics[f"acc_{m}"] for m in FITTED]}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


STUDY = register(Study(
    name="uat.theory",
    cost_fields=("steps",),
    summary="fitted UAT vs VT: imitation-loss separation, feedback sensitivity, null-feedback "
            "zero degradation; Table 6 parameter counts",
    config_type=TheoryConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=None,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=50,
))

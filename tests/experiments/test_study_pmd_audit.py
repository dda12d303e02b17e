"""Study ``pmd.audit`` without a trained actor: ``summarize`` on hand-made audits against numpy, and its control
actors (PMD at a shrunk or overshot step) computed on real inputs, each of which must fail the claim it controls."""
import dataclasses

import jax
import numpy as np
import pytest

from experiments.studies.pmd import audit as audit_study
from experiments.studies.pmd import training
from pmd_jax import audit

CFG = dataclasses.replace(audit_study.QUICK, n_mdps=5, per_mdp=8)  # 40 inputs: the top 5% is 2 inputs


def _audits(rng, runs, C, N, harmful):
    """Audits ``[runs, C, N]``: the shortfall is 0.1 x the row error (``harmful``) or falls with it (the largest
    errors gain more than PMD)."""
    gi = rng.uniform(0.2, 1.0, (runs, C, N))
    err = rng.uniform(0.0, 2.0, (runs, C, N))
    loss = 0.1 * err if harmful else 0.05 - 0.05 * err + rng.uniform(-0.02, 0.02, (runs, C, N))
    return {"gain_ideal": gi, "gain_implemented": gi - loss + rng.normal(0, 0.01, (runs, C, N)), "max_row_error": err}


def _arrays(cfg, rng, N=40):
    C = len(cfg.conditions)
    controls = {"shrunk": _audits(rng, 3, C, N, harmful=True), "overshoot": _audits(rng, 3, C, N, harmful=False)}
    controls["overshoot"]["gain_implemented"] = controls["overshoot"]["gain_ideal"] + 0.05
    return {**_audits(rng, 3, C, N, harmful=True), "row_l1": rng.uniform(0, 0.1, (3, C, N, 4)), "controls": controls,
            "critic_error": rng.uniform(0, 0.3, (2, C, N, 4, 3)), "origin": {"actor": "a", "critic": "b"}}


def test_audit_summary_against_numpy():
    arrays = _arrays(CFG, np.random.default_rng(1))
    i = CFG.conditions.index("low_entropy")
    arrays["gain_implemented"][:, i, :5] = -0.3  # 5 of 40 low-entropy inputs lose value
    s = audit_study.summarize(CFG, arrays)
    m = s.metrics
    assert m["negative_share_low_entropy"] == pytest.approx(5 / 40)
    assert m["negative_count_low_entropy"] == 5.0
    gi, gm, err = (np.asarray(arrays[k])[:, i] for k in ("gain_ideal", "gain_implemented", "max_row_error"))
    top = [np.argsort(-e)[:2] for e in err]
    assert m["top5_gain_over_pmd_low_entropy"] == pytest.approx(np.median([(gm[r] - gi[r])[t].mean() for r, t in enumerate(top)]))

    def spearman(a, b):  # no ties: the Pearson correlation of the ranks
        ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
        return np.corrcoef(ra, rb)[0, 1]

    rho = [spearman(err[r], gi[r] - gm[r]) for r in range(3)]
    assert m["spearman_row_error_shortfall_low_entropy"] == pytest.approx(np.median(rho), rel=1e-12)
    crit = arrays["critic_error"][:, 0].mean(axis=(2, 3))
    assert m["critic_error_per_input_max_iid"] == pytest.approx(np.median(crit.max(1)))
    checks = {c.name: c for c in s.checks}
    assert set(checks) == {f"implemented_below_ideal_{c}" for c in CFG.conditions} | {
        "low_entropy_loses_value_more_often", "row_error_not_value_loss_low", "top5_row_error_gain_over_pmd_low"}
    assert checks["row_error_not_value_loss_low"].value == pytest.approx(np.mean(rho))
    assert checks["row_error_not_value_loss_low"].n == 3 and checks["row_error_not_value_loss_low"].unit == "seed"
    # shortfall = 0.1 x row error: strongly rank-correlated, and the largest errors lose the most
    assert checks["row_error_not_value_loss_low"].verdict == "FAIL"
    assert checks["top5_row_error_gain_over_pmd_low"].verdict == "FAIL"
    assert checks["low_entropy_loses_value_more_often"].verdict == "PASS"
    assert checks["implemented_below_ideal_iid"].verdict == "PASS"
    assert checks["implemented_below_ideal_iid"].control.verdict == "FAIL"  # the overshooting arm gains more

    # an actor whose large errors are harmless: the two checks pass, against their shrunk-step control
    harmless = _audits(np.random.default_rng(2), 3, len(CFG.conditions), 40, harmful=False)
    ok = {c.name: c for c in audit_study.summarize(CFG, {**arrays, **harmless}).checks}
    for name in ("row_error_not_value_loss_low", "top5_row_error_gain_over_pmd_low"):
        assert ok[name].verdict == "PASS" and ok[name].control.verdict == "FAIL", ok[name]


def test_control_actors_fail_their_claims_on_real_inputs():
    """The control arms as compute makes them, on real low-entropy and IID inputs (no trained model): the shrunk-step
    actor's row error is value loss (high rank correlation, its largest errors lose to PMD), the overshooting actor
    gains more than PMD, and neither PMD variant ever loses value, so no band loses value more often than another."""
    cfg = dataclasses.replace(CFG, n_mdps=4, per_mdp=16)
    x = training.condition_inputs(cfg.conditions, cfg.n_mdps, cfg.per_mdp, cfg.eta, cfg.eval_seed)
    with jax.enable_x64(True):
        x64 = jax.tree.map(lambda a: np.asarray(a, np.float64) if np.issubdtype(a.dtype, np.floating) else a, x)
        run_all = jax.jit(jax.vmap(jax.vmap(jax.vmap(audit.audit_call)), in_axes=(None, None, None, None, 0)))
        found = {arm: dataclasses.asdict(run_all(x64.mdp, x64.pi, x64.Q, x64.eta, pi))
                 for arm, pi in audit_study.control_policies(x64, 3, cfg.eval_seed).items()}
    stats = {arm: {c: audit_study.value_stats(cfg, f, j) for j, c in enumerate(cfg.conditions)} for arm, f in found.items()}
    low = stats["shrunk"]["low_entropy"]
    verdicts = [audit_study.RANK_WEAK.judge(low["spearman_row_error_shortfall"]),
                audit_study.TOP_GAIN.judge(low["top5_gain_over_pmd"]),
                *(audit_study.BELOW_IDEAL.judge(stats["overshoot"][c]["shortfall"], key=c) for c in cfg.conditions),
                *(audit_study.LOW_LOSES_MORE.judge(stats[arm]["high_entropy"]["negative_share"]
                                                   - stats[arm]["iid"]["negative_share"]) for arm in found)]
    assert all(v.verdict != "PASS" for v in verdicts), [(v.name, v.value, v.lo, v.hi, v.verdict) for v in verdicts]
    assert np.all(low["spearman_row_error_shortfall"] > 0.5)

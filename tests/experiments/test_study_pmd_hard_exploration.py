"""Study pmd.hard_exploration: its MDP sets, the checks on synthetic records, the controls on real loops, and a
tiny end-to-end run.

The loop itself is ``pmd.coverage``'s (tests/experiments/test_study_pmd_coverage.py); here, that the study's
subset of its arms gives the same records as the full program for those arms.
"""
import json

import jax
import numpy as np
import pytest

from experiments.registry import RunContext
from experiments.studies.pmd import coverage as cov
from experiments.studies.pmd import hard_exploration as he


def test_sets_are_locks_and_two_independent_dense_draws():
    cfg = he.HardExplorationConfig(n_mdps=6)
    items = he.mdp_items(cfg)
    n = cfg.n_mdps
    P, R = items["P"].reshape(3, n, 4, 3, 4), items["R"].reshape(3, n, 4, 3)
    np.testing.assert_allclose(P.sum(-1), 1.0, rtol=1e-6)
    # a lock: every row puts 1 - slip + slip / S on one state; one paying pair, at the last state
    assert np.allclose(P[0].max(-1), 1 - cfg.slip + cfg.slip / 4) and np.all(R[0].sum(axis=(1, 2)) == 1.0)
    assert np.all(R[0][:, -1].sum(-1) == 1.0)
    assert P[1].max() < 1 - cfg.slip and not np.allclose(P[1], P[2]) and not np.allclose(R[1], R[2])
    keys = items["key"].reshape(3, n, -1)
    assert len({k.tobytes() for k in keys.reshape(3 * n, -1)}) == 3 * n  # every loop its own sampling keys
    assert np.all(items["eta"] == cfg.eta) and np.all(items["explore_eps"] == cfg.explore_eps)


def test_the_subset_of_arms_gives_the_full_programs_records():
    """The study runs pmd.coverage's loop on its m = 6 arms and the exact backup only: the arms of one loop share
    their round keys and draw their packets apart, so each kept arm's records are those of the full program."""
    cfg = he.HardExplorationConfig(n_mdps=2, rounds=3)
    items = {k: v[:2] for k, v in he.mdp_items(cfg).items()}
    full = jax.jit(jax.vmap(cov.runner_on_raw_keys(cfg.coverage())))(items)
    part = jax.jit(jax.vmap(cov.runner_on_raw_keys(cfg.coverage(), he.ARMS)))(items)
    cols = [cov.LABELS.index(lab) for lab in he.LABELS]
    for name in ("loss", "unvisited", "critic_error", "zeta"):
        np.testing.assert_allclose(np.asarray(part[name]), np.asarray(full[name])[:, cols], rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def _records(n=40, seed=0, lock_carry=0.01, lock_gap=0.04):
    """Synthetic records ``{set: {name: [n, arms]}}``: on locks carry-Q loses ``lock_carry`` and the stream
    ``lock_gap`` over balanced; on both dense draws carry-Q loses nothing and the stream 0.02."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in he.SETS:
        extra = ({"on_policy_m6": lock_gap, "on_policy_carry_m6": lock_carry, "exploring_m6": 0.01} if name == "lock"
                 else {"on_policy_m6": 0.02, "exploring_m6": 0.002})
        base = rng.uniform(0.005, 0.05, n)
        loss = np.stack([base + extra.get(lab, 0.0) + rng.normal(0, 1e-3, n) for lab in he.LABELS], axis=1)
        out[name] = {"loss": loss, "unvisited": np.full(loss.shape, 3.0), "min_count": np.zeros(loss.shape),
                     "critic_error": np.full(loss.shape, 0.5)}
    return out


def test_checks_on_synthetic_records():
    cfg = he.HardExplorationConfig(n_bootstrap=200)
    summary = he.summarize(cfg, {"records": _records()})
    assert [c.name for c in summary.checks] == [c.name for c in he.STUDY.claims]
    assert all(c.verdict == "PASS" and c.control.verdict != "PASS" for c in summary.checks), summary.checks
    assert {c.unit for c in summary.checks} == {"MDP", "MDP pair"} and all(c.n == 40 for c in summary.checks)
    m = summary.metrics
    assert m["diff_median_on_policy_carry_m6_lock"] == pytest.approx(0.01, abs=2e-3)
    assert m["diff_median_on_policy_m6_dense"] == pytest.approx(0.02, abs=2e-3)
    assert summary.tables["table"]["family"] == ["lock"] * len(he.ARMS) + ["dense"] * len(he.ARMS)
    # locks that behave like dense MDPs: neither claim holds
    easy = {c.name: c.verdict for c in he.summarize(cfg, {"records": _records(lock_carry=0.0, lock_gap=0.02)}).checks}
    assert set(easy) == {c.name for c in he.STUDY.claims} and "PASS" not in easy.values(), easy


def test_run_writes_every_output_and_the_controls_fail_their_claims(tmp_path):
    """The study's program on 12 MDPs of each set, 20 rounds, through compute / summarize / write: complete outputs,
    and the dense family's carry-Q difference and a second dense draw against the first do not pass the claims they
    control."""
    cfg = he.HardExplorationConfig(n_mdps=12, chunk_size=3, n_bootstrap=100)
    ctx = RunContext(study="pmd.hard_exploration", quick=True, out_dir=tmp_path, fingerprint={"test": 1})
    arrays = he.compute(cfg, ctx)
    summary = he.summarize(cfg, arrays)
    he.write(cfg, arrays, summary, tmp_path)
    assert all(c.n == 12 and c.control.n == 12 and c.control.verdict != "PASS" for c in summary.checks), \
        [c.control for c in summary.checks]
    rows = (tmp_path / "losses.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * 12 * len(he.ARMS)
    with np.load(tmp_path / "mdps.npz") as mdps:
        assert mdps["P"].shape == (36, 4, 3, 4) and list(mdps["sets"][::12]) == list(he.SETS)
    assert (tmp_path / "hard_exploration.png").stat().st_size > 10_000
    json.dumps(summary.metrics)  # every metric a plain number


@pytest.mark.parametrize("field,value", [("num_states", 1), ("slip", 1.0), ("n_mdps", 0), ("eta", -1.0)])
def test_bad_config_is_a_one_line_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        he.HardExplorationConfig(**{field: value})

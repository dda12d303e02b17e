"""Study pmd.coverage at a tiny size through the CLI: the outputs are complete, the vmapped eta sweep gives
the same bytes as a clean run; the summary on synthetic records; the bootstrap.

The CLI runs in subprocesses that share one JAX compilation cache, so the study's program
(about 10 s to compile on an idle CPU) is compiled once. Kill and resume of a checkpointed
``sweep_map``, which this study uses, is tested on ``pmd.reversal`` (tests/experiments/test_pmd_reversal.py).
"""
import csv
import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments.studies.pmd import coverage as cov

REPO = pathlib.Path(__file__).resolve().parents[2]
# 8 MDPs, one per device and step: two steps on the suite's 4 devices.
TINY = ["--quick", "--set", "n_mdps=8", "--set", "rounds=3", "--set", "chunk_size=1", "--set", "n_bootstrap=200"]
OUTPUTS = ("table.csv", "losses.csv")


def _run_cli(jax_cache, out, *extra):
    """``python -m experiments run pmd.coverage TINY --out OUT ...`` in a fresh interpreter."""
    code = "import sys\nfrom experiments.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(jax_cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
           "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
    return subprocess.Popen([sys.executable, "-c", code, "run", "pmd.coverage", *TINY, "--out", str(out), *extra],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _finished(proc):
    log = proc.stdout.read().decode()
    assert proc.wait() in (0, 1), log  # at 3 rounds some of the paper's claims need not hold
    return log


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def _check_outputs(study_dir):
    result = json.loads((study_dir / "result.json").read_text())
    assert result["config"]["n_mdps"] == 8 and result["config"]["rounds"] == 3 and "sweep" not in result
    assert [c["name"] for c in result["checks"]] == [c.name for c in cov.STUDY.claims]
    assert all(c["unit"] == "MDP" and c["n"] == 8 for c in result["checks"] if c["kind"] == "interval")
    assert result["metrics"]["min_count_balanced_m6"] == 6.0 and result["metrics"]["unvisited_balanced_m24"] == 0.0
    table = _rows(study_dir / "table.csv")
    assert [r["arm"] for r in table] == [cov.ARM_NAMES[a] for a, _ in cov.ARMS]
    assert table[-1]["arm"] == "exact_backup" and table[-1]["m"] == ""
    assert all(float(r["loss_lo"]) <= float(r["loss_median"]) <= float(r["loss_hi"]) for r in table)
    assert len(_rows(study_dir / "losses.csv")) == 8 * len(cov.ARMS)
    with np.load(study_dir / "mdps.npz") as mdps:
        assert mdps["P"].shape == (8, 4, 3, 4) and mdps["R"].shape == (8, 4, 3)
        np.testing.assert_allclose(mdps["P"].sum(-1), 1.0, rtol=1e-5)
    assert (study_dir / "coverage.png").stat().st_size > 10_000


def test_cli_run_and_eta_sweep(tmp_path):
    """One test, so that one process compiles the program and the later run reads it from the cache:
    (1) a clean run writes complete outputs; (2) the vmapped eta sweep runs every value on the same MDPs,
    and its eta = 0.8 slice is the clean run, byte for byte.
    """
    cache = tmp_path / "jax_cache"
    _finished(_run_cli(cache, tmp_path / "clean"))
    clean = tmp_path / "clean" / "pmd.coverage"
    _check_outputs(clean)

    _finished(_run_cli(cache, tmp_path / "sweep", "--sweep", "eta=0.4,0.8"))
    root = tmp_path / "sweep" / "pmd.coverage" / "sweep"
    results = {v: json.loads((root / f"eta={v}" / "result.json").read_text()) for v in ("0.4", "0.8")}
    assert [r["sweep"] for r in results.values()] == [{"field": "eta", "value": 0.4, "vmapped": True}, {"field": "eta", "value": 0.8, "vmapped": True}]
    assert results["0.4"]["metrics"]["loss_median_balanced_m6"] != results["0.8"]["metrics"]["loss_median_balanced_m6"]
    for name in OUTPUTS:  # the eta = 0.8 slice of the vmapped program is the plain run
        assert (root / "eta=0.8" / name).read_bytes() == (clean / name).read_bytes(), name


def _records(n=40, seed=0):
    """Synthetic per-MDP records: on-policy m6 loses 0.02 more than balanced, m24 0.005, carry and exact ~0."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.005, 0.015, n)
    extra = {"on_policy_m6": 0.02, "on_policy_m24": 0.005, "exploring_m6": 0.002}
    loss = np.stack([base + extra.get(lab, 0.0) + rng.normal(0, 1e-4, n) for lab in cov.LABELS], axis=1)
    shape = loss.shape
    return {
        "loss": loss, "loss_abs": loss * 3.0, "bound": np.full(shape, 1.0),
        "unvisited": np.full(shape, 2.0), "min_count": np.full(shape, 1.0),
        "critic_error": np.full(shape, 0.5), "zeta": np.full(shape, 0.01),
        "zeta_over_envelope": np.full(shape, 0.1), "delta_over_envelope": np.full(shape, 0.1),
    }


def test_summarize_on_synthetic_records():
    cfg = cov.CoverageConfig(n_mdps=40, n_bootstrap=500)
    summary = cov.summarize(cfg, {"records": _records(), "sampling_term": cov.sampling_terms(cfg)})
    assert all(c.passed for c in summary.checks), [(c.name, c.value, c.target) for c in summary.checks]
    # every interval claim is judged per MDP beside its control arm, which does not pass it here
    intervals = [c for c in summary.checks if c.kind == "interval"]
    assert len(intervals) == 5 and all(c.n == 40 and c.control.verdict != "PASS" for c in intervals)
    m = summary.metrics
    assert m["diff_median_on_policy_m6"] == pytest.approx(0.02, abs=1e-3)
    assert "diff_median_balanced_m6" not in m and "unvisited_exact_backup" not in m
    assert summary.tables["table"]["arm"][-1] == "exact_backup" and np.isnan(summary.tables["table"]["diff_median"][0])

    # An on-policy stream no worse than balanced, and a bound violated on one MDP of an oracle arm.
    flat = _records()
    flat["loss"][:, cov.LABELS.index("on_policy_m6")] = flat["loss"][:, cov.LABELS.index("balanced_m6")]
    flat["bound"][3, cov.LABELS.index("exact_backup")] = 0.0
    flat["zeta_over_envelope"][5, 2] = 1.5
    failed = {c.name for c in cov.summarize(cfg, {"records": flat, "sampling_term": cov.sampling_terms(cfg)}).checks
              if not c.passed}
    assert {"on_policy_worse_than_balanced_m6", "on_policy_gap_shrinks_m24", "bound_holds_oracle_arms",
            "routing_error_within_envelope"} <= failed


def test_routing_envelope_check_fails_when_the_decoder_leaks_more_than_its_margins(monkeypatch):
    """The envelope uses the config's kappa; a decoder built with a quarter of that state margin leaks ~e^12 times more,
    and the per-round ratio the runner records must exceed 1 (while the correct decoder stays below it)."""
    cfg = cov.CoverageConfig(n_mdps=2, rounds=3)
    items = {k: v[:2] for k, v in cov.mdp_items(cfg).items()}
    run = jax.jit(jax.vmap(cov.runner_on_raw_keys(cfg)))
    assert float(np.max(run(items)["zeta_over_envelope"])) < 1.0
    construct = cov.decoder.construct_params
    monkeypatch.setattr(cov.decoder, "construct_params",
                        lambda S, A, gamma, kappa, nu, dtype: construct(S, A, gamma, kappa / 4, nu, dtype))
    leaky = jax.jit(jax.vmap(cov.runner_on_raw_keys(cfg)))
    assert float(np.max(leaky(items)["zeta_over_envelope"])) > 1.0


def test_sampling_terms_against_the_hand_formula_and_the_paper():
    """epsilon = B_Q sqrt(2 log(2 S A T / alpha) / m), B_Q = 1 / (1 - 0.8) = 5, 2 S A T / alpha = 9600."""
    terms = cov.sampling_terms(cov.CoverageConfig())
    assert set(terms) == {"m6", "m24"}
    for m in (6, 24):
        assert float(terms[f"m{m}"]) == pytest.approx(5.0 * np.sqrt(2 * np.log(9600.0) / m), rel=1e-6)
    # the paper's section-15 values, 8.74 and 4.37 to the printed two decimals (arithmetic on constants: a test)
    assert abs(float(terms["m6"]) - cov.PAPER["sampling_term_m6"]) <= 0.005
    assert abs(float(terms["m24"]) - cov.PAPER["sampling_term_m24"]) <= 0.005
    wrong = cov.sampling_terms(cov.CoverageConfig(rounds=10))  # a union bound over fewer rounds: another value
    assert abs(float(wrong["m6"]) - cov.PAPER["sampling_term_m6"]) > 0.005


def test_bootstrap_median_against_known_sample():
    x = np.arange(101, dtype=float)
    med, lo, hi = cov.bootstrap_median(x, 2000, 0)
    assert med == 50.0 and lo < 50.0 < hi and hi - lo < 30


def test_controls_fail_their_claims_on_real_loops():
    """The closed loop on 8 MDPs of the family, 20 rounds: each interval claim's control arm (carry-Q for the
    coverage-gap claims, the on-policy stream for the near-balanced and small-loss claims) does not pass the claim
    it controls. A carry-Q stream that lost what the on-policy stream loses would pass the first two."""
    cfg = cov.CoverageConfig(n_mdps=8)
    records = jax.jit(jax.vmap(cov.runner_on_raw_keys(cfg)))(cov.mdp_items(cfg))
    found = cov.judge({k: np.asarray(v, np.float64) for k, v in records.items()}, 0, 0.0)
    controls = {c.name: c.control for c in found if c.kind == "interval"}
    assert len(controls) == 5 and all(c.verdict != "PASS" and c.n == 8 for c in controls.values()), controls

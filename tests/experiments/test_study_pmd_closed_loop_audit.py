"""Study pmd.closed_loop_audit at a tiny size through the CLI, on untrained tiny models kept where the study looks
for ``pmd.repeated_control``'s actors and ``pmd.learned_critic``'s critic (so it loads them and trains nothing):
complete outputs; the residuals recomputed by hand with numpy from the written trace and the MDPs; the loop
replayed call by call; the offline residuals recomputed on one input; the section-13 bound recomputed and covering
the loss (a test, not a check: see the module docstring); the summary on synthetic records; the config errors.
One CLI run (one compiled program) serves every test that reads files."""
import csv
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import checks
from experiments.cli import main
from experiments.seeds import seed_keys
from experiments.studies.pmd import closed_loop_audit as cla
from experiments.studies.pmd import learned_critic as lc
from experiments.studies.pmd import repeated_control as rc
from experiments.studies.pmd import training
from pmd_jax import learned, tasks
from pmd_jax.train import critic_example
from pmd_jax.transformer import ModelConfig

TINY_MODEL = ModelConfig(d_model=8, num_layers=1, num_heads=2)
TRAIN = {"model.d_model": 8, "model.num_layers": 1, "model.num_heads": 2, "num_steps": 4, "warmup": 0,
         "batch_size": 4, "n_train_mdps": 8}
SIZES = {"runs": 2, "stream": 1, "actor_chunks": 2, "critic_chunks": 2, "rounds": 4, "n_mdps": 5, "per_mdp": 3}


def _tiny(tcfg):
    return dataclasses.replace(tcfg, model=TINY_MODEL, num_steps=4, warmup=0, batch_size=4, n_train_mdps=8)


CFG = dataclasses.replace(cla.QUICK, actor=_tiny(cla.QUICK.actor), critic=_tiny(cla.QUICK.critic), **SIZES)


def _sets():
    out = []
    for prefix in ("actor.", "critic."):
        out += [a for k, v in TRAIN.items() for a in ("--set", f"{prefix}{k}={json.dumps(v)}")]
    return out + [a for k, v in SIZES.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The CLI run on untrained tiny models, kept beforehand as the two upstream studies keep theirs."""
    root = tmp_path_factory.mktemp("cla")
    actors = training.initial_params(CFG.actor, "actor", seed_keys(CFG.runs, CFG.stream))
    critics = training.initial_params(CFG.critic, "critic", seed_keys(1, CFG.stream))
    training.keep(root / "pmd.repeated_control", "actor", CFG.actor, "actor", actors,
                  {"stream": CFG.stream, "supervised": [0.0] * CFG.runs, "train": dataclasses.asdict(CFG.actor)})
    training.keep(root / "pmd.learned_critic", "critic", CFG.critic, "critic", critics,
                  {"stream": CFG.stream, "seeds": 1, "train": dataclasses.asdict(CFG.critic)})
    assert main(["run", "pmd.closed_loop_audit", "--quick", *_sets(), "--out", str(root)]) in (0, 1)
    d = root / "pmd.closed_loop_audit"
    with np.load(d / "trace.npz") as t:
        trace = dict(t)
    return {"dir": d, "root": root, "result": json.loads((d / "result.json").read_text()), "trace": trace,
            "actors": actors, "critic": jax.tree.map(lambda a: a[0], critics)}


def _residuals(run):
    """``zeta, delta, dbar [runs, mdps, T]`` from residuals.csv."""
    rows = _rows(run["dir"] / "residuals.csv")
    shape = (CFG.runs, CFG.n_mdps, CFG.rounds)
    out = {k: np.zeros(shape) for k in ("zeta", "delta", "dbar")}
    for r in rows:
        for k in out:
            out[k][int(r["run"]), int(r["mdp"]), int(r["round"]) - 1] = float(r[k])
    return out


def _inputs(trace, r, i, k):
    """The loop's round-k inputs ``(pi_k, Q_k)`` from the trace: uniform and 0 at k = 0."""
    if k == 0:
        return np.full((4, 3), 1 / 3), np.zeros((4, 3))
    return trace["policies"][r, i, k - 1], trace["values"][r, i, k - 1]


def _pmd(pi, Q, eta):
    z = np.log(pi) + eta * Q
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _backup(P, R, gamma, pi, Q):
    """``(F^pi Q)(s, a) = R(s, a) + gamma sum_s' P(s'|s, a) sum_a' pi(a'|s') Q(s', a')`` by hand."""
    S, A = R.shape
    out = np.zeros((S, A))
    for s in range(S):
        for a in range(A):
            out[s, a] = R[s, a] + gamma * sum(P[s, a, t] * sum(pi[t, b] * Q[t, b] for b in range(A)) for t in range(S))
    return out


def test_outputs_complete_and_claims_judged_per_mdp(run):
    d, result = run["dir"], run["result"]
    assert [c["name"] for c in result["checks"]] == [c.name for c in cla.STUDY.claims]
    assert all(c["kind"] == "interval" and c["unit"] == "MDP" and c["n"] == CFG.n_mdps for c in result["checks"])
    assert all(c["control"]["verdict"] in checks.VERDICTS and c["control"]["n"] == CFG.n_mdps for c in result["checks"])
    rows = _rows(d / "residuals.csv")
    assert list(rows[0]) == ["run", "mdp", "round", "zeta", "delta", "dbar"]
    assert len(rows) == CFG.runs * CFG.n_mdps * CFG.rounds
    assert len(_rows(d / "loops.csv")) == CFG.runs * CFG.n_mdps
    assert len(_rows(d / "offline.csv")) == CFG.runs * 2 * CFG.n_mdps * CFG.per_mdp
    assert [r["round"] for r in _rows(d / "table.csv")] == [str(k) for k in range(1, CFG.rounds + 1)]
    assert [r["set"] for r in _rows(d / "offline.csv")][:1] == ["A"]
    assert run["trace"]["policies"].shape == run["trace"]["values"].shape == (CFG.runs, CFG.n_mdps, CFG.rounds, 4, 3)
    assert (d / "closed_loop_audit.png").stat().st_size > 10_000
    origin = {r["role"]: r["origin"] for r in _rows(d / "models.csv")}
    assert origin == {"actor": f"loaded from {run['root'] / 'pmd.repeated_control' / 'models' / 'actor'}",
                      "critic": f"loaded from {run['root'] / 'pmd.learned_critic' / 'models' / 'critic'}"}
    assert not (d / "models").exists()  # nothing trained here, nothing kept
    m = result["metrics"]
    assert m["q_bound"] == pytest.approx(5.0) and np.isfinite([m["zeta_loop_mean"], m["delta_loop_mean"]]).all()
    assert m["zeta_mean_round_1"] == pytest.approx(_residuals(run)["zeta"][..., 0].mean())


def test_in_loop_residuals_recomputed_by_hand(run):
    """zeta_k, delta_k and Dbar_k of every run, MDP and round, with numpy from the trace's policies and values and
    the MDPs (drawn again from the test split, and equal to those the study wrote)."""
    trace, res = run["trace"], _residuals(run)
    mdps = cla.audit_mdps(CFG)
    np.testing.assert_array_equal(trace["P"], np.asarray(mdps.P))
    np.testing.assert_array_equal(trace["R"], np.asarray(mdps.R))
    P, R, gamma = np.asarray(mdps.P, np.float64), np.asarray(mdps.R, np.float64), 0.8
    for r in range(CFG.runs):
        for i in range(CFG.n_mdps):
            for k in range(CFG.rounds):
                pi, Q = _inputs(trace, r, i, k)
                pi_hat, Q_next = trace["policies"][r, i, k], trace["values"][r, i, k]
                zeta = np.abs(pi_hat - _pmd(pi, Q, CFG.eta)).sum(-1).max()
                delta = np.abs(Q_next - _backup(P[i], R[i], gamma, pi_hat, Q)).max()
                greedy = Q >= Q.max(-1, keepdims=True) - 1e-12
                D = -np.log((pi * greedy).sum(-1))
                dbar = (P[i] @ D).max()
                assert res["zeta"][r, i, k] == pytest.approx(zeta, rel=1e-5, abs=2e-5), (r, i, k)
                assert res["delta"][r, i, k] == pytest.approx(delta, rel=1e-5, abs=2e-5), (r, i, k)
                assert res["dbar"][r, i, k] == pytest.approx(dbar, rel=1e-5, abs=2e-5), (r, i, k)


def test_loop_replayed_call_by_call(run):
    """The actor reads the loop's own (pi_k, Q_k); the critic reads Q_k and a balanced 6-per-pair packet drawn with
    round k's key under the policy the actor just returned (repeated_control's loop keys)."""
    trace = run["trace"]
    actor, critic = CFG.actor.actor(), CFG.critic.critic()
    mdps = cla.audit_mdps(CFG)
    i, r = 2, 1
    mdp = jax.tree.map(lambda a: a[i], mdps)
    round_keys = jax.random.split(jax.random.split(jax.random.key(CFG.loop_seed), CFG.n_mdps)[i], CFG.rounds)
    params = jax.tree.map(lambda a: a[r], run["actors"])
    for k in range(2):
        pi, Q = (jnp.asarray(x, jnp.float32) for x in _inputs(trace, r, i, k))
        pi_hat = actor.policy(params, pi, Q, CFG.eta)
        np.testing.assert_allclose(pi_hat, trace["policies"][r, i, k], atol=1e-5)
        packet = learned.balanced_transitions(round_keys[k], mdp, pi_hat, CFG.samples_per_pair)
        assert np.bincount(np.asarray(packet.s) * 3 + np.asarray(packet.a), minlength=12).tolist() == [6] * 12
        np.testing.assert_allclose(critic.q_values(run["critic"], Q, packet), trace["values"][r, i, k], atol=1e-5)


def test_offline_residuals_recomputed_on_one_input(run):
    """Set A, MDP 1, input 2: the actor's row error to PMD at eta = 0.8 on an input from its prior (Q = Q^pi solved
    by numpy), and the critic's sup error to the exact backup of critic_example's policy, both by hand."""
    rows = {(r["run"], r["set"], r["mdp"], r["input"]): r for r in _rows(run["dir"] / "offline.csv")}
    mdps = cla.audit_mdps(CFG)
    i, n = 1, 2
    mdp = jax.tree.map(lambda a: a[i], mdps)
    P, R = np.asarray(mdp.P, np.float64), np.asarray(mdp.R, np.float64)
    keys = cla.offline_keys(CFG)
    x = tasks.sample_actor_inputs(keys["actor"][0, i, n], mdp, "any", CFG.eta)
    pi = np.asarray(x.pi, np.float64)
    M = np.einsum("xay,yb->xayb", P, pi).reshape(12, 12)
    np.testing.assert_allclose(np.linalg.solve(np.eye(12) - 0.8 * M, R.reshape(-1)).reshape(4, 3), x.Q, atol=1e-4)
    assert float(x.eta) == pytest.approx(0.8)
    for r in range(CFG.runs):
        out = np.asarray(CFG.actor.actor().policy(jax.tree.map(lambda a, r=r: a[r], run["actors"]), x.pi, x.Q, x.eta))
        zeta = np.abs(out - _pmd(pi, np.asarray(x.Q, np.float64), 0.8)).sum(-1).max()
        assert float(rows[(str(r), "A", str(i), str(n))]["zeta"]) == pytest.approx(zeta, abs=2e-5)
    Q, pi_c, packet, _ = critic_example(CFG.critic, keys["critic"][0, i, n], mdp)
    pred = np.asarray(CFG.critic.critic().q_values(run["critic"], Q, packet))
    delta = np.abs(pred - _backup(P, R, 0.8, np.asarray(pi_c, np.float64), np.asarray(Q, np.float64))).max()
    assert float(rows[("0", "A", str(i), str(n))]["delta_critic_run_0"]) == pytest.approx(delta, abs=2e-5)
    assert rows[("0", "A", str(i), str(n))]["zeta"] != rows[("0", "B", str(i), str(n))]["zeta"]  # set B: other draws


def test_bound_recomputed_and_covers_the_loss(run):
    """Section 13's recursion by hand from residuals.csv (B_Q = 5, b_0 = ||Q*||, eta = 0.8) gives loops.csv's bound;
    the loss stays below it on every loop whose Q_k stay in [-B_Q, B_Q] (the theorem's hypothesis: then it can only
    fail through a bug, so it is this test and not a check of the study)."""
    res, loops = _residuals(run), _rows(run["dir"] / "loops.csv")
    mdps = cla.audit_mdps(CFG)
    P, R = np.asarray(mdps.P, np.float64), np.asarray(mdps.R, np.float64)
    g, BQ = 0.8, 5.0
    for row in loops:
        r, i = int(row["run"]), int(row["mdp"])
        Q = np.zeros((4, 3))
        for _ in range(2000):  # value iteration for Q*
            Q = R[i] + g * P[i] @ Q.max(-1)
        b = np.abs(Q).max()
        h = res["dbar"][r, i] / 0.8 + BQ * res["zeta"][r, i]
        for k in range(CFG.rounds - 1):
            b = g * b + res["delta"][r, i, k] + g * h[k]
        bound = g / (1 - g) * (2 * b + h[-1])
        assert float(row["bound"]) == pytest.approx(bound, rel=1e-4), (r, i)
        within = np.abs(run["trace"]["values"][r, i, : CFG.rounds - 1]).max() <= BQ
        assert int(row["q_within_bound"]) == within
        if within:
            assert float(row["loss_abs"]) <= float(row["bound"])
    m = run["result"]["metrics"]
    assert m["bound_violations_within_hypothesis"] == 0.0 and m["bound_slack_median"] > 0


def test_claims_and_negative_controls_from_the_files(run):
    """Per MDP from residuals.csv and offline.csv by hand: the claims' log(in-loop mean / set A mean) and the
    controls' log(set B / set A) (two draws of one distribution) give the study's values and intervals, and the
    claims do not pass on their controls in this real run."""
    rows, res = _rows(run["dir"] / "offline.csv"), _residuals(run)
    found = {c["name"]: c for c in run["result"]["checks"]}
    for stat, col, claim in (("zeta", "zeta", cla.ACTOR_IN_LOOP), ("delta", "delta_critic_run_0", cla.CRITIC_IN_LOOP)):
        mean = {s: np.array([np.mean([float(r[col]) for r in rows if r["set"] == s and int(r["mdp"]) == i])
                             for i in range(CFG.n_mdps)]) for s in ("A", "B")}
        values, control = np.log(res[stat].mean(axis=(0, 2)) / mean["A"]), np.log(mean["B"] / mean["A"])
        check = claim.judge(values, control=control)
        assert found[claim.name]["value"] == pytest.approx(check.value, rel=1e-5), stat
        assert (found[claim.name]["lo"], found[claim.name]["hi"]) == pytest.approx((check.lo, check.hi), rel=1e-5)
        assert found[claim.name]["control"]["value"] == pytest.approx(control.mean(), rel=1e-5), stat
        assert claim.judge(control).verdict != checks.PASS and found[claim.name]["control"]["verdict"] != checks.PASS


def _synthetic(loop_factor: float, n=24, seed=0):
    """Records of 3 runs x n MDPs x 5 rounds: offline sets A and B from one distribution, in-loop residuals
    ``loop_factor`` times that distribution's level."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.02, 0.08, n)  # per-MDP level shared by every arm
    runs, T, p = 3, 5, 8
    draw = lambda *shape: level.reshape((1,) * (len(shape) - 2) + (n, 1)) * rng.lognormal(0, 0.3, shape)  # noqa: E731
    zeta = draw(runs, n, T)
    loop = {"zeta": loop_factor * zeta, "delta": loop_factor * 3 * draw(runs, n, T), "dbar": np.zeros((runs, n, T)),
            "values": np.zeros((runs, n, T, 4, 3)), "loss": np.full((runs, n), 0.1), "loss_abs": np.full((runs, n), 0.2),
            "bound": np.full((runs, n), 9.0)}
    off = {"zeta": np.stack([draw(runs, n, p), draw(runs, n, p)], axis=1),
           "delta": 3 * np.stack([draw(n, p), draw(n, p)])}
    return {"loop": loop, "offline": off}


def test_summarize_on_synthetic_records():
    cfg = dataclasses.replace(cla.QUICK, rounds=5)
    excess = cla.summarize(cfg, _synthetic(2.0))
    assert [c.verdict for c in excess.checks] == [checks.PASS, checks.PASS]
    assert all(c.unit == "MDP" and c.n == 24 and c.control.verdict != checks.PASS for c in excess.checks)
    assert excess.checks[0].value == pytest.approx(np.log(2.0), abs=0.15)
    m = excess.metrics
    assert m["zeta_ratio_geomean"] == pytest.approx(2.0, rel=0.15) and m["bound_violations"] == 0
    assert {"zeta_mean_round_1", "zeta_max_round_3", "delta_mean_round_5", "dbar_mean_round_3"} <= set(m)
    equal = cla.summarize(cfg, _synthetic(1.0))
    assert all(c.verdict in (checks.FAIL, checks.INCONCLUSIVE) for c in equal.checks)
    # a loop whose critic leaves [-B_Q, B_Q] is counted, and a loss above the bound there is not a bug
    rec = _synthetic(1.0)
    rec["loop"]["values"][0, 3, 1] = 7.0
    rec["loop"]["loss_abs"][0, 3] = 10.0
    m = cla.summarize(cfg, rec).metrics
    assert m["q_range_violations"] == 1 and m["bound_violations"] == 1 and m["bound_violations_within_hypothesis"] == 0


def test_presets_are_the_upstream_studies_models():
    """The kept models run all trains once: repeated_control's actors and learned_critic's critic, the same loop."""
    for ours, theirs in ((cla.QUICK, rc.QUICK), (cla.FULL, rc.FULL)):
        assert ours.actor == theirs.actor and ours.runs == theirs.runs and ours.loop_seed == theirs.loop_seed
        assert ours.eta == theirs.eta and ours.rounds == theirs.rounds
        assert ours.samples_per_pair == theirs.samples_per_pair
    assert cla.QUICK.critic == lc.QUICK.train and cla.FULL.critic == lc.FULL.train
    assert cla.QUICK.actor_chunks == rc.QUICK.chunks and cla.QUICK.critic_chunks == lc.QUICK.chunks
    assert cla.STUDY.after == ("pmd.learned_critic", "pmd.repeated_control")


@pytest.mark.parametrize("kwargs, field", [
    ({"eta": 1.6}, "eta"), ({"samples_per_pair": 4}, "samples_per_pair"), ({"runs": 0}, "runs"),
    ({"per_mdp": 0}, "per_mdp"), ({"stream": 2}, "stream"), ({"actor_chunks": 7}, "actor_chunks"),
    ({"critic": dataclasses.replace(cla.FULL.critic, family="reward_x2")}, "critic.family"),
    ({"critic": dataclasses.replace(cla.FULL.critic, gamma=0.9)}, "critic.gamma"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        cla.ClosedLoopAuditConfig(**kwargs)

"""Study pmd.trajectory_critic: a tiny run through the CLI writes complete outputs; the claims on synthetic
records; the redraw control on real loops; the arms' wiring recomputed by hand from the packets of the first
two rounds; the presets share pmd.learned_critic's critics; config errors name the field.

Every loop here uses a tiny critic (d_model 8, one layer), untrained or trained 4 steps: the wiring does not
depend on what the critic learned.
"""
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
from experiments.studies.pmd import learned_critic as lc
from experiments.studies.pmd import training
from experiments.studies.pmd import trajectory_critic as tc
from pmd_jax import learned, tasks
from pmd_jax.mdp import loss_normaliser
from pmd_jax.sampling import Arm
from pmd_jax.transformer import ModelConfig

TINY_CRITIC = {"model.d_model": 8, "model.num_layers": 1, "model.num_heads": 2, "num_steps": 4, "warmup": 0,
               "batch_size": 4, "n_train_mdps": 8}
TINY = dataclasses.replace(tc.QUICK, critic=dataclasses.replace(tc.QUICK.critic, model=ModelConfig(
    d_model=8, num_layers=1, num_heads=2)), runs=2)


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_cli_run_writes_complete_outputs(tmp_path):
    sets = [x for k, v in TINY_CRITIC.items() for x in ("--set", f"critic.{k}={json.dumps(v)}")]
    sets += ["--set", "runs=2", "--set", "chunks=2", "--set", "rounds=3", "--set", "n_mdps=4"]
    assert main(["run", "pmd.trajectory_critic", "--quick", *sets, "--out", str(tmp_path)]) in (0, 1)
    study_dir = tmp_path / "pmd.trajectory_critic"
    result = json.loads((study_dir / "result.json").read_text())
    assert [c["name"] for c in result["checks"]] == [c.name for c in tc.STUDY.claims]
    assert all(c["kind"] == "interval" and c["unit"] == "MDP" and c["n"] == 4 and c["control"]["n"] == 4
               and c["verdict"] in checks.VERDICTS and c["control"]["verdict"] in checks.VERDICTS
               for c in result["checks"])
    m = result["metrics"]
    assert m["unvisited_per_round_balanced"] == 0.0 and m["unvisited_per_round_sample_mean_balanced"] == 0.0
    assert 0.0 <= m["unvisited_per_round_stream"] <= 12.0 and m["critic_error_exact"] < 1e-5
    assert m["gap_stream"] == pytest.approx(m["loss_mean_stream"] - m["loss_mean_balanced"], abs=1e-12)
    losses = _rows(study_dir / "losses.csv")
    assert len(losses) == 4 * len(tc.ARMS) and [r["arm"] for r in losses[: len(tc.ARMS)]] == list(tc.ARMS)
    for r in losses:  # the MDP's value is the mean over the critic runs
        assert float(r["loss"]) == pytest.approx((float(r["loss_run_1"]) + float(r["loss_run_2"])) / 2, rel=1e-9)
    stream = [float(r["loss"]) for r in losses if r["arm"] == "stream"]
    balanced = [float(r["loss"]) for r in losses if r["arm"] == "balanced"]
    assert result["checks"][0]["value"] == pytest.approx(np.mean(np.subtract(stream, balanced)), rel=1e-9)
    assert len(_rows(study_dir / "rounds.csv")) == 3 * len(tc.ARMS)
    assert [r["arm"] for r in _rows(study_dir / "table.csv")] == list(tc.ARMS)
    assert _rows(study_dir / "models.csv")[0]["origin"].startswith("trained here (pmd.learned_critic keeps no")
    assert (study_dir / "trajectory_critic.png").stat().st_size > 10_000


def _records(n=40, runs=3, T=4, seed=0, extra=None):
    """Synthetic records: the learned critic on the stream loses 0.03 more than on balanced packets, the other arms
    nothing more (noise 1e-3 per run)."""
    rng = np.random.default_rng(seed)
    extra = {"stream": 0.03, "stream_pair_major": 0.02, "sample_mean_stream": 0.01} if extra is None else extra
    base = rng.uniform(0.005, 0.02, n)
    K, C = len(tc.LEARNED_ARMS), len(tc.CONSTRUCTION_ARMS)

    def loss(arms, shape):
        x = np.stack([base + extra.get(a, 0.0) for a in arms], axis=-1)[..., None] * np.ones(T)
        return np.broadcast_to(x, shape) + rng.normal(0, 1e-3, shape)

    def part(arms, shape):
        stream = np.asarray(["stream" in a for a in arms])[:, None]  # the balanced packets visit every pair
        return {"loss": loss(arms, shape), "delta": np.full(shape, 0.3), "err_visited": np.full(shape, 1.2),
                "err_unvisited": np.where(stream, 0.5, 0.0) * np.ones(shape),
                "keep_err_unvisited": np.where(stream, 0.4, 0.0) * np.ones(shape),
                "unvisited": np.where(stream, 2.0, 0.0) * np.ones(shape)}

    return {"learned": part(tc.ARMS[:K], (runs, n, K, T)), "construction": part(tc.CONSTRUCTION_ARMS, (n, C, T))}


def test_summarize_on_synthetic_records():
    cfg = dataclasses.replace(tc.QUICK, n_mdps=40)
    summary = tc.summarize(cfg, {"records": _records(), "critic_origin": "synthetic"})
    found = {c.name: c for c in summary.checks}
    assert [c.name for c in summary.checks] == [c.name for c in tc.STUDY.claims]
    assert all(c.verdict == checks.PASS and c.n == 40 and c.unit == "MDP" for c in found.values())
    # the controls: a redraw of the same coverage has no gap; the stream without carry-Q is not within 0.006
    assert found["stream_worse_than_balanced"].control.verdict != checks.PASS
    assert found["carry_q_recovers_balanced"].control.verdict == checks.FAIL
    m = summary.metrics
    assert m["gap_stream"] == pytest.approx(0.03, abs=2e-3)
    assert m["gap_sample_mean_stream"] == pytest.approx(0.01, abs=2e-3)
    assert m["critic_error_visited_stream"] == pytest.approx(1.2 / 10)
    assert m["critic_error_unvisited_stream"] == pytest.approx(0.25)
    assert m["keep_error_unvisited_stream"] == pytest.approx(0.2) and "critic_error_unvisited_balanced" not in m
    assert "unvisited_per_round_exact" not in m and set(summary.tables["table"]["arm"]) == set(tc.ARMS)

    # a stream no worse than balanced fails the gap claim (and carry-Q's control no longer fails)
    flat = _records(extra={})
    flat["learned"]["loss"][:, :, tc.ARMS.index("stream")] = flat["learned"]["loss"][:, :, tc.ARMS.index("balanced")]
    found = {c.name: c for c in tc.summarize(cfg, {"records": flat, "critic_origin": ""}).checks}
    assert found["stream_worse_than_balanced"].verdict == checks.FAIL
    assert found["carry_q_recovers_balanced"].control.verdict == checks.PASS
    # a carry-Q stream that loses what the stream loses fails its claim
    lossy = _records(extra={"stream": 0.03, "stream_carry": 0.03})
    found = {c.name: c for c in tc.summarize(cfg, {"records": lossy, "critic_origin": ""}).checks}
    assert found["carry_q_recovers_balanced"].verdict == checks.FAIL


def test_redraw_control_does_not_pass_on_real_loops():
    """The control of the gap claim on real loops (8 MDPs, 20 rounds, two untrained tiny critics): redrawing the
    balanced packet changes the samples but not the coverage, so it does not pass "worse than balanced"."""
    cfg = dataclasses.replace(TINY, n_mdps=8, split="val")
    params = training.initial_params(cfg.critic, "critic", seed_keys(2, 1))
    L = {a: v for a, v in zip(tc.ARMS, tc.per_arm(tc.loops(cfg, params), "loss")[..., -1].T)}
    found = {c.name: c for c in tc.judge(L)}
    assert found["stream_worse_than_balanced"].control.verdict != checks.PASS
    assert found["stream_worse_than_balanced"].control.n == 8


def _sample_mean(tr, Q, gamma, S, A):
    """Per pair the mean of ``r + gamma Q(s', a')`` over the packet's transitions of that pair (numpy), and counts."""
    s, a, r, s2, a2 = (np.asarray(x) for x in (tr.s, tr.a, tr.r, tr.s_next, tr.a_next))
    target = r + gamma * np.asarray(Q)[s2, a2]
    counts = np.bincount(s * A + a, minlength=S * A).reshape(S, A)
    sums = np.bincount(s * A + a, weights=target, minlength=S * A).reshape(S, A)
    return np.divide(sums, counts, out=np.zeros((S, A)), where=counts > 0), counts


def test_arms_wiring_recomputed_from_the_packets():
    """Two rounds of every arm on one MDP, recomputed from the packets drawn by hand: each learned arm is the
    critic on its own packet (balanced; balanced with an independent key; the stream; the stream with Q_k kept on
    unvisited pairs; the stream sorted pair-major), the stream arms and the decoder's stream arm read the same
    packet, the decoder is the per-pair sample mean, the exact arm the backup, and trace_records' errors match."""
    cfg = dataclasses.replace(TINY, rounds=2)
    S, A, m, n = 4, 3, 6, cfg.packet_size
    params = training.initial_params(cfg.critic, "critic", seed_keys(2, 1))
    p0 = jax.tree.map(lambda x: x[0], params)
    model = cfg.critic.critic()
    mdp = jax.tree.map(lambda x: x[0], tasks.split_mdps("iid", "val", 1))
    key = jax.random.key(3)
    learned_tr, constr = jax.jit(tc.make_mdp_runner(cfg))(params, mdp, key)
    k_loop, k_start = jax.random.split(key)
    start = jax.random.randint(k_start, (), 0, S)
    round_keys = jax.random.split(k_loop, 2)
    L = {a: jax.tree.map(lambda x, j=j: np.asarray(x[0, j]), learned_tr) for j, (a, *_) in enumerate(tc.LEARNED_ARMS)}
    C = {a: jax.tree.map(lambda x, j=j: np.asarray(x[j]), constr) for j, a in enumerate(tc.CONSTRUCTION_ARMS)}
    q_jit = jax.jit(lambda Q, tr: model.q_values(p0, Q, tr))
    q = lambda Q, tr: np.asarray(q_jit(jnp.asarray(Q, jnp.float32), tr))  # noqa: E731
    sample_packet = jax.jit(tc.sample_packet, static_argnums=(3, 4, 6))  # one compile per arm, not op by op
    gamma = float(mdp.gamma)

    # the balanced slots are laid out as the critic's training packets (pair-major, m per pair)
    bal = sample_packet(round_keys[0], mdp, jnp.asarray(L["balanced"].policies[0]), Arm.BALANCED, m, start, n)
    ref = learned.balanced_transitions(round_keys[0], mdp, jnp.asarray(L["balanced"].policies[0]), m)
    np.testing.assert_array_equal(bal.transitions.s, ref.s)
    np.testing.assert_array_equal(bal.transitions.a, ref.a)
    assert bool(np.all(bal.transitions.valid)) and bool(np.all(bal.counts == m))

    stream_state = {a: start for a in tc.ARMS if "stream" in a}
    Q_prev = {a: np.zeros((S, A)) for a in tc.ARMS}
    for k in range(2):
        rk = round_keys[k]
        for arm, draw_key in (("balanced", rk), ("balanced_redraw", jax.random.fold_in(rk, 1))):
            packet = sample_packet(draw_key, mdp, jnp.asarray(L[arm].policies[k]), Arm.BALANCED, m, start, n)
            np.testing.assert_allclose(L[arm].values[k], q(Q_prev[arm], packet.transitions), atol=1e-5)
            np.testing.assert_array_equal(L[arm].counts[k], packet.counts)
        for arm in ("stream", "stream_carry", "stream_pair_major"):
            packet = sample_packet(rk, mdp, jnp.asarray(L[arm].policies[k]), Arm.ON_POLICY, m, stream_state[arm], n)
            stream_state[arm] = packet.stream_state
            _, counts = _sample_mean(packet.transitions, Q_prev[arm], gamma, S, A)
            np.testing.assert_array_equal(L[arm].counts[k], counts)
            tr = packet.transitions
            if arm == "stream_pair_major":
                order = np.argsort(np.asarray(tr.s) * A + np.asarray(tr.a), kind="stable")
                tr = jax.tree.map(lambda x, o=order: x[o], tr)
            expect = q(Q_prev[arm], tr)
            if arm == "stream_carry":
                expect = np.where(counts == 0, Q_prev[arm], expect)
            np.testing.assert_allclose(L[arm].values[k], expect, atol=1e-5)
        # the decoder's stream arms read the stream's packet: its per-pair sample mean, to the decoder's leak, and
        # with carry-Q the old Q on the pairs it did not visit
        for arm in ("sample_mean_stream", "sample_mean_stream_carry"):
            packet = sample_packet(rk, mdp, jnp.asarray(C[arm].policies[k]), Arm.ON_POLICY, m, stream_state[arm], n)
            stream_state[arm] = packet.stream_state
            mean, counts = _sample_mean(packet.transitions, Q_prev[arm], gamma, S, A)
            np.testing.assert_array_equal(C[arm].counts[k], counts)
            np.testing.assert_allclose(C[arm].values[k][counts > 0], mean[counts > 0], atol=1e-3)
            if arm == "sample_mean_stream_carry":
                np.testing.assert_array_equal(C[arm].values[k][counts == 0], Q_prev[arm][counts == 0])
        packet = sample_packet(rk, mdp, jnp.asarray(C["sample_mean_balanced"].policies[k]), Arm.BALANCED, m, start, n)
        bmean, _ = _sample_mean(packet.transitions, Q_prev["sample_mean_balanced"], gamma, S, A)
        np.testing.assert_allclose(C["sample_mean_balanced"].values[k], bmean, atol=1e-3)
        P, R = np.asarray(mdp.P), np.asarray(mdp.R)
        pi = jnp.asarray(C["exact"].policies[k])
        backup = R + gamma * np.einsum("xay,yb,yb->xa", P, pi, Q_prev["exact"])
        np.testing.assert_allclose(C["exact"].values[k], backup, atol=1e-5)
        Q_prev = {a: (L[a] if a in L else C[a]).values[k] for a in tc.ARMS}
    # round 1: every arm acted on the uniform policy and drew from the same start state, so the stream arms share
    # the packet (counts) and the redraw differs from balanced
    for arm in ("stream_carry", "stream_pair_major"):
        np.testing.assert_array_equal(L[arm].counts[0], L["stream"].counts[0])
    for arm in ("sample_mean_stream", "sample_mean_stream_carry"):
        np.testing.assert_array_equal(C[arm].counts[0], L["stream"].counts[0])
    assert not np.allclose(L["balanced_redraw"].values[0], L["balanced"].values[0])

    # trace_records' error split, recomputed with numpy from the stream trace
    Q_star, loss0 = loss_normaliser(mdp)
    rec = tc.trace_records(mdp, jax.tree.map(lambda x: x[0, tc.ARMS.index("stream")], learned_tr), jnp.zeros((S, A)),
                           Q_star, loss0)
    T = L["stream"]
    prev = np.concatenate([np.zeros((1, S, A)), T.values[:-1]])
    err = np.abs(T.values - (R + gamma * np.einsum("xay,kyb,kyb->kxa", P, T.policies, prev)))
    unv = T.counts == 0
    np.testing.assert_allclose(rec["err_unvisited"], (err * unv).sum(axis=(1, 2)), atol=1e-4)
    np.testing.assert_allclose(rec["err_visited"], (err * ~unv).sum(axis=(1, 2)), atol=1e-4)
    np.testing.assert_allclose(rec["delta"], err.max(axis=(1, 2)), atol=1e-4)
    np.testing.assert_array_equal(rec["unvisited"], unv.sum(axis=(1, 2)))


def test_presets_reuse_learned_critics_critics():
    """Both presets evaluate the critics pmd.learned_critic keeps, so run all loads them instead of training."""
    assert tc.QUICK.critic == lc.QUICK.train and tc.FULL.critic == lc.FULL.train
    assert tc.QUICK.runs <= lc.QUICK.seeds and tc.FULL.runs <= lc.FULL.seeds
    assert tc.QUICK.stream == lc.QUICK.stream and "pmd.learned_critic" in tc.STUDY.after
    assert tc.QUICK.packet_size == tc.QUICK.critic.critic().num_transitions == 72


@pytest.mark.parametrize("kwargs, field", [
    ({"runs": 0}, "runs"), ({"chunks": 7}, "chunks"), ({"rounds": 0}, "rounds"), ({"n_mdps": 0}, "n_mdps"),
    ({"eta": 0.0}, "eta"), ({"split": "train"}, "split"), ({"stream": 2}, "stream"), ({"loop_seed": -1}, "loop_seed"),
    ({"kappa": -1.0}, "kappa"),
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        tc.TrajectoryCriticConfig(**kwargs)

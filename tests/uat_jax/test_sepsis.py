"""Domain B (uat_jax.sepsis) against a numpy reference, hand-worked steps on handmade tables,
and the properties C.1 claims (expert clusters, schedule, resistance, termination)."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.uat_jax import numpy_sepsis as ref
from uat_jax import sepsis

MEMBERS = {0: [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)], 1: [(0, 3), (0, 4), (1, 3), (1, 4)],
           2: [(1, 2), (2, 1), (2, 2), (2, 3), (3, 2)], 3: [(3, 0), (3, 1), (4, 0), (4, 1)],
           4: [(2, 4), (3, 3), (3, 4), (4, 2), (4, 3), (4, 4)]}
"""The cluster table of the module docstring, (fluid, vaso) members."""


@pytest.fixture(scope="module")
def real():
    return sepsis.make_params()


def tiny_raw(rng, n=4):
    """ICU-Sepsis-shaped arrays with n patient states: uniform patient rows with death and
    survival 0.1 each, SOFA 2, 4, 6, ... and lactate 1, 2, 3, ... (ranks k / (n - 1))."""
    S = n + 3
    tx = np.zeros((S, 25, S))
    tx[:n, :, :n] = 0.8 / n
    tx[:n, :, n] = tx[:n, :, n + 1] = 0.1
    tx[n:, :, S - 1] = 1.0
    d0 = np.zeros(S)
    d0[:n] = np.arange(1, n + 1) / (n * (n + 1) / 2)
    sofa = np.zeros(S)
    sofa[:n] = 2.0 * np.arange(1, n + 1)
    centres = np.zeros((S, 47))
    centres[:n] = rng.normal(size=(n, 47))
    centres[:n, sepsis.LACTATE_COLUMN] = np.arange(1, n + 1)
    return tx, d0, sofa, centres, np.ones((S, 25), bool)


def tiny_params(rng, **knobs):
    tables = sepsis.build_tables(*tiny_raw(rng), n_components=2)
    return sepsis.make_params(tables, **{"horizon": 6, "min_segments": 1, "max_segments": 1,
                                         "min_segment_len": 6, **knobs})


def state(patient, schedule, t=0, prev=-1, run=0):
    return sepsis.EnvState(patient=jnp.int32(patient), t=jnp.int32(t), schedule=jnp.asarray(schedule, jnp.int32),
                           prev_cluster=jnp.int32(prev), run=jnp.int32(run))


TRANSITION = jax.jit(sepsis.transition)


def draws(member=0.0, hazard=0.99, nxt=0.0, admit=0.0, dim=2):
    return sepsis.StepDraws(member=jnp.float32(member), hazard=jnp.float32(hazard), next=jnp.float32(nxt),
                            admit=jnp.float32(admit), noise=jnp.zeros(dim))


def test_hand_worked_steps(rng):
    """Tables: severity (2 SOFA + lactate) / 3 = (0, 1/3, 2/3, 1); tilt 4 ln 2 and the
    fluid-responsive efficacy of (fluid 3, vaso 0), 0.75, make the tilt exp(3 ln 2 (1/3 - sev))
    = (2, 1, 1/2, 1/4) over a uniform row: P = (8, 4, 2, 1) / 15."""
    p = tiny_params(rng, tilt=4 * math.log(2), obs_noise=0.0)
    tb = p.tables
    np.testing.assert_allclose(tb.severity, [0, 1 / 3, 2 / 3, 1], atol=1e-6)
    np.testing.assert_allclose(tb.transition[1, 15], [0.25] * 4, atol=1e-6)
    w = sepsis.tilted_weights(jnp.int32(1), jnp.int32(15), p.tilt * 0.75, tb)
    np.testing.assert_allclose(w / w.sum(), np.array([8, 4, 2, 1]) / 15, atol=1e-6)
    schedule = [0, 0, 2, 2, 2, 2]
    # 1: cluster 3, first member (3, 0) = combination 15; no termination (p_die = p_rec = 0.01); u = 0.5 < 8/15 -> s' = 0
    obs, st, r, done, info = TRANSITION(draws(hazard=0.5, nxt=0.5), state(1, schedule), jnp.int32(3), p)
    assert (int(st.patient), int(info["combination"]), int(st.run), int(st.prev_cluster)) == (0, 15, 1, 3)
    assert float(r) == pytest.approx(0.1 / 3 + 0.05 / 3, abs=1e-6)
    assert float(info["efficacy"]) == pytest.approx(0.75) and not bool(info["switched"]) and not bool(done)
    np.testing.assert_allclose(obs, tb.obs[0])
    # 2: from s = 0 (SOFA 0, lactate 0: recovery zone) p_die = 0.01, p_rec = 0.01 + 0.1; u = 0.05 -> recovered;
    # admitted by u = 0.5 from d0 = (0.1, 0.2, 0.3, 0.4) -> state 2; the repeat count restarts
    obs, st, r, done, info = TRANSITION(draws(member=0.99, hazard=0.05, admit=0.5), st, jnp.int32(3), p)
    assert bool(info["recovered"]) and not bool(info["died"]) and bool(info["terminated"])
    assert int(info["combination"]) == 21 and float(r) == 1.0
    assert (int(st.patient), int(st.prev_cluster), int(st.run), int(st.t)) == (2, -1, 0, 2)
    # 3: regime 2 (conservative) from t = 2: switched; cluster 0 member 3 = (1, 0): e = 0.5 - 1.5 / 4
    obs, st, r, done, info = TRANSITION(draws(member=0.5, hazard=0.5, nxt=0.0), st, jnp.int32(0), p)
    assert int(info["regime"]) == 2 and bool(info["switched"]) and int(info["combination"]) == 5
    assert float(info["efficacy"]) == pytest.approx(0.125)
    assert int(st.patient) == 0 and float(r) == pytest.approx(0.1 * 2 / 3 + 0.05 * 2 / 3, abs=1e-6)
    # 4: u = 0.005 < p_die = 0.01 -> died, -1
    obs, st, r, done, info = TRANSITION(draws(hazard=0.005, admit=0.0), st, jnp.int32(0), p)
    assert bool(info["died"]) and float(r) == -1.0 and int(st.patient) == 0
    assert not bool(info["switched"])


def test_resistance_after_third_repeat(rng):
    p = tiny_params(rng)
    st = state(1, [0] * 6)
    seen = []
    for action in [3, 3, 3, 3, 3, 0, 3]:
        _, st, _, _, info = TRANSITION(draws(), st, jnp.int32(action), p)
        seen.append(float(info["resistance"]))
    np.testing.assert_allclose(seen, [1, 1, 1, 0.8, 0.64, 1, 1], rtol=1e-6)


@jax.jit
def scripted(key, actions, params):
    """Reset, then play ``actions``; per step the draws, the outcome and the new state."""
    obs0, st0 = sepsis.reset(key, params)

    def body(st, x):
        k, action = x
        d = sepsis.draw_step(k, params)
        obs, new, r, done, info = sepsis.transition(d, st, action, params)
        return new, (d, obs, new, r, done, info)
    return st0, jax.lax.scan(body, st0, (jax.random.split(key, actions.shape[0]), actions))[1]


def test_matches_numpy_side_by_side(real, rng):
    """Three episodes on the package's tables (defaults, then frequent termination), the
    numpy reference stepping its own state with the same draws and actions."""
    tb = ref.tables_np(real.tables)
    outcomes = {"died": 0, "recovered": 0, "resisted": 0}
    high = {"termination_scale": 1.0, "recovery_hazard": 0.5, "tilt": 25.0}
    for i, knobs in enumerate([{}, high, high]):
        params = real.replace(**knobs)  # Python floats, as the defaults: one compilation
        kn = ref.knobs_np(params)
        actions = np.zeros(params.horizon, np.int32)
        for t in range(1, params.horizon):  # half the steps repeat the previous cluster
            actions[t] = actions[t - 1] if rng.random() < 0.5 else rng.integers(5)
        st0, out = jax.tree.map(np.asarray, scripted(jax.random.key(i), jnp.asarray(actions), params))
        d, obs, new, r, done, info = out
        st = {k: v for k, v in vars(st0).items()}
        for t in range(params.horizon):
            want = ref.step(tb, kn, params.horizon, st, int(actions[t]),
                            {k: float(getattr(d, k)[t]) for k in ("member", "hazard", "next", "admit")})
            assert (new.patient[t], new.t[t], new.prev_cluster[t], new.run[t]) == \
                (want["patient"], want["t"], want["prev_cluster"], want["run"]), t
            assert info["combination"][t] == want["combination"] and info["regime"][t] == want["regime"]
            assert (info["died"][t], info["recovered"][t]) == (want["died"], want["recovered"])
            assert r[t] == pytest.approx(want["reward"], abs=1e-6)
            assert info["efficacy"][t] == pytest.approx(want["efficacy"], abs=1e-6)
            np.testing.assert_allclose(obs[t], tb["obs"][want["patient"]] + kn["obs_noise"] * d.noise[t], atol=1e-5)
            assert done[t] == (t == params.horizon - 1)
            st = {**st, **{k: want[k] for k in ("patient", "t", "prev_cluster", "run")}}
            outcomes["died"] += want["died"]
            outcomes["recovered"] += want["recovered"]
            outcomes["resisted"] += want["efficacy"] != kn["efficacy"][want["regime"], want["combination"]]
    assert min(outcomes.values()) >= 3, outcomes


def test_treatment_clusters_ordered_and_deterministic():
    levels = sepsis.treatment_levels()
    assert [tuple(levels[a]) for a in (0, 7, 24)] == [(0, 0), (1, 2), (4, 4)]
    labels, centroids = sepsis.treatment_clusters(levels)
    again, _ = sepsis.treatment_clusters(levels)
    np.testing.assert_array_equal(labels, again)
    assert {c: [tuple(levels[a]) for a in np.flatnonzero(labels == c)] for c in range(5)} == MEMBERS
    np.testing.assert_allclose(centroids, [levels[labels == c].mean(0) for c in range(5)])
    intensity = centroids.sum(1)
    assert np.all(np.diff(intensity) >= 0) and intensity[0] < intensity[1] and intensity[3] < intensity[4]
    # Lloyd's fixed point: every combination is nearest to its own centroid
    dist = ((levels[:, None] - centroids[None]) ** 2).sum(-1)
    assert np.all(dist[np.arange(25), labels] <= dist.min(1) + 1e-12)
    tb = sepsis.build_tables(*tiny_raw(np.random.default_rng(0)), n_components=2)
    listed = np.asarray(tb.members)[np.asarray(tb.members) >= 0]
    assert sorted(listed.tolist()) == list(range(25))
    np.testing.assert_array_equal(tb.cluster_size, [6, 4, 5, 4, 6])


def test_pca_standardised_on_patient_states(rng):
    raw = tiny_raw(rng, n=60)
    tb = sepsis.build_tables(*raw, n_components=5)
    x = raw[3][:60]
    z = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0)
    _, sing, vt = np.linalg.svd(z, full_matrices=False)
    comps = np.asarray(tb.components, np.float64)
    np.testing.assert_allclose(comps @ comps.T, np.eye(5), atol=1e-5)
    np.testing.assert_allclose(tb.explained_variance, sing[:5] ** 2 / np.sum(sing ** 2), rtol=1e-4)
    np.testing.assert_allclose(np.abs(comps @ vt[:5].T), np.eye(5), atol=1e-4)  # same axes, up to sign
    assert np.all(comps[np.arange(5), np.argmax(np.abs(comps), 1)] > 0)
    np.testing.assert_allclose(tb.obs, z @ comps.T, atol=1e-4)
    # terminal rows do not enter the standardisation
    moved = list(raw)
    moved[3] = raw[3].copy()
    moved[3][60:] = 1e6
    np.testing.assert_array_equal(sepsis.build_tables(*moved, n_components=5).obs, tb.obs)


def test_package_tables(real):
    tb = real.tables
    assert tb.transition.shape == (713, 25, 713) and tb.obs.shape == (713, sepsis.OBS_DIM)
    np.testing.assert_allclose(tb.transition.sum(-1), 1.0, atol=1e-5)
    evr = np.asarray(tb.explained_variance)
    assert np.all(np.diff(evr) <= 0) and 0.8 < evr.sum() < 0.9
    assert bool(tb.admissible[0, 5]) and not bool(tb.admissible[0, 0])  # state 0 admits 5 10 15 20 only
    assert sepsis.load_tables() is tb  # cached


def test_schedule_segments_and_distribution():
    p = sepsis.make_params(tiny_params(np.random.default_rng(0)).tables)
    draw = jax.jit(jax.vmap(sepsis.draw_schedule, in_axes=(0, None)))
    sched = np.asarray(draw(jax.random.split(jax.random.key(0), 3000), p))
    assert sched.shape == (3000, p.horizon)
    n_seg, firsts, lasts = [], [], []
    for row in sched:
        cuts = np.flatnonzero(np.diff(row) != 0) + 1  # consecutive segments differ, so runs are segments
        lengths = np.diff(np.concatenate([[0], cuts, [p.horizon]]))
        assert lengths.sum() == p.horizon and lengths.min() >= p.min_segment_len
        n_seg.append(len(lengths))
        firsts.append(lengths[0])
        lasts.append(lengths[-1])
    counts = np.bincount(n_seg, minlength=7)
    assert counts[:4].sum() == 0 and counts[7:].sum() == 0
    np.testing.assert_allclose(counts[4:7] / 3000, [1 / 3] * 3, atol=0.04)
    np.testing.assert_allclose(np.bincount(sched[:, 0], minlength=3) / 3000, [1 / 3] * 3, atol=0.04)
    np.testing.assert_allclose(np.bincount(sched.ravel(), minlength=3) / sched.size, [1 / 3] * 3, atol=0.03)
    assert abs(np.mean(firsts) - np.mean(lasts)) < 1.0  # exchangeable segment lengths
    assert abs(np.mean(firsts) - np.mean(p.horizon / np.array(n_seg))) < 1.0


def test_expert_cluster_best_in_every_regime(real):
    """C.1: the favoured cluster is the unique maximiser of the expected one-step dense
    reward, over the patient states and over d_0; the regimes respond differently."""
    dense, sev = jax.jit(sepsis.expected_response)(real)
    dense, sev = np.asarray(dense), np.asarray(sev)
    tb = ref.tables_np(real.tables)
    kn = ref.knobs_np(real)
    states = [0, 100, 356, 712]
    want_dense, want_sev = ref.expected_response(tb, kn, states)
    np.testing.assert_allclose(dense[:, :, states], want_dense, atol=1e-5)
    np.testing.assert_allclose(sev[:, :, states], want_sev, atol=1e-5)
    for k, expert in enumerate(sepsis.EXPERT_CLUSTER):
        for value in (dense[k].mean(-1), dense[k] @ tb["d0"]):
            order = np.argsort(value)[::-1]
            assert order[0] == expert and value[order[0]] - value[order[1]] > 0.008, (k, value)
        assert np.mean(dense[k].argmax(0) == expert) > 0.95
    mean_sev = sev.mean(-1)  # [regime, cluster]
    for a in range(3):
        for b in range(a + 1, 3):
            assert np.abs(mean_sev[a] - mean_sev[b]).max() > 0.1


def test_rollout_bookkeeping_and_protocol(real):
    """jit + vmap over keys and a knob, tables passed as arguments; termination bookkeeping."""
    def episode(key, params):
        obs, st = sepsis.reset(key, params)

        def body(st, k):
            action = jnp.where(jax.random.bernoulli(k), sepsis.expert_action(st, params),
                               jax.random.randint(jax.random.fold_in(k, 1), (), 0, 5))
            obs, new, r, done, info = sepsis.step(k, st, action, params)
            return new, (r, done, info["terminated"], new.prev_cluster, new.run, new.t, info["switched"],
                         info["regime"] != sepsis.regime_at(st))
        return jax.lax.scan(body, st, jax.random.split(key, params.horizon))

    tilts = jnp.array([5.0, 10.0])
    params = real.replace(tilt=tilts)
    axes = jax.tree.map(lambda _: None, real).replace(tilt=0)
    keys = jax.random.split(jax.random.key(3), 8)
    lowered = jax.jit(jax.vmap(jax.vmap(episode, in_axes=(0, None)), in_axes=(None, axes))).lower(keys, params)
    assert len(lowered.as_text()) < 10 ** 6  # the 51 MB tables are arguments, not constants
    final, (r, done, term, prev, count, t, switched, mismatch) = jax.tree.map(np.asarray,
                                                                              lowered.compile()(keys, params))
    assert r.shape == (2, 8, real.horizon)
    assert np.all(done[..., -1]) and not np.any(done[..., :-1])
    np.testing.assert_array_equal(t, np.broadcast_to(np.arange(1, real.horizon + 1), t.shape))
    assert np.all(np.isin(r[term], [-1.0, 1.0])) and np.all(np.abs(r[~term]) <= 0.15 + 1e-6)
    assert np.all(prev[term] == -1) and np.all(count[term] == 0) and np.all(count[~term] >= 1)
    assert 3 * 16 <= switched.sum() <= 5 * 16 and not np.any(mismatch)
    assert 16 <= term.sum() <= 16 * 20
    np.testing.assert_array_equal(final.schedule[0], final.schedule[1])  # same keys, same schedules


def test_bad_inputs(tmp_path, monkeypatch, rng):
    raw = tiny_raw(rng)
    with pytest.raises(ValueError, match="tx_mat"):
        sepsis.build_tables(raw[0][:, :24], *raw[1:])
    with pytest.raises(ValueError, match="state_cluster_centers"):
        sepsis.build_tables(raw[0], raw[1], raw[2], raw[3][:, :46], raw[4])
    with pytest.raises(ValueError, match="n_components"):
        sepsis.standardised_pca(raw[3][:4], 5)
    tables = sepsis.build_tables(*raw, n_components=2)
    with pytest.raises(ValueError, match="horizon"):
        sepsis.make_params(tables, horizon=20)
    with pytest.raises(ValueError, match="efficacy"):
        sepsis.make_params(tables, efficacy=np.zeros((3, 24)))
    with pytest.raises(ValueError, match="termination_scale"):
        sepsis.make_params(tables, termination_scale=1.5)
    with pytest.raises(ValueError, match="resistance_decay"):
        sepsis.make_params(tables, resistance_decay=0.0)
    assert sepsis.make_params(tables, tilt=np.array([5.0, 10.0])).tilt.shape == (2,)  # knob vectors pass
    with pytest.raises(ValueError, match="tilt"):
        sepsis.make_params(tables, tilt=np.array([5.0, -1.0]))
    # the study-facing knobs: the same ranges, and each one an EnvParams field (uat.sepsis passes them by name)
    with pytest.raises(ValueError, match="termination_scale"):
        sepsis.Knobs(termination_scale=1.5)
    assert set(dataclasses.asdict(sepsis.Knobs())) <= {f.name for f in dataclasses.fields(sepsis.EnvParams)}
    assert float(sepsis.make_params(tables, **dataclasses.asdict(sepsis.Knobs(obs_noise=2.0))).obs_noise) == 2.0
    with pytest.raises(ValueError, match="obs_dim"):
        sepsis.make_params(tables, obs_dim=20)
    # asset files: missing, wrong shape, inconsistent with the "mean" strategy
    with pytest.raises(ValueError, match="unreadable ICU-Sepsis assets.*pip install icu-sepsis"):
        sepsis.read_assets(tmp_path)
    tx, d0, sofa, centres, _ = raw
    (tmp_path / "admissible_actions.txt").write_text(
        " ".join(["2"] * 4 + ["25"] * 3) + "\n" + "0 1\n" * 4 + (" ".join(map(str, range(25))) + "\n") * 3)
    np.savez(tmp_path / "dynamics.npz", tx_mat=tx, d_0=d0, sofa_scores=sofa, state_cluster_centers=centres)
    assert sepsis.read_assets(tmp_path)["admissible"][:4, :2].all()  # uniform rows: every row is the mean
    bad = tx.copy()
    bad[0, 7, :4] = [0.5, 0.1, 0.1, 0.1]
    np.savez(tmp_path / "dynamics.npz", tx_mat=bad, d_0=d0, sofa_scores=sofa, state_cluster_centers=centres)
    with pytest.raises(ValueError, match="mean of the admissible"):
        sepsis.read_assets(tmp_path)
    np.savez(tmp_path / "dynamics.npz", tx_mat=tx, d_0=d0[:5], sofa_scores=sofa, state_cluster_centers=centres)
    with pytest.raises(ValueError, match="d_0"):
        sepsis.read_assets(tmp_path)
    monkeypatch.setattr(sepsis.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install icu-sepsis"):
        sepsis.asset_dir()


def _package_step_outcomes(env, patient: int, combo: int, n: int) -> np.ndarray:
    """The state after ``n`` steps of the package's own ``ICUSepsisEnv`` from ``patient`` under ``combo``."""
    out = np.empty(n, int)
    for i in range(n):
        env._current_state = patient  # the package's state; its step reads no other
        out[i] = env.step(np.array(divmod(combo, sepsis.N_LEVELS)))[0]
    return out


def _our_step_outcomes(params, patient: int, combo: int, n: int, key) -> np.ndarray:
    """The same from ours: the cluster holding ``combo``, its member draw pinned to it; death and discharge
    coded as the package's states 713 and 714 (ours readmits a new patient there)."""
    members = np.asarray(params.tables.members)
    cluster, j = (int(x[0]) for x in np.nonzero(members == combo))
    size = int(params.tables.cluster_size[cluster])
    step_draws = jax.vmap(sepsis.draw_step, in_axes=(0, None))(jax.random.split(key, n), params)
    step_draws = step_draws.replace(member=jnp.full(n, (j + 0.5) / size, jnp.float32))
    start = state(patient, np.zeros(params.horizon))
    _, new, _, _, info = jax.vmap(TRANSITION, in_axes=(0, None, None, None))(step_draws, start, jnp.int32(cluster),
                                                                             params)
    assert np.all(np.asarray(info["combination"]) == combo)
    return np.where(info["died"], 713, np.where(info["recovered"], 714, new.patient))


def test_steps_follow_the_package_environment_at_its_own_dynamics(real):
    """Ours with the package's dynamics (termination hazards unscaled, no recovery hazard, no regime tilt, no
    resistance) steps as the package's own ``icu_sepsis.ICUSepsisEnv`` does: from three patients under three
    combinations (one inadmissible, taken by the package's "mean" strategy), the outcomes of 4,000 steps of
    each (death, discharge, the likeliest next patients, any other) are one distribution by a chi-square test.
    The study's own dynamics (hazards scaled by 0.1, a recovery hazard) are rejected by the same test."""
    icu_sepsis = pytest.importorskip("icu_sepsis")
    from scipy import stats

    env = icu_sepsis.ICUSepsisEnv(seed=0)
    assert env._inadmissible_action_strategy == "mean"
    package = sepsis.make_params(real.tables, termination_scale=1.0, recovery_hazard=0.0, tilt=0.0,
                                 resistance_decay=1.0)
    tx = env._tx_mat
    deadly = int(np.argmax(tx[:713, 12, 713]))
    cases = [(deadly, 12), (0, 0), (200, 24)]  # (0, 0): state 0 admits 5, 10, 15, 20 only
    assert not bool(real.tables.admissible[0, 0])
    n, key = 4000, jax.random.key(3)
    for k, (patient, combo) in enumerate(cases):
        theirs = _package_step_outcomes(env, patient, combo, n)
        bins = [713, 714, *np.argsort(tx[patient, combo, :713])[::-1][:6]]
        table = lambda x, bins=bins: [np.sum(x == b) for b in bins] + [np.sum(~np.isin(x, bins))]  # noqa: E731
        for params, same in ((package, True), (real, False)):
            ours = _our_step_outcomes(params, patient, combo, n, jax.random.fold_in(key, k))
            counts = np.array([table(theirs), table(ours)])
            p = stats.chi2_contingency(counts[:, counts.sum(0) > 0]).pvalue
            assert (p > 1e-3) if same else (p < 1e-6), (patient, combo, same, counts.tolist(), p)

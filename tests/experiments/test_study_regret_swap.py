"""regret.swap: a tiny run (compute, summarize, write), the horizon read-out and the checks on synthetic gap curves."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import regret_jax as rj
from experiments import checks
from experiments.registry import RunContext
from experiments.studies.regret.swap import (
    BELOW_EXTERNAL,
    CALIBRATIONS,
    CE_FAR,
    OWN_BELOW_EXTERNAL,
    OWN_MODEL,
    OWN_WITHIN_BM,
    QUICK,
    SWAP_FAR,
    SwapConfig,
    compute,
    head_table,
    horizon_metrics,
    seed_worst,
    step_grid,
    summarize,
    write,
)

TINY = SwapConfig(rj.TrainConfig(model="multihead", d=3, T=3, batch_size=8, num_steps=10), horizons=(1, 2), num_seeds=2,
                  num_etas=4, scan_sequences=1000)
CHECKS = ["learned_ce_far_below_uniform", "learned_swap_far_below_uniform", "learned_ce_within_2x_tuned_bm",
          "calibration_lowers_ce_gap", "fixed_points_converged", "learned_ce_below_external_regret",
          "own_play_ce_within_2x_tuned_bm", "own_play_ce_below_external_regret"]


def test_swap_study_tiny(tmp_path):
    arrays = compute(TINY, RunContext(study="regret.swap", quick=True, out_dir=tmp_path))
    E = TINY.num_etas + len(TINY.horizons)
    assert arrays["curves"]["multihead"]["loss"].shape == (2, 10)
    assert arrays["gaps"]["learned"]["gap_ce"].shape == (3, 2, 6) and arrays["gaps"]["bm"]["gap_swap"].shape == (E, 6)
    assert arrays["gaps"]["init"]["gap_swap"].shape == (3, 2, 6) and arrays["gaps"]["own_play"]["gap_ce"].shape == (3, 2, 6)
    assert TINY.own_play.swap_inputs == "own_play" and TINY.own_play.num_steps == TINY.train.num_steps
    assert {k: v.shape for k, v in arrays["curves"][OWN_MODEL].items()} == {"loss": (2, 10), "nonconverged": (2, 10)}
    assert arrays["nonconverged"]["own_play"].shape == (2,)
    assert arrays["gaps"]["uniform"]["gap_ce"].shape == (6,) and arrays["etas"].shape == (E,)
    assert arrays["nonconverged"]["learned"].shape == (3, 2) and arrays["nonconverged"]["bm"].shape == (E,)
    assert {k: v.shape for k, v in arrays["heads"].items()} == {"eta": (2, 3), "offray": (2, 3), "offdiag": (2, 3)}
    grid = TINY.calibration_grid()
    assert arrays["calibration_sweep"].shape == (len(grid), 2, 6) and grid[0] == pytest.approx(3 / 2**3.5)
    # the sweep is the same self-play as the switch: at the grid's c_d = d it equals c_d = d's
    d_index = int(np.flatnonzero(grid == 3.0)[0])
    np.testing.assert_allclose(arrays["calibration_sweep"][d_index], arrays["gaps"]["learned"]["gap_ce"][0], rtol=1e-5)
    summary = summarize(TINY, arrays)
    m = summary.metrics
    assert m["gap_ce_uniform_t6"] == pytest.approx(2 / 9, abs=1e-6) and m["gap_swap_uniform_t3"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["nonconverged_fraction_learned"] == 0 and m["nonconverged_fraction_bm"] == 0
    assert [c.name for c in summary.checks] == CHECKS and summary.checks[4].passed
    assert [c.n for c in summary.checks] == [2, 2, 2, 2, 1, 2, 2, 2]
    assert all(summary.checks[i].control.n == 2 for i in (0, 1, 2, 3, 5, 6, 7))
    own = ["gap_ce_own_play_t6", "gap_swap_own_play_t3", "ratio_own_play_to_tuned_bm_t6", "ratio_learned_uncalibrated_to_tuned_bm_t3",
           "final_train_loss_own_play", "train_nonconverged_fraction_own_play", "nonconverged_fraction_own_play"]
    assert all(np.isfinite(m[k]) for k in own) and m["train_nonconverged_fraction_own_play"] <= 1
    assert m["ratio_own_play_to_tuned_bm_t6"] == pytest.approx(m["gap_ce_own_play_t6"] / m["gap_ce_bm_tuned_t6"])
    assert summary.tables["table"]["H"] == [3, 6] and summary.tables["heads"]["seed"] == [0, 0, 0, 1, 1, 1]
    assert summary.tables["calibration"]["H"] == [3, 6] and min(summary.tables["calibration"]["gap_ce_at_d_over_best"]) >= 1 - 1e-6
    write(TINY, arrays, summary, tmp_path)
    saved = np.load(tmp_path / "gap_curves.npz")
    assert {"etas", "uniform_gap_ce", "bm_gap_swap", "ftrl_gap_ce", "learned_d_gap_cce", "learned_uncalibrated_gap_ce"} <= set(saved)
    np.testing.assert_array_equal(saved["learned_sqrtd_gap_ce"], arrays["gaps"]["learned"]["gap_ce"][1])
    np.testing.assert_array_equal(saved["own_play_gap_swap"], arrays["gaps"]["own_play"]["gap_swap"][2])  # c_d = 1


def test_step_grid_holds_the_log_grid_and_eta_star_of_every_horizon():
    config = SwapConfig(TINY.train, horizons=(1, 4), eta_min=0.1, eta_max=1.0, num_etas=3)
    np.testing.assert_allclose(step_grid(config, 2.0), sorted([0.1, np.sqrt(0.1), 1.0, 2 / np.sqrt(3), 2 / np.sqrt(12)]))


def _curves(final, T):
    """Constant gap curves: arrays [..., T] equal to ``final`` at every t."""
    final = np.asarray(final, float)
    return np.repeat(final[..., None], T, axis=-1)


def _arrays(config, learned_ce, bm_ce, nonconverged=0, init_ce=None, own_ce=None):
    """``learned_ce`` / ``own_ce`` (default ``learned_ce``) / ``init_ce`` (default 0.2 everywhere) [C, S] final CE gaps
    of the block-trained, own-play and untrained heads, ``bm_ce`` [E] final BM CE gaps; gap_swap = 1.2 gap_ce."""
    T = config.T
    uniform = {"gap_ce": np.full(T, 2 / 9), "gap_swap": np.full(T, 1 / 3), "gap_cce": np.full(T, 1 / 3)}

    def run(final):
        ce = _curves(final, T)
        return {"gap_ce": ce, "gap_swap": 1.2 * ce, "gap_cce": ce}

    E = len(bm_ce)
    init_ce = np.full(np.shape(learned_ce), 0.2) if init_ce is None else init_ce
    own_ce = learned_ce if own_ce is None else own_ce
    S = np.shape(learned_ce)[1]
    return {"gaps": {"uniform": uniform, "bm": run(bm_ce), "ftrl": run(np.full(E, 0.1)), "learned": run(learned_ce),
                     "own_play": run(own_ce), "init": run(init_ce)},
            "etas": np.geomspace(0.1, 1.0, E), "root": {"eta_star": np.asarray(0.4), "se": np.asarray(0.01)},
            "nonconverged": {"learned": np.full(np.shape(learned_ce), nonconverged), "bm": np.zeros(E),
                             "own_play": np.zeros(S)},
            "heads": {"eta": np.array([[0.2, 0.4, 0.3], [0.3, 0.3, 0.3]]), "offray": np.full((2, 3), 0.1),
                      "offdiag": np.array([[0.1, 0.2, 0.5], [0.0, 0.1, 0.1]])},
            "curves": {"multihead": {"loss": np.ones((2, 8))}, OWN_MODEL: {"loss": np.ones((2, 4)), "nonconverged": np.zeros((2, 4))}},
            "calibration_sweep": _curves(np.full((len(config.calibration_grid()), np.shape(learned_ce)[1]), 0.5), T)}


def test_horizon_metrics_pick_the_best_bm_step_per_horizon():
    config = SwapConfig(TINY.train, horizons=(1, 2), num_seeds=2)  # T = 3, rounds 3 and 6
    arrays = _arrays(config, [[0.02, 0.04], [0.05, 0.05], [0.1, 0.1]], [0.2, 0.01, 0.05])
    arrays["gaps"]["bm"]["gap_ce"][2, 2] = 0.001  # step 2 is best at t = 3, step 1 at t = 6
    h = horizon_metrics(config, arrays)
    np.testing.assert_allclose(h["gap_ce_bm_tuned"], [0.001, 0.01])
    np.testing.assert_allclose(h["bm_tuned_eta"], arrays["etas"][[2, 1]])
    np.testing.assert_allclose(h["gap_ce_bm_tuned_at_train_T"], [0.001, 0.05])  # step 2 read at both horizons
    learned_t6 = np.mean([0.02, 0.04])
    np.testing.assert_allclose(h["gap_ce_learned"][1], learned_t6)
    np.testing.assert_allclose(h["gap_ce_learned_uncalibrated"][1], 0.1)
    np.testing.assert_allclose(h["ratio_learned_to_tuned_bm"][1], learned_t6 / 0.01)
    np.testing.assert_allclose(h["gap_swap_learned"][1], 1.2 * learned_t6)


def test_calibration_table_finds_the_planted_best_calibration():
    config = SwapConfig(TINY.train, horizons=(1, 2), num_seeds=2)  # T = 3, rounds 3 and 6
    arrays = _arrays(config, [[0.02, 0.04], [0.05, 0.05], [0.1, 0.1]], [0.2, 0.01, 0.05])
    arrays["calibration_sweep"][1, :, 2] = 0.01  # grid point 1 best at t = 3, point 3 at t = 6
    arrays["calibration_sweep"][3, :, 5] = 0.015
    table = summarize(config, arrays).tables["calibration"]
    grid = config.calibration_grid()
    np.testing.assert_allclose(table["best_c_over_d"], grid[[1, 3]] / 3)
    np.testing.assert_allclose(table["gap_ce_best_c"], [0.01, 0.015])
    np.testing.assert_allclose(table["gap_ce_at_d_over_best"], [0.03 / 0.01, 0.03 / 0.015])
    np.testing.assert_allclose(table["best_c_over_tuned_bm"], [0.01 / 0.01, 0.015 / 0.01])  # BM's best: 0.01
    np.testing.assert_allclose(grid[[0, 7, -1]], [3 / 2**3.5, 3.0, 48.0])


def test_swap_checks_pass_and_fail_on_synthetic_gaps():
    config = SwapConfig(TINY.train, horizons=(1, 2), num_seeds=4)
    learned = [[0.02, 0.03, 0.02, 0.03], [0.05] * 4, [0.1] * 4]  # c_d = d, sqrt(d), 1 per seed
    own = [[0.2] * 4, [0.1] * 4, [0.03, 0.02, 0.03, 0.03]]  # the own-play heads, read at c_d = 1
    good = summarize(config, _arrays(config, learned, [0.2, 0.02, 0.05], own_ce=own))
    assert [c.verdict for c in good.checks] == [checks.PASS] * 8
    assert good.checks[2].value == pytest.approx(0.025 / 0.02)
    assert good.checks[5].value == pytest.approx(0.025 / 0.1)  # FTRL's gap 0.1 at every step
    assert good.checks[6].value == pytest.approx(0.0275 / 0.02) and good.checks[7].value == pytest.approx(0.0275 / 0.1)
    # the controls: untrained heads (0.2: 0.9 of uniform's CE gap, calibration ratio 1, 2x FTRL's gap, 10x BM's gap at
    # c_d = 1) and the uncalibrated heads (5x BM's gap) fail their claims
    assert [good.checks[i].control.verdict for i in (0, 1, 2, 3, 5, 6, 7)] == [checks.FAIL] * 7
    assert good.checks[2].control.value == pytest.approx(5.0) and good.checks[5].control.value == pytest.approx(2.0)
    assert good.checks[6].control.value == pytest.approx(10.0) and good.checks[7].control.value == pytest.approx(2.0)
    bad = summarize(config, _arrays(config, [[0.2] * 4, [0.1] * 4, [0.1] * 4], [0.2, 0.02, 0.05], nonconverged=1,
                                    own_ce=[[0.2] * 4] * 3))
    assert [c.verdict for c in bad.checks] == [checks.FAIL] * 8
    assert bad.metrics["nonconverged_fraction_learned"] == pytest.approx(1 / (2 * config.T))
    powerless = summarize(config, _arrays(config, learned, [0.2, 0.02, 0.05], init_ce=learned))  # untrained as good
    assert [c.verdict for c in powerless.checks] == \
        [checks.NO_POWER] * 2 + [checks.PASS, checks.NO_POWER, checks.PASS, checks.NO_POWER] + [checks.FAIL] * 2
    own_powerless = summarize(config, _arrays(config, learned, [0.2, 0.02, 0.05], own_ce=own, init_ce=own))
    assert [c.verdict for c in own_powerless.checks[6:]] == [checks.NO_POWER] * 2
    assert len(CALIBRATIONS) == 3


def test_untrained_heads_fail_the_far_below_uniform_claims():
    """The control on real self-play: QUICK's heads at initialisation (4 seeds; c_d = d for the block-trained heads'
    claims, c_d = 1 for the own-play heads'), horizons T and 2T."""
    config = SwapConfig(QUICK.train, horizons=(1, 2), num_seeds=4)
    keys = jax.random.key_data(jax.random.split(jax.random.key(3), 4))
    heads = jax.vmap(lambda k: rj.init_variables(config.train, jax.random.wrap_key_data(k)))(keys)["params"]["heads"]
    game = rj.zero_sum_game(rj.WEIGHTED_RPS)

    def swap_play(h, c):
        return rj.self_play(rj.swap_learner(h, c), rj.swap_learner(h, c), game, config.T)

    play = jax.jit(jax.vmap(jax.vmap(swap_play, in_axes=(0, None)), in_axes=(None, 0)))(heads, jnp.asarray([3.0, 1.0]))
    uniform = jax.jit(lambda: rj.self_play(rj.uniform_learner(3), rj.uniform_learner(3), game, config.T))()
    arrays = {"gaps": {"init": {g: np.asarray(getattr(play, g)) for g in ("gap_ce", "gap_swap")},
                       "uniform": {g: np.asarray(getattr(uniform, g)) for g in ("gap_ce", "gap_swap")}}}
    for claim, gap in ((CE_FAR, "gap_ce"), (SWAP_FAR, "gap_swap")):
        assert claim.judge(seed_worst(config, arrays, "init", gap)).verdict != checks.PASS
    # ... the CE-vs-CCE claims against FTRL at its best step of a small grid, at the longest horizon
    etas = np.geomspace(0.05, 2.0, 8).astype(np.float32)
    ftrl = jax.jit(jax.vmap(lambda e: rj.self_play(rj.attention_learner(rj.ftrl_params(3, e)),
                                                   rj.attention_learner(rj.ftrl_params(3, e)), game, config.T).gap_ce))
    best = np.asarray(ftrl(etas))[:, -1].min()
    for claim, c in ((BELOW_EXTERNAL, 0), (OWN_BELOW_EXTERNAL, 1)):
        control = claim.judge(np.asarray(play.gap_ce)[c, :, -1] / best)
        assert control.verdict != checks.PASS and control.value > 1, control
    # ... and the own-play heads' claim against BM at its best step per horizon, on the same grid (c_d = 1)
    bm = jax.jit(jax.vmap(lambda e: swap_play(rj.bm_params(3, e), 1.0).gap_ce))(etas)
    t = np.asarray(config.horizon_rounds()) - 1
    control = OWN_WITHIN_BM.judge(seed_worst(config, arrays, "init", "gap_ce", 1, over=np.asarray(bm)[:, t].min(axis=0)))
    assert control.verdict != checks.PASS and control.value > 2, control


@pytest.mark.parametrize("field, kwargs", [
    ("train.model", {"train": rj.TrainConfig(model="attention")}),
    ("train.d", {"train": rj.TrainConfig(model="multihead", d=4)}),
    ("horizons", {"horizons": (2, 1)}),
    ("num_seeds", {"num_seeds": 0}),
    ("eta grid", {"eta_min": 1.0, "eta_max": 0.5}),
    ("stream", {"stream": 2}),
])
def test_swap_config_validates(field, kwargs):
    with pytest.raises(ValueError, match=field):
        SwapConfig(**{"train": TINY.train, **kwargs})


def test_head_table_reads_every_seed_and_head():
    config = SwapConfig(TINY.train, horizons=(1, 2), num_seeds=2)
    arrays = _arrays(config, [[0.02, 0.04], [0.05, 0.05], [0.1, 0.1]], [0.2, 0.02, 0.05])
    heads = head_table(config, arrays)
    assert heads["seed"] == [0, 0, 0, 1, 1, 1] and heads["head"] == [0, 1, 2, 0, 1, 2]
    np.testing.assert_allclose(heads["kappa"][:3], np.array([0.2, 0.4, 0.3]) * np.sqrt(3))
    np.testing.assert_allclose(heads["eta_over_eta_star"][1], 0.4 / 0.4)
    m = summarize(config, arrays).metrics
    assert m["head_offdiag_max"] == pytest.approx(0.5) and m["head_eta_over_eta_star_mean"] == pytest.approx(1.8 / 6 / 0.4)

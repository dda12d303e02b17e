"""Study ``pmd.visibility`` without training: ``summarize`` on synthetic outputs with hand-computed metrics and
checks (passing and failing), the files ``write`` makes from them, and the config errors."""
import csv
import dataclasses

import jax
import numpy as np
import pytest

from experiments import models
from experiments.studies.pmd import visibility as vis
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

TINY = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=2, warmup=0, num_states=2,
                   num_actions=2)
CFG = dataclasses.replace(vis.QUICK, train=TINY, seeds=1, chunks=1, n_test_mdps=2)


def _rows(*rows):
    """``[N, S = 2, A = 2]`` from one ``(p, 1 - p)`` per (input, state)."""
    return np.array([[[p, 1 - p] for p in states] for states in rows])


def _arrays():
    """Three runs (visible, masked, placebo), 2 inputs x 2 states x 2 actions per band; metrics worked by hand in the test."""
    iid = {"pmd": _rows([0.5, 0.5], [0.5, 0.5]),
           "pi_out": np.stack([_rows([0.6, 0.6], [0.6, 0.6]), _rows([0.5, 0.5], [0.55, 0.55])]),
           "pi_replaced": np.stack([_rows([0.7, 0.7], [0.6, 0.6]), _rows([0.5, 0.5], [0.55, 0.55])]),
           "gain": np.array([[0.1, -0.2], [0.1, 0.2]]), "gain_ideal": np.array([[0.3, 0.4], [0.3, 0.4]])}
    low = {"pmd": _rows([0.9, 0.9], [0.9, 0.9]),
           "pi_out": np.stack([_rows([0.6, 0.6], [0.9, 0.9]), _rows([0.8, 0.8], [0.8, 0.8])]),
           "pi_replaced": np.stack([_rows([0.2, 0.6], [0.9, 0.9]), _rows([0.8, 0.8], [0.8, 0.8])]),
           "gain": np.array([[-0.1, -0.2], [-0.1, 0.2]]), "gain_ideal": np.array([[0.05, 0.0], [0.05, 0.0]])}
    for band in (iid, low):  # and a placebo run (a visible actor of another seed): a copy of run 0
        band.update({k: np.concatenate([band[k], band[k][:1]]) for k in ("pi_out", "pi_replaced", "gain", "gain_ideal")})
        band.update(log_pi=np.log(band["pmd"]), Q=np.zeros((2, 2, 2)), eta=np.full(2, 0.8))
    return {"masked": np.array([0.0, 1.0, 0.0]), "arm": np.array([0, 1, 2]), "eval": {"iid": iid, "low": low}}


# By hand: iid row errors visible 0.2 on every row, masked 0 (input 0) and 0.1 (input 1); movement visible 0.2
# (input 0) and 0 (input 1), masked 0; negative gains visible 1 of 2, masked 0. Low: row errors visible 0.6 / 0
# (inputs 0 / 1), masked 0.2; movement visible 0.8 on (input 0, state 0) only, so mean 0.8 / 4 = 0.2; negative
# gains visible 2 of 2, masked 1 of 2.
WANT = {"row_error_iid_visible": 0.2, "row_error_iid_masked": 0.05, "movement_iid_visible": 0.1,
        "movement_iid_masked": 0.0, "movement_max_iid_visible": 0.2, "negative_gain_share_iid_visible": 0.5,
        "negative_gain_share_iid_masked": 0.0, "row_error_low_visible": 0.3, "row_error_low_masked": 0.2,
        "movement_low_visible": 0.2, "movement_max_low_visible": 0.8, "movement_low_masked": 0.0,
        "negative_gain_share_low_visible": 1.0, "negative_gain_share_low_masked": 0.5, "movement_max_masked": 0.0,
        "gain_ideal_min_iid": 0.3, "gain_ideal_min_low": 0.0}


def _seeded(arrays, seeds=3, placebo_like="visible", jitter=0.02, swap=False):
    """``arrays`` (one run per arm) as ``seeds`` seeds of every arm of ``vis.ARMS``: each seed's runs are the
    given visible / masked runs with their outputs tilted by ``jitter * seed``; the placebo copies the ``placebo_like``
    run (``swap``: the visible and masked runs trade places). Run order: arm-major, as ``compute`` lays it out."""
    src = {"visible": 1, "masked": 0} if swap else {"visible": 0, "masked": 1}
    order = [(a, i) for a in vis.ARMS for i in range(seeds)]
    ev = {}
    for band, e in arrays["eval"].items():
        shift = lambda x, i: np.clip(x + jitter * i * np.array([1.0, -1.0]), 0.01, 0.99)  # noqa: E731
        runs = [(src.get(a, src[placebo_like]), i) for a, i in order]
        ev[band] = {**{k: e[k] for k in ("pmd", "log_pi", "Q", "eta")},
                    **{k: np.stack([shift(e[k][r], i) for r, i in runs]) for k in ("pi_out", "pi_replaced")},
                    **{k: np.stack([e[k][r] for r, _ in runs]) for k in ("gain", "gain_ideal")}}
    arm = np.array([vis.ARMS.index(a) for a, _ in order])
    return {"masked": (arm == 1).astype(float), "arm": arm, "eval": ev}


def test_summarize_metrics_and_checks_by_hand():
    summary = vis.summarize(CFG, _arrays())
    for name, value in WANT.items():
        assert summary.metrics[name] == pytest.approx(value, abs=1e-12), name
    assert set(vis.PAPER) <= set(summary.metrics)
    table = summary.tables["table"]
    assert table["quantity"][0] == "movement (iid)" and table["visible"][0] == pytest.approx(0.1)
    assert table["visible_paper"][0] == vis.PAPER["movement_iid_visible"] and np.isnan(table["masked_paper"][1])
    assert summary.tables["per_run"]["movement_low"] == pytest.approx([0.2, 0.0, 0.2])
    checks = {c.name: c for c in summary.checks}  # one seed: no interval
    assert set(checks) == {c.name for c in vis.STUDY.claims} and all(c.verdict == "INCONCLUSIVE" for c in checks.values())


def test_claims_pass_on_seeds_and_their_controls_fail():
    """Three seeds of the hand-made pair: every claim passes, and its control arm (the masked actor's movement, the
    placebo pair of two visible actors) does not, because the placebo equals the visible actor up to its seed."""
    summary = vis.summarize(CFG, _seeded(_arrays()))
    checks = {c.name: c for c in summary.checks}
    assert all(c.verdict == "PASS" and c.n == 3 and c.unit == "seed" for c in checks.values()), checks
    assert checks["visible_reads_other_states"].control.value == 0.0
    assert all(c.control.verdict != "PASS" for c in checks.values())


def test_summarize_fails_the_claims_when_the_variants_are_swapped():
    swapped = _seeded(_arrays(), swap=True)  # the actor that moved is now called masked
    summary = vis.summarize(CFG, swapped)
    assert summary.metrics["movement_max_masked"] > 0.5
    assert all(c.verdict == "FAIL" for c in summary.checks)
    # a placebo that behaves like the masked actor is no placebo: the control passes too, and the verdict says so
    no_power = vis.summarize(CFG, _seeded(_arrays(), placebo_like="masked"))
    assert {c.name: c.verdict for c in no_power.checks}["masked_closer_to_pmd_iid"] == "NO POWER"


def test_write_files_from_synthetic_outputs(tmp_path):
    arrays = _arrays()
    actor = TINY.full_packet_actor()
    shapes = jax.eval_shape(jax.vmap(actor.init), jax.random.split(jax.random.key(0), 3))
    arrays["params"] = jax.tree.map(lambda a: np.full(a.shape, 0.5, np.float32), shapes)
    summary = vis.summarize(CFG, arrays)
    vis.write(CFG, arrays, summary, tmp_path)
    with open(tmp_path / "per_input.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 3 * 2  # bands x runs x inputs
    low_visible_0 = next(r for r in rows if r["band"] == "low" and r["run"] == "0" and r["input"] == "0")
    assert float(low_visible_0["movement"]) == pytest.approx(0.4) and float(low_visible_0["row_error"]) == pytest.approx(0.6)
    assert float(low_visible_0["gain"]) == pytest.approx(-0.1) and low_visible_0["masked"] == "0.0"
    with np.load(tmp_path / "visibility.npz") as z:
        np.testing.assert_array_equal(z["low_pi_replaced"], arrays["eval"]["low"]["pi_replaced"])
    assert (tmp_path / "visibility.png").stat().st_size > 0
    meta = models.load_meta(tmp_path / "models" / vis.KEPT)
    assert meta["architecture"] == actor.architecture() | {"role": "full_packet_actor"}
    assert meta["info"]["masked"] == [0.0, 1.0, 0.0] and meta["info"]["runs"] == 3
    assert meta["info"]["arm"] == ["visible", "masked", "placebo"] and rows[0]["arm"] == "visible"


@pytest.mark.parametrize("field, kwargs", [
    ("seeds", {"seeds": 0}), ("chunks", {"chunks": 3}), ("n_test_mdps", {"n_test_mdps": 1}), ("eta", {"eta": 2.0}),
    ("stream", {"stream": 2}), ("move_threshold", {"move_threshold": 0.0}),
    ("train.family", {"train": dataclasses.replace(TINY, family="reward_x2")}),
])
def test_config_errors_name_the_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(CFG, **kwargs)

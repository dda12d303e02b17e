"""Training cells: the Size presets, task stacking, the task x seed grid layout, seed statistics."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import cells
from uat_jax.model import DecisionTransformer, init_params
from uat_jax.train import Task


def test_table3_size_builds_the_paper_configs_and_ablations():
    cfg = cells.TABLE3.train_config("uat", "no_kv")
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff, cfg.model.n_layers) == (64, 4, 128, 3)
    assert (cfg.model.horizon, cfg.batch_size, cfg.epochs, cfg.eval_episodes) == (60, 256, 500, 256)
    assert (cfg.lr, cfg.ue_lr, cfg.model.ema_decay) == (2e-3, 2e-2, 0.7)
    assert not cfg.model.modulate_kv and cfg.model.modulate_q
    assert cells.TABLE3.train_config("gtrxl").model.kind == "gtrxl"
    cpu = cells.CPU.train_config("vt")
    assert (cpu.model.d_model, cpu.model.n_layers, cpu.model.horizon, cpu.batch_size, cpu.epochs) == (32, 2, 30, 32, 200)


def test_size_carries_the_sensitivity_knobs_into_every_model():
    size = cells.Size(ema_decay=0.3, d_u=8, dropout=0.2)
    for cfg in (size.train_config("uat"), size.train_config("uat", "no_q"), size.train_config(traced_variant=True),
                size.train_config("adt", domain="sepsis")):
        assert (cfg.model.ema_decay, cfg.model.d_u, cfg.model.dropout) == (0.3, 8, 0.2)
    assert (cells.TABLE3.ema_decay, cells.TABLE3.d_u, cells.TABLE3.dropout) == (0.7, 16, 0.05)  # Table 3, Domain A


@pytest.mark.parametrize("changes, message", [
    (dict(epochs=0), "size.epochs"), (dict(d_model=30), "size.d_model"), (dict(horizon=-1), "size.horizon"),
    (dict(ema_decay=1.0), "size.ema_decay"), (dict(d_u=0), "size.d_u"), (dict(dropout=1.0), "size.dropout")])
def test_size_validates(changes, message):
    with pytest.raises(ValueError, match=message):
        cells.Size(**changes)


def _materialised_count(size, kind):
    """Parameters of ``kind`` at ``size``, counted on initialised arrays (not ``theory.param_count``'s shapes)."""
    params = init_params(DecisionTransformer(size.model_config(kind)), jax.random.key(0))
    return sum(int(np.size(x)) for x in jax.tree.leaves(params))


@pytest.mark.parametrize("size", [cells.CPU, cells.Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=4)])
def test_matched_width_is_the_smallest_that_reaches_uats_parameter_count(size):
    matched = size.matched()
    assert matched == dataclasses.replace(size, d_ff=matched.d_ff)  # only the feed-forward width changes
    uat = _materialised_count(size, "uat")
    assert _materialised_count(matched, "vt") >= uat > _materialised_count(
        dataclasses.replace(size, d_ff=matched.d_ff - 1), "vt")
    if size == cells.CPU:  # 18,693 + 130 per unit of d_ff (2 layers x (2 x 32 + 1)) reaches UAT's 28,797 at +78
        assert (uat, matched.d_ff) == (28797, 142)
    assert size.matched(to="vt") == size  # a model already as large keeps its width


def test_cell_inputs_are_task_major_with_common_seeds():
    tasks = [Task.make(s, c, sg) for s, c, sg in (("gradual", "clean", 0.0), ("cyclic", "gaussian", 2.0))]
    stacked = cells.stack_tasks(tasks)
    np.testing.assert_array_equal(stacked.schedule, [0, 2])
    np.testing.assert_array_equal(stacked.channel.mode, [0, 1])
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 3)))
    items = cells.cell_inputs(tasks, keys)
    np.testing.assert_array_equal(items["key"], np.concatenate([keys, keys]))
    np.testing.assert_array_equal(items["task"].schedule, [0, 0, 0, 2, 2, 2])
    np.testing.assert_allclose(items["task"].channel.sigma, [0, 0, 0, 2, 2, 2])
    assert items["task"].channel.sigma.dtype == np.float32
    out = cells.split_cells({"accuracy": np.arange(6.0), "loss": np.arange(12.0).reshape(6, 2)}, 2)
    np.testing.assert_array_equal(out["accuracy"], [[0, 1, 2], [3, 4, 5]])
    assert out["loss"].shape == (2, 3, 2)
    with pytest.raises(ValueError, match="at least one task"):
        cells.stack_tasks([])


def test_mean_std():
    assert cells.mean_std("acc", [0.5, 0.7]) == pytest.approx({"acc": 0.6, "acc_std": 0.1})


def test_adapt_cell_without_adaptation_replays_the_cells_own_evaluation():
    """TENT at lr 0 on a trained cell's params gives exactly the metrics the cell reported: the adaptation
    cell plays the cell's own evaluation episodes (CellKeys). (That each method at lr 0 replays the plain
    evaluation of the same keys is tests/uat_jax/test_tta.py's.)"""
    from uat_jax import tta

    size = cells.Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=5, batch_size=2, epochs=2, eval_episodes=4)
    cfg = size.train_config("vt")
    items = cells.cell_inputs([Task.make("abrupt"), Task.make("cyclic")],
                              np.asarray(jax.random.key_data(jax.random.split(jax.random.key(5), 2))))
    trained = jax.jit(jax.vmap(cells.make_cell(cfg, keep_params=True)))(items)
    methods = {"tent": tta.TentConfig(lr=0.0, batch_size=2)}
    adapted = jax.jit(jax.vmap(cells.make_adapt_cell(cfg, methods)))({**items, "params": trained["params"]})
    for m in methods:
        np.testing.assert_array_equal(adapted[f"accuracy_{m}"], trained["accuracy"])
        np.testing.assert_array_equal(adapted[f"efficiency_{m}"], trained["efficiency"])
    assert "params" not in cells.make_cell(cfg)(jax.tree.map(lambda x: x[0], items))


def test_gate_cell_replays_the_cells_evaluation_on_sepsis():
    """The gate cell plays the episodes the cell's evaluation played (CellKeys): its per-step hits average to
    the reported accuracy and post-shift accuracy; ||rho|| is 0 for the VT member of the same union parameters
    and positive for UAT (its values are tests/uat_jax/test_model.py's)."""
    from tests.uat_jax.test_model import random_tree
    from uat_jax import sepsis
    from uat_jax.model import DecisionTransformer, init_cache
    from uat_jax.rollout import post_shift_mask
    from uat_jax.train import CellKeys, make_evaluate

    size = cells.Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=8, batch_size=2, epochs=1, eval_episodes=3)
    cfg = size.train_config(traced_variant=True, domain="sepsis")
    env = sepsis.make_params(horizon=8, min_segments=2, max_segments=2, min_segment_len=4)
    model = DecisionTransformer(cfg.model, variant=jnp.int32(0))
    T = cfg.model.horizon
    params = random_tree(model.init, jnp.zeros((T, cfg.model.obs_dim)), jnp.zeros(T, jnp.int32), jnp.zeros(T),
                         init_cache(cfg.model), seed=2)
    key = jax.random.key(3)
    keys = CellKeys.of(key)
    gate_cell, evaluate = jax.jit(cells.make_gate_cell(cfg)), jax.jit(make_evaluate(cfg))
    for member in ("uat", "vt"):
        task = Task.make("gradual", variant=member)
        out = gate_cell({"key": jax.random.key_data(key), "task": task, "params": params}, env)
        want = evaluate(params, keys.eval, task, keys.run, env)
        correct = np.asarray(out["correct"])
        assert correct.shape == np.asarray(out["gate"]).shape == (3, T)
        assert correct.mean() == pytest.approx(float(want["accuracy"]), abs=1e-6)
        mask = np.asarray(post_shift_mask(out["switched"], 5))
        assert correct[mask].mean() == pytest.approx(float(want["post_shift_accuracy"]), abs=1e-6)
        assert np.asarray(out["switched"]).sum(1).tolist() == [1, 1, 1]  # two segments per episode
        if member == "vt":
            np.testing.assert_array_equal(out["gate"], np.zeros((3, T)))
        else:
            assert np.all(np.asarray(out["gate"]) > 0)

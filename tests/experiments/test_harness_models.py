"""experiments.models (kept model checkpoints) and the kept models of the learned PolicyAttention studies
(experiments/studies/pmd/training.py: keep, load_kept)."""
import jax
import numpy as np
import pytest

from experiments import models
from experiments.studies.pmd import training
from pmd_jax import train
from pmd_jax.transformer import ModelConfig

ARCH = {"role": "actor", "d_model": 8, "num_layers": 1, "num_heads": 2, "mlp_ratio": 4, "token_width": 11,
        "out_dim": 3, "max_len": 4}


def _params(scale=1.0):
    """A nested dict pytree with a leading run axis of 2."""
    return {"params": {"embed": {"kernel": scale * np.arange(2 * 11 * 8, dtype=np.float32).reshape(2, 11, 8),
                                 "bias": np.full((2, 8), scale, np.float32)},
                       "pos": scale * np.ones((2, 4, 8), np.float32)},
            "step": np.array([3, 4], np.int32)}


def _template():
    return jax.tree.map(np.zeros_like, _params())


def _assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip(tmp_path):
    path = models.save(tmp_path / "models" / "actor", _params(), ARCH, {"seeds": (1, 2), "lr": np.float32(0.5)})
    assert path == (tmp_path / "models" / "actor").absolute()
    params, info = models.load(path, dict(ARCH), _template())
    _assert_same(params, _params())
    assert info == {"seeds": [1, 2], "lr": 0.5}
    meta = models.load_meta(path)
    assert meta["format_version"] == models.FORMAT_VERSION and meta["architecture"] == ARCH
    assert models.load_info(path) == info


def test_overwrite_replaces(tmp_path):
    models.save(tmp_path / "m", _params(), ARCH, {"run": "first"})
    models.save(tmp_path / "m", _params(scale=-2.0), ARCH, {"run": "second"})
    params, info = models.load(tmp_path / "m", ARCH, _template())
    _assert_same(params, _params(scale=-2.0))
    assert info == {"run": "second"}


def test_mismatch_names_every_differing_field(tmp_path):
    models.save(tmp_path / "m", _params(), ARCH)
    want = {**ARCH, "d_model": 16, "role": "critic"}
    with pytest.raises(models.ModelMismatch) as err:
        models.load(tmp_path / "m", want, _template())
    msg = str(err.value)
    assert "d_model: saved 8, expected 16" in msg
    assert "role: saved 'actor', expected 'critic'" in msg
    for same in ("num_layers", "num_heads", "token_width", "max_len"):
        assert same not in msg
    with pytest.raises(models.ModelMismatch, match="extra: saved None, expected 1"):  # a field only one side has
        models.load(tmp_path / "m", {**ARCH, "extra": 1}, _template())


def test_missing_folder(tmp_path):
    with pytest.raises(models.ModelMissing, match="no kept model at .*nowhere"):
        models.load(tmp_path / "nowhere", ARCH, _template())
    with pytest.raises(models.ModelMissing):
        models.load_meta(tmp_path / "nowhere")
    assert models.load_info(tmp_path / "nowhere") == {}  # a study that may train instead


def test_folder_of_garbage_files(tmp_path):
    folder = tmp_path / "junk"
    (folder / "meta").mkdir(parents=True)
    (folder / "meta" / "metadata").write_bytes(b"\x00\x01 not json")
    (folder / "params.bin").write_bytes(b"garbage")
    with pytest.raises(models.ModelMissing, match="junk"):
        models.load(folder, ARCH, _template())
    assert models.load_info(folder) == {}


def test_orbax_checkpoint_without_our_meta(tmp_path):
    import orbax.checkpoint as ocp

    ckpt = ocp.Checkpointer(ocp.CompositeCheckpointHandler())
    ckpt.save((tmp_path / "other").absolute(), args=ocp.args.Composite(meta=ocp.args.JsonSave({"other": 1})))
    with pytest.raises(models.ModelMissing, match="not written by experiments.models"):
        models.load(tmp_path / "other", ARCH, _template())
    ckpt.save((tmp_path / "params_only").absolute(),
              args=ocp.args.Composite(params=ocp.args.StandardSave(_params())))
    with pytest.raises(models.ModelMissing, match="params_only"):
        models.load(tmp_path / "params_only", ARCH, _template())


@pytest.mark.parametrize("shape", [(2, 5, 8), (3, 4, 8)])
def test_template_of_other_shapes_is_refused(tmp_path, shape):
    models.save(tmp_path / "m", _params(), ARCH)
    wrong = _template()
    wrong["params"]["pos"] = np.zeros(shape, np.float32)  # shape differs, architecture dict agrees
    with pytest.raises((models.ModelMissing, ValueError), match="pos"):
        models.load(tmp_path / "m", ARCH, wrong)


def test_template_of_another_tree_is_refused(tmp_path):
    models.save(tmp_path / "m", _params(), ARCH)
    with pytest.raises(models.ModelMissing, match="cannot restore the parameters"):
        models.load(tmp_path / "m", ARCH, {"params": _template()["params"]})


TCFG = train.TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=4, batch_size=4,
                         n_train_mdps=8, warmup=0)


def test_keep_and_load_kept(tmp_path):
    actor = TCFG.actor()
    shapes = jax.eval_shape(jax.vmap(actor.init), jax.random.split(jax.random.key(0), 2))  # no compile needed
    params = jax.tree.map(lambda x: np.random.default_rng(x.size).normal(size=x.shape).astype(x.dtype), shapes)
    path = training.keep(tmp_path, "actor_label_free", TCFG, "actor", params, {"seeds": [5, 6]})
    assert path == (tmp_path / "models" / "actor_label_free").absolute()
    loaded, info = training.load_kept(tmp_path, "actor_label_free", TCFG, "actor")
    _assert_same(loaded, params)
    assert info == {"seeds": [5, 6], "role": "actor", "runs": 2}
    assert models.load_meta(path)["architecture"] == actor.architecture()
    wider = train.TrainConfig(model=ModelConfig(d_model=16, num_layers=1, num_heads=2), num_steps=4, warmup=0)
    with pytest.raises(models.ModelMismatch, match="d_model: saved 8, expected 16"):
        training.load_kept(tmp_path, "actor_label_free", wider, "actor")
    with pytest.raises(models.ModelMismatch, match="role: saved 'actor', expected 'critic'"):
        training.load_kept(tmp_path, "actor_label_free", TCFG, "critic")
    with pytest.raises(models.ModelMissing):
        training.load_kept(tmp_path, "critic", TCFG, "critic")

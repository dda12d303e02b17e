"""experiments.checkpoint: round trip and the rules for odd checkpoint folders."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.checkpoint import (
    CheckpointCorrupt,
    CheckpointExists,
    ChunkCheckpointer,
)


def _state():
    return {"buf": np.arange(6.0).reshape(2, 3), "w": jnp.array([1.5, -2.0]), "n": jnp.int32(4)}


def _saved(directory, steps=(1, 2)):
    with ChunkCheckpointer(directory, {"cfg": [1, 2]}, resume=False) as ckpt:
        for step in steps:
            state = jax.tree.map(lambda x, step=step: x * step, _state())
            ckpt.save(step, state)
    return state


def test_round_trip_restores_latest_step_and_types(tmp_path):
    last = _saved(tmp_path / "c")
    with ChunkCheckpointer(tmp_path / "c", {"cfg": (1, 2)}, resume=True) as ckpt:  # tuple == saved list
        step, state = ckpt.restore({"buf": np.zeros((2, 3)), "w": jnp.zeros(2), "n": jnp.int32(0)})
    assert step == 2
    assert isinstance(state["buf"], np.ndarray) and isinstance(state["w"], jax.Array)
    for key in last:
        np.testing.assert_array_equal(state[key], last[key])


def test_finish_removes_the_folder(tmp_path):
    ckpt = ChunkCheckpointer(tmp_path / "c", {}, resume=False)
    ckpt.save(1, _state())
    ckpt.finish()
    assert not (tmp_path / "c").exists()


def test_truncated_arrays_are_corrupt(tmp_path, capsys):
    """A truncated latest step falls back to the step before it; with both truncated, an error naming both."""
    _saved(tmp_path / "c")
    for step in ("2", "1"):
        for f in (tmp_path / "c" / step / "state").rglob("*"):
            if f.is_file():
                f.write_bytes(b"")
        if step == "2":
            with ChunkCheckpointer(tmp_path / "c", {"cfg": [1, 2]}, resume=True) as ckpt:
                assert ckpt.restore(_state())[0] == 1
            assert "c/2" in capsys.readouterr().err
            assert not (tmp_path / "c" / "2").exists()  # deleted, so the resumed run can save step 2 again
    with pytest.raises(CheckpointCorrupt, match=r"no intact checkpoint.*c/1"):
        with ChunkCheckpointer(tmp_path / "c", {"cfg": [1, 2]}, resume=True) as ckpt:
            ckpt.restore(_state())


def test_orbax_checkpoint_of_someone_else_is_corrupt(tmp_path):
    import orbax.checkpoint as ocp

    mngr = ocp.CheckpointManager(tmp_path / "c")
    mngr.save(1, args=ocp.args.Composite(meta=ocp.args.JsonSave({"other": 1})))
    mngr.wait_until_finished()
    mngr.close()
    with pytest.raises(CheckpointCorrupt, match="not written by experiments.checkpoint"):
        with ChunkCheckpointer(tmp_path / "c", {}, resume=True) as ckpt:
            ckpt.restore(_state())


def test_leftover_orbax_temp_folder_is_not_a_checkpoint(tmp_path):
    (tmp_path / "c" / "1.orbax-checkpoint-tmp-123").mkdir(parents=True)  # killed mid-save
    with ChunkCheckpointer(tmp_path / "c", {}, resume=False) as ckpt:
        assert ckpt.restore(_state()) is None


def test_foreign_files_are_never_overwritten(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    with pytest.raises(CheckpointExists, match="pass --resume"):
        ChunkCheckpointer(tmp_path / "d", {}, resume=False)
    with pytest.raises(CheckpointCorrupt, match="holds x"):
        ChunkCheckpointer(tmp_path / "d", {}, resume=True)
    with pytest.raises(CheckpointCorrupt, match="not a folder"):
        ChunkCheckpointer(tmp_path / "d" / "x", {}, resume=True)
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["x"]

"""experiments.sweep: sharding, sweep_map against plain vmap, device-count and
kill/resume bitwise identity, run_chunks against a numpy loop and its resume."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import harness_worker
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from experiments import checkpoint, seeds, sweep
from xla_env import xla_flags

WORKER = pathlib.Path(harness_worker.__file__)
REPO = pathlib.Path(__file__).resolve().parents[2]


def _env(devices):
    env = dict(os.environ)
    env["XLA_FLAGS"] = xla_flags(devices)
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


@pytest.fixture(scope="module")
def reference():
    """The worker's sweep, run once here without a checkpoint (4 devices)."""
    return harness_worker.run().outputs


def test_device_mesh_and_shard_leading():
    assert jax.device_count() == 4
    mesh = sweep.device_mesh()
    assert mesh.axis_names == ("sweep",) and mesh.devices.size == 4
    tree = {"a": np.arange(8.0), "b": np.zeros((4, 3))}
    placed = sweep.shard_leading(tree)
    for leaf in jax.tree.leaves(placed):
        assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, PartitionSpec("sweep")), leaf.ndim)
        assert len(leaf.addressable_shards) == 4
    np.testing.assert_array_equal(placed["a"], tree["a"])
    with pytest.raises(ValueError, match=r"\(6,\).*device count 4"):
        sweep.shard_leading({"x": np.zeros(6)})


def test_sweep_map_matches_plain_vmap(reference):
    ref = jax.vmap(harness_worker.make_fn(0.0))(harness_worker.inputs())
    np.testing.assert_array_equal(reference["twice"], 2 * np.arange(harness_worker.N))
    np.testing.assert_allclose(reference["final"], ref["final"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(reference["trace"], ref["trace"], rtol=1e-6, atol=1e-6)
    assert not np.allclose(reference["final"][0], reference["final"][1])  # items differ
    traces = []

    def double(x):
        traces.append(1)
        return x * 2.0

    res = sweep.sweep_map(double, jnp.arange(9.0), chunk_size=2)  # 5 chunks, the last padded
    assert len(traces) == 1  # traced and compiled once for all chunks
    assert res.resumed_chunks == 0 and res.compile_s > 0 and res.run_s > 0
    np.testing.assert_array_equal(res.outputs, 2.0 * np.arange(9.0))


def test_sweep_map_shared_arguments_are_read_by_every_item_and_fingerprinted(tmp_path):
    """``shared`` reaches every item unbatched (sharded sweeps: replicated), and a checkpoint written with other
    shared contents is not resumed."""
    from experiments.checkpoint import CheckpointMismatch, CheckpointSpec

    shared = {"table": np.arange(12.0).reshape(3, 4), "bias": np.float32(0.5)}
    items = {"row": np.arange(6) % 3, "scale": np.arange(6.0)}
    fn = lambda item, sh: sh["table"][item["row"]] * item["scale"] + sh["bias"]  # noqa: E731
    want = np.stack([shared["table"][r] * c + 0.5 for r, c in zip(items["row"], items["scale"])])
    np.testing.assert_allclose(sweep.sweep_map(fn, items, chunk_size=1, shared=shared).outputs, want, rtol=1e-6)
    # a run stopped after its first step (the guard sees a NaN) keeps its checkpoint ...
    stop = sweep.LossGuard("toy", lambda out, idx, done: np.full((len(idx), 1), np.nan))
    spec = lambda resume: CheckpointSpec(tmp_path / "ckpt", {"run": 1}, resume=resume)  # noqa: E731
    with pytest.raises(sweep.NonFiniteLoss):
        sweep.sweep_map(fn, items, chunk_size=1, shared=shared, checkpoint=spec(False), guard=stop)
    # ... which a run with other shared contents refuses, and the same shared contents resume
    other = {**shared, "table": shared["table"] + 1.0}
    with pytest.raises(CheckpointMismatch, match="shared"):
        sweep.sweep_map(fn, items, chunk_size=1, shared=other, checkpoint=spec(True))
    resumed = sweep.sweep_map(fn, items, chunk_size=1, shared=shared, checkpoint=spec(True))
    assert resumed.resumed_chunks > 0
    np.testing.assert_allclose(resumed.outputs, want, rtol=1e-6)


def test_sweep_map_rejects_bad_inputs():
    with pytest.raises(ValueError, match="common leading axis"):
        sweep.sweep_map(lambda t: t["a"], {"a": jnp.zeros(3), "b": jnp.zeros(4)}, chunk_size=2)
    with pytest.raises(ValueError, match="chunk_size must be >= 1"):
        sweep.sweep_map(lambda x: x, jnp.zeros(3), chunk_size=0)


def test_sweep_map_same_bits_on_one_device(tmp_path, reference):
    out = tmp_path / "one.npz"
    subprocess.run(
        [sys.executable, str(WORKER), str(out)], env=_env(1), cwd=REPO, check=True, capture_output=True
    )
    with np.load(out) as one:
        assert int(one["devices"]) == 1
        _assert_trees_equal({k: one[k] for k in reference}, reference)


def test_sweep_map_same_bits_under_either_partitioner(tmp_path, reference):
    """The tests compile with GSPMD unless told otherwise (tests/conftest.py); the other partitioner (JAX's
    default, Shardy) gives the same bits on the same four devices."""
    other = not jax.config.jax_use_shardy_partitioner
    out = tmp_path / "other.npz"
    env = {**_env(4), "JAX_USE_SHARDY_PARTITIONER": str(other).lower()}
    subprocess.run([sys.executable, str(WORKER), str(out)], env=env, cwd=REPO, check=True, capture_output=True)
    with np.load(out) as got:
        assert int(got["devices"]) == 4 and bool(got["shardy"]) == other
        _assert_trees_equal({k: got[k] for k in reference}, reference)


def test_sweep_map_kill_and_resume(tmp_path, reference):
    """Killed on one device after its first checkpoint, resumed here on four."""
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "killed.npz"), "--ckpt", str(ckpt), "--sleep", "0.3"],
        env=_env(1),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (ckpt.is_dir() and any(p.name.isdigit() for p in ckpt.iterdir())):
            assert proc.poll() is None, "worker ended before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed.npz").exists()

    resumed = harness_worker.run(ckpt_dir=ckpt, resume=True)
    num_chunks = -(-harness_worker.N // harness_worker.CHUNK)
    assert 1 <= resumed.resumed_chunks < num_chunks  # only the remaining chunks ran
    assert not ckpt.exists()  # a finished sweep removes its checkpoints
    _assert_trees_equal(resumed.outputs, reference)


def test_sweep_map_corrupt_checkpoint_is_an_error(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "notes.txt").write_text("not a checkpoint")
    (ckpt / "7").mkdir()
    (ckpt / "7" / "state").write_bytes(b"\x00garbage")
    def run():
        return sweep.sweep_map(lambda x: x + 1, jnp.arange(4.0), chunk_size=2, checkpoint=_spec(ckpt, resume=True))

    with pytest.raises(checkpoint.CheckpointCorrupt, match="notes.txt"):
        run()
    (ckpt / "notes.txt").unlink()
    with pytest.raises(checkpoint.CheckpointCorrupt, match=str(ckpt / "7")):
        run()
    assert sorted(p.name for p in ckpt.iterdir()) == ["7"]  # nothing overwritten


# ------------------------------------------------------------------ run_chunks


class _Recorder:
    """Host side of the chunk callback: records which chunks ran."""

    def __init__(self):
        self.seen = []

    def __call__(self, i):
        self.seen.append(int(i))
        return np.int32(i)


def _chunk_fn(recorder):
    """x <- 0.5 x + (i + 1) * scale row-wise; count <- count + 1; key split per chunk."""

    def chunk_fn(state, i):
        i = jax.pure_callback(recorder, jax.ShapeDtypeStruct((), jnp.int32), i)
        key = jax.vmap(lambda k: jax.random.split(k)[0])(state["key"])
        x = 0.5 * state["x"] + (i + 1).astype(jnp.float32) * state["scale"][:, None]
        return {"x": x, "scale": state["scale"], "count": state["count"] + 1, "key": key}

    return chunk_fn


def _raw(state):
    return {**state, "key": jax.random.key_data(state["key"])}


def _init_state():
    return sweep.shard_leading(
        {
            "x": jnp.arange(12, dtype=jnp.float32).reshape(4, 3),
            "scale": jnp.array([1.0, -2.0, 0.5, 3.0], jnp.float32),
            "count": jnp.zeros(4, jnp.int32),
            "key": jax.random.split(jax.random.key(1), 4),  # typed keys must survive a checkpoint
        }
    )


def test_run_chunks_matches_numpy_loop():
    rec = _Recorder()
    res = sweep.run_chunks(_chunk_fn(rec), _init_state(), 5)
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    scale = np.array([1.0, -2.0, 0.5, 3.0])
    for i in range(5):
        x = 0.5 * x + (i + 1) * scale[:, None]
    np.testing.assert_allclose(res.state["x"], x, rtol=1e-6)
    np.testing.assert_array_equal(res.state["count"], np.full(4, 5))
    assert sorted(rec.seen) == [0, 1, 2, 3, 4]
    assert isinstance(res.state["x"], np.ndarray)  # gathered to the host, from every process

    def traces(num_chunks):
        count = []

        def counted(state, i):
            count.append(1)
            return _chunk_fn(rec)(state, i)

        sweep.run_chunks(counted, _init_state(), num_chunks)
        return len(count)

    assert traces(1) == traces(4) <= 2  # more chunks, no more traces
    with pytest.raises(ValueError, match="like its input"):
        sweep.run_chunks(lambda s, i: {"x": s["x"][:2]}, {"x": jnp.zeros(4)}, 2)


def _spec(directory, fingerprint=None, resume=False):
    return checkpoint.CheckpointSpec(directory, fingerprint or {}, resume=resume)


def test_run_chunks_resume_and_checkpoint_rules(tmp_path, capsys, monkeypatch):
    ckpt = tmp_path / "ckpt"
    rec = _Recorder()
    fn = _chunk_fn(rec)
    save = checkpoint.ChunkCheckpointer.save

    def save_then_crash(self, step, state):  # the process dies right after saving chunk 3
        save(self, step, state)
        if step == 3:
            raise KeyboardInterrupt("simulated kill after chunk 3")

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint.ChunkCheckpointer, "save", save_then_crash)
        with pytest.raises(KeyboardInterrupt, match="simulated kill"):
            sweep.run_chunks(fn, _init_state(), 6, checkpoint=_spec(ckpt, {"lr": 0.1}))
    saved = sorted(p.name for p in ckpt.iterdir())
    assert saved == ["2", "3"]  # max_to_keep=2

    with pytest.raises(checkpoint.CheckpointExists, match="--resume"):
        sweep.run_chunks(fn, _init_state(), 6, checkpoint=_spec(ckpt, {"lr": 0.1}))
    with pytest.raises(checkpoint.CheckpointMismatch, match=r"fingerprint\.lr") as err:
        sweep.run_chunks(fn, _init_state(), 6, checkpoint=_spec(ckpt, {"lr": 0.2}, resume=True))
    assert str(ckpt) in str(err.value)
    with pytest.raises(checkpoint.CheckpointMismatch, match="num_chunks"):
        sweep.run_chunks(fn, _init_state(), 7, checkpoint=_spec(ckpt, {"lr": 0.1}, resume=True))
    assert sorted(p.name for p in ckpt.iterdir()) == saved  # never overwritten

    rec.seen = []
    resumed = sweep.run_chunks(fn, _init_state(), 6, checkpoint=_spec(ckpt, {"lr": 0.1}, resume=True))
    assert resumed.resumed_chunks == 3
    assert sorted(rec.seen) == [3, 4, 5]  # only the remaining chunks ran
    assert not ckpt.exists()
    whole = sweep.run_chunks(fn, _init_state(), 6)
    _assert_trees_equal(_raw(resumed.state), _raw(whole.state))
    assert isinstance(resumed.state["x"], np.ndarray)  # gathered to the host

    capsys.readouterr()
    fresh = sweep.run_chunks(fn, _init_state(), 2, checkpoint=_spec(tmp_path / "none", resume=True))
    assert "starting fresh" in capsys.readouterr().err
    assert fresh.resumed_chunks == 0


def test_chunk_for_caps_a_devices_share_with_the_least_padding():
    assert jax.device_count() == 4
    assert seeds.chunk_for(4 * 36) == 36  # no cap: a device's whole share at once
    assert seeds.chunk_for(4 * 36, 64) == 36  # a share under the cap is not split
    assert seeds.chunk_for(4 * 36, 8) == 6  # 6 calls of 6, not 5 of 8 (4 repeated items)
    assert seeds.chunk_for(4 * 13, 8) == 7  # 2 calls of 7 (1 repeated), not 13 calls of 1
    assert seeds.chunk_for(4 * 16, 8) == 8
    assert seeds.chunk_for(4 * 17 - 3, 8) == 6  # a share of 17: 3 calls of 6
    assert seeds.chunk_for(5, 1) == 1


def test_train_grid_in_capped_chunks_gives_the_whole_grids_outputs(tmp_path, monkeypatch):
    from experiments.registry import RunContext

    ctx = RunContext(study="test.grid", quick=True, out_dir=tmp_path)
    items = {"x": np.arange(6 * 3, dtype=np.float32).reshape(6, 3), "k": np.arange(6, dtype=np.int32)}
    chunks, mapped = [], seeds.mapped

    def spy(*args, **kwargs):
        chunks.append(args[4])
        return mapped(*args, **kwargs)

    def item_fn(item):
        return {"y": jnp.cumsum(item["x"]) * item["k"]}

    monkeypatch.setattr(seeds, "mapped", spy)
    whole = seeds.train_grid(ctx, "whole", item_fn, items, labels=["a", "b"], num_seeds=3)
    capped = seeds.train_grid(ctx, "capped", item_fn, items, labels=["a", "b"], num_seeds=3, max_chunk=1)
    assert chunks == [2, 1]  # 6 items on 4 devices: a share of 2 each, then 1 a call
    _assert_trees_equal(whole, capped)
    np.testing.assert_array_equal(capped["y"], np.cumsum(items["x"], axis=1) * items["k"][:, None])

"""experiments.io: atomic writes, JSON without NaN, exact CSV round trips, NPZ, PNG."""
import csv
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from experiments import io  # noqa: E402


def test_atomic_write_text_replaces_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "a.txt"
    io.atomic_write_text(target, "first")
    io.atomic_write_text(target, "second ✓")
    assert target.read_text(encoding="utf-8") == "second ✓"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_failure_mid_write_keeps_old_file_and_no_temp(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")

    def half_then_fail(f):
        f.write(b"new half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        io._atomic_write(target, half_then_fail)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["a.txt"]


def test_failure_at_fsync_keeps_old_file(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    io.atomic_write_json(target, {"v": 1})

    def broken_fsync(fd):
        raise OSError("fsync failed")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="fsync failed"):
        io.atomic_write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_json_writes_non_finite_as_null_and_numpy_as_plain(tmp_path):
    obj = {
        "nan": float("nan"),
        "inf": np.float32("inf"),
        "neg": -math.inf,
        "f32": np.float32(0.5),
        "i64": np.int64(7),
        "flag": np.bool_(True),
        "arr": np.array([[1.0, np.nan], [3.0, 4.0]]),
        "tup": (1, "a"),
    }
    io.atomic_write_json(tmp_path / "o.json", obj)
    text = (tmp_path / "o.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {
        "nan": None,
        "inf": None,
        "neg": None,
        "f32": 0.5,
        "i64": 7,
        "flag": True,
        "arr": [[1.0, None], [3.0, 4.0]],
        "tup": [1, "a"],
    }
    with pytest.raises(TypeError, match="object"):
        io.atomic_write_json(tmp_path / "bad.json", {"x": object()})
    assert not (tmp_path / "bad.json").exists()


def test_write_csv_round_trips_floats_exactly(tmp_path):
    rng = np.random.default_rng(0)
    f64 = np.concatenate(
        [rng.standard_normal(50) * 10.0 ** rng.integers(-300, 300, 50), [0.1, -0.0, 1e-320, np.nan, np.inf]]
    )
    f32 = (rng.standard_normal(55) * 1e3).astype(np.float32)
    py = [float(v) / 3.0 for v in range(55)]
    flags = [bool(v % 2) for v in range(55)]
    names = [f"n,{v}" for v in range(55)]  # commas must be quoted
    cols = {"f64": f64, "f32": f32, "py": py, "flag": flags, "idx": np.arange(55), "name": names}
    path = tmp_path / "t.csv"
    io.write_csv(path, cols)
    first = path.read_bytes()
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(cols)
    body = rows[1:]
    assert len(body) == 55
    got64 = np.array([float(r[0]) for r in body])
    assert np.array_equal(got64.view(np.uint64), f64.view(np.uint64))  # bitwise, incl. -0.0 and nan
    got32 = np.array([np.float32(r[1]) for r in body])
    assert np.array_equal(got32.view(np.uint32), f32.view(np.uint32))
    assert [float(r[2]) for r in body] == py
    assert [r[3] for r in body] == ["true" if b else "false" for b in flags]
    assert [int(r[4]) for r in body] == list(range(55))
    assert [r[5] for r in body] == names
    io.write_csv(path, cols)
    assert path.read_bytes() == first  # byte-identical rerun


def test_write_csv_rejects_ragged_and_2d_columns(tmp_path):
    with pytest.raises(ValueError, match="'b' has 2 rows"):
        io.write_csv(tmp_path / "x.csv", {"a": [1, 2, 3], "b": [1, 2]})
    with pytest.raises(ValueError, match="'m' must be 1-D"):
        io.write_csv(tmp_path / "x.csv", {"m": np.zeros((2, 2))})
    assert not (tmp_path / "x.csv").exists()


def test_save_npz_round_trip(tmp_path):
    a, b = np.arange(6, dtype=np.int32).reshape(2, 3), np.array([0.25, np.nan])
    io.save_npz(tmp_path / "d.npz", a=a, b=b)
    with np.load(tmp_path / "d.npz") as data:
        assert data["a"].dtype == np.int32 and np.array_equal(data["a"], a)
        assert np.array_equal(data["b"], b, equal_nan=True)
    assert os.listdir(tmp_path) == ["d.npz"]


def test_save_figure_writes_png_and_closes(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    io.save_figure(fig, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert fig.number not in plt.get_fignums()
    assert os.listdir(tmp_path) == ["f.png"]

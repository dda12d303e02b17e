"""The Table 6 efficiency table of ``bench uat.darkroom`` (experiments/benchmarks/uat.py) at a tiny size."""
import csv

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import io
from experiments.benchmarks import uat as bench_uat
from uat_jax import theory
from uat_jax.cells import Size
from uat_jax.model import DecisionTransformer, init_params

TINY = Size(d_model=8, n_heads=2, d_ff=8, n_layers=1, horizon=4, batch_size=2, epochs=1, eval_episodes=2)
RATIO_COLUMNS = [f"{c}_ratio_to_vt" for c in bench_uat.COLUMNS]
PAPER_COLUMNS = [f"paper_{c}{r}" for c in bench_uat.COLUMNS for r in ("", "_ratio_to_vt")]


def _vt_params_by_hand(size: Size, obs_dim: int = 10, n_actions: int = 5) -> int:
    """Vanilla-TF's parameters from the architecture (uat_jax.model): W^E o + b, positions [T, d],
    LayerNorms (2d each), per layer Q, K, V, O (d x d + d each) and the FFN, the head."""
    d, f, L, T = size.d_model, size.d_ff, size.n_layers, size.horizon
    layer = 2 * d + 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d)
    return (obs_dim * d + d) + T * d + 2 * d + L * layer + 2 * d + (d * n_actions + n_actions)


def test_param_counts_against_independent_counts():
    # The Table 3 size: ours 105,541 (study uat.theory's count; the paper's 109,828).
    assert theory.param_count(bench_uat.cells.TABLE3.model_config("vt")) == 105541
    assert theory.param_count(TINY.model_config("vt")) == _vt_params_by_hand(TINY)
    kinds = sorted({bench_uat.model_kind(row) for row in bench_uat.ROWS})
    models = {k: DecisionTransformer(TINY.model_config(k)) for k in kinds}
    params = jax.jit(lambda key: {k: init_params(m, key) for k, m in models.items()})(jax.random.key(1))
    for row in bench_uat.ROWS:
        kind = bench_uat.model_kind(row)
        counted = sum(int(np.size(x)) for x in jax.tree.leaves(params[kind]))
        assert theory.param_count(TINY.model_config(kind)) == counted, row
    assert [bench_uat.model_kind(r) for r in ("tent", "cotta", "uat")] == ["vt", "vt", "uat"]
    with pytest.raises(ValueError, match="row must be one of"):
        bench_uat.model_kind("rate")


def test_peak_mb_counts_arguments_outputs_temps_less_aliases():
    x = jnp.zeros((1024, 256), jnp.float32)  # 1 MiB
    plain = jax.jit(lambda a: a + 1).lower(x).compile()
    donated = jax.jit(lambda a: a + 1, donate_argnums=0).lower(x).compile()
    assert bench_uat.peak_mb(plain) == pytest.approx(2.0)  # argument and output, no temporaries
    assert bench_uat.peak_mb(donated) == pytest.approx(1.0)  # the output reuses the argument's buffer
    chain = jax.jit(lambda a: jnp.tanh(a @ a.T) @ a).lower(x).compile()  # a [1024, 1024] temporary (4 MiB)
    assert bench_uat.peak_mb(chain) >= 2.0 + 4.0


def test_with_ratios_divides_by_vt_and_adds_the_paper():
    table = {row: {c: float(i + 2) * (j + 1) for j, c in enumerate(bench_uat.COLUMNS)}
             for i, row in enumerate(("vt", "uat"))}
    out = bench_uat.with_ratios(table)
    assert all(out["vt"][c] == 1.0 for c in RATIO_COLUMNS)
    assert all(out["uat"][c] == pytest.approx(1.5) for c in RATIO_COLUMNS)  # 3 (j + 1) / 2 (j + 1)
    assert out["uat"]["paper_train_ms_per_epoch"] == 32.4
    assert out["uat"]["paper_train_ms_per_epoch_ratio_to_vt"] == pytest.approx(32.4 / 17.1)
    assert out["uat"]["paper_params_ratio_to_vt"] == pytest.approx(155972 / 109828)
    with pytest.raises(ValueError, match="needs the row 'vt'"):
        bench_uat.with_ratios({"uat": table["uat"]})


def test_every_row_every_column_and_tta_trains_as_vt(monkeypatch, tmp_path):
    """The table's assembly, with the measurements stubbed (distinct numbers per model), so all
    seven rows run: training is measured once per model trained, TENT / CoTTA report VT's."""
    trained, inferred = [], []

    def fake_training(cfg, epochs_k, repeats):
        trained.append(cfg.model.kind)
        base = 10.0 * len(trained)
        return {"train_ms_per_epoch": base, "train_peak_mb": base + 0.5, "compile_s": 1.0}

    def fake_inference(cfg, row, repeats):
        inferred.append((cfg.model.kind, row))
        return {"infer_ms_per_step": 1.0 + len(inferred), "infer_peak_mb": 2.0 + len(inferred), "compile_s": 1.0}

    monkeypatch.setattr(bench_uat, "_training", fake_training)
    monkeypatch.setattr(bench_uat, "_inference", fake_inference)
    table = bench_uat.efficiency_table(TINY, epochs_k=2)
    assert list(table) == list(bench_uat.ROWS)
    assert trained == ["vt", "gtrxl", "dt", "adt", "uat"]  # once each; TENT and CoTTA reuse VT's
    assert inferred == [(bench_uat.model_kind(r), r) for r in bench_uat.ROWS]
    for row, values in table.items():
        assert set(bench_uat.COLUMNS) | set(RATIO_COLUMNS) | set(PAPER_COLUMNS) <= set(values), row
    for row in ("tent", "cotta"):
        assert table[row]["train_as"] == "vt"
        for col in ("params", "train_ms_per_epoch", "train_peak_mb"):
            assert table[row][col] == table["vt"][col]
        assert table[row]["infer_ms_per_step"] != table["vt"]["infer_ms_per_step"]
    columns = bench_uat.table_columns(table)
    with open(io.write_csv(tmp_path / "efficiency.csv", columns)) as f:
        rows = list(csv.DictReader(f))
    assert [r["model"] for r in rows] == list(bench_uat.ROWS) and float(rows[2]["params"]) == table["vt"]["params"]
    with pytest.raises(ValueError, match="epochs_k must be"):
        bench_uat.efficiency_table(TINY, epochs_k=1)
    with pytest.raises(ValueError, match="rows must be"):
        bench_uat.efficiency_table(TINY, epochs_k=2, rows=("uat",))


def test_measured_table_at_a_tiny_size():
    """The real measurements (compiled programs, timings, memory) for VT and TENT."""
    table = bench_uat.efficiency_table(TINY, epochs_k=2, rows=("vt", "tent"))
    for row, values in table.items():
        assert all(np.isfinite(values[c]) for c in bench_uat.COLUMNS + tuple(RATIO_COLUMNS)), row
        assert values["train_peak_mb"] > 0 and values["infer_peak_mb"] > 0 and values["infer_ms_per_step"] > 0
    assert all(table["vt"][c] == 1.0 for c in RATIO_COLUMNS)
    assert table["tent"]["params"] == table["vt"]["params"] == _vt_params_by_hand(TINY)
    # TENT's program also returns the adapted parameters (float32), so its adaptation step is live.
    assert table["tent"]["infer_peak_mb"] - table["vt"]["infer_peak_mb"] > 4 * table["vt"]["params"] / 2**20


def test_per_epoch_and_per_step_arithmetic(monkeypatch):
    """ms per epoch = (t_k - t_1) / (k - 1) and ms per step = t / T, on stubbed programs whose
    call takes 3 s + 2 s per epoch (training) or 0.5 s (inference)."""

    class Program:
        def __init__(self, epochs):
            self.epochs = epochs

        def __call__(self, *args):
            return jnp.zeros(())

    monkeypatch.setattr(bench_uat, "_train_program", lambda cfg, seeds=None: (Program(cfg.epochs), 1.0))
    monkeypatch.setattr(bench_uat, "_compiled", lambda fn, *args: (Program(None), 1.0))
    monkeypatch.setattr(bench_uat, "_run_s", lambda p, *a, repeats: 0.5 if p.epochs is None else 3.0 + 2.0 * p.epochs)
    monkeypatch.setattr(bench_uat, "peak_mb", lambda p: 7.0 if p.epochs == 5 else -1.0)
    train = bench_uat._training(TINY.train_config("uat"), epochs_k=5, repeats=1)
    assert train == {"train_ms_per_epoch": pytest.approx(2000.0), "train_peak_mb": 7.0, "compile_s": 2.0}
    infer = bench_uat._inference(TINY.train_config("vt"), "tent", repeats=1)
    assert infer["infer_ms_per_step"] == pytest.approx(1000 * 0.5 / TINY.horizon)

"""``bench rate.tmaze``'s seeds vmapped against looped (experiments/benchmarks/rate.py) at a tiny size;
the full benchmark (the authors' configuration) takes minutes and is run by hand."""
import dataclasses
import importlib

import jax

import rate_jax
from experiments.benchmarks import rate as bench_rate

TINY = rate_jax.TrainConfig(model=rate_jax.ModelConfig(segment_len=3, num_mem_tokens=2, n_layer=1, d_model=8,
                                                       n_head=1, d_head=8, n_head_ca=1),
                            num_segments=2, num_train=8, num_val=4, batch_size=4, num_steps=2)


def test_seeds_vmapped_against_looped_at_a_tiny_size():
    out = bench_rate._seeds_vmapped_vs_looped(TINY, seeds=2, steps=2, rounds=2)
    assert set(out) == {"compile_s", "vmapped_s", "looped_s", "looped_over_vmapped"}
    assert out["compile_s"] > 0 and out["vmapped_s"] > 0 and out["looped_s"] > 0
    assert out["looped_over_vmapped"] == out["looped_s"] / out["vmapped_s"]


def test_the_quick_comparison_uses_the_quick_study_config():
    """The bench times ``rate.tmaze --quick``'s RATE over ``QUICK_STEPS`` steps: the training config it
    builds is the quick study's but for its step count (the bench function once shadowed the study
    module it reads this from, which only this call would show)."""
    study = importlib.import_module("experiments.studies.rate.tmaze")
    cfg = bench_rate._quick_train_config()
    assert cfg.num_steps == bench_rate.QUICK_STEPS != study.QUICK.num_steps
    assert dataclasses.replace(cfg, num_steps=study.QUICK.num_steps) == study.QUICK.train_config("RATE")
    assert cfg.model.num_mem_tokens > 0 and cfg.model.n_head_ca > 0  # RATE: memory tokens and the valve


def test_the_authors_configuration_runs_with_dropout_and_no_feed_forward(monkeypatch):
    """``authors_configuration`` at a tiny size: the model is the bench's but for its feed-forward block and
    dropout, and the timings come back."""
    assert bench_rate.AUTHORS_MODEL == dataclasses.replace(bench_rate.BENCH_MODEL, d_inner=0, dropout=0.2)
    tiny = dataclasses.replace(TINY, model=dataclasses.replace(TINY.model, d_inner=0, dropout=0.2))
    state = rate_jax.init_state(tiny, jax.random.PRNGKey(0))
    segs = rate_jax.to_segments(state.train_data, tiny.model.segment_len)
    masks = rate_jax.split_segments(state.train_data.action_mask, tiny.model.segment_len)
    monkeypatch.setattr(bench_rate, "AUTHORS_MODEL", tiny.model)
    out = bench_rate._authors_configuration(TINY, segs, masks)
    assert set(out) == {"forward_backward_ms_per_batch", "forward_ms_per_batch", "compile_s"}
    assert all(v > 0 for v in out.values())

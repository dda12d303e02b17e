"""``bench rate.tmaze``'s seeds vmapped against looped (experiments/benchmarks/rate.py) at a tiny size;
the full benchmark (the authors' configuration) takes minutes and is run by hand."""
import dataclasses
import importlib

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

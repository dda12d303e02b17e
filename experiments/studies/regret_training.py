"""Seed-vmapped regret-loss training shared by the regret studies (no study of its own).

``regret.ftrl_match``, ``regret.swap``, ``regret.deep`` and ``regret.cce`` all train
``regret_jax.make_train(config)`` over seeds; this is the one place that does it.
"""
from __future__ import annotations

import dataclasses

import jax

import regret_jax as rj
from experiments import sweep
from experiments.registry import RunContext


def train_seeds(ctx: RunContext, config: rj.TrainConfig, num_seeds: int, name: str = "train") -> sweep.SweepResult:
    """``jax.vmap(make_train(config))`` over ``num_seeds`` keys, one ``sweep_map`` chunk.

    Seed keys are ``split(key(0), num_seeds)`` (the same for every model, so models of
    one study differ only by architecture); the run checkpoints under
    ``ctx.checkpoint_dir(name)`` and resumes with ``ctx.resume``.  The outputs'
    ``variables`` and ``loss_curve`` carry a leading seed axis.
    """
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), num_seeds))
    train = rj.make_train(config)
    return sweep.sweep_map(lambda k: train(jax.random.wrap_key_data(k)), keys, chunk_size=num_seeds,
                           ckpt_dir=ctx.checkpoint_dir(name), fingerprint=dataclasses.asdict(config),
                           resume=ctx.resume, desc=name)

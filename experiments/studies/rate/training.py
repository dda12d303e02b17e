"""Training shared by the RATE studies (``rate.tmaze``, ``rate.mrv``): not a study itself.

One model configuration, every seed in one vmapped program, chunked and checkpointed by
``experiments.seeds.train_chunked`` with a NaN guard on the recorded per-step loss.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import rate_jax
from experiments import seeds
from experiments.registry import RunContext


def train_seeds(ctx: RunContext, name: str, tcfg: rate_jax.TrainConfig, num_seeds: int, stream: int, chunks: int):
    """Train ``tcfg`` from the keys ``seed_keys(num_seeds, stream)``, checkpointed as ``ckpt_<name>``.

    Returns (TrainState with leading axis S (host arrays), curves {metric: [S, num_steps]},
    teacher-forced validation turn accuracy [S]).
    """
    keys = jnp.asarray(seeds.seed_keys(num_seeds, stream))  # raw uint32 keys: checkpointable
    per_chunk = tcfg.num_steps // chunks
    state = seeds.train_chunked(ctx, f"ckpt_{name}", rate_jax.make_chunk(tcfg, chunks),
                                rate_jax.init_chunked(tcfg, keys), chunks, model=name,
                                loss_so_far=lambda run, items, done: run.curves["loss"][items, : done * per_chunk])
    turn, _ = jax.jit(jax.vmap(rate_jax.make_validate(tcfg)))(state.train)
    return state.train, {k: np.asarray(v) for k, v in state.curves.items()}, np.asarray(turn)

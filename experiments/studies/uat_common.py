"""Shared runner of the ``uat.*`` studies: train-and-evaluate one model configuration on
a list of DarkRoom tasks x seeds as one vmapped, sharded, checkpointed ``sweep_map``.

Sizes: FULL is Table 3 (Domain A); QUICK is a CPU size (d_model 32, 2 layers, batch 32,
200 epochs, episodes of T = 30 steps, 2 seeds) that still separates feedback-aware from
observation-only models.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import uat_jax as uat
from experiments import sweep
from experiments.registry import RunContext


@dataclasses.dataclass(frozen=True)
class Size:
    d_model: int
    n_heads: int
    d_ff: int
    n_layers: int
    batch_size: int
    epochs: int
    eval_episodes: int
    seeds: int
    horizon: int = 60

    def train_config(self, kind: str = "uat", ablation: str | None = None) -> uat.TrainConfig:
        model = uat.ModelConfig(kind=kind, d_model=self.d_model, n_heads=self.n_heads,
                                d_ff=self.d_ff, n_layers=self.n_layers, horizon=self.horizon)
        if ablation is not None:
            model = uat.ablation(model, ablation)
        return uat.TrainConfig(model=model, epochs=self.epochs, batch_size=self.batch_size,
                               eval_episodes=self.eval_episodes)


FULL = Size(d_model=64, n_heads=4, d_ff=128, n_layers=3, batch_size=256, epochs=500,
            eval_episodes=256, seeds=3)
QUICK = Size(d_model=32, n_heads=4, d_ff=64, n_layers=2, batch_size=32, epochs=200,
             eval_episodes=64, seeds=2, horizon=30)


def size_for(ctx: RunContext) -> Size:
    size = QUICK if ctx.quick else FULL
    return dataclasses.replace(size, seeds=ctx.seeds) if ctx.seeds else size


def stack_tasks(tasks: list[uat.Task]) -> uat.Task:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)


def run_cells(ctx: RunContext, name: str, cfg: uat.TrainConfig, tasks: list[uat.Task],
              seeds: int) -> tuple[dict[str, np.ndarray], float]:
    """Train and evaluate ``cfg`` on every task x seed in one program.

    Returns ({"accuracy", "efficiency": [n_tasks, seeds], "loss": [n_tasks, seeds, epochs]},
    compile seconds). Seed s of every task uses the same key, so tasks are compared on
    common random numbers."""
    train = uat.make_train(cfg)
    n = len(tasks) * seeds
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), seeds))
    items = {"key": jnp.tile(keys, (len(tasks), 1)),
             "task": jax.tree.map(lambda x: jnp.repeat(x, seeds, axis=0), stack_tasks(tasks))}

    def one(item):
        res = train(jax.random.wrap_key_data(item["key"]), item["task"])
        return {"accuracy": res.eval.accuracy, "efficiency": res.eval.efficiency, "loss": res.loss}

    out = sweep.sweep_map(one, items, chunk_size=-(-n // jax.device_count()),
                          ckpt_dir=ctx.checkpoint_dir(name), resume=ctx.resume, desc=name,
                          fingerprint={"name": name, "config": repr(cfg), "seeds": seeds})
    shaped = {k: v.reshape((len(tasks), seeds) + v.shape[1:]) for k, v in out.outputs.items()}
    return shaped, out.compile_s


def mean_std(prefix: str, values: np.ndarray) -> dict[str, float]:
    """{prefix: mean, prefix_std: std} over seeds."""
    return {prefix: float(np.mean(values)), f"{prefix}_std": float(np.std(values))}

"""Training shared by the UAT studies (``uat.darkroom``, ``uat.ablation``, ``uat.boundary``): not a study itself."""
from __future__ import annotations

from experiments import seeds
from experiments.registry import RunContext
from uat_jax import cells
from uat_jax.train import Task


def train_grid(ctx: RunContext, name: str, train_cfg, tasks: list[Task], labels: list[str], num_seeds: int,
               stream: int) -> dict:
    """``train_cfg`` on every task x seed (seeds of ``stream``) as one checkpointed sweep:
    outputs [tasks, seeds, ...]."""
    out = seeds.train_grid(ctx, name, cells.make_cell(train_cfg),
                           cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)),
                           labels=labels, num_seeds=num_seeds, loss_of=lambda o: o["loss"])
    return cells.split_cells(out, len(tasks))

"""Training shared by the UAT studies (``uat.darkroom``, ``uat.ablation``, ``uat.boundary``): not a study itself.

:func:`train_models` compiles one program per distinct model structure: the members of
the switched family (``uat_jax.config.SWITCHED``: UAT, its Table 4 ablations and
Vanilla-TF) that a study trains share one ``traced_variant`` program, the member being
an array leaf of each task; every other kind (A-DT, DT-style, GTrXL) is its own program.
"""
from __future__ import annotations

from experiments import seeds
from experiments.registry import RunContext
from uat_jax import cells
from uat_jax.config import KINDS, SWITCHED
from uat_jax.train import Task


def train_grid(ctx: RunContext, name: str, train_cfg, tasks: list[Task], labels: list[str], num_seeds: int,
               stream: int) -> dict:
    """``train_cfg`` on every task x seed (seeds of ``stream``) as one checkpointed sweep:
    outputs [tasks, seeds, ...]."""
    out = seeds.train_grid(ctx, name, cells.make_cell(train_cfg),
                           cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)),
                           labels=labels, num_seeds=num_seeds, loss_of=lambda o: o["loss"])
    return cells.split_cells(out, len(tasks))


def train_models(ctx: RunContext, name: str, size: cells.Size, runs: dict[str, list[Task]],
                 labels: dict[str, list[str]], num_seeds: int, stream: int) -> dict[str, dict]:
    """Every model of ``runs`` (a kind of ``KINDS`` or a member of ``SWITCHED``) on its tasks
    x seeds: ``{model: outputs [tasks, seeds, ...]}``. Two or more switched-family members
    train as one program ``name``; any other model as its own program ``name_<model>``.
    Seed ``s`` is the same key in every program, so each member computes what it would
    alone (``uat_jax.model``: the traced union runs a member exactly as the static one)."""
    family = [m for m in runs if m in SWITCHED]
    family = family if len(family) > 1 else []
    out = {}
    if family:
        tasks = [t.with_variant(m) for m in family for t in runs[m]]
        grid = train_grid(ctx, name, size.train_config(traced_variant=True), tasks,
                          [f"{m}, {x}" for m in family for x in labels[m]], num_seeds, stream)
        start = 0
        for m in family:
            out[m] = {k: v[start:start + len(runs[m])] for k, v in grid.items()}
            start += len(runs[m])
    for m in (m for m in runs if m not in family):
        train_cfg = size.train_config(m) if m in KINDS else size.train_config("uat", m)
        out[m] = train_grid(ctx, f"{name}_{m}", train_cfg, runs[m], labels[m], num_seeds, stream)
    return {m: out[m] for m in runs}

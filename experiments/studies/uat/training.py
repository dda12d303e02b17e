"""Training shared by the UAT studies (``uat.darkroom``, ``uat.ablation``, ``uat.boundary``, ``uat.mechanism``,
``uat.recsys``): not a study itself.

:func:`train_models` compiles one program per distinct model structure: the members of
the switched family (``uat_jax.config.SWITCHED``: UAT, its Table 4 ablations and
Vanilla-TF) that a study trains share one ``traced_variant`` program, the member being
an array leaf of each task; every other kind (A-DT, DT-style, GTrXL) is its own program.
Test-time adaptation baselines (TENT, CoTTA: ``uat_jax.tta``) adapt the trained
Vanilla-TF cells in one further program (``adapt``). A domain other than DarkRoom
(``uat_jax.domains``) passes its environment parameters ``env``: one replicated argument of
every program (``sweep_map(shared=env)``), fingerprinted by content; Domain D (``uat_jax.recsys``)
passes its dataset the same way.
"""
from __future__ import annotations

import functools

import jax

from experiments import seeds
from experiments.registry import RunContext
from uat_jax import cells
from uat_jax.config import KINDS, SWITCHED
from uat_jax.train import Task


def train_grid(ctx: RunContext, name: str, train_cfg, tasks: list[Task], labels: list[str], num_seeds: int,
               stream: int, keep_params: bool = False, env=None, make_cell=cells.make_cell) -> dict:
    """``train_cfg`` on every task x seed (seeds of ``stream``) as one checkpointed sweep of
    ``make_cell(train_cfg, keep_params)``: outputs [tasks, seeds, ...] (``"params"`` too, flat over
    tasks x seeds, with ``keep_params``)."""
    out = seeds.train_grid(ctx, name, make_cell(train_cfg, keep_params),
                           cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)),
                           labels=labels, num_seeds=num_seeds, loss_of=lambda o: o["loss"], shared=env)
    params = out.pop("params", None)
    grid = cells.split_cells(out, len(tasks))
    return grid if params is None else {**grid, "params": params}


def adapt_grid(ctx: RunContext, name: str, train_cfg, params, tasks: list[Task], labels: list[str],
               num_seeds: int, stream: int, methods: dict, env=None) -> dict[str, dict]:
    """Each test-time adaptation method of ``methods`` on the Vanilla-TF cells ``params`` (flat over
    ``tasks`` x seeds, as :func:`train_grid` keeps them) in one checkpointed program:
    ``{method: {<the domain's metrics>: [tasks, seeds]}}``."""
    items = {**cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)), "params": params}
    out = seeds.train_grid(ctx, name, cells.make_adapt_cell(train_cfg, methods), items,
                           labels=labels, num_seeds=num_seeds, shared=env)
    grid = cells.split_cells(out, len(tasks))
    return {m: {k.removesuffix(f"_{m}"): v for k, v in grid.items() if k.endswith(f"_{m}")} for m in methods}


def train_models(ctx: RunContext, name: str, size: cells.Size, runs: dict[str, list[Task]],
                 labels: dict[str, list[str]], num_seeds: int, stream: int,
                 adapt: dict | None = None, domain: str = "darkroom", env=None, configure=None,
                 make_cell=cells.make_cell) -> dict[str, dict]:
    """Every model of ``runs`` (a kind of ``KINDS`` or a member of ``SWITCHED``) on its tasks
    x seeds: ``{model: outputs [tasks, seeds, ...]}``. Two or more switched-family members
    train as one program ``name``; any other model as its own program ``name_<model>``.
    Seed ``s`` is the same key in every program, so each member computes what it would
    alone (``uat_jax.model``: the traced union runs a member exactly as the static one).
    ``adapt`` ({name: ``uat_jax.tta`` config}, needs ``"vt"`` in ``runs``) adds one entry per
    method, ``{<the domain's metrics>: [tasks, seeds]}``: the trained Vanilla-TF cells
    adapted at test time (program ``name_tta``). ``domain`` and its ``env``: see the module docstring.
    ``configure(kind, variant=None, traced_variant=False)`` gives each program's training
    configuration (default ``size.train_config`` on ``domain``) and ``make_cell(cfg, keep_params)``
    its cell (default ``uat_jax.cells.make_cell``): Domain D passes ``uat_jax.recsys``'s."""
    if adapt and "vt" not in runs:
        raise ValueError(f"test-time adaptation {sorted(adapt)} adapts the Vanilla-TF: runs must include 'vt'")
    configure = configure or functools.partial(size.train_config, domain=domain)
    family = [m for m in runs if m in SWITCHED]
    family = family if len(family) > 1 else []
    keep = bool(adapt)
    out, cfgs = {}, {}
    if family:
        tasks = [t.with_variant(m) for m in family for t in runs[m]]
        cfgs.update({m: configure("uat", traced_variant=True) for m in family})
        grid = train_grid(ctx, name, cfgs[family[0]], tasks,
                          [f"{m}, {x}" for m in family for x in labels[m]], num_seeds, stream, keep, env, make_cell)
        params, start = grid.pop("params", None), 0
        for m in family:
            out[m] = {k: v[start:start + len(runs[m])] for k, v in grid.items()}
            if m == "vt" and keep:
                rows = slice(start * num_seeds, (start + len(runs[m])) * num_seeds)
                out[m]["params"] = jax.tree.map(lambda p, rows=rows: p[rows], params)
            start += len(runs[m])
    for m in (m for m in runs if m not in family):
        cfgs[m] = configure(m) if m in KINDS else configure("uat", m)
        out[m] = train_grid(ctx, f"{name}_{m}", cfgs[m], runs[m], labels[m], num_seeds, stream, keep and m == "vt",
                            env, make_cell)
    if adapt:
        vt_tasks = [t.with_variant("vt") for t in runs["vt"]] if "vt" in family else runs["vt"]
        out.update(adapt_grid(ctx, f"{name}_tta", cfgs["vt"], out["vt"].pop("params"), vt_tasks, labels["vt"],
                              num_seeds, stream, adapt, env))
    return {m: out[m] for m in (*runs, *(adapt or {}))}

"""Training shared by the UAT studies (``uat.darkroom``, ``uat.ablation``, ``uat.boundary``, ``uat.mechanism``,
``uat.recsys``): not a study itself.

:func:`train_models` compiles one program per distinct model structure: the members of
the switched family (``uat_jax.config.SWITCHED``: UAT, its Table 4 ablations, Vanilla-TF
and A-DT) that a study trains share one ``traced_variant`` program, the member being
an array leaf of each task; every other kind (DT-style, GTrXL) is its own program.
Test-time adaptation baselines (TENT, CoTTA: ``uat_jax.tta``) adapt the trained
Vanilla-TF cells in one further program (``adapt``). A domain other than DarkRoom
(``uat_jax.domains``) passes its environment parameters ``env``: one replicated argument of
every program (``sweep_map(shared=env)``), fingerprinted by content; Domain D (``uat_jax.recsys``)
passes its dataset the same way.

:func:`keep_cells` writes trained cells of the switched family as a kept model
(``experiments.models``: ``DIR/STUDY/models/NAME``, ``uat.darkroom`` keeps its UAT and
Vanilla-TF cells per schedule) and :func:`reuse_or_train_cells` is how another study
(``uat.mechanism``) gets the same cells: loaded when they were trained with the same
config on the same seed stream, else trained here.
"""
from __future__ import annotations

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np

from experiments import models, seeds
from experiments.io import jsonable
from experiments.registry import RunContext
from uat_jax import cells, tta
from uat_jax.config import KINDS, SWITCHED
from uat_jax.model import DecisionTransformer, init_params
from uat_jax.train import Task


def check_models(models: tuple[str, ...], required: tuple[str, ...], extra: tuple[str, ...] = ()) -> None:
    """Raise unless ``models`` are distinct kinds (``uat_jax.config.KINDS``) or names of ``extra`` (a Table 4
    ablation, a study's own model), including ``required``."""
    names = KINDS + extra
    if not set(required) <= set(models) <= set(names) or len(set(models)) != len(models):
        raise ValueError(f"models must be distinct names from {names} including {required}, got {models}")


def check_models_and_adaptation(cfg, required: tuple[str, ...], extra: tuple[str, ...] = ()) -> None:
    """Validate a study config's ``seeds``, ``stream``, ``models`` (:func:`check_models`), ``adapt`` (distinct
    ``uat_jax.tta`` methods) and ``adapt_batch`` (a divisor of ``size.eval_episodes``)."""
    if cfg.seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {cfg.seeds}")
    seeds.check_stream(cfg.stream)
    check_models(cfg.models, required, extra)
    if not set(cfg.adapt) <= set(tta.METHODS) or len(set(cfg.adapt)) != len(cfg.adapt):
        raise ValueError(f"adapt must be distinct names from {tuple(tta.METHODS)}, got {cfg.adapt}")
    if not (cfg.adapt_batch >= 1 and cfg.size.eval_episodes % cfg.adapt_batch == 0):
        raise ValueError(f"adapt_batch must be a divisor of size.eval_episodes={cfg.size.eval_episodes}, "
                         f"got {cfg.adapt_batch}")


def train_grid(ctx: RunContext, name: str, train_cfg, tasks: list[Task], labels: list[str], num_seeds: int,
               stream: int, keep_params: bool = False, env=None, make_cell=cells.make_cell) -> dict:
    """``train_cfg`` on every task x seed (seeds of ``stream``) as one checkpointed sweep of
    ``make_cell(train_cfg, keep_params)`` (``cells.cells_per_call()`` cells a call): outputs
    [tasks, seeds, ...] (``"params"`` too, flat over tasks x seeds, with ``keep_params``)."""
    out = seeds.train_grid(ctx, name, make_cell(train_cfg, keep_params),
                           cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)),
                           labels=labels, num_seeds=num_seeds, loss_of=lambda o: o["loss"], shared=env,
                           max_chunk=cells.cells_per_call())
    params = out.pop("params", None)
    grid = cells.split_cells(out, len(tasks))
    return grid if params is None else {**grid, "params": params}


def replay_grid(ctx: RunContext, name: str, cell, params, tasks: list[Task], labels: list[str], num_seeds: int,
                stream: int, env=None) -> dict:
    """``cell(item, env)`` (``uat_jax.cells.make_adapt_cell``, ``make_gate_cell``) on trained cells
    ``params`` (flat over ``tasks`` x seeds, as :func:`train_grid` keeps them), each item holding the
    key and task the cell trained from, in one checkpointed program: outputs [tasks, seeds, ...]."""
    items = {**cells.cell_inputs(tasks, seeds.seed_keys(num_seeds, stream)), "params": params}
    out = seeds.train_grid(ctx, name, cell, items, labels=labels, num_seeds=num_seeds, shared=env,
                           max_chunk=cells.cells_per_call())
    return cells.split_cells(out, len(tasks))


def adapt_grid(ctx: RunContext, name: str, train_cfg, params, tasks: list[Task], labels: list[str],
               num_seeds: int, stream: int, methods: dict, env=None) -> dict[str, dict]:
    """Each test-time adaptation method of ``methods`` on the Vanilla-TF cells ``params`` in one
    program (:func:`replay_grid`): ``{method: {<the domain's metrics>: [tasks, seeds]}}``."""
    grid = replay_grid(ctx, name, cells.make_adapt_cell(train_cfg, methods), params, tasks, labels, num_seeds,
                       stream, env)
    return {m: {k.removesuffix(f"_{m}"): v for k, v in grid.items() if k.endswith(f"_{m}")} for m in methods}


def train_models(ctx: RunContext, name: str, size: cells.Size, runs: dict[str, list[Task]],
                 labels: dict[str, list[str]], num_seeds: int, stream: int,
                 adapt: dict | None = None, domain: str = "darkroom", env=None, configure=None,
                 make_cell=cells.make_cell, keep: tuple[str, ...] = ()) -> dict[str, dict]:
    """Every model of ``runs`` (a kind of ``KINDS``, a member of ``SWITCHED``, or a name ``configure`` knows) on its tasks
    x seeds: ``{model: outputs [tasks, seeds, ...]}``. Two or more switched-family members
    train as one program ``name``; any other model as its own program ``name_<model>``.
    Seed ``s`` is the same key in every program, so each member computes what it would
    alone (``uat_jax.model``: the traced union runs a member exactly as the static one).
    ``adapt`` ({name: ``uat_jax.tta`` config}, needs ``"vt"`` in ``runs``) adds one entry per
    method, ``{<the domain's metrics>: [tasks, seeds]}``: the trained Vanilla-TF cells
    adapted at test time (program ``name_tta``). ``domain`` and its ``env``: see the module docstring.
    ``configure(kind, variant=None, traced_variant=False)`` gives each program's training
    configuration (default ``size.train_config`` on ``domain``) and ``make_cell(cfg, keep_params)``
    its cell (default ``uat_jax.cells.make_cell``): Domain D passes ``uat_jax.recsys``'s. Each
    switched-family member of ``keep`` (trained in the family program) also returns its trained
    ``"params"``, flat over its tasks x seeds."""
    if adapt and "vt" not in runs:
        raise ValueError(f"test-time adaptation {sorted(adapt)} adapts the Vanilla-TF: runs must include 'vt'")
    configure = configure or functools.partial(size.train_config, domain=domain)
    family = [m for m in runs if m in SWITCHED]
    family = family if len(family) > 1 else []
    if not set(keep) <= set(family):
        raise ValueError(f"keep must name switched-family members trained together, {family}, got {keep}")
    kept = {*keep, *(["vt"] if adapt else [])}
    out, cfgs = {}, {}
    if family:
        tasks = [t.with_variant(m) for m in family for t in runs[m]]
        cfgs.update({m: configure("uat", traced_variant=True) for m in family})
        grid = train_grid(ctx, name, cfgs[family[0]], tasks,
                          [f"{m}, {x}" for m in family for x in labels[m]], num_seeds, stream, bool(kept), env,
                          make_cell)
        params, start = grid.pop("params", None), 0
        for m in family:
            out[m] = {k: v[start:start + len(runs[m])] for k, v in grid.items()}
            if m in kept:
                rows = slice(start * num_seeds, (start + len(runs[m])) * num_seeds)
                out[m]["params"] = jax.tree.map(lambda p, rows=rows: p[rows], params)
            start += len(runs[m])
    for m in (m for m in runs if m not in family):
        cfgs[m] = configure("uat", m) if m in SWITCHED and m not in KINDS else configure(m)
        out[m] = train_grid(ctx, f"{name}_{m}", cfgs[m], runs[m], labels[m], num_seeds, stream, m in kept,
                            env, make_cell)
    if adapt:
        vt_tasks = [t.with_variant("vt") for t in runs["vt"]] if "vt" in family else runs["vt"]
        vt_params = out["vt"]["params"] if "vt" in keep else out["vt"].pop("params")
        out.update(adapt_grid(ctx, f"{name}_tta", cfgs["vt"], vt_params, vt_tasks, labels["vt"],
                              num_seeds, stream, adapt, env))
    return {m: out[m] for m in (*runs, *(adapt or {}))}


def _union_template(train_cfg, runs: int):
    """Shapes of ``runs`` parameter sets of the switched union of ``train_cfg``."""
    model = DecisionTransformer(train_cfg.model, variant=jnp.int32(0))
    return jax.eval_shape(jax.vmap(lambda k: init_params(model, k)), jax.random.split(jax.random.key(0), runs))


def keep_cells(ctx: RunContext, name: str, train_cfg, members: tuple[str, ...], params, accuracy, stream: int):
    """Write trained switched-family cells as the kept model ``name`` of this study: ``params`` flat over
    ``members`` x seeds (task-major, as :func:`train_grid` returns them), with their fixed-goal evaluation
    ``accuracy`` [members, seeds], seed stream and training config."""
    info = {"train": dataclasses.asdict(train_cfg), "stream": stream, "members": list(members),
            "seeds": int(np.shape(accuracy)[1]), "accuracy": np.asarray(accuracy).tolist()}
    return models.save(ctx.out_dir / "models" / name, params, jsonable(dataclasses.asdict(train_cfg.model)), info)


def reuse_or_train_cells(ctx: RunContext, source: str, name: str, program: str, train_cfg, tasks: list[Task],
                         members: tuple[str, ...], labels: list[str], num_seeds: int, stream: int) -> tuple[dict, str]:
    """``(grid, origin)``: the switched-family cells ``members`` x seeds (``tasks``, one per member) trained with
    ``train_cfg`` on ``seed_keys(num_seeds, stream)``, as ``{"accuracy": [members, seeds], "params": flat}``.

    Loaded from the model ``name`` kept by study ``source`` in this results folder (:func:`keep_cells`) when its
    training config, stream and members equal these and it holds at least ``num_seeds`` seeds (``seed_keys`` is
    prefix-stable, so its first seeds are these); otherwise trained here (program ``program``), the same cells up to
    the float rounding of a differently batched program. ``origin`` says which.
    """
    path = ctx.kept_model(source, name)
    want = json.loads(json.dumps(jsonable(dataclasses.asdict(train_cfg))))
    info = models.load_info(path)
    if (info.get("train") == want and info.get("stream") == stream and info.get("members") == list(members)
            and info.get("seeds", 0) >= num_seeds):
        saved = info["seeds"]
        params, _ = models.load(path, jsonable(dataclasses.asdict(train_cfg.model)),
                                _union_template(train_cfg, len(members) * saved))
        rows = np.array([m * saved + s for m in range(len(members)) for s in range(num_seeds)])
        accuracy = np.asarray(info["accuracy"])[:, :num_seeds]
        return {"accuracy": accuracy, "params": jax.tree.map(lambda p: np.asarray(p)[rows], params)}, \
            f"loaded from {path}"
    grid = train_grid(ctx, program, train_cfg, tasks, labels, num_seeds, stream, keep_params=True)
    return {"accuracy": grid["accuracy"], "params": grid["params"]}, \
        f"trained here ({source} keeps no matching {name} in {path.parent.parent.parent})"

"""Training cells: one model configuration trained and evaluated on a domain's tasks x seeds.

A *cell* is one (task, seed) pair; a study trains a model configuration on every cell
of a grid as one vmapped program (the sweep engine maps :func:`make_cell` over the
inputs of :func:`cell_inputs`). A cell trains and is evaluated on one run of its
task's goal schedule, drawn from its key (``uat_jax.train``). Seed ``s`` of every task
uses the same key, so tasks (and models) are compared on common random numbers.

``Size`` gathers the knobs the studies vary (model widths, episode length, batch,
epochs, evaluation episodes, and UAT's EMA decay and utility dimension for the Figure 5
sensitivity); every other model and optimiser setting is the Table 3
default of :class:`uat_jax.config.ModelConfig` and :class:`uat_jax.train.TrainConfig`.
``TABLE3`` is the paper's Domain A size (Table 3 of "Breaking Feedback-Blindness:
Utility-Augmented Transformer for Sequential Decision Making", arXiv 2607.18910);
``CPU`` is a size for 2 CPU cores (d_model 32, 2 layers, batch 32, 200 epochs,
episodes of T = 30 steps) that still separates feedback-aware from observation-only
models.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from uat_jax import domains, theory
from uat_jax.config import ModelConfig, ablation
from uat_jax.feedback import shift
from uat_jax.model import regime_gate_norms
from uat_jax.train import CellKeys, Task, TrainConfig, default_env, evaluation_rollout, make_train, task_model
from uat_jax.tta import CottaConfig, TentConfig, make_tta_evaluate

__all__ = ["CPU", "CPU_CELLS_PER_CALL", "TABLE3", "Size", "cell_inputs", "cells_per_call", "make_adapt_cell", "make_cell", "make_gate_cell", "mean_std",
           "split_cells", "stack_tasks"]


@dataclasses.dataclass(frozen=True)
class Size:
    """Model and training size of a study (the rest is Table 3's defaults)."""

    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 128
    n_layers: int = 3
    horizon: int = 60  # episode length T
    batch_size: int = 256  # episodes per epoch
    epochs: int = 500
    eval_episodes: int = 256
    ema_decay: float = 0.7  # of the regime state (Table 3; the Figure 5 sensitivity sweeps it)
    d_u: int = 16  # utility dimension (Table 3; swept in Figure 5)
    dropout: float = 0.05  # Table 3: 0.05 in Domain A, 0.2 in Domain B

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "d_ff", "n_layers", "horizon", "batch_size", "epochs", "eval_episodes",
                     "d_u"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"size.{name} must be an integer >= 1, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"size.d_model must be a multiple of size.n_heads = {self.n_heads}, got {self.d_model}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"size.ema_decay must be in [0, 1), got {self.ema_decay!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"size.dropout must be in [0, 1), got {self.dropout!r}")

    def model_config(self, kind: str = "uat", variant: str | None = None,
                     traced_variant: bool = False, domain: str = "darkroom") -> ModelConfig:
        """The model ``kind`` at this size for ``domain``'s observations and actions; ``variant``
        names a Table 4 ablation of UAT; ``traced_variant``: the switched-family union
        (``config.SWITCHED``)."""
        env = domains.get(domain)
        model = ModelConfig(kind=kind, obs_dim=env.obs_dim, n_actions=env.n_actions, d_model=self.d_model,
                            n_heads=self.n_heads, d_ff=self.d_ff, n_layers=self.n_layers, horizon=self.horizon,
                            ema_decay=self.ema_decay, d_u=self.d_u, dropout=self.dropout,
                            traced_variant=traced_variant)
        return model if variant is None else ablation(model, variant)

    def matched(self, kind: str = "vt", to: str = "uat", domain: str = "darkroom") -> Size:
        """This size with the smallest feed-forward width ``d_ff`` at which model ``kind`` has at least as
        many parameters as model ``to`` has at this size: a capacity-matched baseline (UAT has about 1.5x
        Vanilla-TF's parameters, Appendix D.3). A model's parameters are affine in ``d_ff`` (each layer's
        feed-forward block holds ``(2 d_model + 1) d_ff + d_model``), so the width is solved, not searched."""
        count = lambda size, k: theory.param_count(size.model_config(k, domain=domain))  # noqa: E731
        target, base = count(self, to), count(self, kind)
        per_unit = count(dataclasses.replace(self, d_ff=self.d_ff + 1), kind) - base
        return dataclasses.replace(self, d_ff=self.d_ff + max(0, -(-(target - base) // per_unit)))

    def train_config(self, kind: str = "uat", variant: str | None = None,
                     traced_variant: bool = False, domain: str = "darkroom") -> TrainConfig:
        """The training configuration of ``kind`` (or UAT ablation ``variant``, or the
        switched-family union) at this size on ``domain``."""
        return TrainConfig(model=self.model_config(kind, variant, traced_variant, domain), epochs=self.epochs,
                           batch_size=self.batch_size, eval_episodes=self.eval_episodes, domain=domain)


TABLE3 = Size()
CPU = Size(d_model=32, n_heads=4, d_ff=64, n_layers=2, horizon=30, batch_size=32, epochs=200, eval_episodes=64)


CPU_CELLS_PER_CALL = 8
"""On a CPU a training grid runs at most this many cells per call of its program (an accelerator runs
the whole grid at once): XLA's CPU code for a vmapped batch of many of these small models is slower per
cell than for a few. Measured on 2 cores, 20 epochs, ms per cell and epoch: uat.sepsis's quick union
37.6 at 16 cells, 31.0 at 4, 32.0 at 8; DarkRoom's (``CPU``) 13.9 at 36, 12.1 to 12.6 at 4 to 12."""


def cells_per_call() -> int | None:
    """The most cells a training grid runs per program call on this backend (None: all of them)."""
    return CPU_CELLS_PER_CALL if jax.default_backend() == "cpu" else None


def stack_tasks(tasks: list[Task]) -> Task:
    """Tasks stacked along a new leading axis (a batch of tasks to vmap over)."""
    if not tasks:
        raise ValueError("stack_tasks needs at least one task")
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tasks)


def cell_inputs(tasks: list[Task], keys: np.ndarray) -> dict:
    """Sweep inputs of the grid ``tasks x seeds``, task-major: item ``i`` is task ``i // S``,
    seed ``i % S``, where ``keys`` [S, 2] is the raw key data of the S seeds."""
    keys = np.asarray(keys)
    seeds = keys.shape[0]
    stacked = stack_tasks(tasks)
    return {"key": np.tile(keys, (len(tasks), 1)),
            "task": jax.tree.map(lambda x: np.repeat(np.asarray(x), seeds, axis=0), stacked)}


def make_cell(cfg: TrainConfig, keep_params: bool = False):
    """``cell(item, env=None) -> {<the domain's metrics>: [], "loss", "train_accuracy": [epochs]}``:
    train ``cfg`` from the item's key on its task in ``env`` (``train.make_train``), then evaluate
    it (pure, jittable); the metrics are ``uat_jax.domains``'s (DarkRoom: accuracy, efficiency,
    plus ``distinct_goals``, the cells that were a goal of a training episode).
    ``keep_params`` adds the trained ``"params"`` (for :func:`make_adapt_cell`)."""
    train, domain = make_train(cfg), domains.get(cfg.domain)

    def cell(item: dict, env=None) -> dict:
        res = train(jax.random.wrap_key_data(item["key"]), item["task"], env)
        out = {**res.eval, **domain.settings_metrics(res.settings, default_env(cfg, env)),
               "loss": res.loss, "train_accuracy": res.train_accuracy}
        return {**out, "params": res.params} if keep_params else out

    return cell


def make_adapt_cell(cfg: TrainConfig, methods: dict[str, TentConfig | CottaConfig]):
    """``cell(item, env=None) -> {"<metric>_<name>": []}`` for each metric of the domain and each
    test-time adaptation method (``uat_jax.tta``): the Vanilla-TF ``item["params"]`` that
    :func:`make_cell` trained from ``item["key"]`` on ``item["task"]``, evaluated while adapting on
    the episodes its plain evaluation played (the cell's run and evaluation keys, ``train.CellKeys``)."""
    evaluators = {name: make_tta_evaluate(cfg, method) for name, method in methods.items()}

    def cell(item: dict, env=None) -> dict:
        keys = CellKeys.of(jax.random.wrap_key_data(item["key"]))
        out = {}
        for name, evaluate in evaluators.items():
            metrics = evaluate(item["params"], keys.eval, item["task"], keys.run, env)
            out.update({f"{metric}_{name}": value for metric, value in metrics.items()})
        return out

    return cell


def make_gate_cell(cfg: TrainConfig):
    """``cell(item, env=None) -> {"gate", "correct", <the domain's record>: [eval_episodes, T]}``: the
    regime-gate norm ||rho_t|| (``model.regime_gate_norms``; 0 for a model without the gate) and
    whether the action matched the expert's, at every step of the evaluation episodes that
    :func:`make_cell` played with the trained ``item["params"]`` (the cell's run and evaluation
    keys, ``train.CellKeys``), beside the domain's per-step record (sepsis: regime, switched)."""

    def cell(item: dict, env=None) -> dict:
        keys = CellKeys.of(jax.random.wrap_key_data(item["key"]))
        params, task = item["params"], item["task"]
        traj = evaluation_rollout(cfg, params, keys.eval, task, keys.run, env)
        model = task_model(cfg.model, task)
        gate = jax.vmap(lambda o, a, r: regime_gate_norms(model, params, o, *shift(a, r)))(
            traj.obs, traj.actions, traj.fed_rewards)
        return {"gate": gate, "correct": traj.actions == traj.expert, **traj.record}

    return cell


def split_cells(outputs: dict, n_tasks: int) -> dict:
    """Sweep outputs with leading axis ``n_tasks * S`` reshaped to ``[n_tasks, S, ...]``."""
    return {k: np.asarray(v).reshape((n_tasks, -1) + np.shape(v)[1:]) for k, v in outputs.items()}


def mean_std(prefix: str, values) -> dict[str, float]:
    """``{prefix: mean, prefix_std: std}`` over seeds (numpy, population std, in the values' dtype)."""
    values = np.asarray(values)
    return {prefix: float(np.mean(values)), f"{prefix}_std": float(np.std(values))}

"""Training and kept models shared by the learned PolicyAttention studies (``pmd.learned_actor``,
``pmd.learned_critic``, ``pmd.repeated_control``): not a study itself.

:func:`train_runs` trains every run (seed x objective) of one role as one vmapped program,
chunked and checkpointed by the harness with its NaN guard; :func:`keep` writes the
trained parameters to ``DIR/STUDY/models/NAME`` (``experiments.models``) and
:func:`load_kept` reads them back for another study, refusing a different architecture.
"""
from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from experiments import models, seeds
from experiments.registry import RunContext
from pmd_jax import rules, tasks, train


def train_runs(ctx: RunContext, name: str, tcfg: train.TrainConfig, role: str, keys: np.ndarray,
               supervised: np.ndarray, chunks: int):
    """Train ``len(keys)`` runs of ``role`` (``supervised[i]`` picks run ``i``'s actor objective).

    Returns ``(params with a leading run axis, {"loss": [runs, num_steps]})`` as host arrays.
    """
    per_chunk = tcfg.num_steps // chunks
    run = seeds.train_chunked(ctx, f"ckpt_{name}", train.make_chunk(tcfg, role, chunks),
                              train.init_run(tcfg, role, keys, supervised), chunks, role=role,
                              loss_so_far=lambda r, items, done: r.curves["loss"][items, : done * per_chunk])
    return jax.tree.map(np.asarray, run.state.params), {"loss": np.asarray(run.curves["loss"])}


def model_of(tcfg: train.TrainConfig, role: str):
    return tcfg.actor() if role == "actor" else tcfg.critic()


def keep(out_dir: pathlib.Path, name: str, tcfg: train.TrainConfig, role: str, params, info: dict) -> pathlib.Path:
    """Write the runs' parameters as the kept model ``out_dir/models/name``."""
    return models.save(out_dir / "models" / name, params, model_of(tcfg, role).architecture(),
                       {**info, "role": role, "runs": int(jax.tree.leaves(params)[0].shape[0])})


def load_kept(result_dir: pathlib.Path, name: str, tcfg: train.TrainConfig, role: str):
    """``(params with a run axis, info)`` of the kept model ``result_dir/models/name`` for ``tcfg``'s architecture."""
    path = pathlib.Path(result_dir) / "models" / name
    runs = int(models.load_meta(path)["info"]["runs"])
    model = model_of(tcfg, role)
    template = jax.eval_shape(jax.vmap(model.init), jax.random.split(jax.random.key(0), runs))
    return models.load(path, model.architecture(), template)


def heldout_inputs(family: str, split: str, n_mdps: int, entropy: str, etas, key_seed: int, data_seed: int = 0):
    """Actor inputs of one held-out cell block: every MDP of ``split`` x every step in ``etas``.

    Returns :class:`pmd_jax.tasks.ActorInputs` with leading axis ``len(etas) * n_mdps``
    (eta-major), policies drawn from the ``entropy`` band of the prior with keys of ``key_seed``.
    """
    mdps = tasks.split_mdps(family, split, n_mdps, data_seed)
    etas = np.asarray(etas, np.float32)
    keys = jax.random.split(jax.random.fold_in(jax.random.key(key_seed), tuple(tasks.POLICY_ENTROPY).index(entropy)),
                            len(etas) * n_mdps)
    tiled = jax.tree.map(lambda x: np.tile(x, (len(etas),) + (1,) * (x.ndim - 1)), mdps)
    draw = jax.vmap(lambda k, m, e: tasks.sample_actor_inputs(k, m, entropy, e))
    return jax.jit(draw)(keys, tiled, np.repeat(etas, n_mdps))


def fitted_step_median(pi_out, pi, Q):
    """The step an actor effectively takes on a set of inputs ``[n, S, A]``: per input the moment-matching
    step of its S rows (:func:`pmd_jax.rules.fitted_step`), then the median over inputs (robust to the few
    low-entropy inputs whose output leaves the prior's support and would pull a pooled fit to its bracket end)."""
    return jnp.median(jax.vmap(rules.fitted_step)(pi_out, pi, Q))

"""Training and kept models shared by the learned PolicyAttention studies (``pmd.learned_actor``,
``pmd.learned_critic``, ``pmd.repeated_control``, ``pmd.stress``, ``pmd.audit``, ``pmd.visibility``): not a
study itself.

:func:`train_runs` trains every run (seed x objective) of one role as one vmapped program,
chunked and checkpointed by the harness with its NaN guard; :func:`keep` writes the
trained parameters to ``DIR/STUDY/models/NAME`` (``experiments.models``) and
:func:`load_kept` reads them back for another study, refusing a different architecture.
:func:`reuse_or_train` is how a study evaluates another study's trained models: it loads
them when they were trained with the same config, else trains the same runs itself.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from experiments import models, seeds
from experiments.io import jsonable
from experiments.registry import RunContext
from pmd_jax import audit, rules, tasks, train
from pmd_jax.pmd import pmd_step
from pmd_jax.transformer import ModelConfig


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


def initial_params(tcfg: train.TrainConfig, role: str, keys: np.ndarray):
    """The parameters runs ``keys`` of ``role`` start training from (host arrays with a run axis): the untrained
    models the studies' negative controls evaluate."""
    run = train.init_run(tcfg, role, keys, np.zeros(len(keys)))
    return jax.tree.map(np.asarray, run.state.params)


def model_of(tcfg: train.TrainConfig, role: str):
    """The model that plays ``role`` (one of ``pmd_jax.train.ROLES``) at ``tcfg``'s sizes."""
    models_of_roles = {"actor": tcfg.actor, "critic": tcfg.critic, "full_packet_actor": tcfg.full_packet_actor}
    if role not in models_of_roles:
        raise ValueError(f"role must be one of {tuple(models_of_roles)}, got {role!r}")
    return models_of_roles[role]()


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


def reuse_or_train(ctx: RunContext, source: str, name: str, tcfg: train.TrainConfig, role: str, runs: int,
                   stream: int, chunks: int):
    """``(params with a run axis [runs], origin)``: label-free runs ``0..runs-1`` of ``role`` trained with ``tcfg``
    on the keys ``seed_keys(runs, stream)``.

    Loaded from the model ``name`` kept by study ``source`` in this results folder when its recorded ``train``
    config and ``stream`` equal these and it holds at least ``runs`` label-free runs (``seed_keys`` is
    prefix-stable, so its first label-free runs are these runs); otherwise trained here (checkpoint
    ``ckpt_{name}``), the same runs up to the float rounding of a different batch of runs. ``origin`` says which.
    """
    path = ctx.kept_model(source, name)
    want = json.loads(json.dumps(jsonable(dataclasses.asdict(tcfg))))
    info = models.load_info(path)
    label_free = np.flatnonzero(np.asarray(info.get("supervised", np.zeros(info.get("runs", 0)))) < 0.5)
    if info.get("train") == want and info.get("stream") == stream and len(label_free) >= runs:
        params, _ = load_kept(path.parent.parent, name, tcfg, role)
        return jax.tree.map(lambda a: np.asarray(a)[label_free[:runs]], params), f"loaded from {path}"
    params, _ = train_runs(ctx, name, tcfg, role, seeds.seed_keys(runs, stream), np.zeros(runs), chunks)
    return params, f"trained here ({source} keeps no matching {name} in {path.parent.parent.parent})"


# Conditions of the archived stress screen and the matched audit (EvoRobust companion, sections 10 and 15):
# name -> (task family, policy-entropy band of the inputs).
CONDITIONS = {
    "iid": ("iid", "any"), "reward_x2": ("reward_x2", "any"), "bimodal_rewards": ("bimodal_rewards", "any"),
    "sparse_transitions": ("sparse_transitions", "any"), "low_entropy": ("iid", "low"), "high_entropy": ("iid", "high"),
}


def check_screen(cfg, required: tuple[str, ...]) -> None:
    """A clear error naming the field when a screen config's ``n_mdps``, ``per_mdp``, ``conditions`` (which must
    hold ``required``, the conditions its checks compare) or ``eta`` (inside the actor's training range) is bad."""
    for name in ("n_mdps", "per_mdp"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if not cfg.conditions or any(c not in CONDITIONS for c in cfg.conditions):
        raise ValueError(f"conditions must be a non-empty subset of {tuple(CONDITIONS)}, got {cfg.conditions}")
    for needed in required:
        if needed not in cfg.conditions:
            raise ValueError(f"conditions must include {needed!r} (the checks compare it)")
    lo, hi = tasks.ETA_RANGE
    if not lo <= cfg.eta <= hi:
        raise ValueError(f"eta must lie in the actor's training range {tasks.ETA_RANGE}, got {cfg.eta}")


def condition_inputs(conditions, n_mdps: int, per_mdp: int, eta: float, key_seed: int, data_seed: int = 0):
    """Actor inputs ``[conditions, per_mdp * n_mdps]`` at step ``eta``: for each condition of :data:`CONDITIONS`,
    ``per_mdp`` policies on each of ``n_mdps`` test MDPs of its family, drawn from its entropy band."""
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad or not conditions:
        raise ValueError(f"conditions must be a non-empty subset of {tuple(CONDITIONS)}, got {tuple(conditions)}")
    blocks = [heldout_inputs(CONDITIONS[c][0], "test", n_mdps, CONDITIONS[c][1], [eta] * per_mdp, key_seed + i, data_seed)
              for i, c in enumerate(conditions)]
    return jax.tree.map(lambda *a: np.stack(a), *blocks)


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
    return _draw_inputs(entropy, keys, tiled, np.repeat(etas, n_mdps))


@functools.partial(jax.jit, static_argnums=0)
def _draw_inputs(entropy: str, keys, mdps, etas):
    """One compiled program per entropy band and batch shape, shared by every call."""
    return jax.vmap(lambda k, m, e: tasks.sample_actor_inputs(k, m, entropy, e))(keys, mdps, etas)


def fitted_step_median(pi_out, pi, Q):
    """The step an actor effectively takes on a set of inputs ``[n, S, A]``: per input the moment-matching
    step of its S rows (:func:`pmd_jax.rules.fitted_step`), then the median over inputs (robust to the few
    low-entropy inputs whose output leaves the prior's support and would pull a pooled fit to its bracket end)."""
    return jnp.median(jax.vmap(rules.fitted_step)(pi_out, pi, Q))


def actor_outputs(tcfg: train.TrainConfig, params, x) -> np.ndarray:
    """``pi_new [runs, *batch, S, A]`` (float64) of every actor run on inputs ``x`` with any batch shape."""
    actor = tcfg.actor()
    flat = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[x.eta.ndim:]), x)

    @jax.jit
    def run(params, flat):
        per_input = jax.vmap(lambda pi, Q, e: actor.policy(params, pi, Q, e))
        return per_input(flat.pi, flat.Q, flat.eta)

    out = np.asarray(jax.vmap(run, in_axes=(0, None))(params, flat), np.float64)
    return out.reshape(out.shape[:1] + x.eta.shape + out.shape[-2:])


def critic_outputs(tcfg: train.TrainConfig, params, x, pi_new: np.ndarray, seed: int, target_samples: int) -> dict:
    """Per scoring of :func:`pmd_jax.audit.critic_errors`, ``|Q_next - target| [critic runs, *batch, S, A]``:
    critic run ``c`` reads packets drawn under actor run ``c mod len(pi_new)``'s returned policy."""
    critic = tcfg.critic()
    batch = x.eta.shape
    flat = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[len(batch):]), x)
    runs = jax.tree.leaves(params)[0].shape[0]
    new = jnp.asarray(pi_new[np.arange(runs) % len(pi_new)], flat.pi.dtype).reshape((runs, -1) + pi_new.shape[-2:])
    keys = jax.random.split(jax.random.key(seed), new.shape[1])

    @jax.jit
    def run(params, new):
        def one(k, mdp, pi, Q, eta, p):
            return audit.critic_errors(lambda q, tr: critic.q_values(params, q, tr), k, mdp, Q, p,
                                       pmd_step(pi, Q, eta), tcfg.samples_per_pair, target_samples)
        return jax.vmap(one)(keys, flat.mdp, flat.pi, flat.Q, flat.eta, new)

    # one compiled call per critic run: vmapping the runs too holds every run's activations at once (the quick screen
    # with 4 critics was killed for memory at 9 GB)
    out = [run(jax.tree.map(lambda a, c=c: a[c], params), new[c]) for c in range(runs)]
    return {k: np.stack([np.asarray(o[k], np.float64) for o in out]).reshape((runs,) + batch + out[0][k].shape[-2:])
            for k in out[0]}


@dataclasses.dataclass(frozen=True)
class KeptModels:
    """The learned actors and critics a screen evaluates: ``actor_runs`` label-free actors of ``pmd.learned_actor``
    (``actor``, its train config) and ``critic_runs`` critics of ``pmd.learned_critic`` (``critic``), seeds of
    ``stream``; the defaults are those studies' FULL presets, :data:`QUICK_MODELS` their QUICK ones. The chunks
    apply only when the models are trained here (:func:`reuse_or_train`)."""

    actor: train.TrainConfig = train.TrainConfig(num_steps=12_800, warmup=400)
    critic: train.TrainConfig = train.TrainConfig(model=ModelConfig(num_layers=3), num_steps=12_800, warmup=400,
                                                  batch_size=32)
    actor_runs: int = 5
    critic_runs: int = 5
    stream: int = seeds.JUDGED
    actor_chunks: int = 8
    critic_chunks: int = 8

    def __post_init__(self):
        seeds.check_stream(self.stream)
        for role in ("actor", "critic"):
            for name in (f"{role}_runs", f"{role}_chunks"):
                if getattr(self, name) < 1:
                    raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
            if getattr(self, role).num_steps % getattr(self, f"{role}_chunks"):
                raise ValueError(f"{role}_chunks must divide {role}.num_steps={getattr(self, role).num_steps}")


QUICK_MODELS = KeptModels(
    actor=train.TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=800, warmup=80),
    critic=train.TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=1_500, warmup=100, batch_size=16),
    actor_runs=5, critic_runs=4, actor_chunks=4, critic_chunks=3)


def screened_models(spec: KeptModels, ctx: RunContext) -> dict:
    """The actors and critics of ``spec`` by :func:`reuse_or_train`, with ``origin`` per role."""
    out = {"origin": {}}
    for role, source in (("actor", "pmd.learned_actor"), ("critic", "pmd.learned_critic")):
        out[role], out["origin"][role] = reuse_or_train(ctx, source, role, getattr(spec, role), role,
                                                        getattr(spec, f"{role}_runs"), spec.stream,
                                                        getattr(spec, f"{role}_chunks"))
    return out


def screen(spec: KeptModels, ctx: RunContext, cfg, target_samples: int):
    """``(models, inputs, pi_new, critic errors)`` of a screen: the models of ``spec``, the inputs of ``cfg``'s
    ``conditions, n_mdps, per_mdp, eta, eval_seed`` (:func:`condition_inputs`), every actor run's returned
    policies ``[runs, C, N, S, A]`` and the critics' errors after them (:func:`critic_outputs`)."""
    found = screened_models(spec, ctx)
    x = condition_inputs(cfg.conditions, cfg.n_mdps, cfg.per_mdp, cfg.eta, cfg.eval_seed)
    pi_new = actor_outputs(spec.actor, found["actor"], x)
    return found, x, pi_new, critic_outputs(spec.critic, found["critic"], x, pi_new, cfg.eval_seed, target_samples)


def keep_trained(spec: KeptModels, found: dict, out_dir: pathlib.Path) -> None:
    """Keep, in this study's folder, the models of :func:`screened_models` that were trained here."""
    for role, origin in found["origin"].items():
        if origin.startswith("trained here"):
            tcfg = getattr(spec, role)
            keep(out_dir, role, tcfg, role, found[role],
                 {"stream": spec.stream, "seeds": getattr(spec, f"{role}_runs"), "train": dataclasses.asdict(tcfg)})


def ideal_policies(x) -> np.ndarray:
    """Ideal PMD ``softmax(log pi + eta Q)`` on every input of ``x`` (any batch shape), float64."""
    f64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
    return np.asarray(pmd_step(f64(x.pi), f64(x.Q), f64(x.eta)[..., None, None]))

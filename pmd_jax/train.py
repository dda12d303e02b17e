"""Training the learned actor and critic on generated MDPs (PolicyAttention, arXiv 2609.30500,
sections 6 and 9; objectives in :mod:`pmd_jax.learned`).

The training split is a fixed pool of ``n_train_mdps`` MDPs of one family
(:func:`pmd_jax.tasks.split_mdps` on the ``train`` key stream, disjoint from the
``val`` and ``test`` streams that evaluation draws from). Each step draws
``batch_size`` MDPs from the pool and, per MDP, fresh inputs from the stated priors:

* actor: a policy ``pi`` from :func:`pmd_jax.tasks.sample_policy` (``entropy="any"``),
  its exact ``Q^pi`` and a step ``eta ~ U[ETA_RANGE]``; loss :func:`pmd_jax.learned.actor_loss`
  (label-free KL-proximal or, with ``supervised = 1``, cross-entropy to PMD);
* critic: memories ``Q = lambda Q^{pi_0}`` (``pi_0`` from the prior, ``lambda ~ U[0, 1]``,
  so the near-zero ``Q`` of a loop's first rounds is in range), an evaluation policy
  ``pi`` from the prior, a balanced packet of ``samples_per_pair`` draws per pair under
  ``pi``, and the target: per pair the mean of ``target_samples`` fresh one-step
  targets ``r + gamma Q(s', a')``.

Every seed is one row of a vmapped state (:class:`Run`); :func:`make_chunk` advances all
of them ``num_steps / num_chunks`` steps as one ``lax.scan``, recording the per-step
loss, so the harness can checkpoint between chunks.

Role ``"full_packet_actor"`` (:mod:`pmd_jax.visibility`, EvoRobust companion section 10) trains the
actor that reads every state's memories on the same data and objectives as ``"actor"``; each run also
carries a mask flag (:class:`MaskedTrainState`), 0 visible and 1 state-local, so both variants train in
one vmapped program. The ``"actor"`` and ``"critic"`` roles are unchanged by it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct

from pmd_jax import learned, tasks, visibility
from pmd_jax.mdp import FiniteMDP, policy_evaluation
from pmd_jax.transformer import ModelConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One role's training run (actor or critic). Critic-only fields: ``samples_per_pair``, ``target_samples``."""

    model: ModelConfig = ModelConfig()
    num_steps: int = 3200
    batch_size: int = 64  # MDP inputs per step (the actor sees S rows of each)
    lr: float = 1e-3
    warmup: int = 100
    clip: float = 1.0  # global gradient-norm clip
    n_train_mdps: int = 2048
    family: str = "iid"
    data_seed: int = 0  # seed of the split key streams (train pool here; val/test in the studies)
    num_states: int = 4
    num_actions: int = 3
    gamma: float = 0.8
    samples_per_pair: int = 6  # critic packet: m fresh transitions per pair
    target_samples: int = 8  # critic target: fresh one-step targets averaged per pair

    def __post_init__(self):
        for name in ("num_steps", "batch_size", "n_train_mdps", "num_states", "num_actions", "samples_per_pair",
                     "target_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0 or self.warmup >= self.num_steps:
            raise ValueError(f"warmup must lie in [0, num_steps), got {self.warmup}")
        if self.lr <= 0 or self.clip <= 0:
            raise ValueError(f"lr and clip must be > 0, got lr={self.lr}, clip={self.clip}")
        if not 0.0 < self.gamma < 1.0:
            raise ValueError(f"gamma must lie in (0, 1), got {self.gamma}")
        if self.family not in tasks.FAMILIES:
            raise ValueError(f"family must be one of {tasks.FAMILIES}, got {self.family!r}")

    def actor(self) -> learned.LearnedActor:
        return learned.LearnedActor(self.model, self.num_states, self.num_actions)

    def full_packet_actor(self) -> visibility.FullPacketActor:
        return visibility.FullPacketActor(self.model, self.num_states, self.num_actions)

    def critic(self) -> learned.LearnedCritic:
        n = self.num_states * self.num_actions * self.samples_per_pair
        return learned.LearnedCritic(self.model, self.num_states, self.num_actions, n)

    def optimizer(self) -> optax.GradientTransformation:
        schedule = optax.warmup_cosine_decay_schedule(0.0, self.lr, self.warmup, self.num_steps, self.lr / 10)
        return optax.chain(optax.clip_by_global_norm(self.clip), optax.adam(schedule))

    def pool(self) -> FiniteMDP:
        return tasks.split_mdps(self.family, "train", self.n_train_mdps, self.data_seed, num_states=self.num_states,
                                num_actions=self.num_actions, gamma=self.gamma)


@struct.dataclass
class TrainState:
    params: dict
    opt_state: optax.OptState
    key: jax.Array  # raw key data [2]
    supervised: jax.Array  # actor objective: 0 label-free (KL-proximal), 1 supervised on PMD targets


@struct.dataclass
class MaskedTrainState(TrainState):
    """A full-packet actor's state: also its attention flag (0 visible, 1 state-local mask)."""

    masked: jax.Array


ROLES = ("actor", "critic", visibility.ROLE)


@struct.dataclass
class Run:
    """Seed-vmapped states (leading axis = runs) and per-step losses ``curves["loss"] [runs, num_steps]``."""

    state: TrainState
    curves: dict


def _draw(pool: FiniteMDP, key: jax.Array, n: int) -> FiniteMDP:
    idx = jax.random.randint(key, (n,), 0, pool.R.shape[0])
    return jax.tree.map(lambda x: x[idx], pool)


def _actor_loss_on_batch(config: TrainConfig, pool: FiniteMDP, log_policy: Callable) -> Callable:
    """``loss(params, key, supervised, *flags)``: ``log_policy(params, pi, Q, eta, *flags)`` on a fresh batch."""

    def loss(params, key, supervised, *flags):
        k_mdp, k_in = jax.random.split(key)
        mdps = _draw(pool, k_mdp, config.batch_size)
        x = jax.vmap(tasks.sample_actor_inputs)(jax.random.split(k_in, config.batch_size), mdps)
        log_new = jax.vmap(lambda p, q, e: log_policy(params, p, q, e, *flags))(x.pi, x.Q, x.eta)
        return learned.actor_loss(log_new, x.pi, x.Q, x.eta, supervised)

    return loss


def actor_batch_loss(config: TrainConfig, pool: FiniteMDP) -> Callable:
    """``loss(params, key, supervised)`` of one actor step on a fresh batch."""
    return _actor_loss_on_batch(config, pool, config.actor().log_policy)


def full_packet_actor_batch_loss(config: TrainConfig, pool: FiniteMDP) -> Callable:
    """``loss(params, key, supervised, masked)`` of one full-packet actor step (same data as the actor's)."""
    return _actor_loss_on_batch(config, pool, config.full_packet_actor().log_policy)


def critic_example(config: TrainConfig, key: jax.Array, mdp: FiniteMDP):
    """One critic training input: ``(Q memories, evaluation policy, packet, target [S, A])`` (module docstring)."""
    S, A = config.num_states, config.num_actions
    k0, k1, kl, kp, kt = jax.random.split(key, 5)
    Q = jax.random.uniform(kl) * policy_evaluation(mdp, tasks.sample_policy(k0, S, A))
    pi = tasks.sample_policy(k1, S, A)
    packet = learned.balanced_transitions(kp, mdp, pi, config.samples_per_pair)
    fresh = learned.balanced_transitions(kt, mdp, pi, config.target_samples)
    return Q, pi, packet, learned.td_targets(fresh, Q, mdp.gamma, config.target_samples)


def critic_batch_loss(config: TrainConfig, pool: FiniteMDP) -> Callable:
    """``loss(params, key, _)`` of one critic step: mean squared error to the sampled Bellman targets."""
    critic = config.critic()

    def loss(params, key, _):
        k_mdp, k_in = jax.random.split(key)
        mdps = _draw(pool, k_mdp, config.batch_size)
        Q, _, packet, target = jax.vmap(lambda k, m: critic_example(config, k, m))(
            jax.random.split(k_in, config.batch_size), mdps)
        pred = jax.vmap(lambda q, tr: critic.q_values(params, q, tr))(Q, packet)
        return jnp.mean((pred - target) ** 2)

    return loss


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")


def _split_flags(role: str, flags, runs: int):
    """``(supervised [runs], masked [runs] or None)`` from ``init_run``'s flags argument."""
    if role != visibility.ROLE:
        return jnp.asarray(flags, jnp.float32), None
    if not isinstance(flags, dict) or set(flags) != {"supervised", "masked"}:
        raise ValueError(f"supervised: role {role!r} needs a dict with keys 'supervised' and 'masked' "
                         f"(per-run flags), got {flags!r}")
    out = tuple(jnp.asarray(flags[name], jnp.float32) for name in ("supervised", "masked"))
    for name, v in zip(("supervised", "masked"), out):
        if v.shape != (runs,):
            raise ValueError(f"{name}: needs one flag per run, shape ({runs},), got {v.shape}")
    return out


def init_run(config: TrainConfig, role: str, keys, supervised) -> Run:
    """One fresh :class:`TrainState` per raw key (``keys [runs, 2]``) and objective flag (``supervised [runs]``).

    Role ``"full_packet_actor"``: ``supervised`` is ``{"supervised": [runs], "masked": [runs]}`` and the
    states are :class:`MaskedTrainState` (the mask flag does not touch the initial parameters).
    """
    _check_role(role)
    model = {"actor": config.actor, "critic": config.critic, visibility.ROLE: config.full_packet_actor}[role]()
    opt = config.optimizer()
    flag, masked = _split_flags(role, supervised, len(keys))

    def one(k, flag):
        k_init, k_train = jax.random.split(jax.random.wrap_key_data(k))
        params = model.init(k_init)
        return TrainState(params=params, opt_state=opt.init(params), key=jax.random.key_data(k_train),
                          supervised=jnp.asarray(flag, jnp.float32))

    states = jax.jit(jax.vmap(one))(jnp.asarray(keys), flag)
    if masked is not None:
        states = MaskedTrainState(**{f.name: getattr(states, f.name) for f in dataclasses.fields(states)},
                                  masked=masked)
    return Run(state=states, curves={"loss": jnp.zeros((len(keys), config.num_steps))})


def make_chunk(config: TrainConfig, role: str, num_chunks: int) -> Callable[[Run, jax.Array], Run]:
    """``chunk(run, i) -> run``: steps ``i C .. (i + 1) C - 1`` (``C = num_steps / num_chunks``) of every run."""
    _check_role(role)
    if num_chunks < 1 or config.num_steps % num_chunks:
        raise ValueError(f"num_chunks must be >= 1 and divide num_steps={config.num_steps}, got {num_chunks}")
    per_chunk = config.num_steps // num_chunks
    pool = config.pool()
    loss_fn = {"actor": actor_batch_loss, "critic": critic_batch_loss,
               visibility.ROLE: full_packet_actor_batch_loss}[role](config, pool)
    opt = config.optimizer()

    def step(state: TrainState, _):
        key, sub = jax.random.split(jax.random.wrap_key_data(state.key))
        flags = (state.masked,) if isinstance(state, MaskedTrainState) else ()
        loss, grads = jax.value_and_grad(loss_fn)(state.params, sub, state.supervised, *flags)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        new = state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state,
                            key=jax.random.key_data(key))
        return new, loss

    def one_run(state: TrainState):
        return jax.lax.scan(step, state, None, length=per_chunk)

    def chunk(run: Run, i) -> Run:
        state, losses = jax.vmap(one_run)(run.state)
        curves = {"loss": jax.lax.dynamic_update_slice(run.curves["loss"], losses, (0, i * per_chunk))}
        return Run(state=state, curves=curves)

    return chunk

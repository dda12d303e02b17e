"""Implicit Q-learning (IQL), the offline reinforcement-learning baseline of Domain B.

The UAT paper ("Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential
Decision Making", arXiv 2607.18910) lists IQL in Table 1's Domain B row (0.712 overall, 0.425
post-shift accuracy) without a setting. The method is Kostrikov, Nair & Levine, "Offline
Reinforcement Learning with Implicit Q-Learning" (arXiv 2110.06169), section 4, with L_2^tau(u) =
|tau - 1(u < 0)| u^2 the expectile loss:

- value, eq. (5): L_V(psi) = E_(s,a)[L_2^tau(Q_hat(s, a) - V_psi(s))], Q_hat the target critic
  (the minimum of its two heads, :func:`value_loss`);
- critic, eq. (6): L_Q(theta) = E_(s,a,r,s')[(r + gamma (1 - d) V_psi(s') - Q_theta(s, a))^2] for
  each of the two heads (:func:`critic_loss`, :func:`td_target`);
- policy, eq. (7): L_pi(phi) = -E_(s,a)[exp(beta (Q_hat(s, a) - V_psi(s))) log pi_phi(a | s)],
  the weight clipped at ``max_weight`` = 100 as in the authors' code (:func:`actor_loss`,
  :func:`awr_weights`);
- the target critic follows theta by Polyak averaging at rate ``polyak`` = 0.005 after each step.
  One step updates V, then pi (with the new V), then Q (with the new V), then the target: the
  order of the authors' JAX learner.

Readings (ours; the UAT paper gives none):

- The log. An offline method learns from logged care, not from the expert's labels: each
  training cell logs ``episodes`` episodes of the domain played by an epsilon-expert (the
  regime-aware expert's cluster with probability 1 - ``epsilon``, a uniform cluster otherwise,
  epsilon = 0.3), so every cluster is tried in every regime (:func:`collect`). An episode of T
  steps gives the T - 1 transitions (o_t, a_t, r_t, o_{t+1}, d_t) whose next observation was
  recorded; d_t = 1 where the stay ended at step t (death or recovery: no bootstrap past it, the
  next observation being the next patient's admission), read from the domain's per-step
  ``record["terminated"]``. The log is the run's first ``episodes`` episodes (DarkRoom: under the
  task's goal schedule; sepsis: i.i.d. patients and regime schedules).
- The networks are Markov, as IQL's: MLPs of o_t alone (two hidden ReLU layers of ``hidden`` =
  256 units, the IQL paper's), a critic with two heads of one Q-value per cluster (discrete
  actions), a value and a softmax policy. IQL so sees no history and no fed reward; what it can
  know of the hidden regime is what o_t shows.
- Optimisation: Adam at 3e-4 for all three networks, minibatches of 256 transitions drawn
  uniformly with replacement, tau = 0.7, beta = 3, gamma = 0.99 (the IQL paper's locomotion
  settings); ``steps`` gradient steps.
- Evaluation: the greedy policy argmax_a pi(a | o_t) plays the cell's evaluation episodes
  (``train.CellKeys``' evaluation key, split per episode as ``train.evaluation_rollout`` does), so
  it meets the same patients and regime schedules as the transformer cells of the same seed, and
  is scored by the domain's metrics (``uat_jax.domains``).
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from uat_jax import domains
from uat_jax.rollout import Trajectory, play
from uat_jax.train import CellKeys, Task, TrainConfig, default_env, episode_settings, eval_episodes


@dataclasses.dataclass(frozen=True)
class IqlConfig:
    """IQL's knobs (module docstring): the log, the networks and the optimisation."""

    episodes: int = 4096  # logged episodes per cell
    epsilon: float = 0.3  # the logging policy's uniform-action probability
    hidden: int = 256
    steps: int = 50_000
    batch_size: int = 256
    lr: float = 3e-4
    expectile: float = 0.7  # tau
    temperature: float = 3.0  # beta
    discount: float = 0.99  # gamma
    polyak: float = 0.005
    max_weight: float = 100.0

    def __post_init__(self) -> None:
        for name in ("episodes", "hidden", "steps", "batch_size"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"iql.{name} must be an integer >= 1, got {value!r}")
        for name, lo, hi in (("epsilon", 0.0, 1.0), ("discount", 0.0, 1.0), ("polyak", 0.0, 1.0)):
            if not lo <= getattr(self, name) <= hi:
                raise ValueError(f"iql.{name} must be in [{lo}, {hi}], got {getattr(self, name)!r}")
        if not 0.0 < self.expectile < 1.0:
            raise ValueError(f"iql.expectile must be in (0, 1), got {self.expectile!r}")
        for name in ("lr", "temperature", "max_weight"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"iql.{name} must be > 0, got {getattr(self, name)!r}")


class Mlp(nn.Module):
    """Two hidden ReLU layers, then ``out`` linear outputs."""

    hidden: int
    out: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(2):
            x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.out)(x)


class Networks(nn.Module):
    """The twin critic Q [..., 2, A], the value V [...] and the policy logits [..., A] of o_t."""

    hidden: int
    n_actions: int

    def setup(self) -> None:
        self.q1, self.q2 = Mlp(self.hidden, self.n_actions), Mlp(self.hidden, self.n_actions)
        self.v = Mlp(self.hidden, 1)
        self.pi = Mlp(self.hidden, self.n_actions)

    def __call__(self, obs: jax.Array):
        return self.critic(obs), self.value(obs), self.policy(obs)

    def critic(self, obs: jax.Array) -> jax.Array:
        return jnp.stack([self.q1(obs), self.q2(obs)], -2)

    def value(self, obs: jax.Array) -> jax.Array:
        return self.v(obs)[..., 0]

    def policy(self, obs: jax.Array) -> jax.Array:
        return self.pi(obs)


@struct.dataclass
class Transitions:
    """Logged transitions, leading axis N."""

    obs: jax.Array  # [N, obs_dim] o_t
    action: jax.Array  # [N] int32 a_t
    reward: jax.Array  # [N] r_t
    next_obs: jax.Array  # [N, obs_dim] o_{t+1}
    terminal: jax.Array  # [N] bool: the stay ended at step t (no bootstrap)


def expectile_loss(u: jax.Array, tau: float) -> jax.Array:
    """L_2^tau(u) = |tau - 1(u < 0)| u^2, elementwise (IQL eq. 5)."""
    return jnp.abs(tau - (u < 0).astype(u.dtype)) * u ** 2


def value_loss(q_target_sa: jax.Array, v: jax.Array, tau: float) -> jax.Array:
    """Eq. (5): mean L_2^tau(min over the target heads of Q_hat(s, a) - V(s)); ``q_target_sa`` [N, 2]."""
    return jnp.mean(expectile_loss(q_target_sa.min(-1) - v, tau))


def td_target(reward: jax.Array, terminal: jax.Array, v_next: jax.Array, discount: float) -> jax.Array:
    """r + gamma (1 - d) V(s') (eq. 6)."""
    return reward + discount * (1.0 - terminal.astype(reward.dtype)) * v_next


def critic_loss(q_sa: jax.Array, target: jax.Array) -> jax.Array:
    """Eq. (6) summed over the two heads: mean over transitions of sum_i (target - Q_i(s, a))^2."""
    return jnp.mean(jnp.sum((target[:, None] - q_sa) ** 2, -1))


def awr_weights(q_target_sa: jax.Array, v: jax.Array, temperature: float, max_weight: float) -> jax.Array:
    """min(exp(beta (min_i Q_hat_i(s, a) - V(s))), max_weight) (eq. 7 and the authors' clip)."""
    return jnp.minimum(jnp.exp(temperature * (q_target_sa.min(-1) - v)), max_weight)


def actor_loss(logits: jax.Array, action: jax.Array, weights: jax.Array) -> jax.Array:
    """Eq. (7): -mean_i w_i log pi(a_i | s_i)."""
    log_pi = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], -1)[:, 0]
    return -jnp.mean(weights * log_pi)


def at_action(values: jax.Array, action: jax.Array) -> jax.Array:
    """values[..., a] of per-action values [N, ..., A] at actions [N]."""
    index = action.reshape(action.shape + (1,) * (values.ndim - 1))
    return jnp.take_along_axis(values, index, -1)[..., 0]


def logging_policy(epsilon: float, n_actions: int):
    """The epsilon-expert as a :func:`uat_jax.rollout.play` policy: log-probabilities of the expert's
    action with probability 1 - epsilon, a uniform action otherwise."""

    def policy(state, obs, prev_action, prev_reward, expert):
        probs = (1.0 - epsilon) * jax.nn.one_hot(expert, n_actions) + epsilon / n_actions
        return jnp.log(probs), state

    return policy


def transitions_of(traj: Trajectory) -> Transitions:
    """The T - 1 transitions per episode of trajectories [B, T] whose next observation was recorded; a
    domain without ``record["terminated"]`` (DarkRoom) ends no stay inside an episode."""
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
    return Transitions(obs=flat(traj.obs[:, :-1]), action=flat(traj.actions[:, :-1]),
                       reward=flat(traj.rewards[:, :-1]), next_obs=flat(traj.obs[:, 1:]),
                       terminal=flat(traj.record.get("terminated", jnp.zeros_like(traj.rewards, bool))[:, :-1]))


def play_episodes(policy, train_cfg: TrainConfig, key: jax.Array, task: Task, run_key: jax.Array,
                  episodes: jax.Array, greedy: bool, env=None) -> Trajectory:
    """Episodes ``episodes`` [n] of the run ``run_key`` of ``task`` (their settings: DarkRoom's goals,
    ``train.episode_settings``) played by the stateless :func:`uat_jax.rollout.play` ``policy``,
    episode ``b`` from split ``b`` of ``key``."""
    domain, env = domains.get(train_cfg.domain), default_env(train_cfg, env)
    settings = episode_settings(train_cfg, task, run_key, episodes, env)
    return jax.vmap(lambda s, k: play(policy, (), k, domain, domain.with_setting(env, s), task.channel, greedy))(
        settings, jax.random.split(key, episodes.shape[0]))


def collect(key: jax.Array, cfg: IqlConfig, train_cfg: TrainConfig, task: Task, run_key: jax.Array,
            env=None) -> Transitions:
    """The log: the first ``cfg.episodes`` episodes of the run, played by the epsilon-expert."""
    policy = logging_policy(cfg.epsilon, domains.get(train_cfg.domain).n_actions)
    return transitions_of(play_episodes(policy, train_cfg, key, task, run_key, jnp.arange(cfg.episodes), False, env))


CRITIC = ("q1", "q2")


@struct.dataclass
class IqlState:
    params: dict
    target: dict  # the target critic: the q1 and q2 sub-networks of params, Polyak-averaged
    opt_state: tuple  # Adam states of the value, the policy and the critic


def make_fit(cfg: IqlConfig, obs_dim: int, n_actions: int):
    """``fit(key, data: Transitions) -> (params, losses {"value", "actor", "critic": [steps]})``:
    ``cfg.steps`` IQL steps (module docstring) on minibatches drawn from ``data``."""
    net = Networks(cfg.hidden, n_actions)
    opt = optax.adam(cfg.lr)

    def part(params, names) -> dict:
        return {k: params["params"][k] for k in names}

    def with_part(params, sub: dict) -> dict:
        return {"params": {**params["params"], **sub}}

    def descend(params, opt_state, names, loss_of):
        """One Adam step of ``loss_of(sub)`` on the sub-networks ``names`` of ``params``."""
        loss, grads = jax.value_and_grad(loss_of)(part(params, names))
        updates, opt_state = opt.update(grads, opt_state)
        return with_part(params, optax.apply_updates(part(params, names), updates)), opt_state, loss

    def fit(key: jax.Array, data: Transitions):
        k_init, k_steps = jax.random.split(key)
        params = net.init(k_init, jnp.zeros((1, obs_dim)))
        state = IqlState(params, part(params, CRITIC),
                         tuple(opt.init(part(params, names)) for names in (("v",), ("pi",), CRITIC)))
        n = data.reward.shape[0]

        def step(s: IqlState, k):
            b = jax.tree.map(lambda x: x[jax.random.randint(k, (cfg.batch_size,), 0, n)], data)
            q_hat = at_action(net.apply(with_part(s.params, s.target), b.obs, method=Networks.critic), b.action)
            params, opt_v, lv = descend(s.params, s.opt_state[0], ("v",), lambda sub: value_loss(
                q_hat, net.apply(with_part(s.params, sub), b.obs, method=Networks.value), cfg.expectile))
            weights = awr_weights(q_hat, net.apply(params, b.obs, method=Networks.value), cfg.temperature,
                                  cfg.max_weight)
            params, opt_pi, lp = descend(params, s.opt_state[1], ("pi",), lambda sub: actor_loss(
                net.apply(with_part(params, sub), b.obs, method=Networks.policy), b.action, weights))
            target = td_target(b.reward, b.terminal, net.apply(params, b.next_obs, method=Networks.value),
                               cfg.discount)
            params, opt_q, lq = descend(params, s.opt_state[2], CRITIC, lambda sub: critic_loss(
                at_action(net.apply(with_part(params, sub), b.obs, method=Networks.critic), b.action), target))
            new_target = optax.incremental_update(part(params, CRITIC), s.target, cfg.polyak)
            return IqlState(params, new_target, (opt_v, opt_pi, opt_q)), {"value": lv, "actor": lp, "critic": lq}

        state, losses = jax.lax.scan(step, state, jax.random.split(k_steps, cfg.steps))
        return state.params, losses

    return fit


def greedy_policy(params, cfg: IqlConfig, n_actions: int):
    """argmax_a pi(a | o_t) as a :func:`uat_jax.rollout.play` policy."""
    net = Networks(cfg.hidden, n_actions)

    def policy(state, obs, prev_action, prev_reward, expert):
        return net.apply(params, obs, method=Networks.policy), state

    return policy


def make_cell(cfg: IqlConfig, train_cfg: TrainConfig):
    """``cell(item, env=None) -> {<the domain's metrics>: [], "loss", "value_loss", "actor_loss",
    "critic_loss": [steps]}`` for a grid item {"key", "task"} (``uat_jax.cells.cell_inputs``), with the
    item key's ``train.CellKeys``: log the run's first episodes (epoch key), fit IQL (init key), then play
    the greedy policy on the episodes ``train.evaluation_rollout`` plays (evaluation key), so IQL meets
    the patients and regime schedules of the transformer cells of the same seed."""
    domain = domains.get(train_cfg.domain)
    fit = make_fit(cfg, domain.obs_dim, domain.n_actions)

    def cell(item: dict, env=None) -> dict:
        keys, task = CellKeys.of(jax.random.wrap_key_data(item["key"])), item["task"]
        data = collect(keys.epochs, cfg, train_cfg, task, keys.run, env)
        params, losses = fit(keys.init, data)
        traj = play_episodes(greedy_policy(params, cfg, domain.n_actions), train_cfg, keys.eval, task, keys.run,
                             eval_episodes(train_cfg), True, env)
        metrics = domain.metrics(traj)
        return {**metrics, "loss": losses["value"] + losses["actor"] + losses["critic"],
                **{f"{k}_loss": v for k, v in losses.items()}}

    return cell

"""How much one fed reward tells about the hidden regime on ``uat.sepsis``' simulator (``uat_jax.sepsis``,
docs/uat.md sections 15 and 21); no model is trained.

    python docs/analysis/sepsis_feedback_signal.py            # the quick horizon, resistance on and off

For each treatment cluster c, ``EPISODES`` episodes of ``HORIZON`` steps are played choosing c at every
step (fresh patients and regime schedules, as the study's episodes), and the rewards are grouped by the
regime acting on the step. Printed per cluster and regime: the mean and standard deviation of the whole
reward (terminal +-1 included: what UAT and A-DT are fed) and of the dense part alone (non-terminal
steps). Then, per cluster, the largest separation of two regimes' reward distributions,
d' = |mean_k - mean_j| / sqrt((var_k + var_j) / 2) over regime pairs (``separation``): a reader that
averages n rewards of one cluster separates two regimes by about d' sqrt(n) standard deviations, so
telling them apart at 2 standard deviations takes about (2 / d')^2 steps. Resistance (efficacy x 0.8
per use after the third in a row) is the simulator's; ``--no-resistance`` switches it off, the most
the reward can say under fresh efficacy.

Last, how much of the dense reward the observations already hold (``reward_r2``): over episodes of
uniformly random clusters, a least-squares fit of the dense reward r_t on (o_t, o_{t+1}) (and, second,
on their squares and elementwise products too), fitted on the first half of the non-terminal steps;
printed is its R^2 on the second half.
"""
from __future__ import annotations

import itertools
import sys

import jax
import jax.numpy as jnp
import numpy as np

from uat_jax import domains, sepsis
from uat_jax.feedback import FeedbackChannel
from uat_jax.rollout import Trajectory, play

HORIZON = 60  # uat.sepsis --quick
EPISODES = 2000


def separation(rewards: np.ndarray, regimes: np.ndarray) -> float:
    """Largest d' = |mean_k - mean_j| / sqrt((var_k + var_j) / 2) over pairs of regimes present."""
    stats = [(rewards[regimes == k].mean(), rewards[regimes == k].var()) for k in np.unique(regimes)]
    return max(abs(a[0] - b[0]) / np.sqrt((a[1] + b[1]) / 2) for a, b in itertools.combinations(stats, 2))


def open_loop(params: sepsis.EnvParams, keys: jax.Array, actions: jax.Array) -> Trajectory:
    """Trajectories [episodes, horizon] of playing the clusters ``actions`` [episodes, horizon] whatever
    happens (open loop), episode i from ``keys[i]``, through the studies' own player
    (``uat_jax.rollout.play``, whose sepsis record holds the regime and whether the stay ended); one program."""

    def episode(key, acts):
        def scheduled(t, obs, prev_action, prev_reward, expert):
            return jnp.log(jax.nn.one_hot(acts[t], sepsis.N_ACTIONS)), t + 1

        return play(scheduled, jnp.zeros((), jnp.int32), key, domains.SEPSIS, params,
                    FeedbackChannel.make("clean"), greedy=True)

    return jax.tree.map(np.asarray, jax.jit(jax.vmap(episode))(keys, actions))


def cluster_rows(params: sepsis.EnvParams, episodes: int = EPISODES, seed: int = 0) -> list[dict]:
    """Per cluster c (its episodes from key seed + c, all clusters in one program): the reward statistics
    per regime and the separations d' of the whole and dense rewards."""
    clusters = np.arange(sepsis.N_ACTIONS)
    keys = jnp.concatenate([jax.random.split(jax.random.key(seed + c), episodes) for c in clusters])
    actions = np.repeat(clusters, episodes)[:, None] * np.ones(params.horizon, np.int32)
    traj = open_loop(params, keys, actions)
    rewards, regimes, terminated = (x.reshape(len(clusters), episodes, -1)
                                    for x in (traj.rewards, traj.record["regime"], traj.record["terminated"]))
    rows = []
    for c, reward, regime, dense in zip(clusters, rewards, regimes, ~terminated):
        row = {"cluster": int(c), "d_whole": separation(reward.ravel(), regime.ravel()),
               "d_dense": separation(reward[dense], regime[dense])}
        for k, name in enumerate(sepsis.REGIMES):
            on, on_dense = regime == k, (regime == k) & dense
            row[name] = (reward[on].mean(), reward[on].std(), reward[on_dense].mean(), reward[on_dense].std())
        rows.append(row)
    return rows


def reward_r2(params: sepsis.EnvParams, episodes: int = EPISODES, seed: int = 0) -> tuple[float, float]:
    """Held-out R^2 of the dense reward r_t from (o_t, o_{t+1}) over episodes of uniformly random clusters
    (drawn from key ``seed`` + 1000): linear, and with squares and products."""
    actions = jax.random.randint(jax.random.key(seed + 1000), (episodes, params.horizon), 0, sepsis.N_ACTIONS)
    traj = open_loop(params, jax.random.split(jax.random.key(seed), episodes), actions)
    dense = ~traj.record["terminated"][:, :-1]  # the last step's next observation is not recorded
    o, o2, y = traj.obs[:, :-1][dense], traj.obs[:, 1:][dense], traj.rewards[:, :-1][dense]
    half = len(y) // 2

    def held_out_r2(x):
        x = np.c_[x, np.ones(len(x))]
        w = np.linalg.lstsq(x[:half], y[:half], rcond=None)[0]
        return float(1 - np.mean((y[half:] - x[half:] @ w) ** 2) / np.var(y[half:]))

    pair = np.c_[o, o2]
    return held_out_r2(pair), held_out_r2(np.c_[pair, pair**2, o * o2])


def main(argv: list[str]) -> None:
    knobs = {"resistance_decay": 1.0} if "--no-resistance" in argv else {}
    params = sepsis.make_params(horizon=HORIZON, **knobs)
    print(f"resistance {'off' if knobs else 'on'}, T = {HORIZON}, {EPISODES} episodes per cluster")
    print("cluster | " + " | ".join(f"{name}: whole (dense)" for name in sepsis.REGIMES) + " | d' whole, dense")
    for row in cluster_rows(params):
        cells = [f"{m:+.3f}±{s:.3f} ({dm:+.3f}±{ds:.3f})" for m, s, dm, ds in (row[n] for n in sepsis.REGIMES)]
        print(f"{row['cluster']} | " + " | ".join(cells) + f" | {row['d_whole']:.2f}, {row['d_dense']:.2f}")
    linear, quadratic = reward_r2(params)
    print(f"held-out R^2 of the dense reward from (o_t, o_t+1): linear {linear:.3f}, with squares and products "
          f"{quadratic:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Memory tasks beyond T-Maze as training data and evaluation environments of the RATE family.

"Recurrent Action Transformer with Memory" (RATE, arXiv 2306.09459) evaluates RATE on
memory tasks besides T-Maze (POPGym, Minigrid-Memory). A task here bundles what
:mod:`rate_jax.train` and :mod:`rate_jax.evaluate` need of one:

* ``obs_dim``, ``num_actions``: the model's input and output sizes;
* ``oracle_steps``: the most steps an oracle episode takes (training trajectories of
  K*N steps must be longer, so that each records its final observation);
* ``data(key, num, max_steps)``: ``num`` oracle episodes as :class:`rate_jax.dataset.Trajectories`
  padded to ``max_steps``, with ``corridor_length`` the index of the task's
  memory-dependent decision (what :func:`rate_jax.train.make_validate` scores) and
  ``goal_y`` 0 where the task has none;
* ``env`` (gymnax-style ``reset``/``step``) and ``env_params(num)``: the evaluation
  environment, one params entry per episode;
* ``initial_rtg``: the return-to-go evaluation starts from (the best return, 1, as in the
  authors' ``desired_return_1 = 1.0``).

Tasks are frozen dataclasses of Python scalars, so they hash and can sit in a
:class:`rate_jax.train.TrainConfig`.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rate_jax import minigrid_memory, popgym
from rate_jax.dataset import Trajectories


def _broadcast(params, num: int):
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num,) + jnp.shape(x)), params)


@dataclasses.dataclass(frozen=True)
class PopgymTask:
    """One POPGym task of :mod:`rate_jax.popgym` (``name`` a key of ``popgym.TASKS``) at ``level``.

    The decision :func:`rate_jax.train.make_validate` scores is the final action (index
    length - 1): the one whose cue lies farthest back (Autoencode: the first card shown;
    CountRecall: every value dealt; RepeatPrevious: k - 1 steps back, as every scored step).
    """

    name: str
    level: str = "easy"
    initial_rtg: float = 1.0

    def __post_init__(self):
        if self.name not in popgym.TASKS:
            raise ValueError(f"PopgymTask.name must be one of {sorted(popgym.TASKS)}, got {self.name!r}")
        if self.level not in popgym.LEVELS:
            raise ValueError(f"PopgymTask.level must be one of {popgym.LEVELS}, got {self.level!r}")

    @property
    def env(self):
        return popgym.TASKS[self.name]

    @property
    def obs_dim(self) -> int:
        return self.env.obs_dim

    @property
    def num_actions(self) -> int:
        return self.env.num_actions

    @property
    def oracle_steps(self) -> int:
        return self.env.episode_length(self.level)

    def env_params(self, num: int):
        return _broadcast(self.env.params(self.level), num)

    def data(self, key: jax.Array, num: int, max_steps: int) -> Trajectories:
        eps = popgym.generate(key, self.env, self.level, num, max_steps)
        return Trajectories(obs=eps.obs, actions=eps.actions, rtg=eps.rtg, action_mask=eps.action_mask,
                            corridor_length=eps.length - 1, goal_y=jnp.zeros_like(eps.length))


OBJECTS = (minigrid_memory.UNSEEN, minigrid_memory.EMPTY, minigrid_memory.WALL, minigrid_memory.KEY,
           minigrid_memory.BALL)  # every object index a Memory view can hold


def one_hot_view(obs: jax.Array) -> jax.Array:
    """MiniGrid's flat (object, colour, state) view [..., V*V*3] as one-hot object indices
    [..., V*V*5] over :data:`OBJECTS`, cell by cell. Lossless in this task: the colour is a
    function of the object (grey wall, green key and ball, 0 for empty and unseen) and the
    state is always 0. Why: fed raw, key (5) and ball (6) differ by one unit in one input of a
    linear embedding, among walls (2) and empty cells (1) that change with every step; no
    model learned to compare the cue with the end objects from that (DT and RATE at d 64,
    with and without a feed-forward block, 1,200 steps: the choice stayed at chance while
    every other action was imitated), so the view is one-hot encoded, as symbolic MiniGrid
    observations usually are (the authors render RGB images for a convolutional encoder)."""
    cells = obs.reshape(obs.shape[:-1] + (-1, 3))[..., 0]
    return (cells[..., None] == jnp.asarray(OBJECTS, obs.dtype)).astype(jnp.float32).reshape(obs.shape[:-1] + (-1,))


@dataclasses.dataclass(frozen=True)
class OneHotMemoryEnv:
    """:mod:`rate_jax.minigrid_memory` with :func:`one_hot_view` observations (gymnax-style)."""

    def reset(self, key: jax.Array, params: minigrid_memory.EnvParams):
        obs, state = minigrid_memory.reset(key, params)
        return one_hot_view(obs), state

    def step(self, key: jax.Array, state, action: jax.Array, params: minigrid_memory.EnvParams):
        obs, state, reward, done, info = minigrid_memory.step(key, state, action, params)
        return one_hot_view(obs), state, reward, done, info


@dataclasses.dataclass(frozen=True)
class MinigridTask:
    """MiniGrid-Memory (:mod:`rate_jax.minigrid_memory`) at side ``size``.

    ``random_length``, ``max_steps``, ``time_limit`` and ``view_size`` as
    :func:`minigrid_memory.make_params`; the defaults are the authors' setting
    (:func:`minigrid_memory.authors_params`: random length, reward denominator 845, episodes
    cut at 96 steps, 3 x 3 view). The scored decision is the turn at the split
    (``minigrid_memory.generate``). Observations are :func:`one_hot_view` encoded.
    """

    size: int
    random_length: bool = True
    max_steps: int = minigrid_memory.AUTHORS_MAX_STEPS
    time_limit: int = minigrid_memory.AUTHORS_TIME_LIMIT
    view_size: int = minigrid_memory.AUTHORS_VIEW_SIZE
    initial_rtg: float = 1.0

    def __post_init__(self):
        self.params()  # validates size, time_limit and view_size, naming the field

    env = OneHotMemoryEnv()
    num_actions = minigrid_memory.NUM_ACTIONS

    @property
    def obs_dim(self) -> int:
        return self.view_size ** 2 * len(OBJECTS)

    @property
    def oracle_steps(self) -> int:
        return minigrid_memory.oracle_max_steps(self.size)

    def params(self) -> minigrid_memory.EnvParams:
        return minigrid_memory.make_params(self.size, random_length=self.random_length, max_steps=self.max_steps,
                                           time_limit=self.time_limit,
                                           view_size=self.view_size)

    def env_params(self, num: int) -> minigrid_memory.EnvParams:
        return _broadcast(self.params(), num)

    def data(self, key: jax.Array, num: int, max_steps: int) -> Trajectories:
        traj = minigrid_memory.generate(key, self.env_params(num), max_steps)
        return traj.replace(obs=one_hot_view(traj.obs))

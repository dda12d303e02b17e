"""MiniGrid-Memory as pure gymnax-style functions, its oracle and oracle dataset.

The Memory task of Farama MiniGrid (``minigrid/envs/memory.py``, ``MemoryEnv``), used by
"Recurrent Action Transformer with Memory" (RATE, arXiv 2306.09459) as Minigrid-Memory.
The grid is S x S (S = ``size``, odd), x to the east, y to the south, mid = S // 2::

    ###########   S = 11, h = 8 (fixed length)
    #.......#.#
    #.......#.#    c: the cue (green key or ball) at (1, mid - 1)
    #####...#O#    O: the two end objects at (h + 1, mid -+ 2), one key and one ball
    #c..#####.#    the agent starts at (x0, mid), 1 <= x0 <= h, facing east
    #.........#    success: the cell (h + 1, mid -+ 1) next to the object equal to the cue;
    #...#####.#    failure: the cell next to the other one (both end the episode)
    #####...#O#    (the open cells above and below the room cannot be reached)
    #.......#.#
    #.......#.#
    ###########

with h = ``hallway_end`` = S - 3, or drawn uniformly from {4, ..., S - 3} with
``random_length`` (MiniGrid's ``MemorySxRandom``). The draws are MiniGrid's, in its order:
h, x0 ~ U{1..h}, the cue ~ U{key, ball}, the (north, south) pair ~ U{(ball, key), (key, ball)}.
Note (MiniGrid's code, not its docstring): the start is anywhere along the hallway, so the
cue is in the first view only when x0 = 1; otherwise the agent has to walk back to see it.

Dynamics (``MiniGridEnv.step``): actions 0 left (turn), 1 right (turn), 2 forward (move
unless the cell ahead is a wall or an object); 3 pickup (mapped to toggle by MemoryEnv),
4 drop, 5 toggle, 6 done are no-ops here that still take a step. :data:`NUM_ACTIONS` = 3 is
the reduced action set the RATE authors use (``spaces.Discrete(3)`` in their
``MinigridMemory`` wrapper). The reward is 1 - 0.9 * t / ``max_steps`` on reaching the
success cell at step t, 0 otherwise; the episode ends on success, failure, t >= ``max_steps``
(MiniGrid: 5 S^2) or t >= ``time_limit`` (the authors' wrapper ends episodes at 96 steps).

Observation: MiniGrid's egocentric partial view (``gen_obs_grid``): the ``view_size`` x
``view_size`` square ahead of the agent (agent at column V // 2 of the last row, facing up),
cells outside the grid are walls, occlusion as MiniGrid's ``Grid.process_vis``
(``see_through_walls=False``), each cell encoded as (object, colour, state) with MiniGrid's
indices (unseen 0, empty 1, wall 2, key 5, ball 6; green 1, grey 5; state 0). ``reset`` and
``step`` return it flattened in MiniGrid's ``image`` layout (image[i, j, c] with i the view
column, j the view row), float32 [V * V * 3]. MiniGrid's default view is 7; the authors use 3
(``ViewSizeWrapper(env, 3)``) and render it to RGB (``RGBImgPartialObsWrapper``, 28-pixel
tiles, 84 x 84 x 3); that image is a fixed function of this encoding (the agent is always
drawn at the same place, pointing up), so this encoding carries the same information.

Why our own environment, not a package (checked against the pins jax 0.10.2, flax 0.12.8,
Python 3.11): xminigrid 0.9.3 installs but its ``Memory`` is not MiniGrid's (height fixed at
7, start cell drawn from [1, h), no random length, a transparent view without occlusion, no
state channel) and its ``EnvParams`` sizes are static (``pytree_node=False``: one compilation
per size); navix 4.0.0 has a ``Memory`` environment but requires Python >= 3.12 (the 0.7.x
releases that fit Python 3.11 have none) and also keeps height and width static. Here the
grid is never stored: :func:`cell` evaluates the layout at any coordinates, so ``size``,
``random_length``, ``max_steps`` and ``time_limit`` are array leaves and one compiled program
serves every corridor size (vmap over :class:`EnvParams`); only ``view_size`` is static
(it fixes the observation shape).

The RATE authors' setting (repository CognitiveAISystems/RATE, ``MinigridMemory/``): data from
``MiniGrid-MemoryS13Random-v0`` resized to S = 31 (random length, view 3, 3 actions, episodes
cut at 96 steps, reward denominator 5 * 13^2 = 845 because the size is changed after
construction); evaluation on S = 11, 21, ..., 91 with the same settings, 100 seeds each
(:data:`AUTHORS_EVAL_SIZES`, :func:`authors_params`).

``step`` does not reset automatically; callers stop counting after ``done``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rate_jax.dataset import Trajectories

LEFT, RIGHT, FORWARD = 0, 1, 2
NUM_ACTIONS = 3
EAST, SOUTH, WEST, NORTH = 0, 1, 2, 3
UNSEEN, EMPTY, WALL, KEY, BALL = 0, 1, 2, 5, 6  # MiniGrid's OBJECT_TO_IDX
GREEN, GREY = 1, 5  # MiniGrid's COLOR_TO_IDX
MIN_SIZE = 7

AUTHORS_TRAIN_SIZE = 31
AUTHORS_EVAL_SIZES = (11, 21, 31, 41, 51, 61, 71, 81, 91)
AUTHORS_TIME_LIMIT = 96
AUTHORS_MAX_STEPS = 5 * 13 ** 2
AUTHORS_VIEW_SIZE = 3


@struct.dataclass
class EnvParams:
    """size S [] int32 (odd, >= 7); random_length [] bool; max_steps [] int32 (MiniGrid's,
    the reward denominator and a time limit); time_limit [] int32 (an extra episode cut);
    view_size (static int, odd >= 3: the observation is view_size^2 * 3 numbers)."""

    size: jax.Array
    random_length: jax.Array
    max_steps: jax.Array
    time_limit: jax.Array
    view_size: int = struct.field(pytree_node=False, default=7)


@struct.dataclass
class Layout:
    """MiniGrid's random draws of one episode, all [] int32: hallway_end h, start column x0,
    the cue object and the object at the north end (KEY or BALL; the south one is the other)."""

    hallway_end: jax.Array
    agent_x: jax.Array
    cue: jax.Array
    upper: jax.Array


@struct.dataclass
class EnvState:
    """Position (x, y), direction (0 east, 1 south, 2 west, 3 north), time, the layout
    (hallway_end, cue, upper), all [] int32, and cue_seen, upper_seen [] bool (the cue / the
    north end object has been visible in some observation so far; read only by the oracle)."""

    x: jax.Array
    y: jax.Array
    direction: jax.Array
    time: jax.Array
    hallway_end: jax.Array
    cue: jax.Array
    upper: jax.Array
    cue_seen: jax.Array
    upper_seen: jax.Array


def _concrete(value) -> np.ndarray | None:
    """``value`` as a numpy array, or None under tracing (no check is possible there)."""
    if isinstance(value, jax.core.Tracer):
        return None
    return np.asarray(value)


def _check(field: str, value, ok, allowed: str) -> None:
    arr = _concrete(value)
    if arr is not None and not np.all(ok(arr)):
        raise ValueError(f"minigrid_memory.{field} must be {allowed}, got {arr.tolist()!r}")


def make_params(size, *, random_length=False, max_steps=None, time_limit=None, view_size: int = 7) -> EnvParams:
    """MiniGrid's defaults: ``max_steps`` = 5 S^2, no extra time limit, view 7 (``MemoryEnv``).

    ``size`` may be an array of sizes (the leaves then have its shape, ready for vmap).
    """
    if not isinstance(view_size, int) or view_size < 3 or view_size % 2 == 0:
        raise ValueError(f"minigrid_memory.view_size must be an odd integer >= 3, got {view_size!r}")
    _check("size", size, lambda s: (s >= MIN_SIZE) & (s % 2 == 1), f"odd integers >= {MIN_SIZE}")
    size = jnp.asarray(size, jnp.int32)
    max_steps = 5 * size ** 2 if max_steps is None else jnp.broadcast_to(jnp.asarray(max_steps, jnp.int32), size.shape)
    time_limit = max_steps if time_limit is None else jnp.broadcast_to(jnp.asarray(time_limit, jnp.int32), size.shape)
    _check("max_steps", max_steps, lambda m: m >= 1, "integers >= 1")
    _check("time_limit", time_limit, lambda m: m >= 1, "integers >= 1")
    random_length = jnp.broadcast_to(jnp.asarray(random_length, bool), size.shape)
    return EnvParams(size=size, random_length=random_length, max_steps=max_steps, time_limit=time_limit,
                     view_size=view_size)


def authors_params(size) -> EnvParams:
    """The RATE authors' evaluation environment at side ``size``: ``MemoryS13Random`` resized
    (random length), view 3, episodes cut at 96 steps, reward 1 - 0.9 t / 845."""
    return make_params(size, random_length=True, max_steps=AUTHORS_MAX_STEPS, time_limit=AUTHORS_TIME_LIMIT,
                       view_size=AUTHORS_VIEW_SIZE)


def sample_layout(key: jax.Array, params: EnvParams) -> Layout:
    """MiniGrid's ``_gen_grid`` draws: h = S - 3 or U{4..S-3}, x0 ~ U{1..h}, cue, north object."""
    k_len, k_x, k_cue, k_pair = jax.random.split(key, 4)
    size = params.size
    hallway_end = jnp.where(params.random_length, jax.random.randint(k_len, (), 4, size - 2), size - 3)
    agent_x = jax.random.randint(k_x, (), 1, hallway_end + 1)
    cue = jnp.where(jax.random.bernoulli(k_cue), BALL, KEY)
    upper = jnp.where(jax.random.bernoulli(k_pair), KEY, BALL)
    return Layout(hallway_end=hallway_end.astype(jnp.int32), agent_x=agent_x.astype(jnp.int32),
                  cue=cue.astype(jnp.int32), upper=upper.astype(jnp.int32))


def cell(x: jax.Array, y: jax.Array, state: EnvState, params: EnvParams) -> jax.Array:
    """Object index at world cells (x, y) (any broadcastable shapes) of ``MemoryEnv._gen_grid``.

    Walls: the border, outside the grid (MiniGrid's ``Grid.slice``), the start room
    (1 <= x <= 4 at y = mid -+ 2, and (4, mid -+ 1)), the hallway (5 <= x < h at y = mid -+ 1),
    the split (x = h except y = mid, and x = h + 2); objects are set last, as in MiniGrid.
    """
    size, h = params.size, state.hallway_end
    mid = size // 2
    inside = (x >= 0) & (x < size) & (y >= 0) & (y < size)
    border = (x == 0) | (x == size - 1) | (y == 0) | (y == size - 1)
    room = ((x >= 1) & (x <= 4) & (jnp.abs(y - mid) == 2)) | ((x == 4) & (jnp.abs(y - mid) == 1))
    hallway = (x >= 5) & (x < h) & (jnp.abs(y - mid) == 1)
    split = ((x == h) & (y != mid)) | (x == h + 2)
    wall = ~inside | border | room | hallway | split
    lower = KEY + BALL - state.upper
    obj = jnp.where(wall, WALL, EMPTY)
    obj = jnp.where((x == 1) & (y == mid - 1), state.cue, obj)
    obj = jnp.where((x == h + 1) & (y == mid - 2), state.upper, obj)
    return jnp.where((x == h + 1) & (y == mid + 2), lower, obj)


def visibility(see_behind: jax.Array) -> jax.Array:
    """MiniGrid's ``Grid.process_vis`` on the upright view [V, V] (index [column, row]), agent at
    (V // 2, V - 1); ``see_behind`` is False at walls.

    MiniGrid walks the rows from the agent's outwards; in each row a left-to-right sweep, then a
    right-to-left sweep: a visible cell that does not block makes its side neighbour visible,
    and the cell ahead of both. Here each sweep is done at once: with c[x] the number of
    blocking cells among columns 0..x-1, the left-to-right sweep reaches column k from a
    visible i <= k iff c[k] = c[i] (no blocker in i..k-1), the right-to-left sweep reaches k
    from i >= k iff c[i+1] = c[k+1] (none in k+1..i); the row ahead then receives, from each
    visible non-blocking i, columns i and i + 1 (first sweep, i < V - 1) and i and i - 1
    (second sweep, i > 0). V is static, so the row loop unrolls at trace time.
    """
    v = see_behind.shape[0]
    col = np.arange(v)
    upto, from_right = col[:, None] <= col[None, :], col[:, None] >= col[None, :]  # [i, k]
    seed = jnp.zeros(v, bool).at[v // 2].set(True)
    rows = []
    for j in reversed(range(v)):
        sb = see_behind[:, j]
        c = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(~sb)])
        first = jnp.any(seed[:, None] & upto & (c[None, :v] == c[:v, None]), axis=0)
        row = jnp.any(first[:, None] & from_right & (c[1:, None] == c[None, 1:]), axis=0)
        rows.append(row)
        g1 = first & sb & (col < v - 1)
        g2 = row & sb & (col > 0)
        no = jnp.zeros(1, bool)
        seed = g1 | g2 | jnp.concatenate([no, g1[:-1]]) | jnp.concatenate([g2[1:], no])
    return jnp.stack(rows[::-1], axis=1)


def _direction_vector(direction: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MiniGrid's ``DIR_TO_VEC[direction]``: (1, 0), (0, 1), (-1, 0), (0, -1) for east, south, west, north."""
    return ((direction == EAST).astype(jnp.int32) - (direction == WEST),
            (direction == SOUTH).astype(jnp.int32) - (direction == NORTH))


def view(state: EnvState, params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """(image int32 [V, V, 3] as MiniGrid's ``gen_obs``, cue visible [] bool, north end object
    visible [] bool).

    View cell (i, j) is f = V - 1 - j cells ahead and l = i - V // 2 cells to the right of the
    agent (MiniGrid's ``get_view_exts`` + ``slice`` + ``rotate_left`` (dir + 1) times).
    """
    v = params.view_size
    ahead = (v - 1 - np.arange(v))[None, :]
    right = (np.arange(v) - v // 2)[:, None]
    dx, dy = _direction_vector(state.direction)
    wx = state.x + ahead * dx - right * dy  # the agent's right is (-dy, dx) with y pointing south
    wy = state.y + ahead * dy + right * dx
    obj = cell(wx, wy, state, params)
    visible = visibility(obj != WALL)
    colour = jnp.where(obj == WALL, GREY, jnp.where(obj == EMPTY, 0, GREEN))
    image = jnp.where(visible[..., None], jnp.stack([obj, colour, jnp.zeros_like(obj)], -1), UNSEEN)
    mid = params.size // 2
    cue_visible = jnp.any(visible & (wx == 1) & (wy == mid - 1))
    upper_visible = jnp.any(visible & (wx == state.hallway_end + 1) & (wy == mid - 2))
    return image.astype(jnp.int32), cue_visible, upper_visible


def _observe(state: EnvState, params: EnvParams) -> tuple[jax.Array, EnvState]:
    image, cue_visible, upper_visible = view(state, params)
    return image.reshape(-1).astype(jnp.float32), state.replace(cue_seen=state.cue_seen | cue_visible,
                                                                upper_seen=state.upper_seen | upper_visible)


def reset_to(layout: Layout, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """Start of the episode drawn as ``layout``: agent at (x0, mid) facing east, time 0."""
    mid = (params.size // 2).astype(jnp.int32)
    state = EnvState(x=layout.agent_x, y=mid, direction=jnp.int32(EAST), time=jnp.int32(0),
                     hallway_end=layout.hallway_end, cue=layout.cue, upper=layout.upper,
                     cue_seen=jnp.zeros((), bool), upper_seen=jnp.zeros((), bool))
    return _observe(state, params)


def reset(key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """A new episode with MiniGrid's draws (:func:`sample_layout`)."""
    return reset_to(sample_layout(key, params), params)


def success_y(state: EnvState, params: EnvParams) -> jax.Array:
    """Row of the success cell (h + 1, mid -+ 1): next to the end object equal to the cue."""
    mid = params.size // 2
    return jnp.where(state.cue == state.upper, mid - 1, mid + 1)


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """One ``MemoryEnv.step``; returns (obs, state, reward, done, {"success": bool, "chose": bool})
    (chose: the agent stepped beside an end object, the success or the failure cell, which ends
    the episode; success: beside the one equal to the cue).

    ``key`` is unused (the dynamics are deterministic); it keeps the gymnax signature.
    """
    del key
    action = jnp.asarray(action, jnp.int32)
    dx, dy = _direction_vector(state.direction)
    fx, fy = state.x + dx, state.y + dy
    move = (action == FORWARD) & (cell(fx, fy, state, params) == EMPTY)
    turn = jnp.where(action == LEFT, -1, jnp.where(action == RIGHT, 1, 0))
    state = state.replace(x=jnp.where(move, fx, state.x), y=jnp.where(move, fy, state.y),
                          direction=(state.direction + turn) % 4, time=state.time + 1)
    at_split = state.x == state.hallway_end + 1
    good_y = success_y(state, params)
    success = at_split & (state.y == good_y)
    failure = at_split & (state.y == params.size - 1 - good_y)
    reward = jnp.where(success, 1.0 - 0.9 * state.time / params.max_steps, 0.0)
    done = success | failure | (state.time >= params.max_steps) | (state.time >= params.time_limit)
    obs, state = _observe(state, params)
    return obs, state, reward.astype(jnp.float32), done, {"success": success, "chose": success | failure}


def oracle_action(state: EnvState, params: EnvParams) -> jax.Array:
    """Oracle that always succeeds when the time limit allows (:func:`oracle_max_steps`).

    It acts as an agent with a perfect memory of what it has seen: until the cue has been
    seen, face west and walk back; then face east and walk to the split (h + 1, mid); there,
    face north until the north end object has been seen (with a 3 x 3 view it comes into
    view only then), then face the success side and step onto it. Turns take the shorter
    way round (left on a half turn). It reads the layout only through ``cue_seen`` and
    ``upper_seen``, so each action is a function of the observations so far (tested): a
    model imitating it can, in principle, match every action. (An oracle that turned to the
    success side straight away would choose before the end objects are in a 3 x 3 view, by
    information no observation holds, and cap any imitation at 50%.)
    """
    mid = params.size // 2
    at_split = state.x == state.hallway_end + 1
    side = jnp.where(~state.upper_seen, NORTH, jnp.where(success_y(state, params) < mid, NORTH, SOUTH))
    target = jnp.where(~state.cue_seen, WEST, jnp.where(at_split, side, EAST))
    diff = (target - state.direction) % 4
    return jnp.where(diff == 0, FORWARD, jnp.where(diff == 1, RIGHT, LEFT)).astype(jnp.int32)


def oracle_max_steps(size) -> int:
    """Longest oracle episode on side ``size`` (any view >= 3): start at x0 = h = S - 3, half
    turn, walk back to x = 3 (the cue enters a 3-wide view), half turn, walk to h + 1, turn
    north (the north object enters the view), half turn to the south, step:
    2 + (h - 3) + 2 + (h - 2) + 1 + 2 + 1 = 2h + 3 steps."""
    return 2 * (int(np.max(np.asarray(size))) - 3) + 3


def _episode(key: jax.Array, params: EnvParams, num_steps: int):
    obs0, state0 = reset(key, params)

    def body(carry, _):
        obs, state, done = carry
        action = oracle_action(state, params)
        next_obs, next_state, reward, step_done, _ = step(None, state, action, params)
        live = ~done
        record = (obs, action * live, reward * live, live.astype(jnp.float32),
                  live & (state.x == state.hallway_end + 1) & state.upper_seen)
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(done, b, a), new, old)
        return (keep(next_obs, obs), keep(next_state, state), done | step_done), record

    init = (obs0, state0, jnp.zeros((), bool))
    _, (obs, actions, rewards, mask, at_split) = jax.lax.scan(body, init, None, length=num_steps)
    rtg = jnp.cumsum(rewards[::-1])[::-1]
    goal_north = state0.cue == state0.upper
    return Trajectories(obs=obs, actions=actions.astype(jnp.int32), rtg=rtg, action_mask=mask,
                        corridor_length=jnp.argmax(at_split).astype(jnp.int32),
                        goal_y=jnp.where(goal_north, 1, -1).astype(jnp.int32))


def generate(key: jax.Array, params: EnvParams, num_steps: int) -> Trajectories:
    """One oracle episode per entry of ``params`` (leaves [B]), padded to ``num_steps``, in the
    layout of :func:`rate_jax.dataset.generate` (jit and vmap over episodes).

    obs [B, T, V*V*3]; actions [B, T] int32 (0 where absent); rtg [B, T]: the return still to
    come, sum_{k >= t} r_k (the authors' ``discount_cumsum`` with gamma = 1), so rtg[:, 0] is
    the episode return and 0 from the final observation on; action_mask [B, T]: 1 while the
    episode runs, 0 at the final observation (recorded) and in padding (which repeats it).
    The two extra fields of :class:`~rate_jax.dataset.Trajectories` keep the meaning that
    :func:`rate_jax.train.make_validate` reads: ``corridor_length`` [B] is the index of the
    memory-dependent decision (the first observation at the split with the north object
    seen, where the oracle heads for the success side: forward to the north, or the first
    turn of a half turn to the south) and ``goal_y`` [B] is +1 if the success side is north, else -1.
    ``num_steps`` must exceed :func:`oracle_max_steps` so that every episode ends in it.
    """
    if not isinstance(num_steps, int) or num_steps < 2:
        raise ValueError(f"minigrid_memory.num_steps must be an integer >= 2, got {num_steps!r}")
    sizes = _concrete(params.size)
    if sizes is not None and num_steps <= oracle_max_steps(sizes):
        raise ValueError(f"minigrid_memory.num_steps must be > {oracle_max_steps(sizes)} (the longest oracle "
                         f"episode at size {int(np.max(sizes))}), got {num_steps}")
    keys = jax.random.split(key, params.size.shape[0])
    return jax.vmap(_episode, in_axes=(0, 0, None))(keys, params, num_steps)

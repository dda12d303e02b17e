"""MiniGrid-Memory (rate_jax.minigrid_memory) against a numpy MemoryEnv, hand-worked views and the oracle.

The numpy reference below rebuilds Farama MiniGrid's ``MemoryEnv`` the way MiniGrid does it: an
explicit grid from ``_gen_grid`` (same draws, injected), ``gen_obs_grid`` as ``slice`` +
``rotate_left`` (dir + 1 times) + ``process_vis`` + ``encode``, and ``MiniGridEnv.step``.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import minigrid_memory as mm
from rate_jax import train
from rate_jax.minigrid_memory import BALL, EMPTY, FORWARD, KEY, LEFT, RIGHT, UNSEEN, WALL

DX, DY = (1, 0, -1, 0), (0, 1, 0, -1)
COLOUR = {EMPTY: 0, WALL: 5, KEY: 1, BALL: 1}


# ----------------------------------------------------------------------------- numpy MemoryEnv
def ref_grid(size, hallway_end, cue, upper):
    """``MemoryEnv._gen_grid`` on an explicit [x, y] grid of object indices (EMPTY = None)."""
    g = np.full((size, size), EMPTY)
    g[:, 0] = g[:, -1] = g[0, :] = g[-1, :] = WALL
    mid = size // 2
    for i in range(1, 5):
        g[i, mid - 2] = g[i, mid + 2] = WALL
    g[4, mid - 1] = g[4, mid + 1] = WALL
    for i in range(5, hallway_end):
        g[i, mid - 1] = g[i, mid + 1] = WALL
    for j in range(size):
        if j != mid:
            g[hallway_end, j] = WALL
        g[hallway_end + 2, j] = WALL
    g[1, mid - 1] = cue
    g[hallway_end + 1, mid - 2] = upper
    g[hallway_end + 1, mid + 2] = KEY + BALL - upper
    return g


def ref_obs(g, x, y, d, v):
    """``gen_obs_grid`` + ``encode``: image [v, v, 3] (uint-valued ints)."""
    size = g.shape[0]
    top = {0: (x, y - v // 2), 1: (x - v // 2, y), 2: (x - v + 1, y - v // 2), 3: (x - v // 2, y - v + 1)}[d]
    sub = np.full((v, v), WALL)
    for j in range(v):
        for i in range(v):
            gx, gy = top[0] + i, top[1] + j
            if 0 <= gx < size and 0 <= gy < size:
                sub[i, j] = g[gx, gy]
    for _ in range(d + 1):  # rotate_left: new[j, v - 1 - i] = old[i, j]
        new = np.empty_like(sub)
        for i in range(v):
            for j in range(v):
                new[j, v - 1 - i] = sub[i, j]
        sub = new
    mask = np.zeros((v, v), bool)  # process_vis
    mask[v // 2, v - 1] = True
    for j in reversed(range(v)):
        for i in range(v - 1):
            if mask[i, j] and sub[i, j] != WALL:
                mask[i + 1, j] = True
                if j > 0:
                    mask[i + 1, j - 1] = mask[i, j - 1] = True
        for i in reversed(range(1, v)):
            if mask[i, j] and sub[i, j] != WALL:
                mask[i - 1, j] = True
                if j > 0:
                    mask[i - 1, j - 1] = mask[i, j - 1] = True
    sub[v // 2, v - 1] = EMPTY  # nothing carried
    image = np.zeros((v, v, 3), int)
    for i in range(v):
        for j in range(v):
            if mask[i, j]:
                image[i, j] = (sub[i, j], COLOUR[int(sub[i, j])], 0)
    return image


def ref_episode(size, hallway_end, x0, cue, upper, actions, view, max_steps, time_limit):
    """Replay ``actions`` in the numpy MemoryEnv; returns (images [n+1], rewards [n], dones [n]) up to done."""
    g = ref_grid(size, hallway_end, cue, upper)
    mid = size // 2
    x, y, d, t = x0, mid, 0, 0
    good = (hallway_end + 1, mid - 1) if cue == upper else (hallway_end + 1, mid + 1)
    bad = (hallway_end + 1, 2 * mid - good[1])
    images, rewards, dones = [ref_obs(g, x, y, d, view)], [], []
    for a in actions:
        t += 1
        fx, fy = x + DX[d], y + DY[d]
        if a == 0:
            d = (d - 1) % 4
        elif a == 1:
            d = (d + 1) % 4
        elif a == 2 and g[fx, fy] == EMPTY:
            x, y = fx, fy
        reward, done = 0.0, t >= max_steps or t >= time_limit
        if (x, y) == good:
            reward, done = 1 - 0.9 * (t / max_steps), True
        if (x, y) == bad:
            reward, done = 0.0, True
        images.append(ref_obs(g, x, y, d, view))
        rewards.append(reward)
        dones.append(done)
        if done:
            break
    return np.array(images), np.array(rewards), np.array(dones)


# ----------------------------------------------------------------------------- JAX helpers
step = jax.jit(mm.step)  # one compilation per view size, shared by the hand-worked tests
reset_to = jax.jit(mm.reset_to)
oracle_action = jax.jit(mm.oracle_action)


def layout(h, x0, cue, upper):
    return mm.Layout(hallway_end=jnp.int32(h), agent_x=jnp.int32(x0), cue=jnp.int32(cue), upper=jnp.int32(upper))


def rollout(params, lay, actions):
    """JAX episode from ``reset_to(lay)`` under fixed ``actions``: (images [T+1, V, V, 3], rewards [T], dones [T])."""
    v = params.view_size
    obs, state = reset_to(lay, params)
    images, rewards, dones = [obs], [], []
    for a in actions:
        obs, state, r, d, _ = step(None, state, jnp.int32(a), params)
        images.append(obs)
        rewards.append(r)
        dones.append(d)
    return np.asarray(jnp.stack(images)).reshape(-1, v, v, 3), np.asarray(rewards), np.asarray(dones)


@jax.jit
def policy_rollouts(keys, params, eps, num_random, blind):
    """One episode per row of ``keys`` [B, T + 1] (params leaves [B]), layout by ``sample_layout``.

    Actions: with probability ``eps`` uniform over ``num_random`` actions, else the oracle; with
    ``blind`` the oracle ignores the cue (always heads for the key). Returns (layouts, actions [B, T],
    images [B, T + 1, V, V, 3], rewards [B, T], dones [B, T]); steps after done are not frozen.
    """
    v = params.view_size

    def episode(ks, p):
        lay = mm.sample_layout(ks[0], p)
        obs0, state = mm.reset_to(lay, p)

        def body(s, k):
            k_u, k_a = jax.random.split(k)
            seen = s.replace(cue=jnp.where(blind, KEY, s.cue), cue_seen=s.cue_seen | blind)
            a = jnp.where(jax.random.uniform(k_u) < eps, jax.random.randint(k_a, (), 0, num_random),
                          mm.oracle_action(seen, p))
            obs, s, r, d, _ = mm.step(None, s, a, p)
            return s, (a, obs, r, d)

        _, (acts, obs, rew, done) = jax.lax.scan(body, state, ks[1:])
        return lay, acts, jnp.concatenate([obs0[None], obs]).reshape(-1, v, v, 3), rew, done

    return jax.vmap(episode)(keys, params)


NUM, HORIZON = 48, 70  # one compiled policy_rollouts per view size


def rollout_keys(seed):
    return jax.random.split(jax.random.key(seed), NUM * (HORIZON + 1)).reshape(NUM, HORIZON + 1)


def won(rewards, dones):
    """Per episode: the first done step has a positive reward."""
    dones = np.asarray(dones)
    first = np.argmax(dones, axis=1)
    return dones.any(1) & (np.asarray(rewards)[np.arange(len(first)), first] > 0)


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("view", [3, 7])
def test_matches_numpy_memoryenv_side_by_side(view):
    """Whole episodes (obs, reward, done) under an epsilon-oracle over all 7 actions, mixed sizes."""
    num = NUM
    sizes = np.array([7, 9, 11, 13, 15, 17] * 8)
    random_length = np.arange(num) % 3 == 0
    params = mm.make_params(sizes, random_length=random_length, time_limit=np.where(np.arange(num) % 5 == 0, 20, 10**6),
                            view_size=view)
    lays, actions, images, rewards, dones = jax.tree.map(
        np.asarray, policy_rollouts(rollout_keys(view), params, 0.3, 7, False))
    outcomes = set()
    for b in range(num):
        lay = jax.tree.map(lambda a, b=b: int(a[b]), lays)
        ref_img, ref_rew, ref_done = ref_episode(
            int(sizes[b]), lay.hallway_end, lay.agent_x, lay.cue, lay.upper, actions[b], view,
            int(params.max_steps[b]), int(params.time_limit[b]))
        n = len(ref_rew)
        np.testing.assert_array_equal(images[b, :n + 1], ref_img, err_msg=f"episode {b}")
        np.testing.assert_allclose(rewards[b, :n], ref_rew, rtol=1e-6, err_msg=f"episode {b}")
        np.testing.assert_array_equal(dones[b, :n], ref_done, err_msg=f"episode {b}")
        outcomes.add("success" if ref_rew[-1] > 0 else "fail/timeout" if ref_done[-1] else "running")
    assert outcomes >= {"success", "fail/timeout"}  # both endings were compared


def test_sample_layout_follows_minigrid_draws():
    n = 600
    keys = jax.random.split(jax.random.key(1), n)
    for random_length in (False, True):
        params = mm.make_params(np.full(n, 13), random_length=random_length)
        lay = jax.jit(jax.vmap(mm.sample_layout))(keys, params)
        h, x0 = np.asarray(lay.hallway_end), np.asarray(lay.agent_x)
        assert set(h) == (set(range(4, 11)) if random_length else {10})  # rand_int(4, width - 2) or width - 3
        assert np.all((x0 >= 1) & (x0 <= h)) and np.any(x0 == h) and np.any(x0 == 1)  # rand_int(1, h + 1)
        assert set(np.asarray(lay.cue)) == set(np.asarray(lay.upper)) == {KEY, BALL}


def test_hand_worked_views():
    """S = 11, h = 8 (module docstring's map): the cue in the first view only from the room; the end."""
    p3 = mm.make_params(11, view_size=3)
    empty, wall, key = [EMPTY, 0, 0], [WALL, 5, 0], [KEY, 1, 0]
    obs, state = reset_to(layout(8, 1, KEY, BALL), p3)
    img = np.asarray(obs).reshape(3, 3, 3)
    # facing east at (1, 5): column 0 is the agent's left (y = 4), row 2 the agent's own row
    assert img[0, 2].tolist() == key and bool(state.cue_seen)
    assert all(img[i, j].tolist() == empty for i in range(3) for j in range(3) if (i, j) != (0, 2))
    # walking east: the cue is out of view from x = 2 on, and no object shows before the split
    for x in range(2, 10):
        obs, state, _, _, _ = step(None, state, FORWARD, p3)
        img = np.asarray(obs).reshape(3, 3, 3)
        assert int(state.x) == x and not np.isin(img[..., 0], [KEY, BALL]).any()
        if 5 <= x <= 6:  # hallway (x + 2 <= 8): walls on both sides, open ahead
            assert img[0].tolist() == [wall] * 3 and img[2].tolist() == [wall] * 3 and img[1].tolist() == [empty] * 3
    # from the hallway the cue is never in the first view
    _, state = reset_to(layout(8, 6, KEY, BALL), p3)
    assert not bool(state.cue_seen)
    # view 3 at the split: north shows the north object two cells ahead, south the south one
    at_split = reset_to(layout(8, 9, KEY, BALL), p3)[1]
    north = step(None, at_split, LEFT, p3)[0].reshape(3, 3, 3)
    south = step(None, at_split, RIGHT, p3)[0].reshape(3, 3, 3)
    assert north[1, 0].tolist() == [BALL, 1, 0] and south[1, 0].tolist() == key
    # view 7 (MiniGrid's default) at the split facing east: both end objects in the agent's row
    p7 = mm.make_params(11)
    img = np.asarray(reset_to(layout(8, 9, KEY, BALL), p7)[0]).reshape(7, 7, 3)
    assert img[1, 6].tolist() == [BALL, 1, 0] and img[5, 6].tolist() == key
    # occlusion, view 7 facing north at the split (9, 5): (9, 3) is the north object; (7, 3) is
    # empty but behind the split wall (unseen); (6, 5) is seen through the opening at (8, 5)
    img = np.asarray(step(None, reset_to(layout(8, 9, KEY, BALL), p7)[1], LEFT, p7)[0]).reshape(7, 7, 3)
    assert img[3, 4].tolist() == [BALL, 1, 0] and img[1, 4].tolist() == [UNSEEN, 0, 0]
    assert img[0, 6].tolist() == empty and img[2, 5].tolist() == wall


def test_hand_worked_dynamics_and_reward():
    """S = 7, h = 4, cue = north object = key: success at (5, 2) after 6 steps, failure at (5, 4)."""
    params = mm.make_params(7, view_size=3)  # max_steps = 245
    _, s0 = reset_to(layout(4, 1, KEY, KEY), params)
    s = step(None, s0, LEFT, params)[1]
    assert int(s.direction) == mm.NORTH and (int(s.x), int(s.y)) == (1, 3)
    s = step(None, s, FORWARD, params)[1]  # the cue blocks the way
    assert (int(s.x), int(s.y), int(s.time)) == (1, 3, 2)
    assert int(step(None, s0, RIGHT, params)[1].direction) == mm.SOUTH
    for a in (3, 4, 5, 6):  # pickup (-> toggle), drop, toggle, done: no-ops that take a step
        s = step(None, s0, a, params)[1]
        assert (int(s.x), int(s.y), int(s.direction), int(s.time)) == (1, 3, mm.EAST, 1)
    path = [FORWARD] * 4 + [LEFT, FORWARD]
    _, rew, done = rollout(params, layout(4, 1, KEY, KEY), jnp.asarray(path))
    assert np.asarray(done).tolist() == [False] * 5 + [True]
    np.testing.assert_allclose(np.asarray(rew), [0] * 5 + [1 - 0.9 * 6 / 245], rtol=1e-6)
    _, rew, done = rollout(params, layout(4, 1, KEY, KEY), jnp.asarray([FORWARD] * 4 + [RIGHT, FORWARD]))
    assert bool(done[-1]) and float(rew[-1]) == 0.0 and not np.asarray(done[:-1]).any()
    _, rew, done = rollout(params, layout(4, 1, BALL, KEY), jnp.asarray(path))  # cue = ball: north is wrong
    assert bool(done[-1]) and float(rew[-1]) == 0.0
    cut = mm.make_params(7, time_limit=5, view_size=3)
    _, rew, done = rollout(cut, layout(4, 1, KEY, KEY), jnp.asarray(path))
    assert np.asarray(done).tolist()[:5] == [False] * 4 + [True] and float(rew[:5].sum()) == 0.0


def test_oracle_dataset_always_succeeds_and_matches_layout():
    sizes = np.array([7, 9, 11, 15, 21, 31] * 6)
    params = mm.make_params(sizes, random_length=np.arange(sizes.size) % 2 == 0, view_size=3)
    t_max = 60  # > oracle_max_steps(31) = 59, and 6 segments of 10
    traj = jax.jit(mm.generate, static_argnums=2)(jax.random.key(3), params, t_max)
    b = sizes.size
    assert traj.obs.shape == (b, t_max, 27) and traj.actions.dtype == jnp.int32 and traj.rtg.shape == (b, t_max)
    mask, rtg, actions, obs = (np.asarray(a) for a in (traj.action_mask, traj.rtg, traj.actions, traj.obs))
    decision, goal_y = np.asarray(traj.corridor_length), np.asarray(traj.goal_y)
    steps = mask.sum(1).astype(int)
    assert np.all(steps <= mm.oracle_max_steps(sizes)) and np.all(mask[:, -1] == 0)
    np.testing.assert_allclose(rtg[:, 0], 1 - 0.9 * steps / (5 * sizes ** 2), rtol=1e-5)  # every episode won
    for i in range(b):
        n = steps[i]
        assert mask[i, :n].all() and not mask[i, n:].any() and not rtg[i, n:].any() and not actions[i, n:].any()
        np.testing.assert_allclose(rtg[i, :n], rtg[i, 0])  # the one reward comes with the last action
        assert np.all(obs[i, n:] == obs[i, n])  # padding repeats the final obs
        assert set(actions[i, :n]) <= {LEFT, RIGHT, FORWARD}
        # the decision (first observation at the split with the north object seen): the shortest way to
        # the success side, from facing east (object seen before the split) or north (after turning to it)
        rest = actions[i, decision[i]:n].tolist()
        assert rest in ([[LEFT, FORWARD], [FORWARD]] if goal_y[i] == 1 else [[RIGHT, FORWARD], [LEFT, LEFT, FORWARD]])
        assert actions[i, decision[i] - 1] == LEFT or rest[0] != FORWARD  # FORWARD only after turning north
    # the longest episode (start at x0 = h = S - 3, view 3) meets the bound exactly
    worst = mm.make_params(31, view_size=3)
    _, s = reset_to(layout(28, 28, KEY, BALL), worst)
    for _ in range(mm.oracle_max_steps(31)):
        _, s, _, done, info = step(None, s, oracle_action(s, worst), worst)
    assert bool(done) and bool(info["success"]) and int(s.time) == 59
    # consumable by the trainer as rate_jax.dataset.Trajectories
    segs = train.to_segments(traj, 10)
    assert segs.obs.shape == (6, b, 10, 27) and segs.action_known.shape == (6, b, 10)


def test_oracle_acts_on_the_observations_so_far():
    """The four (cue, north object) layouts of each start: while two episodes have seen the same
    observations, the oracle takes the same action (it uses no information the agent lacks), and
    the episodes whose layouts differ do part (so the test compares real decisions)."""
    params = mm.make_params(11, view_size=3)
    for h, x0 in [(8, 1), (8, 8), (5, 3), (4, 4)]:
        runs = []
        for cue in (KEY, BALL):
            for upper in (KEY, BALL):
                _, s = reset_to(layout(h, x0, cue, upper), params)
                obs, actions = [np.asarray(mm.view(s, params)[0])], []
                for _ in range(mm.oracle_max_steps(11)):
                    a = int(oracle_action(s, params))
                    actions.append(a)
                    _, s, _, done, _ = step(None, s, a, params)
                    obs.append(np.asarray(mm.view(s, params)[0]))
                    if bool(done):
                        break
                runs.append((obs, actions))
        parted = 0
        for (o1, a1) in runs:
            for (o2, a2) in runs:
                t = 0
                while t < min(len(a1), len(a2)) and np.array_equal(o1[t], o2[t]):
                    assert a1[t] == a2[t]
                    t += 1
                parted += a1 != a2
        assert parted == 8  # every pair of different layouts ends with different actions


def test_random_policy_far_below_oracle_and_cue_blind_at_chance():
    """The authors' setting at S = 31, random length, view 3: the oracle always wins, the cue-blind oracle
    wins half, a uniform random policy over the 3 actions ~0.1 (random walks reach short hallways' split)."""
    params = mm.authors_params(np.full(NUM, mm.AUTHORS_TRAIN_SIZE))
    rates = {}
    for name, eps, blind in [("oracle", 0.0, False), ("blind", 0.0, True), ("random", 1.0, False)]:
        wins = [won(*policy_rollouts(rollout_keys(10 * seed), params, eps, mm.NUM_ACTIONS, blind)[3:])
                for seed in range(1, 5)]  # 4 x 48 episodes of 70 steps (< 96; the oracle needs <= 59)
        rates[name] = np.mean(wins)
    assert rates["oracle"] == 1.0
    assert 0.38 < rates["blind"] < 0.62
    assert rates["random"] < 0.2


def test_bad_input_names_the_field():
    for kwargs, field in [(dict(size=8), "size"), (dict(size=5), "size"), (dict(size=9, view_size=4), "view_size"),
                          (dict(size=9, max_steps=0), "max_steps"), (dict(size=9, time_limit=0), "time_limit")]:
        with pytest.raises(ValueError, match=field):
            mm.make_params(**kwargs)
    with pytest.raises(ValueError, match="num_steps"):
        mm.generate(jax.random.key(0), mm.make_params(np.array([11, 21])), 37)  # 2 * 18 + 1 = 37 steps + the final obs

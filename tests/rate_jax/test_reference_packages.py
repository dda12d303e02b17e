"""The JAX memory tasks against their reference packages: popgym 1.0.7 and minigrid 3.2.0, step for step.

``tests/rate_jax/test_popgym.py`` and ``test_minigrid_memory.py`` compare the JAX environments with
numpy ports written in this repository; here the packages themselves (pinned in the ``test`` extra)
are stepped beside ours. The random draws cannot be shared (``jax.random`` here, numpy's
``Generator`` there), so each episode starts from the reference's reset: its hidden state is read
and our state is built to match it (the small adapters below), then one action sequence is played
in both and every observation, reward and termination is compared. The draws themselves are
compared as distributions (``test_*_draws_*``): frequencies over many resets of each side against
the exact value that the package's code implies, within 4 binomial standard errors of the sample
size (about 6e-5 two-sided per comparison, about 2e-3 over the file's 38 comparisons).

POPGym (:mod:`rate_jax.popgym`; the studies' tasks and level: ``rate.popgym`` QUICK and FULL run
RepeatPrevious, Autoencode and CountRecall at ``easy``; medium and hard are compared too). State:
the reference's shuffled ``deck.idx`` (two decks for CountRecall), dealt from its end, so our deal
order is ``idx[::-1]``. Actions: per step the oracle's answer (read from our state) or a uniformly
random one, half and half from a seeded numpy generator, so that both signs of the reward occur.
Documented differences, tested as mappings (module docstring and docs/rate.md section 11):

* observations are one-hot vectors instead of the reference's integer spaces: RepeatPrevious
  ``suit`` -> one-hot [4]; Autoencode ``(mode, suit)`` -> ``[mode, one-hot suit]`` [5];
  CountRecall ``[value, query]`` -> ``[one-hot value, one-hot query]`` over 13 slots each [26];
* CountRecall has 27 actions at every level (the reference 27, 27, 17): actions up to 26 are
  played in both, and one above the level's largest count is scored wrong by both;
* the reference never truncates (no time limit is registered): ``truncated`` is always False and
  ``terminated`` is our ``done``; the episode lengths (``max_episode_length``) agree.

MiniGrid-Memory (:mod:`rate_jax.minigrid_memory`). State: the layout of ``MemoryEnv._gen_grid``
(hallway end ``success_pos[0] - 1``, start ``agent_pos``, the cue at ``(1, mid - 1)``, the north
end object) becomes a :class:`~rate_jax.minigrid_memory.Layout` for ``reset_to``; the whole grid
(``Grid.encode``) is compared with :func:`~rate_jax.minigrid_memory.cell` first. Actions: a random
sequence, our oracle (reaches the success end) and our oracle with the cue swapped (reaches the
failure end); the oracle's actions are computed in JAX and replayed in the package. Two settings:
the RATE authors' (``authors_params`` at every size of ``AUTHORS_EVAL_SIZES``: random length, view
3, 3 actions, reward denominator 845) and MiniGrid's own (view 7, fixed and random length, all 7
actions, a short ``max_steps`` of 48 so that truncation is reached). Documented differences,
tested as mappings (module docstring and docs/rate.md section 12):

* our observation is MiniGrid's ``image`` (object, colour, state) flattened in its [i, j, c] order;
  the dict's ``direction`` and ``mission`` are not observed (the authors' wrapper keeps the image
  only, ``ImgObsWrapper``); the direction is compared with our state's instead;
* one ``done`` for MiniGrid's ``terminated or truncated`` (``truncated`` at ``max_steps``), and the
  authors' extra cut ``time_limit`` (96 steps) that MiniGrid does not have: done = terminated or
  truncated or t >= time_limit;
* the authors resize ``MiniGrid-MemoryS13Random-v0`` after construction, which keeps its
  ``max_steps`` = 5 * 13^2 = 845; ``MemoryEnv(size=S, random_length=True, max_steps=845)`` is that
  environment (``size`` enters ``_gen_grid`` only through the width and height).

No undocumented difference was found (no assertion here is marked xfail).
"""
import os

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # minigrid imports pygame at module level

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from minigrid.envs import MemoryEnv  # noqa: E402
from popgym.envs import autoencode as ref_autoencode  # noqa: E402
from popgym.envs import count_recall as ref_count_recall  # noqa: E402
from popgym.envs import repeat_previous as ref_repeat_previous  # noqa: E402

from experiments.studies.rate import minigrid_memory as minigrid_study  # noqa: E402
from experiments.studies.rate import popgym as popgym_study  # noqa: E402
from rate_jax import minigrid_memory as mm  # noqa: E402
from rate_jax import popgym as pg  # noqa: E402

Z = 4.0  # tolerance of every frequency comparison, in binomial standard errors of its sample size


def within_binomial(hits, n: int, p: float, what: str) -> None:
    """The frequency ``mean(hits)`` of ``n`` draws is within ``Z`` standard errors of ``p``."""
    freq = float(np.mean(hits))
    se = np.sqrt(p * (1 - p) / n)
    assert len(hits) == n and abs(freq - p) <= Z * se, f"{what}: {freq:.4f} over {n} draws, expected {p:.4f} +- {Z} * {se:.4f}"


# ================================================================================================ POPGym
REF_POPGYM = {
    "repeat_previous": {"easy": ref_repeat_previous.RepeatPreviousEasy,
                        "medium": ref_repeat_previous.RepeatPreviousMedium,
                        "hard": ref_repeat_previous.RepeatPreviousHard},
    "autoencode": {"easy": ref_autoencode.AutoencodeEasy, "medium": ref_autoencode.AutoencodeMedium,
                   "hard": ref_autoencode.AutoencodeHard},
    "count_recall": {"easy": ref_count_recall.CountRecallEasy, "medium": ref_count_recall.CountRecallMedium,
                     "hard": ref_count_recall.CountRecallHard},
}
POPGYM_SEEDS = (0, 1, 2, 3)


def test_popgym_levels_cover_the_studies_and_match_the_reference():
    """Every task and level the ``rate.popgym`` presets run is compared here, and each level's
    arguments are the reference class's (decks, k, deck type, episode length, action count)."""
    for config in (popgym_study.QUICK, popgym_study.FULL):
        assert set(config.tasks) <= set(REF_POPGYM) and config.level in pg.LEVELS
    for name, levels in REF_POPGYM.items():
        env = pg.TASKS[name]
        for level, ref_type in levels.items():
            ref, params = ref_type(), env.params(level)
            deck = ref.value_deck if name == "count_recall" else ref.deck
            assert deck.num_cards == int(params.num_cards)
            assert ref.max_episode_length == env.episode_length(level)
            if name == "repeat_previous":
                assert ref.k == int(params.k) and ref.action_space.n == env.num_actions
            if name == "autoencode":
                assert ref.action_space.n == env.num_actions
            if name == "count_recall":
                assert ref.num_distinct_cards == pg.NUM_TYPES[int(params.deck_type)]
                # documented: 27 actions at every level; the reference's space is the level's largest count + 1
                assert ref.action_space.n == deck.num_cards // ref.num_distinct_cards + 1 <= env.num_actions


def deal_order(deck, max_cards: int) -> np.ndarray:
    """The reference deck's deal order (it deals from the end of ``idx``), padded with 0 as ``pg.shuffle``."""
    order = np.zeros(max_cards, np.int32)
    order[:deck.num_cards] = deck.idx[::-1]
    return order


def popgym_state(name: str, ref):
    """Our state at the reference's reset (the adapter): its deal order(s), nothing dealt yet beyond the first."""
    env = pg.TASKS[name]
    if name == "count_recall":
        values, queries = deal_order(ref.value_deck, env.max_cards), deal_order(ref.query_deck, env.max_cards)
        counts = np.zeros(pg.MAX_TYPES, np.int32)
        counts[ref.deck_idx_type[values[0]]] = 1  # reset counts the first value (our reset's rule: checked in the draws test)
        return pg.CountRecallState(values=values, queries=queries, counts=counts, time=np.int32(0))
    state_type = pg.RepeatPreviousState if name == "repeat_previous" else pg.AutoencodeState
    return state_type(cards=deal_order(ref.deck, env.max_cards), time=np.int32(0))


def popgym_obs(name: str, obs) -> np.ndarray:
    """The reference's integer observation in our one-hot encoding (the documented mapping)."""
    one_hot = lambda i, n: np.eye(n, dtype=np.float32)[int(i)]
    if name == "repeat_previous":
        return one_hot(obs, pg.NUM_SUITS)
    if name == "autoencode":
        mode, suit = obs
        return np.concatenate([[float(mode)], one_hot(suit, pg.NUM_SUITS)]).astype(np.float32)
    value, query = np.asarray(obs)
    return np.concatenate([one_hot(value, pg.MAX_TYPES), one_hot(query, pg.MAX_TYPES)])


def play_popgym(env, states, params, random_actions, use_oracle):
    """Our episodes from ``states`` (leaves [B]): at step t the oracle's action where ``use_oracle[b, t]``,
    else ``random_actions[b, t]``. Returns (actions [B, T], obs [B, T + 1, D], rewards [B, T], dones [B, T]);
    steps after done are not frozen (only the steps up to the reference's termination are read)."""

    def episode(state, p, random_a, oracle):
        def body(s, x):
            a = jnp.where(x[1], env.oracle_action(s, p), x[0]).astype(jnp.int32)
            obs, s, r, d, _ = env.step(None, s, a, p)
            return s, (a, obs, r, d)

        _, (acts, obs, rew, done) = jax.lax.scan(body, state, (random_a, oracle))
        return acts, jnp.concatenate([env.observation(state, p)[None], obs]), rew, done

    return jax.vmap(episode)(states, params, random_actions, use_oracle)


_play_popgym = jax.jit(play_popgym, static_argnums=0)


@pytest.mark.parametrize("name", list(REF_POPGYM))
def test_popgym_step_for_step(name):
    env = pg.TASKS[name]
    cases = [(level, seed) for level in pg.LEVELS for seed in POPGYM_SEEDS]
    horizon = max(env.episode_length(level) for level in pg.LEVELS)
    refs, states, random_actions, use_oracle = [], [], [], []
    for level, seed in cases:
        ref = REF_POPGYM[name][level]()
        obs0, _ = ref.reset(seed=seed)
        refs.append((ref, obs0))
        states.append(popgym_state(name, ref))
        rng = np.random.default_rng([seed, pg.LEVELS.index(level)])
        random_actions.append(rng.integers(0, env.num_actions, horizon))
        use_oracle.append(rng.random(horizon) < 0.5)
    stack = lambda *x: np.stack(x)  # numpy until the one call: no eager JAX ops to compile
    params = jax.tree.map(stack, *[jax.tree.map(np.asarray, env.params(level)) for level, _ in cases])
    acts, obs, rew, done = jax.tree.map(np.asarray, _play_popgym(
        env, jax.tree.map(stack, *states), params, np.stack(random_actions), np.stack(use_oracle)))

    signs = set()
    for b, ((level, seed), (ref, ref_obs)) in enumerate(zip(cases, refs)):
        where = f"{name} {level} seed {seed}"
        np.testing.assert_array_equal(obs[b, 0], popgym_obs(name, ref_obs), err_msg=f"{where} reset")
        for t in range(horizon):
            ref_obs, ref_rew, terminated, truncated, _ = ref.step(int(acts[b, t]))
            at = f"{where} step {t + 1} (action {acts[b, t]})"
            np.testing.assert_array_equal(obs[b, t + 1], popgym_obs(name, ref_obs), err_msg=at)
            assert abs(float(rew[b, t]) - ref_rew) <= 1e-6, f"{at}: reward {rew[b, t]} vs the reference's {ref_rew}"
            assert bool(done[b, t]) == terminated and not truncated, f"{at}: done {done[b, t]} vs {terminated}"
            signs.add(np.sign(ref_rew))
            if terminated:
                break
        assert terminated and t + 1 == env.episode_length(level), f"{where}: ended after {t + 1} steps"
    assert signs >= {-1.0, 1.0}  # right and wrong answers were both scored


@pytest.mark.parametrize("name", list(REF_POPGYM))
def test_popgym_draws_match_the_reference_shuffle(name):
    """The shuffle, which cannot be matched draw for draw, as frequencies at the studies' level
    (``easy``) over many resets of each side: the first dealt card lies in the lower half of the ids
    (1/2, a uniform position of every card), the first two dealt cards share a suit or type
    ((N/n - 1) / (N - 1) without replacement: 12/51 for suits), and for CountRecall the first value
    and query share a type (1/n: the two decks are independent). For CountRecall it also checks the
    adapter of ``test_popgym_step_for_step``: our reset's counts are the one-hot type of the first value."""
    env, level = pg.TASKS[name], popgym_study.QUICK.level
    params = env.params(level)
    n_ours = n_ref = 4000
    _, ours = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(jax.random.split(jax.random.key(7), n_ours), params)
    ref = REF_POPGYM[name][level]()
    ref_orders = []  # per reset: the deal orders of the reference's deck(s)
    for i in range(n_ref):
        ref.reset(seed=7 if i == 0 else None)
        decks = (ref.value_deck, ref.query_deck) if name == "count_recall" else (ref.deck,)
        ref_orders.append([deck.idx[::-1] for deck in decks])
    if name == "count_recall":
        kind = ref.deck_idx_type
        np.testing.assert_array_equal(np.asarray(ours.counts), np.eye(pg.MAX_TYPES, dtype=np.int32)[
            kind[np.asarray(ours.values[:, 0])]])
        sides = ((np.asarray(ours.values[:, 0]), np.asarray(ours.values[:, 1]), np.asarray(ours.queries[:, 0])),
                 tuple(np.array([o[deck][pos] for o in ref_orders]) for deck, pos in ((0, 0), (0, 1), (1, 0))))
    else:
        kind = ref.deck.suits_idx
        sides = ((np.asarray(ours.cards[:, 0]), np.asarray(ours.cards[:, 1]), None),
                 (np.array([o[0][0] for o in ref_orders]), np.array([o[0][1] for o in ref_orders]), None))
    num_cards, num_types = int(params.num_cards), int(kind.max()) + 1
    for side, n, (c0, c1, q0) in zip(("ours", "popgym"), (n_ours, n_ref), sides):
        within_binomial(c0 < num_cards // 2, n, 0.5, f"{name} {side}: first card in the lower half")
        within_binomial(kind[c0] == kind[c1], n, (num_cards / num_types - 1) / (num_cards - 1),
                        f"{name} {side}: first two cards of one type")
        if q0 is not None:
            within_binomial(kind[c0] == kind[q0], n, 1 / num_types, f"{name} {side}: first value and query of one type")


# ================================================================================================ MiniGrid
TYPE = {"key": mm.KEY, "ball": mm.BALL}
MINIGRID_SEEDS = (0, 1, 2)
MODES = ("random", "oracle", "oracle_to_failure")
GRID = max(mm.AUTHORS_EVAL_SIZES)  # our layouts are evaluated on a GRID x GRID window and cropped to each size


def ref_draws(ref) -> tuple[int, int, int, int]:
    """(hallway end h, start column x0, cue, north end object) of the reference's current layout."""
    mid = ref.height // 2
    h = int(ref.success_pos[0]) - 1
    assert int(ref.agent_pos[1]) == mid and ref.agent_dir == mm.EAST
    return h, int(ref.agent_pos[0]), TYPE[ref.grid.get(1, mid - 1).type], TYPE[ref.grid.get(h + 1, mid - 2).type]


def minigrid_layout(ref) -> mm.Layout:
    """Our layout of the reference's reset (the adapter)."""
    h, x0, cue, upper = ref_draws(ref)
    return mm.Layout(hallway_end=jnp.int32(h), agent_x=jnp.int32(x0), cue=jnp.int32(cue), upper=jnp.int32(upper))


def play_minigrid(layouts, params, random_actions, modes):
    """Our episodes (leaves [B]): per mode the given actions, the oracle, or the oracle with the cue
    swapped (it heads for the failure end). Returns (objects [B, GRID, GRID] of ``cell`` at reset,
    actions [B, T], obs [B, T + 1, D], rewards [B, T], dones [B, T], positions [B, T + 1, 3] as (x, y, dir),
    info["chose"] [B, T]); steps after done are not frozen."""
    xs = jnp.arange(GRID)[:, None]

    def episode(layout, p, random_a, mode):
        obs0, state = mm.reset_to(layout, p)

        def body(s, a_random):
            swapped = s.replace(cue=mm.KEY + mm.BALL - s.cue)
            a = jnp.where(mode == 0, a_random,
                          jnp.where(mode == 1, mm.oracle_action(s, p), mm.oracle_action(swapped, p)))
            obs, s, r, d, info = mm.step(None, s, a, p)
            return s, (a, obs, r, d, jnp.stack([s.x, s.y, s.direction]), info["chose"])

        _, (acts, obs, rew, done, pos, chose) = jax.lax.scan(body, state, random_a)
        pos0 = jnp.stack([state.x, state.y, state.direction])
        return (mm.cell(xs, xs.T, state, p), acts, jnp.concatenate([obs0[None], obs]), rew, done,
                jnp.concatenate([pos0[None], pos]), chose)

    return jax.vmap(episode)(layouts, params, random_actions, modes)


_play_minigrid = jax.jit(play_minigrid)

SETTINGS = {
    # the RATE authors' evaluation: MemoryS13Random resized to S, view 3, 3 actions, cut at 96 steps
    "authors": dict(sizes=mm.AUTHORS_EVAL_SIZES, random_length=(True,), view=mm.AUTHORS_VIEW_SIZE,
                    max_steps=mm.AUTHORS_MAX_STEPS, time_limit=mm.AUTHORS_TIME_LIMIT, actions=3,
                    action_p=(0.25, 0.25, 0.5)),
    # MiniGrid's own: view 7, the registered sizes, fixed and random length, all 7 actions, max_steps short
    "minigrid": dict(sizes=(7, 11, 17), random_length=(False, True), view=7, max_steps=48, time_limit=None,
                     actions=7, action_p=(0.15, 0.15, 0.4, 0.075, 0.075, 0.075, 0.075)),
}


def test_minigrid_sizes_cover_the_study():
    """The authors' setting compared below is the one ``rate.minigrid_memory`` evaluates (and trains, random length)."""
    for config in (minigrid_study.QUICK, minigrid_study.FULL):
        assert set(config.eval_sizes) <= set(SETTINGS["authors"]["sizes"]) and config.random_length
    p = mm.authors_params(31)
    assert (int(p.max_steps), int(p.time_limit), p.view_size) == (845, 96, 3) and bool(p.random_length)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_minigrid_step_for_step(setting):
    cfg = SETTINGS[setting]
    horizon = cfg["time_limit"] or cfg["max_steps"]
    cases = [(size, rl, seed, mode) for size in cfg["sizes"] for rl in cfg["random_length"]
             for seed in MINIGRID_SEEDS for mode in range(len(MODES))]
    refs, layouts, random_actions = [], [], []
    for size, rl, seed, mode in cases:
        ref = MemoryEnv(size=size, random_length=rl, max_steps=cfg["max_steps"], agent_view_size=cfg["view"])
        obs0, _ = ref.reset(seed=seed)
        refs.append((ref, obs0))
        layouts.append(minigrid_layout(ref))
        rng = np.random.default_rng([size, rl, seed, mode])
        random_actions.append(rng.choice(cfg["actions"], size=horizon, p=cfg["action_p"]))
    sizes = np.array([c[0] for c in cases])
    params = mm.make_params(sizes, random_length=np.array([c[1] for c in cases]), max_steps=cfg["max_steps"],
                            time_limit=cfg["time_limit"], view_size=cfg["view"])
    time_limit = np.asarray(params.time_limit)
    grids, acts, obs, rew, done, pos, chose = jax.tree.map(np.asarray, _play_minigrid(
        jax.tree.map(lambda *x: jnp.stack(x), *layouts), params, jnp.asarray(np.stack(random_actions), jnp.int32),
        jnp.asarray([c[3] for c in cases], jnp.int32)))

    endings = {mode: set() for mode in MODES}
    for b, ((size, rl, seed, mode), (ref, ref_obs)) in enumerate(zip(cases, refs)):
        where = f"{setting} size {size} random_length {rl} seed {seed} {MODES[mode]}"
        np.testing.assert_array_equal(grids[b, :size, :size], ref.grid.encode()[..., 0], err_msg=f"{where} grid")
        np.testing.assert_array_equal(obs[b, 0], ref_obs["image"].reshape(-1), err_msg=f"{where} reset")
        for t in range(horizon):
            ref_obs, ref_rew, terminated, truncated, _ = ref.step(int(acts[b, t]))
            at = f"{where} step {t + 1} (action {acts[b, t]})"
            np.testing.assert_array_equal(obs[b, t + 1], ref_obs["image"].reshape(-1), err_msg=at)
            assert tuple(pos[b, t + 1]) == (*ref.agent_pos, ref.agent_dir) == (*ref.agent_pos, ref_obs["direction"]), at
            assert abs(float(rew[b, t]) - ref_rew) <= 1e-6, f"{at}: reward {rew[b, t]} vs the reference's {ref_rew}"
            assert truncated == (t + 1 >= cfg["max_steps"]), at
            ref_done = terminated or truncated or t + 1 >= time_limit[b]
            assert bool(done[b, t]) == ref_done, f"{at}: done {done[b, t]} vs terminated {terminated} truncated {truncated}"
            assert bool(chose[b, t]) == terminated, f"{at}: chose {chose[b, t]} vs terminated {terminated}"  # an end object
            if ref_done:
                break
        endings[MODES[mode]].add("success" if ref_rew > 0 else "failure" if terminated else "cut")
    # what was compared: the oracle reaches the success end, the swapped oracle the failure end, random play is cut
    assert "success" in endings["oracle"] and "failure" in endings["oracle_to_failure"] and "cut" in endings["random"]
    assert endings["oracle"] <= {"success", "cut"} and endings["oracle_to_failure"] <= {"failure", "cut"}


def ref_layout_draws(size: int, n: int, seed: int) -> np.ndarray:
    """(h, x0, cue, north object) of ``n`` resets of MiniGrid's ``MemoryEnv(random_length=True)``, [n, 4]."""
    ref = MemoryEnv(size=size, random_length=True, agent_view_size=3)
    ref.reset(seed=seed)
    out = []
    for _ in range(n):
        out.append(ref_draws(ref))
        ref.reset()
    return np.array(out)


@pytest.mark.parametrize("size", sorted({minigrid_study.QUICK.train_size, minigrid_study.FULL.train_size}))
def test_minigrid_draws_match_the_reference(size):
    """``sample_layout`` against MiniGrid's ``_gen_grid`` draws with random length, at the studies' training
    sizes, as frequencies over many resets: h in the lower half of {4..S-3}; a start at x0 = 1 (the cue in
    the first view: mean over h of 1/h); a start in the far half (x0 > h / 2: mean of ceil(h/2)/h); the cue a
    key, the north object a key, the two equal (the success end north): 1/2 each."""
    n_ours, n_ref = 20000, 2000
    ours = jax.jit(jax.vmap(mm.sample_layout, in_axes=(0, None)))(
        jax.random.split(jax.random.key(11), n_ours), mm.authors_params(size))
    ours = np.stack([np.asarray(x) for x in (ours.hallway_end, ours.agent_x, ours.cue, ours.upper)], -1)
    hs = np.arange(4, size - 2)  # MiniGrid's _rand_int(4, width - 2): numpy's integers(low, high), high excluded
    half = hs[len(hs) // 2]
    for side, n, d in (("ours", n_ours, ours), ("minigrid", n_ref, ref_layout_draws(size, n_ref, 11))):
        h, x0, cue, upper = d.T
        assert h.min() >= 4 and h.max() <= size - 3 and (x0 >= 1).all() and (x0 <= h).all(), side
        what = f"size {size} {side}"
        within_binomial(h < half, n, float(np.mean(hs < half)), f"{what}: h below {half}")
        within_binomial(x0 == 1, n, float(np.mean(1 / hs)), f"{what}: start at x0 = 1")
        within_binomial(2 * x0 > h, n, float(np.mean(np.ceil(hs / 2) / hs)), f"{what}: start past mid-hallway")
        within_binomial(cue == mm.KEY, n, 0.5, f"{what}: cue is the key")
        within_binomial(upper == mm.KEY, n, 0.5, f"{what}: north object is the key")
        within_binomial(cue == upper, n, 0.5, f"{what}: success end north")

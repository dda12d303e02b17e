"""POPGym RepeatPrevious, Autoencode and CountRecall against numpy ports of popgym 1.0.7.

The ``Ref*`` classes below follow ``popgym/core/deck.py`` and ``popgym/envs/{repeat_previous,
autoencode,count_recall}.py`` statement by statement (integer observations, a deck that
deals from the end of ``idx``) and are written without reference to ``rate_jax.popgym``;
the JAX deal order is injected as ``idx = cards[:N][::-1]``.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rate_jax import popgym as pg
from rate_jax.train import to_segments

# ------------------------------------------------------------------------------ numpy ports of the reference


class RefDeck:
    """``core/deck.py``: card tables tiled as in the reference; ``deal`` takes from the end of ``idx``."""

    def __init__(self, num_decks, idx):
        self.num_cards = 52 * num_decks
        self.ranks_idx = np.tile(np.arange(13).repeat(4), num_decks)
        self.suits_idx = np.tile(np.tile(np.arange(4), 13), num_decks)
        self.colors_idx = np.tile(np.arange(2), self.num_cards // 2)
        self.idx = np.asarray(idx)
        assert sorted(self.idx.tolist()) == list(range(self.num_cards))
        self.deck_len = self.num_cards
        self.hand = []

    def __len__(self):
        return self.deck_len

    def deal(self):
        assert self.deck_len > 0, "DeckEmptyError"
        self.deck_len -= 1
        self.hand.append(int(self.idx[self.deck_len]))


class RefRepeatPrevious:
    def __init__(self, num_decks, k, idx):
        self.deck, self.k = RefDeck(num_decks, idx), k

    def reset(self):
        self.deck.deal()
        return int(self.deck.suits_idx[self.deck.hand[-1]])

    def step(self, action):
        reward_scale = 1 / (self.deck.num_cards - self.k)
        reward = 0
        terminated = len(self.deck) == 1
        if len(self.deck.hand) >= self.k:
            reward = reward_scale if action == self.deck.suits_idx[self.deck.hand[-self.k]] else -reward_scale
        self.deck.deal()
        return int(self.deck.suits_idx[self.deck.hand[-1]]), reward, terminated


class RefAutoencode:
    PLAY, WATCH = 0, 1

    def __init__(self, num_decks, idx):
        self.deck = RefDeck(num_decks, idx)

    def make_obs(self, card_idx):
        return self.mode, int(self.deck.suits_idx[card_idx])

    def reset(self):
        self.deck.deal()
        self.mode = self.WATCH
        return self.make_obs(self.deck.hand[-1])

    def step(self, action):
        terminated, reward, reward_scale = False, 0, 1 / self.deck.num_cards
        if self.mode == self.WATCH:
            self.deck.deal()
            if len(self.deck) == 0:
                self.mode = self.PLAY
            obs = self.make_obs(self.deck.hand[-1])
        else:
            terminated = len(self.deck.hand) == 1
            correct = self.deck.suits_idx[self.deck.hand.pop(-1)]
            reward = reward_scale if action == correct else -reward_scale
            obs = self.make_obs(0)
        return obs, reward, terminated


class RefCountRecall:
    def __init__(self, num_decks, deck_type, value_idx, query_idx):
        self.value_deck, self.query_deck = RefDeck(num_decks, value_idx), RefDeck(num_decks, query_idx)
        table = {"colors": "colors_idx", "suits": "suits_idx", "ranks": "ranks_idx"}[deck_type]
        self.types = getattr(self.value_deck, table)
        self.num_distinct = len(np.unique(self.types))
        self.reward_scale = 1 / (self.value_deck.num_cards - 1)

    def deal(self):
        self.value_deck.deal()
        self.query_deck.deal()
        return int(self.types[self.value_deck.hand[-1]]), int(self.types[self.query_deck.hand[-1]])

    def reset(self):
        self.counts = np.zeros(self.num_distinct, np.int64)
        self.value, self.query = self.deal()
        self.counts[self.value] += 1
        return self.value, self.query

    def step(self, action):
        prev_count = self.counts[self.query]
        self.value, self.query = self.deal()
        self.counts[self.value] += 1
        reward = (1 if action == prev_count else -1) * self.reward_scale
        return (self.value, self.query), reward, len(self.value_deck) == 0


def one_hot(i, n):
    return np.eye(n)[i]


# reference observation -> the flat layout documented in rate_jax.popgym
ENCODE = {
    "repeat_previous": lambda o: one_hot(o, 4),
    "autoencode": lambda o: np.concatenate([[o[0]], one_hot(o[1], 4)]),
    "count_recall": lambda o: np.concatenate([one_hot(o[0], 13), one_hot(o[1], 13)]),
}
DECKS = {"easy": 1, "medium": 2, "hard": 3}
CR_LEVELS = {"easy": (1, "colors"), "medium": (2, "suits"), "hard": (4, "ranks")}


def make_ref(name, level, state):
    def idx(cards, n):
        return np.asarray(cards)[:n][::-1]

    if name == "repeat_previous":
        d, k = {"easy": (1, 4), "medium": (2, 32), "hard": (3, 64)}[level]
        return RefRepeatPrevious(d, k, idx(state.cards, 52 * d))
    if name == "autoencode":
        return RefAutoencode(DECKS[level], idx(state.cards, 52 * DECKS[level]))
    d, deck_type = CR_LEVELS[level]
    return RefCountRecall(d, deck_type, idx(state.values, 52 * d), idx(state.queries, 52 * d))


# ------------------------------------------------------------------------------ helpers on the JAX side


def mixed_policy(env, params, p_oracle):
    """The oracle's action with probability ``p_oracle``, else uniform over the action space."""

    def policy(key, obs, state):
        k_coin, k_act = jax.random.split(key)
        guess = jax.random.randint(k_act, (), 0, env.num_actions)
        return jnp.where(jax.random.bernoulli(k_coin, p_oracle), env.oracle_action(state, params), guess)

    return policy


@functools.cache
def all_levels(env, episodes):
    """jitted ``(key, p_oracle) -> (Episodes, reset states)`` [levels, episodes, ...]: one
    :func:`pg.rollout` per level and episode (vmapped over stacked params), one compile per task."""
    longest = max(env.episode_length(level) for level in pg.LEVELS) + 1

    def one(key, params, p_oracle):
        _, state0 = env.reset(jax.random.split(key)[0], params)  # rollout's documented reset key
        return pg.rollout(env, key, params, longest, mixed_policy(env, params, p_oracle)), state0

    def run(key, p_oracle):
        keys = jax.random.split(key, (len(pg.LEVELS), episodes))
        per_level = jax.vmap(one, in_axes=(0, None, None))
        return jax.vmap(per_level, in_axes=(0, 0, None))(keys, pg.stacked_params(env), p_oracle)

    return jax.jit(run)


def rewards_of(episodes):
    """r_t = R_t - R_{t+1} (zero after the episode)."""
    rtg = np.asarray(episodes.rtg, np.float64)
    return rtg - np.concatenate([rtg[..., 1:], np.zeros_like(rtg[..., :1])], axis=-1)


def run_steps(env, state, params, actions):
    """Step a JAX state through an action list; rows of (obs, reward, done)."""
    step = jax.jit(env.step)
    rows = []
    for a in actions:
        obs, state, reward, done, _ = step(jax.random.key(0), state, jnp.int32(a), params)
        rows.append((np.asarray(obs).tolist(), float(reward), bool(done)))
    return rows


# ------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("name", list(pg.TASKS))
def test_side_by_side_with_numpy_reference(name):
    """Whole episodes of every level under half-oracle, half-random actions: observations,
    rewards and the episode end of the JAX env equal the numpy port of popgym's step."""
    env, episodes = pg.TASKS[name], 4
    data, state0 = jax.tree.map(np.asarray, all_levels(env, episodes)(jax.random.key(11), 0.5))
    rewards, signs = rewards_of(data), set()
    for li, level in enumerate(pg.LEVELS):
        steps = env.episode_length(level)
        for e in range(episodes):
            ref = make_ref(name, level, jax.tree.map(lambda x, i=(li, e): x[i], state0))
            ref_obs, ref_rewards, ends = [ENCODE[name](ref.reset())], [], []
            for action in data.actions[li, e, :steps]:
                o, r, d = ref.step(int(action))
                ref_obs.append(ENCODE[name](o))
                ref_rewards.append(r)
                ends.append(d)
            np.testing.assert_array_equal(data.obs[li, e, :steps + 1], ref_obs, err_msg=f"{level} observations")
            np.testing.assert_allclose(rewards[li, e, :steps], ref_rewards, atol=2e-6, err_msg=f"{level} rewards")
            assert ends == [False] * (steps - 1) + [True]  # the reference ends at the documented length
            assert int(data.length[li, e]) == steps, f"{level} JAX episode length"
            signs |= set(np.sign(ref_rewards))
    assert {-1.0, 1.0} <= signs


def test_repeat_previous_hand_worked():
    env, params = pg.REPEAT_PREVIOUS, pg.RepeatPreviousParams(num_cards=jnp.int32(5), k=jnp.int32(2))
    state = pg.RepeatPreviousState(cards=jnp.array([3, 1, 4, 0, 2]), time=jnp.int32(0))  # suits 3 1 0 0 2
    assert np.asarray(env.observation(state, params)).tolist() == [0, 0, 0, 1]
    # step 1 unscored (i < k); step i scores against suit(c_{i-2}): 3, 1, 0; scale 1/(N - k) = 1/3
    rows = run_steps(env, state, params, [2, 3, 0, 0])
    assert [r[0].index(1) for r in rows] == [1, 0, 0, 2]
    np.testing.assert_allclose([r[1] for r in rows], [0, 1 / 3, -1 / 3, 1 / 3], rtol=1e-6)
    assert [r[2] for r in rows] == [False, False, False, True]
    assert int(env.oracle_action(state.replace(time=jnp.int32(2)), params)) == 1  # step 3 wants suit(c_1)


def test_autoencode_hand_worked():
    env, params = pg.AUTOENCODE, pg.AutoencodeParams(num_cards=jnp.int32(3))
    state = pg.AutoencodeState(cards=jnp.array([2, 0, 1]), time=jnp.int32(0))  # suits 2 0 1
    assert np.asarray(env.observation(state, params)).tolist() == [1, 0, 0, 1, 0]
    # watch, watch (the deck empties: mode 0 with the last card), then recall suits 1, 0, 2
    rows = run_steps(env, state, params, [3, 3, 1, 2, 2])
    assert [r[0] for r in rows] == [[1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 0], [0, 1, 0, 0, 0],
                                    [0, 1, 0, 0, 0]]
    np.testing.assert_allclose([r[1] for r in rows], [0, 0, 1 / 3, -1 / 3, 1 / 3], rtol=1e-6)
    assert [r[2] for r in rows] == [False, False, False, False, True]
    oracle = [int(env.oracle_action(state.replace(time=jnp.int32(t)), params)) for t in range(5)]
    assert oracle == [0, 0, 1, 0, 2]


def test_count_recall_hand_worked():
    env = pg.COUNT_RECALL
    params = pg.CountRecallParams(num_cards=jnp.int32(4), deck_type=jnp.int32(pg.SUITS))
    values, queries = jnp.array([0, 5, 4, 2]), jnp.array([4, 8, 1, 0])  # suits 0 1 0 2 and 0 0 1 0
    counts = jnp.zeros(13, jnp.int32).at[0].set(1)  # v_0 counted at reset
    state = pg.CountRecallState(values=values, queries=queries, counts=counts, time=jnp.int32(0))
    # counts of the queried suit including the current value: 1, 1, 1; scale 1/(N - 1) = 1/3
    rows = run_steps(env, state, params, [1, 2, 1])
    assert [(r[0][:13].index(1), r[0][13:].index(1)) for r in rows] == [(1, 0), (0, 1), (2, 0)]
    np.testing.assert_allclose([r[1] for r in rows], [1 / 3, -1 / 3, 1 / 3], rtol=1e-6)
    assert [r[2] for r in rows] == [False, False, True]
    assert int(env.oracle_action(state, params)) == 1


@pytest.mark.parametrize("name", list(pg.TASKS))
def test_oracle_is_maximal_and_random_is_far_below(name):
    """The oracle's return is 1 at every level (every scored step +scale, the scales sum
    to 1); a uniformly random policy scores its expectation -1 + 2 / num_actions."""
    env = pg.TASKS[name]
    oracle, _ = all_levels(env, 4)(jax.random.key(1), 1.0)  # the side-by-side test's compiled program
    np.testing.assert_allclose(oracle.rtg[:, :, 0], 1.0, atol=1e-5)
    assert rewards_of(oracle).min() > -1e-6
    random, _ = all_levels(env, 4)(jax.random.key(2), 0.0)
    mean = np.asarray(random.rtg[:, :, 0]).mean(axis=1)
    np.testing.assert_allclose(mean, -1 + 2 / env.num_actions, atol=0.15)
    assert (mean < -0.3).all()


@pytest.mark.parametrize("name", list(pg.TASKS))
def test_oracle_dataset_layout(name):
    env, level, k = pg.TASKS[name], "easy", 13
    steps = env.episode_length(level)
    num_segments = -(-(steps + 1) // k)
    data = pg.generate(jax.random.key(5), env, level, 3, k * num_segments)
    t_max = k * num_segments
    assert data.obs.shape == (3, t_max, env.obs_dim) and data.actions.dtype == jnp.int32
    mask = np.asarray(data.action_mask)
    assert (mask[:, :steps] == 1).all() and (mask[:, steps:] == 0).all()
    rtg = np.asarray(data.rtg)
    np.testing.assert_allclose(rtg[:, 0], 1.0, atol=1e-5)  # whole-episode rtg = oracle return
    assert (rtg[:, steps:] == 0).all() and (np.asarray(data.actions)[:, steps:] == 0).all()
    np.testing.assert_array_equal(data.obs[:, steps:], np.broadcast_to(data.obs[:, steps:steps + 1],
                                                                       data.obs[:, steps:].shape))
    rewards = rtg[:, :steps] - rtg[:, 1:steps + 1]
    scored = {"repeat_previous": 52 - 4, "autoencode": 52, "count_recall": 51}[name]  # easy: N - k, N, N - 1
    np.testing.assert_allclose(np.sort(rewards, axis=1)[:, -scored:], 1 / scored, rtol=1e-3)  # +scale each
    np.testing.assert_allclose(np.sort(rewards, axis=1)[:, :-scored], 0.0, atol=1e-6)  # unscored steps
    segs = to_segments(data, k)  # consumable by the RATE trainer's segmenting
    assert segs.obs.shape == (num_segments, 3, k, env.obs_dim) and segs.action_known.shape == (num_segments, 3, k)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="level"):
        pg.REPEAT_PREVIOUS.params("extreme")
    with pytest.raises(ValueError, match="max_steps"):
        pg.generate(jax.random.key(0), pg.AUTOENCODE, "easy", 2, 102)
    with pytest.raises(ValueError, match="num_episodes"):
        pg.generate(jax.random.key(0), pg.COUNT_RECALL, "easy", 0)

"""Three memory tasks of POPGym as pure gymnax-style functions, with oracle datasets.

POPGym: "POPGym: Benchmarking Partially Observable Reinforcement Learning" (Morad et
al., arXiv 2303.01859), its environment descriptions ("POPGym Environments"), and its
reference package popgym 1.0.7, whose files ``popgym/envs/repeat_previous.py``,
``autoencode.py`` and ``count_recall.py`` (with ``popgym/core/deck.py``) each task here
follows step by step.
They are the environments of the planned study ``rate.popgym``, which is to compare RATE
("Recurrent Action Transformer with Memory", arXiv 2306.09459) with DT, RMT and TrXL.

Why these three: each probes a different kind of memory, and all three are card games
whose only randomness is the shuffle, so an oracle that reads the deck plays perfectly.

* RepeatPrevious: recall what was seen a fixed k - 1 steps back (a delay line).
* Autoencode: recall a whole sequence in reverse (a stack; the cue-use distance
  grows to the episode length).
* CountRecall: keep running counts of every card type over the whole episode
  (order-agnostic set memory; no single cue, every past value matters).

The deck (``core/deck.py``): ``num_decks`` * 52 cards with ids c; suit = c mod 4,
rank = (c mod 52) // 4, colour = c mod 2 (the reference's ``suits_idx``, ``ranks_idx``,
``colors_idx`` tables). The reference shuffles ``idx`` and deals from its end; the
state here stores the deal order ``cards[i]`` (the i-th card dealt, so the reference's
``idx`` is ``cards[:N][::-1]``). N = cards in play; arrays are padded to the task's
largest level (``max_cards``) so that every level has the same shapes: params are
array leaves, and one compiled program runs (vmaps over) all three levels.

Time t counts steps taken; the observation o_t is the one after t steps (o_0 from
``reset``), the action a_t is the one taken at o_t, by step i = t + 1.

RepeatPrevious(num_decks, k); levels (1, 4), (2, 32), (3, 64). o_t = one-hot suit of
c_t [4] (the reference's ``Discrete(4)`` observation). Step i scores when i >= k (the
reference's ``hand_size >= k``): +1/(N - k) if a_t = suit(c_{i-k}) (the reference's
``hand[-k]``), else -1/(N - k); steps i < k give 0. Done at i = N - 1 (the reference's
``len(deck) == 1`` checked before dealing). Episode N - 1 steps, N - k scored steps,
return in [-1, 1]. The target of a_t was shown at o_{t+1-k}: k - 1 steps back.

Autoencode(num_decks); levels 1, 2, 3 decks. o_t = [mode, one-hot suit] [5]: the
reference's ``(Discrete(2), Discrete(4))`` with mode 1 = WATCH, 0 = PLAY. Watch steps
i = 1..N-1 deal c_i, reward 0; the step that empties the deck switches to PLAY before
the observation, so o_{N-1} = (0, suit(c_{N-1})). Play steps i = N..2N-1 pop the hand:
a_t must be suit(c_{2N-2-t}), reward +-1/N; o_t for t >= N is (0, suit 0), as the
reference's ``make_obs(np.array([0]))`` shows the suit of card id 0. Done at i = 2N - 1
(the reference's hand of one card before the pop). Episode 2N - 1 steps, N scored.

CountRecall(num_decks, deck_type); levels (1, colours), (2, suits), (4, ranks). Two
independently shuffled decks give value v_t and query q_t (types of c_t in each deck);
o_t = [one-hot v_t, one-hot q_t], each one-hot over 13 slots [26] (the reference's
``MultiDiscrete([n, n])``, n = 2, 4, 13 types; unused slots are 0). a_t must be the
count of q_t among v_0..v_t (the reference's ``counts[prev_query]`` read before the
next deal, so the current value counts); reward +-1/(N - 1) at every step; done at
i = N - 1 (value deck empty). Answers range over 0..N/n (27, 27, 17 actions in the
reference); the action space here is the largest, 27, for every level: an action
above N/n is never the count, so it scores -1/(N - 1) as the reference's
``action == prev_count`` test would.

Readings and departures:
* Observations are flat float vectors (one-hot cards), not the reference's integer
  spaces; the mapping is exact (see each task above). No previous action is appended
  (none of the three sets ``obs_requires_prev_action``).
* The shuffle is a uniform permutation drawn with ``jax.random``, not numpy's; tests
  inject the same deal order into a numpy port of the reference.
* CountRecall's ``error_clamp`` is accepted by the reference but never used by its
  ``step`` (the reward is +-1/(N - 1)); it is left out. Its ``query_counts`` feed only
  ``get_state`` (the Markov state, no observation or reward) and are left out too.
* ``step`` does not reset (as in :mod:`rate_jax.tmaze`); callers stop after ``done``.
* The JAX port FLAIROx/popjym (not on PyPI) was not used: its RepeatPrevious targets
  c_{t-k} instead of the reference's c_{t+1-k} and runs N steps, and its CountRecall
  excludes the current value from the count and has 2 actions. popgym-arcade (JAX,
  bolt-research) re-designs AutoEncode and CountRecall as pixel games with a 5-button
  count-up/confirm interface and other deck sizes, and has no RepeatPrevious.

Cue-use distance d (observations between the one that holds what a_t needs and o_t)
against a context of C steps (the last C observations): the cue is out of context
iff d >= C. Per level (episode steps, largest d):

============== ================= ================== =================
task           easy              medium             hard
============== ================= ================== =================
RepeatPrevious 51 steps, d = 3   103 steps, d = 31  155 steps, d = 63
Autoencode     103, d <= 102     207, d <= 206      311, d <= 310
CountRecall    51, d <= 50       103, d <= 102      207, d <= 206
============== ================= ================== =================

RepeatPrevious has one fixed d = k - 1 at every scored step, so a context of C <= k - 1
steps is left with the deck composition only (near guessing, expected return about -0.5)
while C >= k solves it.
Autoencode's m-th play step needs the card shown 2m steps before (m = 0..N-1), so a
context of C steps answers only the first ceil(C/2) recalls. CountRecall needs v_0 at
every step, so any step t >= C depends on values outside the context.

The oracle dataset (:func:`generate`): episodes of the privileged :meth:`oracle_action`
(reads the hidden deck), which scores at every scored step, so every episode has the
maximal return 1 and the first return-to-go is that oracle return. Layout as
:mod:`rate_jax.dataset`: obs o_0..o_{T-1}, the action taken at each (actions of
unscored steps are the oracle's fill-in 0 and count as targets), return-to-go
R_0 = episode return, R_{t+1} = R_t - r_t; the final observation is recorded with
``action_mask = 0`` and repeats in padding, where return-to-go is 0.
"""
from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable

import jax
import jax.numpy as jnp
from flax import struct

LEVELS = ("easy", "medium", "hard")
DECK_SIZE = 52
NUM_SUITS = 4
NUM_RANKS = 13
COLORS, SUITS, RANKS = 0, 1, 2  # CountRecall deck types (the reference's ``deck_type``)
NUM_TYPES = (2, NUM_SUITS, NUM_RANKS)  # distinct cards per deck type
MAX_TYPES = NUM_RANKS


def suit(card: jax.Array) -> jax.Array:
    """Suit index of card id ``card`` (the reference's ``Deck.suits_idx``: arange(4) tiled)."""
    return card % NUM_SUITS


def card_type(card: jax.Array, deck_type: jax.Array) -> jax.Array:
    """Colour (c mod 2), suit (c mod 4) or rank ((c mod 52) // 4) of ``card`` by ``deck_type``
    (the reference's ``colors_idx``, ``suits_idx``, ``ranks_idx`` tables of ``core/deck.py``)."""
    return jnp.stack([card % 2, card % NUM_SUITS, (card % DECK_SIZE) // NUM_SUITS])[deck_type]


def shuffle(key: jax.Array, num_cards: jax.Array, max_cards: int) -> jax.Array:
    """Deal order of a uniformly shuffled deck of ``num_cards`` cards (ids 0..num_cards-1),
    padded with 0 to ``max_cards`` (the reference's ``Deck.reset(shuffle=True)`` then
    ``deal`` from the end of ``idx``). int32 [max_cards]."""
    slot = jnp.arange(max_cards)
    pad = slot >= num_cards
    order = jnp.lexsort((jax.random.bits(key, (max_cards,), jnp.uint32), pad))  # real cards first
    return jnp.where(pad, 0, order).astype(jnp.int32)


def _signed(correct: jax.Array, scale: jax.Array) -> jax.Array:
    return jnp.where(correct, scale, -scale).astype(jnp.float32)


# ----------------------------------------------------------------------------------------- RepeatPrevious


@struct.dataclass
class RepeatPreviousParams:
    """num_cards N [] int32 (52 * num_decks) and k [] int32."""

    num_cards: jax.Array
    k: jax.Array


@struct.dataclass
class RepeatPreviousState:
    """cards [max_cards] int32 (deal order, padded); time [] int32 (steps taken)."""

    cards: jax.Array
    time: jax.Array


@dataclasses.dataclass(frozen=True)
class RepeatPrevious:
    """``popgym/envs/repeat_previous.py``: answer the suit of the card dealt k - 1 steps before
    the current one (see the module docstring)."""

    name = "repeat_previous"
    num_actions = NUM_SUITS
    obs_dim = NUM_SUITS
    max_cards = 3 * DECK_SIZE
    level_args = {"easy": (1, 4), "medium": (2, 32), "hard": (3, 64)}  # (num_decks, k)

    def params(self, level: str) -> RepeatPreviousParams:
        num_decks, k = _level(self, level)
        return RepeatPreviousParams(num_cards=jnp.int32(DECK_SIZE * num_decks), k=jnp.int32(k))

    def episode_length(self, level: str) -> int:
        """N - 1 steps."""
        return DECK_SIZE * _level(self, level)[0] - 1

    def observation(self, state: RepeatPreviousState, params: RepeatPreviousParams) -> jax.Array:
        """One-hot suit of the last dealt card c_t, float32 [4]."""
        return jax.nn.one_hot(suit(state.cards[state.time]), NUM_SUITS)

    def reset(self, key: jax.Array, params: RepeatPreviousParams):
        """Shuffle and deal one card (the reference's ``reset``)."""
        state = RepeatPreviousState(cards=shuffle(key, params.num_cards, self.max_cards), time=jnp.int32(0))
        return self.observation(state, params), state

    def _target(self, state: RepeatPreviousState, params: RepeatPreviousParams) -> jax.Array:
        """suit(c_{i-k}) for step i = time + 1, the reference's ``hand[-k]``."""
        return suit(state.cards[jnp.maximum(state.time + 1 - params.k, 0)])

    def step(self, key: jax.Array, state: RepeatPreviousState, action: jax.Array, params: RepeatPreviousParams):
        """Score a_t against suit(c_{i-k}) if i >= k, then deal c_i; done at i = N - 1."""
        i = state.time + 1
        scale = 1.0 / (params.num_cards - params.k)
        reward = jnp.where(i >= params.k, _signed(action == self._target(state, params), scale), 0.0)
        done = i >= params.num_cards - 1
        state = state.replace(time=i)
        return self.observation(state, params), state, reward, done, {}

    def oracle_action(self, state: RepeatPreviousState, params: RepeatPreviousParams) -> jax.Array:
        """The suit the next step scores (0 at unscored steps)."""
        return jnp.where(state.time + 1 >= params.k, self._target(state, params), 0).astype(jnp.int32)


# ----------------------------------------------------------------------------------------- Autoencode


@struct.dataclass
class AutoencodeParams:
    """num_cards N [] int32 (52 * num_decks)."""

    num_cards: jax.Array


@struct.dataclass
class AutoencodeState:
    """cards [max_cards] int32 (deal order, padded); time [] int32 (steps taken)."""

    cards: jax.Array
    time: jax.Array


@dataclasses.dataclass(frozen=True)
class Autoencode:
    """``popgym/envs/autoencode.py``: watch N cards, then answer their suits in reverse order
    (see the module docstring)."""

    name = "autoencode"
    num_actions = NUM_SUITS
    obs_dim = 1 + NUM_SUITS
    max_cards = 3 * DECK_SIZE
    level_args = {"easy": (1,), "medium": (2,), "hard": (3,)}  # (num_decks,)

    def params(self, level: str) -> AutoencodeParams:
        return AutoencodeParams(num_cards=jnp.int32(DECK_SIZE * _level(self, level)[0]))

    def episode_length(self, level: str) -> int:
        """2N - 1 steps."""
        return 2 * DECK_SIZE * _level(self, level)[0] - 1

    def observation(self, state: AutoencodeState, params: AutoencodeParams) -> jax.Array:
        """[mode, one-hot suit] float32 [5]: (1, suit(c_t)) while watching (t < N - 1),
        (0, suit(c_{N-1})) at t = N - 1, (0, suit of card id 0 = 0) while playing."""
        n, t = params.num_cards, state.time
        watch = (t < n - 1).astype(jnp.float32)
        shown = jnp.where(t <= n - 1, suit(state.cards[t]), 0)
        return jnp.concatenate([watch[None], jax.nn.one_hot(shown, NUM_SUITS)])

    def reset(self, key: jax.Array, params: AutoencodeParams):
        """Shuffle and deal one card in WATCH mode (the reference's ``reset``)."""
        state = AutoencodeState(cards=shuffle(key, params.num_cards, self.max_cards), time=jnp.int32(0))
        return self.observation(state, params), state

    def _target(self, state: AutoencodeState, params: AutoencodeParams) -> jax.Array:
        """suit(c_{2N-1-i}) for step i = time + 1: the card the play step pops off the hand."""
        return suit(state.cards[jnp.maximum(2 * params.num_cards - 2 - state.time, 0)])

    def step(self, key: jax.Array, state: AutoencodeState, action: jax.Array, params: AutoencodeParams):
        """Watch steps i < N deal (reward 0); play steps i >= N score a_t against the popped
        card (+-1/N); done at i = 2N - 1."""
        n = params.num_cards
        i = state.time + 1
        reward = jnp.where(i >= n, _signed(action == self._target(state, params), 1.0 / n), 0.0)
        done = i >= 2 * n - 1
        state = state.replace(time=i)
        return self.observation(state, params), state, reward, done, {}

    def oracle_action(self, state: AutoencodeState, params: AutoencodeParams) -> jax.Array:
        """The popped card's suit while playing, 0 while watching."""
        return jnp.where(state.time + 1 >= params.num_cards, self._target(state, params), 0).astype(jnp.int32)


# ----------------------------------------------------------------------------------------- CountRecall


@struct.dataclass
class CountRecallParams:
    """num_cards N [] int32 (52 * num_decks) and deck_type [] int32 (COLORS, SUITS or RANKS)."""

    num_cards: jax.Array
    deck_type: jax.Array


@struct.dataclass
class CountRecallState:
    """values, queries [max_cards] int32 (deal orders of the two decks, padded); counts
    [13] int32 (dealt values per type, the reference's ``counts``); time [] int32."""

    values: jax.Array
    queries: jax.Array
    counts: jax.Array
    time: jax.Array


@dataclasses.dataclass(frozen=True)
class CountRecall:
    """``popgym/envs/count_recall.py``: answer how many cards of the queried type have been
    dealt so far, the current one included (see the module docstring)."""

    name = "count_recall"
    num_actions = DECK_SIZE // 2 + 1  # answers 0..26: the largest N / types (easy 52 / 2, medium 104 / 4)
    obs_dim = 2 * MAX_TYPES
    max_cards = 4 * DECK_SIZE
    level_args = {"easy": (1, COLORS), "medium": (2, SUITS), "hard": (4, RANKS)}  # (num_decks, deck_type)

    def params(self, level: str) -> CountRecallParams:
        num_decks, deck_type = _level(self, level)
        return CountRecallParams(num_cards=jnp.int32(DECK_SIZE * num_decks), deck_type=jnp.int32(deck_type))

    def episode_length(self, level: str) -> int:
        """N - 1 steps."""
        return DECK_SIZE * _level(self, level)[0] - 1

    def observation(self, state: CountRecallState, params: CountRecallParams) -> jax.Array:
        """[one-hot v_t, one-hot q_t] over 13 slots each, float32 [26]."""
        v = card_type(state.values[state.time], params.deck_type)
        q = card_type(state.queries[state.time], params.deck_type)
        return jnp.concatenate([jax.nn.one_hot(v, MAX_TYPES), jax.nn.one_hot(q, MAX_TYPES)])

    def reset(self, key: jax.Array, params: CountRecallParams):
        """Shuffle both decks, deal (v_0, q_0) and count v_0 (the reference's ``reset``)."""
        k_value, k_query = jax.random.split(key)
        values = shuffle(k_value, params.num_cards, self.max_cards)
        queries = shuffle(k_query, params.num_cards, self.max_cards)
        counts = jnp.zeros((MAX_TYPES,), jnp.int32).at[card_type(values[0], params.deck_type)].add(1)
        state = CountRecallState(values=values, queries=queries, counts=counts, time=jnp.int32(0))
        return self.observation(state, params), state

    def _target(self, state: CountRecallState, params: CountRecallParams) -> jax.Array:
        """counts[q_t]: dealt values of the queried type, v_0..v_t (the reference's ``prev_count``)."""
        return state.counts[card_type(state.queries[state.time], params.deck_type)]

    def step(self, key: jax.Array, state: CountRecallState, action: jax.Array, params: CountRecallParams):
        """Score a_t against counts[q_t] (+-1/(N - 1)), then deal (v_i, q_i) and count v_i;
        done at i = N - 1."""
        i = state.time + 1
        reward = _signed(action == self._target(state, params), 1.0 / (params.num_cards - 1))
        value = card_type(state.values[i], params.deck_type)
        state = state.replace(counts=state.counts.at[value].add(1), time=i)
        done = i >= params.num_cards - 1
        return self.observation(state, params), state, reward, done, {}

    def oracle_action(self, state: CountRecallState, params: CountRecallParams) -> jax.Array:
        """The true count counts[q_t]."""
        return self._target(state, params).astype(jnp.int32)


def _level(env, level: str) -> tuple[int, ...]:
    if level not in env.level_args:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    return env.level_args[level]


REPEAT_PREVIOUS = RepeatPrevious()
AUTOENCODE = Autoencode()
COUNT_RECALL = CountRecall()
TASKS = {env.name: env for env in (REPEAT_PREVIOUS, AUTOENCODE, COUNT_RECALL)}


def stacked_params(env, levels: tuple[str, ...] = LEVELS):
    """Params of ``levels`` stacked on a leading axis [L] (all levels share shapes), for ``jax.vmap``."""
    return jax.tree.map(lambda *x: jnp.stack(x), *[env.params(level) for level in levels])


# ----------------------------------------------------------------------------------------- episodes and data


@struct.dataclass
class Episodes:
    """Recorded episodes in the layout of :class:`rate_jax.dataset.Trajectories`:
    obs [B, T, obs_dim]; actions [B, T] int32 (0 where absent); rtg [B, T] (return-to-go
    before the reward of step t); action_mask [B, T] (1 = an action was taken at t);
    length [B] int32 (steps the episode took). Unbatched from :func:`rollout`."""

    obs: jax.Array
    actions: jax.Array
    rtg: jax.Array
    action_mask: jax.Array
    length: jax.Array


Policy = Callable[[jax.Array, jax.Array, object], jax.Array]


def rollout(env, key: jax.Array, params, max_steps: int, policy: Policy) -> Episodes:
    """One episode of ``policy(key, obs, state) -> action`` as a ``lax.scan`` of ``max_steps``.

    Resets with ``jax.random.split(key)[0]``. Step t records (o_t, a_t, mask 1) until the
    episode is done; after it, the final observation repeats with mask 0 and reward 0.
    Return-to-go R_t = sum_{s >= t} r_s (R_0 = episode return, R_{t+1} = R_t - r_t as in
    :mod:`rate_jax.dataset`).
    """
    k_reset, k_steps = jax.random.split(key)
    obs0, state0 = env.reset(k_reset, params)

    def body(carry, k):
        obs, state, done = carry
        k_act, k_step = jax.random.split(k)
        action = policy(k_act, obs, state).astype(jnp.int32)
        next_obs, next_state, reward, step_done, _ = env.step(k_step, state, action, params)
        live = ~done
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(done, b, a), new, old)
        record = (obs, jnp.where(live, action, 0), jnp.where(live, reward, 0.0), live.astype(jnp.float32))
        return (keep(next_obs, obs), keep(next_state, state), done | step_done), record

    init = (obs0, state0, jnp.zeros((), bool))
    _, (obs, actions, rewards, mask) = jax.lax.scan(body, init, jax.random.split(k_steps, max_steps))
    rtg = jnp.cumsum(rewards[::-1])[::-1]
    return Episodes(obs=obs, actions=actions, rtg=rtg, action_mask=mask, length=jnp.sum(mask).astype(jnp.int32))


@partial(jax.jit, static_argnames=("env", "num_episodes", "max_steps"))
def _oracle_episodes(key, env, params, num_episodes: int, max_steps: int) -> Episodes:
    oracle = lambda k, obs, state: env.oracle_action(state, params)
    episode = lambda k: rollout(env, k, params, max_steps, oracle)
    return jax.vmap(episode)(jax.random.split(key, num_episodes))


def generate(key: jax.Array, env, level: str, num_episodes: int, max_steps: int | None = None) -> Episodes:
    """``num_episodes`` oracle episodes of ``env`` at ``level``, padded to ``max_steps``
    (default: the episode's steps + 1, so the final observation is recorded with mask 0).

    An oracle episode scores at every scored step: return 1, so rtg[:, 0] = 1.
    """
    steps = env.episode_length(level)
    max_steps = steps + 1 if max_steps is None else max_steps
    if not (isinstance(max_steps, int) and max_steps >= steps):
        raise ValueError(f"max_steps must be an integer >= {steps} (the {env.name} {level} episode), got {max_steps!r}")
    if not (isinstance(num_episodes, int) and num_episodes >= 1):
        raise ValueError(f"num_episodes must be an integer >= 1, got {num_episodes!r}")
    return _oracle_episodes(key, env, env.params(level), num_episodes, max_steps)

"""Domain D data: MovieLens delayed-feedback recommendation (UAT paper, Appendix C.1-C.3).

Paper: "Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential Decision
Making" (UAT, arXiv 2607.18910), Appendix C.1 (Domain D: data, filters, reward, state,
action and delayed feedback), C.2 (the regime-aware expert), C.3 (HR@K, NDCG@K under
leave-one-out with 99 sampled negatives), D.2 (the delay sweep d in {0, 1, 3, 5, 10} and the
null / shuffle / adversarial corruption at d = 1) and Figure 1. numpy / pandas read and
prepare the files once; what runs per step (reward, expert target, delay, corruption,
metrics) is pure JAX. Every reading of words the paper leaves open is stated here.

Files (the MovieLens layouts, F. M. Harper and J. A. Konstan, "The MovieLens Datasets: History
and Context", 2015; :data:`LAYOUTS`): a folder holding the files of one release as GroupLens ships
it. ml-1m's ``ratings.dat`` / ``movies.dat`` (``::``-separated, no header, Latin-1) and ml-100k's
``u.data`` (tab-separated userId, movieId, rating, timestamp), ``u.item`` (``|``-separated; the
last 19 fields are 0/1 genre flags) and ``u.genre`` (the flags' names, ``name|index``) are read
into the frames of the CSV layout (an ml-100k movie's genres: the names of its set flags in
``u.genre``'s order, which is alphabetical; only ``unknown`` set is ``(no genres listed)``, no flag
set is an error); their errors name the line counting from 1. The CSV layout of ml-25m and
ml-latest-small: ``ratings.csv``
(header ``userId,movieId,rating,timestamp``; integer ids, ratings in [0.5, 5], integer Unix
seconds) and ``movies.csv`` (header ``movieId,title,genres``; genres ``|``-separated).
Extra columns are ignored. A missing file or column, an unparseable or missing number, a
non-integer id or timestamp, a rating outside [0.5, 5], a duplicate movieId, an empty
genres field (or an empty genre between two ``|``) and a rating of a movie that
``movies.csv`` does not list are errors naming the file, the line (the header is line 1)
and the column. Blank lines are skipped. Movies marked ``(no genres listed)`` (MovieLens's
own marker; about 5,000 in ml-25m) are valid but carry no genre regime: they and their
ratings are dropped before the filters.

Genre of an item (reading): its first listed genre (ml-25m and ml-latest-small list genres
alphabetically, so this is the alphabetically first; the synthetic files list the planted
genre first). The genres are indexed so that 0..G-1 are the G = ``n_regimes`` regime genres,
the G genres with the most training ratings (ties by name), and the rest follow by name.

Filters (reading of "users with >= 100 interactions and items with >= 50 ratings"): iterated
to a fixed point (a (100, 50)-core), each round first dropping users below
``min_user_interactions`` and then items below ``min_item_ratings``; so every kept user has
>= 100 ratings of kept items and every kept item >= 50 ratings by kept users. Then "sample
up to 20k eligible user sequences": when more users are eligible, ``max_users`` of them are
drawn uniformly without replacement (numpy, seed ``seed``) and kept in userId order; the
vocabulary is the items the kept users rated, re-indexed 0..V-1 in movieId order. Each
user's ratings are in chronological order: by timestamp, ties by movieId.

Windows and leave-one-out (reading of T = 50 and C.3): a user with chronological items
x_1..x_n (n >= T + 3) gives one window of T steps per split, the last ones: test holds
steps x_{n-T}..x_{n-1} with successors x_{n-T+1}..x_n, valid is the same shifted back by one
step, train by two. Evaluation ranks the expert target at the last step of the valid /
test window (the last item of the user, x_n, when it lies in the active genre), so the test
item x_n is never a successor in train or valid, and x_{n-1} never in train. Training
supervises all T steps of the train window.

Genre regimes (C.1 "hidden genre regime"; the schedule is ours): c is a hidden schedule over
each user's last T + 2 steps, shared by the three windows (train reads steps 0..T-1, valid
1..T, test 2..T+1), drawn independently of the log: 3-5 segments (uniform), each at least 6
steps long (the n - 1 cut points sorted uniforms on the slack), the first genre uniform
among the G regime genres, each next one uniform among the G - 1 others. A user's regimes
and expert draws come from fold_in(key(seed), userId) alone, so they do not depend on which
other users are sampled.

Reward (C.1): r_t = (rating_t / 5) 1[genre(i_t) = c_t] - 0.2 1[genre(i_t) != c_t], computed
from the logged interaction (i_t, rating_t).

Expert target (C.2 "selects a target item from that regime's genre cluster"; C.1 "need not
equal the logged successor"; reading): a*_t = i_{t+1} when genre(i_{t+1}) = c_t (the user's
own next item, when it is in the active genre), else an item of cluster c_t drawn with
probability proportional to its number of training ratings (the ratings of each user but
the last two), so the expert recommends a popular item of the active genre.

Delayed feedback (C.1, D.2): the model at step t sees r~_t = r_{t-d}, zero when t - d < 1
(1-based), with d an array so a sweep over d compiles once. d = 0 gives r_t of the latest
completed interaction i_t, never feedback on a*_t.

Corruption (D.2, Figure 1; reading): applied to the delayed channel r~ with
``uat_jax.feedback.corrupt_episode``: "null" feeds zeros; "shuffled" feeds at step t the
delayed reward r~_s of a uniform step s <= t (a shuffle of the past, as in Domain A);
"adversarial" feeds -r~_t, the inverted reward of Figure 1 right (r -> -r).

Negatives and metrics (C.3): for each valid / test target, 99 items drawn uniformly without
replacement from the vocabulary minus every item the user rated (any split) and minus the
target itself (numpy, seeded). Candidates are [U, 100] with the target in column 0. HR@K
and NDCG@K (K = 10, 20; He et al., "Neural Collaborative Filtering", 2017) use the
pessimistic rank: the number of negatives scoring >= the target (ties count against it; a
NaN score counts against it too), HR@K = 1[rank < K], NDCG@K = 1[rank < K] / log2(rank + 2).
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from flax import struct

from uat_jax.feedback import FeedbackChannel, corrupt_episode
from uat_jax.errors import DataError

RATINGS_FILE, MOVIES_FILE = "ratings.csv", "movies.csv"
LAYOUTS = {"ml-25m / ml-latest (CSV)": (RATINGS_FILE, MOVIES_FILE), "ml-1m": ("ratings.dat", "movies.dat"),
           "ml-100k": ("u.data", "u.item", "u.genre")}
"""The MovieLens releases' file names, by layout (module docstring); a folder is read in the first that it holds."""
ML100K_GENRE_FLAGS = 19
"""Genre flags at the end of each ``u.item`` line (``unknown`` and 18 genres)."""
RATINGS_COLUMNS = ("userId", "movieId", "rating", "timestamp")
MOVIES_COLUMNS = ("movieId", "title", "genres")
NO_GENRES = "(no genres listed)"
RATING_RANGE = (0.5, 5.0)
MISMATCH_PENALTY = 0.2
"""C.1 reward: -0.2 for an item outside the active genre."""
DELAYS = (0, 1, 3, 5, 10)
"""D.2 delay sweep; d = 1 is the main setting (Table 3)."""
CORRUPTIONS = {"clean": "clean", "null": "null", "shuffled": "shuffle", "adversarial": "sign_flip"}
"""Domain D corruption names (D.2) -> ``uat_jax.feedback.CORRUPTIONS`` modes."""
KS = (10, 20)
"""C.3 cut-offs of HR@K and NDCG@K."""


@dataclasses.dataclass(frozen=True)
class RecsysConfig:
    """Preparation of Domain D (module docstring). Defaults: the paper's (C.1, Table 3)."""

    min_user_interactions: int = 100
    min_item_ratings: int = 50
    max_users: int = 20_000
    horizon: int = 50
    n_regimes: int = 4
    min_segments: int = 3
    max_segments: int = 5
    min_segment_len: int = 6
    n_negatives: int = 99
    seed: int = 0

    def __post_init__(self):
        for name in ("min_user_interactions", "min_item_ratings", "max_users", "horizon",
                     "min_segments", "min_segment_len", "n_negatives"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.n_regimes < 2:
            raise ValueError(f"n_regimes must be >= 2 (a regime must be able to switch), got {self.n_regimes}")
        if self.max_segments < self.min_segments:
            raise ValueError(f"max_segments ({self.max_segments}) must be >= min_segments ({self.min_segments})")
        if self.max_segments * self.min_segment_len > self.timeline:
            raise ValueError(f"max_segments * min_segment_len = {self.max_segments * self.min_segment_len} "
                             f"exceeds the regime timeline horizon + 2 = {self.timeline}")
        if self.min_user_interactions < self.horizon + 3:
            raise ValueError(f"min_user_interactions ({self.min_user_interactions}) must be >= horizon + 3 = "
                             f"{self.horizon + 3} (train, valid and test windows of one user)")

    @property
    def timeline(self) -> int:
        """Steps of a user's regime schedule: the three windows, offset by one step each."""
        return self.horizon + 2


@struct.dataclass
class Windows:
    """One window of T steps per user, all [U, T]; step t (0-based) of a window."""

    items: np.ndarray  # int32 i_t: the logged item (observation)
    ratings: np.ndarray  # float32 rating_t in [0.5, 5]
    genres: np.ndarray  # int32 genre(i_t)
    next_items: np.ndarray  # int32 i_{t+1}: the logged successor
    regimes: np.ndarray  # int32 c_t in [0, G): the hidden active genre
    rewards: np.ndarray  # float32 r_t (undelayed; ``delayed_feedback`` makes r~_t)
    targets: np.ndarray  # int32 a*_t: the expert target (supervision, never feedback)


@struct.dataclass
class Clusters:
    """The regime genres' item clusters, for the expert's popularity draw. The members of
    genre g are ``order[start[g]:end[g]]``; ``cum`` is g plus their normalised cumulative
    training popularity, so it increases across the whole array."""

    order: np.ndarray  # [K] int32 item indices, by (genre, item)
    cum: np.ndarray  # [K] float32
    start: np.ndarray  # [G] int32
    end: np.ndarray  # [G] int32


@dataclasses.dataclass(frozen=True)
class RecsysData:
    """The prepared Domain D dataset. U users, V items, G regime genres, T = horizon,
    C = 1 + n_negatives candidates (column 0 the target)."""

    config: RecsysConfig
    train: Windows  # [U, T]: user's last steps but two
    valid: Windows  # [U, T]: shifted by one step
    test: Windows  # [U, T]: the last T steps (successor of the last = the user's last item)
    valid_candidates: np.ndarray  # [U, C] int32, column 0 = valid.targets[:, -1]
    test_candidates: np.ndarray  # [U, C] int32, column 0 = test.targets[:, -1]
    item_genre: np.ndarray  # [V] int32 genre index of each item
    popularity: np.ndarray  # [V] int64 training ratings of each item
    clusters: Clusters
    item_ids: np.ndarray  # [V] int64 movieId of item index v
    user_ids: np.ndarray  # [U] int64 userId of row u
    genre_names: tuple[str, ...]  # genre index -> name; 0..G-1 are the regime genres

    @property
    def n_items(self) -> int:
        return int(self.item_ids.shape[0])


# --------------------------------------------------------------------------- reading

def _where(path: Path, index, column: str) -> str:
    return f"{path}: line {int(index) + 2}, column {column!r}"


def _read_csv(path: Path, columns: tuple[str, ...], **kwargs) -> pd.DataFrame:
    """Read ``columns`` of a CSV after checking its header; the frame's index is the data
    row (line = index + 2)."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected the MovieLens {path.name})")
    with open(path, encoding="utf-8-sig", newline="") as fh:
        first = fh.readline()
    if not first.strip():
        raise DataError(f"{path}: line 1: empty, expected the header {','.join(columns)}")
    header = [h.strip() for h in next(csv.reader([first]))]
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataError(f"{path}: line 1 (header): missing column(s) {missing}; expected "
                        f"{','.join(columns)}, found {','.join(header)}")
    try:
        frame = pd.read_csv(path, encoding="utf-8-sig", skip_blank_lines=False, **kwargs)
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: unreadable CSV ({err})") from err
    frame.columns = [c.strip() for c in frame.columns]
    return frame[list(columns)]


def _numeric(path: Path, frame: pd.DataFrame, column: str, integer: bool) -> np.ndarray:
    """``frame[column]`` as float64, with an error naming the first bad line."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        i = bad[0]
        text = raw.iloc[i]
        what = "missing value" if pd.isna(text) or str(text).strip() == "" else f"unparseable number {text!r}"
        raise DataError(f"{_where(path, frame.index[i], column)}: {what}")
    if integer:
        frac = np.flatnonzero(values != np.floor(values))
        if frac.size:
            i = frac[0]
            raise DataError(f"{_where(path, frame.index[i], column)}: expected an integer, got {raw.iloc[i]!r}")
    return values


def _drop_blank(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop the rows of blank lines (all fields missing or empty), keeping the index."""
    blank = pd.DataFrame({c: frame[c].isna() if pd.api.types.is_numeric_dtype(frame[c])
                          else frame[c].isna() | (frame[c].astype(str).str.strip() == "") for c in frame.columns})
    return frame[~blank.all(axis=1)]


def read_ratings(path: str | Path) -> pd.DataFrame:
    """MovieLens ``ratings.csv`` -> frame (userId, movieId: int64; rating: float64;
    timestamp: int64), index = data row (line - 2). Errors name file, line and column."""
    path = Path(path)
    return _checked_ratings(path, _read_csv(path, RATINGS_COLUMNS))


def read_movies(path: str | Path) -> pd.DataFrame:
    """MovieLens ``movies.csv`` -> frame (movieId: int64, title, genres: str, genre: the
    first listed genre or None for ``(no genres listed)``). Errors name file, line, column."""
    path = Path(path)
    return _checked_movies(path, _read_csv(path, MOVIES_COLUMNS, dtype=str, keep_default_na=False))


def _checked_movies(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """The movie frame of :func:`read_movies` from string columns ``MOVIES_COLUMNS``."""
    frame = _drop_blank(frame)
    ids = _numeric(path, frame, "movieId", integer=True).astype(np.int64)
    dup = np.flatnonzero(pd.Series(ids).duplicated().to_numpy())
    if dup.size:
        i = dup[0]
        first = frame.index[np.flatnonzero(ids == ids[i])[0]] + 2
        raise DataError(f"{_where(path, frame.index[i], 'movieId')}: duplicate movieId {ids[i]} (first on line {first})")
    genres = frame["genres"].str.strip()
    for i, text in enumerate(genres):
        if text == "":
            raise DataError(f"{_where(path, frame.index[i], 'genres')}: movie {ids[i]} has no genres "
                            f"(MovieLens marks such movies {NO_GENRES!r})")
        if text != NO_GENRES and any(g.strip() == "" for g in text.split("|")):
            raise DataError(f"{_where(path, frame.index[i], 'genres')}: empty genre in {text!r}")
    first = genres.str.split("|").str[0].str.strip()
    return pd.DataFrame({"movieId": ids, "title": frame["title"].to_numpy(), "genres": genres.to_numpy(),
                         "genre": first.where(genres != NO_GENRES, None).to_numpy()}, index=frame.index)


def _read_headerless(path: Path, sep: str, columns: tuple[str, ...], **kwargs) -> pd.DataFrame:
    """A GroupLens ``.dat`` / ``u.*`` file (no header, Latin-1) as strings, index = line - 2 (the
    CSV layout's convention, so :func:`_where` names line index + 2). ``sep`` of more than one
    character (ml-1m's ``::``) is replaced by a tab first: its titles hold single colons only."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected the MovieLens {path.name})")
    text = path.read_text(encoding="latin-1")
    if len(sep) > 1:
        text, sep = text.replace(sep, "\t"), "\t"
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, header=None, dtype=str, keep_default_na=False,
                            skip_blank_lines=False, quoting=csv.QUOTE_NONE, **kwargs)
    except pd.errors.ParserError as err:
        raise DataError(f"{path}: unreadable file ({err})") from err
    frame.index = frame.index - 1
    if frame.shape[1] < len(columns):
        raise DataError(f"{path}: {frame.shape[1]} fields a line, expected {len(columns)}: {', '.join(columns)}")
    return frame.iloc[:, :len(columns)].set_axis(list(columns), axis=1)


def _checked_ratings(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    """The rating frame of :func:`read_ratings` from string columns ``RATINGS_COLUMNS``."""
    frame = _drop_blank(frame)
    out = {c: _numeric(path, frame, c, integer=c != "rating") for c in RATINGS_COLUMNS}
    lo, hi = RATING_RANGE
    bad = np.flatnonzero((out["rating"] < lo) | (out["rating"] > hi))
    if bad.size:
        i = bad[0]
        raise DataError(f"{_where(path, frame.index[i], 'rating')}: rating {out['rating'][i]} outside [{lo}, {hi}]")
    return pd.DataFrame({c: out[c] if c == "rating" else out[c].astype(np.int64) for c in RATINGS_COLUMNS},
                        index=frame.index)


def read_ml1m(directory: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ml-1m's ``ratings.dat`` (UserID::MovieID::Rating::Timestamp) and ``movies.dat``
    (MovieID::Title::Genres) as the frames of :func:`read_ratings` and :func:`read_movies`."""
    ratings_path, movies_path = (directory / name for name in LAYOUTS["ml-1m"])
    ratings = _checked_ratings(ratings_path, _read_headerless(ratings_path, "::", RATINGS_COLUMNS))
    return ratings, _checked_movies(movies_path, _read_headerless(movies_path, "::", MOVIES_COLUMNS))


def read_ml100k(directory: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """ml-100k's ``u.data``, ``u.item`` and ``u.genre`` as the frames of :func:`read_ratings` and
    :func:`read_movies`; a movie's ``genres`` are the names of its set flags (module docstring)."""
    data_path, item_path, genre_path = (directory / name for name in LAYOUTS["ml-100k"])
    ratings = _checked_ratings(data_path, _read_headerless(data_path, "\t", RATINGS_COLUMNS))
    names = _drop_blank(_read_headerless(genre_path, "|", ("name", "index")))
    if list(names["index"]) != [str(i) for i in range(ML100K_GENRE_FLAGS)]:
        raise DataError(f"{genre_path}: genre indices {list(names['index'])}, expected 0..{ML100K_GENRE_FLAGS - 1} "
                        "in order (unknown and 18 genres, one per line)")
    flags = tuple(f"flag {n}" for n in names["name"])
    items = _drop_blank(_read_headerless(item_path, "|", ("movieId", "title", "release", "video", "url", *flags)))
    set_flags = {f: _numeric(item_path, items, f, integer=True) == 1 for f in flags}
    genres = []
    for row, line in enumerate(items.index):
        listed = [f[5:] for f in flags if set_flags[f][row]]
        if not listed:
            raise DataError(f"{_where(item_path, line, flags[0])}: movie {items['movieId'].iloc[row]} has no genre flag set")
        genres.append("|".join(g for g in listed if g != "unknown") or NO_GENRES)
    return ratings, _checked_movies(item_path, items[["movieId", "title"]].assign(genres=genres))


def read_movielens(directory: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ratings, movies) of a MovieLens folder in any of :data:`LAYOUTS`; a rating of a movie
    absent from the movie file is an error naming its line (never dropped silently)."""
    directory = Path(directory)
    expected = "; ".join(f"{name}: {', '.join(files)}" for name, files in LAYOUTS.items())
    if not directory.is_dir():
        raise DataError(f"data_dir {directory} is not a folder (expected the files of a MovieLens release: {expected})")
    if (directory / RATINGS_FILE).is_file() or (directory / MOVIES_FILE).is_file():
        files = LAYOUTS["ml-25m / ml-latest (CSV)"]
        ratings, movies = read_ratings(directory / RATINGS_FILE), read_movies(directory / MOVIES_FILE)
    elif (directory / LAYOUTS["ml-1m"][0]).is_file():
        files, (ratings, movies) = LAYOUTS["ml-1m"], read_ml1m(directory)
    elif (directory / LAYOUTS["ml-100k"][0]).is_file():
        files, (ratings, movies) = LAYOUTS["ml-100k"], read_ml100k(directory)
    else:
        raise DataError(f"data_dir {directory} holds no MovieLens rating file (expected {expected})")
    unknown = np.flatnonzero(~np.isin(ratings["movieId"].to_numpy(), movies["movieId"].to_numpy()))
    if unknown.size:
        i = unknown[0]
        raise DataError(f"{_where(directory / files[0], ratings.index[i], 'movieId')}: movie "
                        f"{ratings['movieId'].iloc[i]} is not in {directory / files[1]}")
    return ratings, movies


# --------------------------------------------------------------------------- filters

def core_filter(users: np.ndarray, items: np.ndarray, min_user: int, min_item: int) -> np.ndarray:
    """Mask of the interactions (users[k], items[k]) kept by the C.1 filters, iterated to a
    fixed point: each round drops users with < ``min_user`` kept interactions, then items
    with < ``min_item`` kept ratings (module docstring)."""
    if users.shape != items.shape or users.ndim != 1:
        raise ValueError(f"users and items must be equal-length vectors, got {users.shape} and {items.shape}")
    u = np.unique(users, return_inverse=True)[1]
    i = np.unique(items, return_inverse=True)[1]
    keep = np.ones(users.shape[0], bool)
    while True:
        before = int(keep.sum())
        keep &= np.bincount(u, weights=keep)[u] >= min_user
        keep &= np.bincount(i, weights=keep)[i] >= min_item
        if int(keep.sum()) == before:
            return keep


# --------------------------------------------------------------------------- per-step JAX

def draw_regimes(u: jax.Array, length: int, n_regimes: int, min_segments: int, max_segments: int,
                 min_len: int) -> jax.Array:
    """[length] hidden genre regime c_t (C.1; the schedule is ours, module docstring):
    n ~ U{min_segments..max_segments} segments of >= ``min_len`` steps, the first regime
    uniform, each next one uniform among the others. ``u``: 2 max_segments uniforms in
    [0, 1) (n, the max_segments - 1 cuts, the first regime, the max_segments - 1 moves)."""
    m = max_segments - 1
    if u.shape != (2 * max_segments,):
        raise ValueError(f"u must hold 2 * max_segments = {2 * max_segments} uniforms, got shape {u.shape}")
    n = min_segments + jnp.floor(u[0] * (max_segments - min_segments + 1)).astype(jnp.int32)
    slots = jnp.arange(1, max_segments)
    valid = slots < n
    cut_u = jnp.sort(jnp.where(valid, u[1:1 + m], 2.0))
    cuts = jnp.floor(jnp.where(valid, cut_u, 0.0) * (length - n * min_len + 1)).astype(jnp.int32)
    bounds = jnp.where(valid, slots * min_len + cuts, length)
    segment = jnp.sum(jnp.arange(length)[:, None] >= bounds[None, :], axis=1)
    first = jnp.floor(u[1 + m] * n_regimes).astype(jnp.int32)
    moves = 1 + jnp.floor(u[2 + m:] * (n_regimes - 1)).astype(jnp.int32)
    regimes = (first + jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(moves)])) % n_regimes
    return regimes[segment].astype(jnp.int32)


def reward(ratings: jax.Array, genres: jax.Array, regimes: jax.Array) -> jax.Array:
    """C.1: r_t = (rating_t / 5) 1[genre(i_t) = c_t] - 0.2 1[genre(i_t) != c_t]."""
    return jnp.where(genres == regimes, ratings / 5.0, -MISMATCH_PENALTY).astype(jnp.float32)


def expert_targets(u: jax.Array, next_items: jax.Array, regimes: jax.Array, item_genre: jax.Array,
                   clusters: Clusters) -> jax.Array:
    """C.2 regime-aware expert target a*_t (reading, module docstring): i_{t+1} when its
    genre is c_t, else a popularity-weighted draw from cluster c_t by inverse CDF of the
    uniforms ``u`` in [0, 1) (shape of ``regimes``)."""
    x = regimes + u
    idx = jnp.searchsorted(clusters.cum, x, side="right")
    idx = jnp.clip(idx, clusters.start[regimes], clusters.end[regimes] - 1)
    drawn = clusters.order[idx]
    return jnp.where(item_genre[next_items] == regimes, next_items, drawn).astype(jnp.int32)


def delay(values: jax.Array, d: jax.Array | int, fill: float | int = 0) -> jax.Array:
    """C.1 delayed feedback on the last (time) axis: out_t = values_{t-d}, ``fill`` where
    t - d < 0 (0-based). ``d`` may be traced (one compile for the whole sweep); a negative
    d feeds ``fill`` everywhere, never a future value."""
    if isinstance(d, int) and d < 0:
        raise ValueError(f"delay d must be >= 0, got {d}")
    t = jnp.arange(values.shape[-1])
    src = t - d
    shifted = jnp.take(values, jnp.clip(src, 0, values.shape[-1] - 1), axis=-1)
    return jnp.where((src >= 0) & (src <= t), shifted, jnp.asarray(fill, values.dtype))


def corruption(name: str) -> FeedbackChannel:
    """The ``uat_jax.feedback`` channel of a Domain D corruption (D.2; module docstring)."""
    if name not in CORRUPTIONS:
        raise ValueError(f"corruption must be one of {tuple(CORRUPTIONS)}, got {name!r}")
    return FeedbackChannel.make(CORRUPTIONS[name])


def delayed_feedback(key: jax.Array, rewards: jax.Array, d: jax.Array | int, channel: FeedbackChannel) -> jax.Array:
    """The reward channel fed to feedback-aware models, [..., T]: ``delay(rewards, d)``
    then the corruption ``channel`` (``corrupt_episode``, sequence k with key fold_in(key, k))."""
    delayed = delay(rewards, d)
    flat = delayed.reshape(-1, delayed.shape[-1])
    keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(jnp.arange(flat.shape[0]))
    return jax.vmap(corrupt_episode, in_axes=(0, 0, None))(keys, flat, channel).reshape(delayed.shape)


# --------------------------------------------------------------------------- metrics

def _check_scores(scores: jax.Array, k: int | None = None) -> None:
    if scores.ndim != 2 or scores.shape[1] < 2:
        raise ValueError(f"scores must be [users, candidates >= 2] with the target in column 0, got {scores.shape}")
    if k is not None and not 1 <= k <= scores.shape[1]:
        raise ValueError(f"k must be in [1, {scores.shape[1]}] (the candidates), got {k}")


def target_rank(scores: jax.Array) -> jax.Array:
    """[U] pessimistic 0-based rank of column 0: the negatives scoring >= it (NaN on
    either side counts against the target)."""
    _check_scores(scores)
    pos, neg = scores[:, :1], scores[:, 1:]
    return jnp.sum((neg >= pos) | jnp.isnan(neg) | jnp.isnan(pos), axis=1).astype(jnp.int32)


def hit_rate(scores: jax.Array, k: int) -> jax.Array:
    """C.3 HR@K: the fraction of users whose target ranks in the top K."""
    _check_scores(scores, k)
    return jnp.mean(target_rank(scores) < k)


def ndcg(scores: jax.Array, k: int) -> jax.Array:
    """C.3 NDCG@K with one relevant item: mean of 1[rank < K] / log2(rank + 2)."""
    _check_scores(scores, k)
    rank = target_rank(scores)
    return jnp.mean(jnp.where(rank < k, 1.0 / jnp.log2(rank + 2.0), 0.0))


def ranking_metrics(scores: jax.Array, ks: tuple[int, ...] = KS) -> dict[str, jax.Array]:
    """{"hr@K", "ndcg@K"} for each K in ``ks`` from [U, C] candidate scores."""
    return {**{f"hr@{k}": hit_rate(scores, k) for k in ks}, **{f"ndcg@{k}": ndcg(scores, k) for k in ks}}


def candidate_scores(logits: jax.Array, candidates: jax.Array) -> jax.Array:
    """[U, C] scores of the candidates from [U, V] item logits."""
    if logits.ndim != 2 or candidates.ndim != 2 or logits.shape[0] != candidates.shape[0]:
        raise ValueError(f"logits [U, V] and candidates [U, C] must share U, got {logits.shape} and {candidates.shape}")
    return jnp.take_along_axis(logits, candidates, axis=1)


# --------------------------------------------------------------------------- preparation

def sample_negatives(rng: np.random.Generator, user_items: list[np.ndarray], positives: np.ndarray,
                     n_items: int, n_negatives: int, user_ids: np.ndarray) -> np.ndarray:
    """[U, n_negatives] items drawn uniformly without replacement from [0, n_items) minus
    ``user_items[u]`` (the items user u rated) minus ``positives[u]`` (C.3)."""
    out = np.empty((len(user_items), n_negatives), np.int32)
    for u, (seen, pos) in enumerate(zip(user_items, positives)):
        excluded = np.union1d(seen, [pos])
        free = n_items - excluded.size
        if free < n_negatives:
            raise ValueError(f"user {user_ids[u]}: only {free} items left for {n_negatives} negatives "
                             f"(n_negatives, vocabulary {n_items}, the user rated {seen.size})")
        j = rng.choice(free, n_negatives, replace=False)
        # j-th free item = j + #{excluded s_k with s_k - k <= j} (s sorted)
        out[u] = j + np.searchsorted(excluded - np.arange(excluded.size), j, side="right")
    return out


def _clusters(item_genre: np.ndarray, popularity: np.ndarray, n_regimes: int) -> Clusters:
    order = np.concatenate([np.flatnonzero(item_genre == g) for g in range(n_regimes)])
    sizes = np.bincount(item_genre[order], minlength=n_regimes)
    end = np.cumsum(sizes)
    start = end - sizes
    cum = np.concatenate([g + np.cumsum(popularity[order[s:e]]) / popularity[order[s:e]].sum()
                          for g, (s, e) in enumerate(zip(start, end))])
    return Clusters(order=order.astype(np.int32), cum=cum.astype(np.float32),
                    start=start.astype(np.int32), end=end.astype(np.int32))


@functools.partial(jax.jit, static_argnames=("schedule",))
def _windows(key, user_ids, seq, ratings, item_genre, clusters, schedule):
    """Train / valid / test windows from [U, T+3] items and ratings (one compiled program);
    ``schedule`` = (timeline, G, min_segments, max_segments, min_segment_len). Each user's
    draws come from fold_in(key, userId) alone."""
    timeline, _, _, max_segments, _ = schedule
    T = timeline - 2
    n_u = 2 * max_segments
    u = jax.vmap(lambda uid: jax.random.uniform(jax.random.fold_in(key, uid), (n_u + 3 * T,)))(user_ids)
    regimes = jax.vmap(lambda x: draw_regimes(x, *schedule))(u[:, :n_u])
    genres = item_genre[seq]
    offsets = range(3)  # train, valid, test: offsets 0, 1, 2 on the user's timeline
    cut = lambda x, shift: jnp.stack([x[:, o + shift:o + shift + T] for o in offsets])  # [3, U, T]
    c = cut(regimes, 0)
    targets = expert_targets(u[:, n_u:].reshape(-1, 3, T).swapaxes(0, 1), cut(seq, 1), c, item_genre, clusters)
    r = reward(cut(ratings, 0), cut(genres, 0), c)
    fields = dict(items=cut(seq, 0), ratings=cut(ratings, 0), genres=cut(genres, 0), next_items=cut(seq, 1),
                  regimes=c, rewards=r, targets=targets)
    return [Windows(**{name: v[o] for name, v in fields.items()}) for o in offsets]


def prepare(ratings: pd.DataFrame, movies: pd.DataFrame, config: RecsysConfig = RecsysConfig()) -> RecsysData:
    """The Domain D dataset (C.1-C.3) from ``read_movielens`` frames (module docstring)."""
    T, G = config.horizon, config.n_regimes
    genre_of = movies.set_index("movieId")["genre"]
    genre = genre_of.reindex(ratings["movieId"].to_numpy()).to_numpy()
    known = pd.notna(genre)
    users = ratings["userId"].to_numpy()[known]
    movie = ratings["movieId"].to_numpy()[known]
    keep = core_filter(users, movie, config.min_user_interactions, config.min_item_ratings)
    users, movie = users[keep], movie[keep]
    time = ratings["timestamp"].to_numpy()[known][keep]
    score = ratings["rating"].to_numpy()[known][keep]
    user_ids = np.unique(users)
    if user_ids.size == 0:
        raise ValueError(f"no user passes the filters (min_user_interactions={config.min_user_interactions}, "
                         f"min_item_ratings={config.min_item_ratings})")
    if user_ids.size > config.max_users:
        rng = np.random.default_rng(config.seed)
        user_ids = np.sort(rng.choice(user_ids, config.max_users, replace=False))
        sel = np.isin(users, user_ids)
        users, movie, time, score = users[sel], movie[sel], time[sel], score[sel]
    order = np.lexsort((movie, time, users))
    users, movie, score = users[order], movie[order], score[order]
    item_ids, items = np.unique(movie, return_inverse=True)
    counts = np.bincount(np.unique(users, return_inverse=True)[1])
    ends = np.cumsum(counts)
    starts = ends - counts
    # training ratings: all but each user's last two (the valid and test successors)
    rank_from_end = np.repeat(ends, counts) - np.arange(users.size)
    popularity = np.bincount(items[rank_from_end > 2], minlength=item_ids.size)
    names = genre_of.reindex(item_ids).to_numpy().astype(str)
    per_genre = pd.Series(popularity).groupby(names).sum()
    ranked = sorted(per_genre.index, key=lambda g: (-per_genre[g], g))
    if len(ranked) < G or per_genre[ranked[G - 1]] == 0:
        raise ValueError(f"n_regimes = {G} but only {int((per_genre > 0).sum())} genres have training ratings")
    genre_names = tuple(ranked[:G]) + tuple(sorted(ranked[G:]))
    item_genre = pd.Index(genre_names).get_indexer(names).astype(np.int32)
    clusters = _clusters(item_genre, popularity, G)
    tail = ends[:, None] - (T + 3) + np.arange(T + 3)
    schedule = (config.timeline, G, config.min_segments, config.max_segments, config.min_segment_len)
    split = jax.tree.map(np.asarray, _windows(jax.random.key(config.seed), jnp.asarray(user_ids, jnp.int32),
                                              jnp.asarray(items[tail], jnp.int32), jnp.asarray(score[tail], jnp.float32),
                                              jnp.asarray(item_genre), jax.tree.map(jnp.asarray, clusters), schedule))
    rng = np.random.default_rng([config.seed, 1])
    user_items = [np.unique(items[s:e]) for s, e in zip(starts, ends)]
    candidates = [np.concatenate([w.targets[:, -1:], sample_negatives(rng, user_items, w.targets[:, -1], item_ids.size,
                                                                      config.n_negatives, user_ids)], axis=1)
                  for w in split[1:]]
    return RecsysData(config=config, train=split[0], valid=split[1], test=split[2], valid_candidates=candidates[0],
                      test_candidates=candidates[1], item_genre=item_genre, popularity=popularity, clusters=clusters,
                      item_ids=item_ids.astype(np.int64), user_ids=user_ids.astype(np.int64), genre_names=genre_names)


def load(data_dir: str | Path, config: RecsysConfig = RecsysConfig()) -> RecsysData:
    """``prepare(*read_movielens(data_dir), config)``: a folder with ratings.csv, movies.csv."""
    return prepare(*read_movielens(data_dir), config)


# --------------------------------------------------------------------------- synthetic files

SYNTHETIC_GENRES = ("Action", "Comedy", "Drama", "Romance", "Sci-Fi", "Thriller")


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the synthetic MovieLens files (``write_synthetic``). Defaults pass the
    paper's filters: most users rate 110-160 movies; ``light_fraction`` rate 20-99 (they fail
    the >= 100 filter); item popularity ~ (rank + 20)^-0.5, so the tail fails >= 50."""

    n_users: int = 300
    n_items: int = 500
    genres: tuple[str, ...] = SYNTHETIC_GENRES
    min_len: int = 110
    max_len: int = 160
    light_fraction: float = 0.1
    light_len: tuple[int, int] = (20, 99)
    regime_len: tuple[int, int] = (8, 20)  # planted taste segment lengths (steps)
    stickiness: float = 0.8  # P(the next movie is of the user's current taste genre)
    second_genre: float = 0.3  # P(a movie lists a second genre after its planted one)
    n_no_genre: int = 2  # movies listed '(no genres listed)', never rated
    seed: int = 0

    def __post_init__(self):
        if len(self.genres) < 2:
            raise ValueError(f"genres must hold >= 2 names, got {self.genres}")
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
        if self.max_len > self.n_items:
            raise ValueError(f"max_len ({self.max_len}) exceeds n_items ({self.n_items}): users rate a movie once")
        if not (0 <= self.light_fraction <= 1 and 0 <= self.stickiness <= 1 and 0 <= self.second_genre <= 1):
            raise ValueError("light_fraction, stickiness and second_genre must be probabilities")
        if not 1 <= self.regime_len[0] <= self.regime_len[1]:
            raise ValueError(f"regime_len must be (lo, hi) with 1 <= lo <= hi, got {self.regime_len}")


def synthetic_frames(cfg: SyntheticConfig = SyntheticConfig()) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """(ratings, movies, taste): MovieLens frames with planted genre regimes, and the
    planted taste genre of each rating row.

    Movies: ids 1 + 3 v (not contiguous), planted genre v mod n_genres listed first, a
    second genre with probability ``second_genre``; every fifth title has a comma. Users:
    a taste genre per segment (lengths uniform in ``regime_len``; first uniform, next
    uniform among the others); each step picks a genre (the taste with probability
    ``stickiness``, else uniform), then an unrated movie of it by popularity (any unrated
    movie if none is left). Rating: 3 + 1[movie genre = taste] + quality_v + N(0, 0.6^2),
    quality_v ~ N(0, 0.5^2), rounded to half stars, clipped to [0.5, 5]. Timestamps
    increase by 1 + Poisson(3600) s from a uniform start in [9.5e8, 1.5e9]."""
    rng = np.random.default_rng(cfg.seed)
    n_g, V = len(cfg.genres), cfg.n_items
    genre = np.arange(V) % n_g
    pop = (rng.permutation(V) + 20.0) ** -0.5
    quality = rng.normal(0.0, 0.5, V)
    second = (genre + rng.integers(1, n_g, V)) % n_g
    listed = [cfg.genres[g] + (f"|{cfg.genres[s]}" if rng.random() < cfg.second_genre else "")
              for g, s in zip(genre, second)]
    titles = [f"Synthetic Movie {v}{', The' if v % 5 == 0 else ''} ({1950 + v % 70})" for v in range(V)]
    movies = pd.DataFrame({"movieId": 1 + 3 * np.arange(V + cfg.n_no_genre),
                           "title": titles + [f"Untagged Movie {k}" for k in range(cfg.n_no_genre)],
                           "genres": listed + [NO_GENRES] * cfg.n_no_genre})
    rows, taste_rows = [], []
    for user in range(1, cfg.n_users + 1):
        light = rng.random() < cfg.light_fraction
        n = rng.integers(*cfg.light_len, endpoint=True) if light else rng.integers(cfg.min_len, cfg.max_len, endpoint=True)
        n = min(int(n), V)
        taste = np.empty(n, np.int64)
        t, g = 0, rng.integers(n_g)
        while t < n:
            span = rng.integers(*cfg.regime_len, endpoint=True)
            taste[t:t + span] = g
            t += span
            g = (g + rng.integers(1, n_g)) % n_g
        free = np.ones(V, bool)
        chosen = np.empty(n, np.int64)
        for k in range(n):
            want = taste[k] if rng.random() < cfg.stickiness else rng.integers(n_g)
            w = pop * free * (genre == want)
            w = w if w.sum() > 0 else pop * free
            chosen[k] = rng.choice(V, p=w / w.sum())
            free[chosen[k]] = False
        match = genre[chosen] == taste
        stars = 3.0 + match + quality[chosen] + rng.normal(0.0, 0.6, n)
        stars = np.clip(np.round(stars * 2) / 2, *RATING_RANGE)
        times = rng.integers(950_000_000, 1_500_000_000) + np.cumsum(1 + rng.poisson(3600, n))
        rows.append(pd.DataFrame({"userId": user, "movieId": 1 + 3 * chosen, "rating": stars, "timestamp": times}))
        taste_rows.append(taste)
    ratings = pd.concat(rows, ignore_index=True)
    taste = np.concatenate(taste_rows)
    order = np.lexsort((ratings["movieId"].to_numpy(), ratings["userId"].to_numpy()))  # the files' layout
    return ratings.iloc[order].reset_index(drop=True), movies, taste[order]


def write_synthetic(directory: str | Path, cfg: SyntheticConfig = SyntheticConfig()) -> np.ndarray:
    """Write ``synthetic_frames(cfg)`` as ``ratings.csv`` and ``movies.csv`` in the MovieLens
    layout (rows by userId then movieId, as in ml-latest-small); returns the planted taste
    genre of each ratings.csv row."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ratings, movies, taste = synthetic_frames(cfg)
    ratings.to_csv(directory / RATINGS_FILE, index=False)
    movies.to_csv(directory / MOVIES_FILE, index=False)
    return taste

"""Domain D data layer (``uat_jax.recsys_data``): MovieLens reading and its errors, the C.1
filters, reward, delay and corruption, the expert target, the C.3 ranking metrics against
brute-force numpy, the negatives, and the synthetic files round trip."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from uat_jax import recsys_data as rd

SYN = rd.SyntheticConfig(n_users=40, n_items=150, min_len=40, max_len=60, light_len=(5, 15), seed=3)
CFG = rd.RecsysConfig(min_user_interactions=20, min_item_ratings=5, max_users=25, horizon=10, n_regimes=3,
                      min_segments=2, max_segments=3, min_segment_len=3, n_negatives=20, seed=1)
UNTAGGED = 1 + 3 * SYN.n_items  # the first '(no genres listed)' movie of the synthetic catalogue


# --------------------------------------------------------------------------- metrics

def brute_rank(scores: np.ndarray) -> np.ndarray:
    """Position of column 0 after sorting by score descending, ties placing it last."""
    ranks = []
    for row in scores:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j == 0))
        ranks.append(order.index(0))
    return np.array(ranks)


def test_metrics_match_brute_force_with_ties(rng):
    scores = rng.integers(0, 6, (60, 100)).astype(np.float32)  # 6 values over 100 columns: many ties
    scores[:5, 0] = 10.0  # some clear hits
    ranks = brute_rank(scores)
    np.testing.assert_array_equal(np.asarray(rd.target_rank(jnp.asarray(scores))), ranks)
    got = rd.ranking_metrics(jnp.asarray(scores))
    for k in rd.KS:
        hr = np.mean([r < k for r in ranks])
        nd = np.mean([1.0 / math.log2(r + 2) if r < k else 0.0 for r in ranks])
        assert float(got[f"hr@{k}"]) == pytest.approx(hr)
        assert float(got[f"ndcg@{k}"]) == pytest.approx(nd, rel=1e-6)


def test_metrics_hand_example_and_nan():
    s = jnp.asarray([[3.0, 1.0, 3.0, 5.0], [4.0, 1.0, 2.0, 3.0], [jnp.nan, 1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(np.asarray(rd.target_rank(s)), [2, 0, 3])  # tie counts against; NaN worst
    assert float(rd.hit_rate(s, 1)) == pytest.approx(1 / 3)
    assert float(rd.ndcg(s, 3)) == pytest.approx((0.5 + 1.0) / 3)  # 1/log2(2 + 2), 1/log2(0 + 2)
    with pytest.raises(ValueError, match="k must be"):
        rd.hit_rate(s, 5)
    with pytest.raises(ValueError, match="scores"):
        rd.ndcg(s[0], 1)


def test_candidate_scores_gathers():
    logits = jnp.arange(12.0).reshape(2, 6)
    np.testing.assert_array_equal(np.asarray(rd.candidate_scores(logits, jnp.asarray([[5, 0], [1, 2]]))),
                                  [[5.0, 0.0], [7.0, 8.0]])


# --------------------------------------------------------------------------- filters, reward, delay

def test_core_filter_hand_example():
    # u1: a b, u2: a b, u3: a c, u4: c. Thresholds 2 / 2. Round 1 drops u4, then c (1 rating
    # left); round 2 drops u3 (only a left); a and b keep exactly 2 ratings (threshold kept).
    users = np.array([1, 1, 2, 2, 3, 3, 4])
    items = np.array([10, 11, 10, 11, 10, 12, 12])
    np.testing.assert_array_equal(rd.core_filter(users, items, 2, 2), [1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(rd.core_filter(users, items, 1, 1), np.ones(7, bool))
    np.testing.assert_array_equal(rd.core_filter(users, items, 3, 1), np.zeros(7, bool))


def test_reward_hand_example():
    r = rd.reward(jnp.asarray([4.0, 2.5, 5.0, 0.5]), jnp.asarray([1, 0, 2, 3]), jnp.asarray([1, 1, 2, 3]))
    np.testing.assert_allclose(np.asarray(r), [0.8, -0.2, 1.0, 0.1], rtol=1e-6)


def test_delay_hand_examples_one_compile():
    rewards = jnp.asarray([[1.0, 2.0, 3.0, 4.0, 5.0]])
    traces = []

    @jax.jit
    def fed(d):
        traces.append(d)
        return rd.delay(rewards, d)

    want = {0: [1, 2, 3, 4, 5], 1: [0, 1, 2, 3, 4], 3: [0, 0, 0, 1, 2], 5: [0, 0, 0, 0, 0], 10: [0] * 5}
    for d in rd.DELAYS:
        np.testing.assert_array_equal(np.asarray(fed(jnp.asarray(d))), [want[d]])
    assert len(traces) == 1  # the sweep over d compiles once
    np.testing.assert_array_equal(np.asarray(fed(jnp.asarray(-2))), [[0] * 5])  # never a future value
    np.testing.assert_array_equal(np.asarray(rd.delay(jnp.asarray([4, 5, 6]), 1, fill=-1)), [-1, 4, 5])
    with pytest.raises(ValueError, match="delay d"):
        rd.delay(rewards, -1)


def test_delayed_feedback_corruptions():
    rewards = jnp.asarray(np.random.default_rng(0).normal(size=(3, 8)), jnp.float32)
    key = jax.random.key(0)
    delayed = np.asarray(rd.delay(rewards, 2))
    fed = jax.jit(rd.delayed_feedback)  # one program for the four channels
    out = {name: np.asarray(fed(key, rewards, 2, rd.corruption(name))) for name in rd.CORRUPTIONS}
    np.testing.assert_allclose(out["clean"], delayed)
    np.testing.assert_allclose(out["null"], 0.0)
    np.testing.assert_allclose(out["adversarial"], -delayed)
    for b in range(3):  # shuffled: a delayed reward of the same sequence from a step <= t
        for t in range(8):
            assert np.any(np.isclose(out["shuffled"][b, t], delayed[b, :t + 1]))
    assert not np.allclose(out["shuffled"], delayed)
    with pytest.raises(ValueError, match="corruption"):
        rd.corruption("sign_flip")


def test_expert_target_hand_example():
    # items 0..5, genres [0, 1, 0, 2, 1, 0]; regimes 0 and 1; popularity 1, 3, 3, -, 1, 0
    item_genre = np.array([0, 1, 0, 2, 1, 0])
    clusters = rd._clusters(item_genre, np.array([1, 3, 3, 9, 1, 0]), 2)
    np.testing.assert_array_equal(clusters.order, [0, 2, 5, 1, 4])
    np.testing.assert_allclose(clusters.cum, [0.25, 1.0, 1.0, 1.75, 2.0])
    nxt = jnp.asarray([2, 3, 3, 4, 1, 0, 3, 3, 2])
    reg = jnp.asarray([0, 0, 0, 1, 1, 1, 0, 0, 1])
    u = jnp.asarray([0.9, 0.1, 0.5, 0.0, 0.8, 0.74, 0.25, 0.9999, 0.75])
    got = rd.expert_targets(u, nxt, reg, jnp.asarray(item_genre), jax.tree.map(jnp.asarray, clusters))
    # match -> successor (2, 4, 1); mismatch -> item k with cdf[k-1] <= u < cdf[k]: in cluster 0
    # (items 0, 2, 5; cdf 0.25, 1, 1) 0.1 -> 0, 0.5 -> 2, 0.25 -> 2, 0.9999 -> 2 (item 5 has no
    # ratings, never drawn); in cluster 1 (items 1, 4; cdf 0.75, 1) 0.74 -> 1, 0.75 -> 4
    np.testing.assert_array_equal(np.asarray(got), [2, 0, 2, 4, 1, 1, 2, 2, 4])


def test_draw_regimes_segments():
    u = jax.random.uniform(jax.random.key(0), (64, 10))
    c = np.asarray(jax.jit(jax.vmap(lambda x: rd.draw_regimes(x, 30, 4, 3, 5, 4)))(u))
    assert c.min() >= 0 and c.max() < 4
    for row in c:
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        lengths = np.diff(np.r_[starts, 30])
        assert 3 <= len(starts) <= 5 and lengths.min() >= 4
    with pytest.raises(ValueError, match="uniforms"):
        rd.draw_regimes(u[0, :4], 30, 4, 3, 5, 4)


# --------------------------------------------------------------------------- negatives

def test_sample_negatives_excludes_user_items():
    rng = np.random.default_rng(0)
    seen = [np.array([0, 1, 2, 7]), np.array([5]), np.arange(0, 30, 2)]
    pos = np.array([9, 5, 1])
    neg = rd.sample_negatives(rng, seen, pos, 30, 12, np.array([1, 2, 3]))
    for s, p, row in zip(seen, pos, neg):
        assert len(set(row)) == 12 and row.min() >= 0 and row.max() < 30
        assert not set(row) & (set(s) | {p})
    full = rd.sample_negatives(rng, [np.arange(0, 30, 2)], np.array([1]), 30, 14, np.array([3]))
    assert set(full[0]) == set(range(3, 30, 2))  # all 14 free items
    with pytest.raises(ValueError, match="user 3"):
        rd.sample_negatives(rng, [np.arange(0, 30, 2)], np.array([1]), 30, 15, np.array([3]))


# --------------------------------------------------------------------------- files

RATINGS_OK = "userId,movieId,rating,timestamp\n1,1,4.0,100\n1,2,3.5,101\n"
MOVIES_OK = 'movieId,title,genres\n1,"Heat, The (1995)",Action|Crime\n2,Toy Story (1995),Animation|Comedy\n'


def write(tmp_path, ratings=RATINGS_OK, movies=MOVIES_OK):
    (tmp_path / "ratings.csv").write_text(ratings)
    (tmp_path / "movies.csv").write_text(movies)
    return tmp_path


def test_read_small_files(tmp_path):
    ratings, movies = rd.read_movielens(write(tmp_path, RATINGS_OK + "\n", MOVIES_OK + '3,Untagged,"(no genres listed)"\n'))
    assert ratings["userId"].tolist() == [1, 1] and ratings["rating"].tolist() == [4.0, 3.5]
    assert movies["title"][0] == "Heat, The (1995)"
    assert movies["genre"].tolist()[:2] == ["Action", "Animation"] and pd.isna(movies["genre"].iloc[2])


@pytest.mark.parametrize("ratings,movies,where", [
    ("userId,movieId,score,timestamp\n1,1,4,100\n", MOVIES_OK, r"ratings.csv: line 1 \(header\): missing column\(s\) \['rating'\]"),
    ("user,movie,rating,time\n1,1,4,100\n", MOVIES_OK, r"ratings.csv: line 1 \(header\)"),
    ("", MOVIES_OK, r"ratings.csv: line 1: empty"),
    (RATINGS_OK + "1,x2,4.0,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'movieId': unparseable number 'x2'"),
    (RATINGS_OK + "1,2,,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'rating': missing value"),
    (RATINGS_OK + "1.5,2,4,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'userId': expected an integer"),
    (RATINGS_OK + "1,2,5.5,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'rating': rating 5.5 outside"),
    (RATINGS_OK + "1,2,0,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'rating': rating 0.0 outside"),
    (RATINGS_OK + "\n1,2,9,102\n", MOVIES_OK, r"ratings.csv: line 5, column 'rating': rating 9.0 outside"),
    (RATINGS_OK + "1,2,4,102,9\n", MOVIES_OK, r"ratings.csv: unreadable CSV"),
    (RATINGS_OK + "2,7,4,102\n", MOVIES_OK, r"ratings.csv: line 4, column 'movieId': movie 7 is not in"),
    (RATINGS_OK, "movieId,name,genres\n1,A,Drama\n", r"movies.csv: line 1 \(header\): missing column\(s\) \['title'\]"),
    (RATINGS_OK, MOVIES_OK + "3,Empty,\n", r"movies.csv: line 4, column 'genres': movie 3 has no genres"),
    (RATINGS_OK, MOVIES_OK + "3,Gap,Action||Drama\n", r"movies.csv: line 4, column 'genres': empty genre"),
    (RATINGS_OK, MOVIES_OK + "2,Again,Drama\n", r"movies.csv: line 4, column 'movieId': duplicate movieId 2 \(first on line 3\)"),
    (RATINGS_OK, MOVIES_OK + "three,X,Drama\n", r"movies.csv: line 4, column 'movieId': unparseable number 'three'"),
])
def test_malformed_files(tmp_path, ratings, movies, where):
    with pytest.raises(ValueError, match=where):
        rd.read_movielens(write(tmp_path, ratings, movies))


def test_missing_files(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        rd.read_movielens(tmp_path / "nowhere")
    (tmp_path / "ratings.csv").write_text(RATINGS_OK)
    with pytest.raises(ValueError, match="movies.csv: file not found"):
        rd.read_movielens(tmp_path)


# GroupLens's other layouts, written here as its READMEs describe them (Latin-1, no header)
ML100K_GENRES = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
                 "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western"]


def write_ml1m(folder, ratings, movies):
    """ratings [(user, movie, rating, time)], movies [(id, title, genres)] as ml-1m's ratings.dat, movies.dat."""
    (folder / "ratings.dat").write_text("".join("::".join(map(str, r)) + "\n" for r in ratings), encoding="latin-1")
    (folder / "movies.dat").write_text("".join("::".join(map(str, m)) + "\n" for m in movies), encoding="latin-1")
    return folder


def write_ml100k(folder, ratings, movies, genres=ML100K_GENRES):
    """ratings as above; movies [(id, title, [genre names])] as ml-100k's u.data, u.item (flags), u.genre."""
    (folder / "u.data").write_text("".join("\t".join(map(str, r)) + "\n" for r in ratings), encoding="latin-1")
    lines = [f"{i}|{title}|01-Jan-1995||http://x/{i}|" + "|".join(str(int(g in listed)) for g in ML100K_GENRES)
             for i, title, listed in movies]
    (folder / "u.item").write_text("\n".join(lines) + "\n", encoding="latin-1")
    (folder / "u.genre").write_text("".join(f"{g}|{i}\n" for i, g in enumerate(genres)) + "\n", encoding="latin-1")
    return folder


def test_ml1m_and_ml100k_layouts_read_as_the_csv_layout(tmp_path):
    ratings = [(1, 1, 4, 100), (1, 2, 3, 101), (2, 1, 5, 99)]
    (tmp_path / "csv").mkdir()
    write(tmp_path / "csv", "userId,movieId,rating,timestamp\n" + "".join(",".join(map(str, r)) + "\n" for r in ratings),
          'movieId,title,genres\n1,"Heat: Redux, The (1995)",Action|Crime\n2,Café (1995),Animation|Comedy\n'
          '3,Lost (1996),(no genres listed)\n')
    want_r, want_m = (f.reset_index(drop=True) for f in rd.read_movielens(tmp_path / "csv"))
    (tmp_path / "1m").mkdir()
    movies = [(1, "Heat: Redux, The (1995)", "Action|Crime"), (2, "Café (1995)", "Animation|Comedy"),
              (3, "Lost (1996)", "(no genres listed)")]
    got_r, got_m = (f.reset_index(drop=True) for f in rd.read_movielens(write_ml1m(tmp_path / "1m", ratings, movies)))
    pd.testing.assert_frame_equal(got_r, want_r)
    pd.testing.assert_frame_equal(got_m, want_m)
    (tmp_path / "100k").mkdir()
    flagged = [(1, "Heat: Redux, The (1995)", ["Crime", "Action"]), (2, "Café (1995)", ["Comedy", "Animation"]),
               (3, "Lost (1996)", ["unknown"])]
    got_r, got_m = (f.reset_index(drop=True) for f in rd.read_movielens(write_ml100k(tmp_path / "100k", ratings, flagged)))
    pd.testing.assert_frame_equal(got_r, want_r)
    pd.testing.assert_frame_equal(got_m, want_m)  # flags in u.genre's (alphabetical) order: Action|Crime


ML1M_MOVIES = [(1, "A (1995)", "Drama"), (2, "B (1995)", "Comedy")]
ML100K_MOVIES = [(1, "A (1995)", ["Drama"]), (2, "B (1995)", ["Comedy"])]


@pytest.mark.parametrize("layout, ratings, movies, genres, where", [
    ("1m", [(1, 1, 4, 100), (1, 2, 3)], ML1M_MOVIES, None, r"ratings.dat: line 2, column 'timestamp': missing value"),
    ("1m", [(1, 1, 4, 100), (1, 2, 6, 101)], ML1M_MOVIES, None, r"ratings.dat: line 2, column 'rating': rating 6.0"),
    ("1m", [(1, 7, 4, 100)], ML1M_MOVIES, None, r"ratings.dat: line 1, column 'movieId': movie 7 is not in .*movies.dat"),
    ("1m", [(1, 1, 4, 100)], ML1M_MOVIES + [(2, "C", "Drama")], None, r"movies.dat: line 3, column 'movieId': duplicate"),
    ("1m", [(1, 1, 4, 100)], [(1, "A", "")], None, r"movies.dat: line 1, column 'genres': movie 1 has no genres"),
    ("100k", [(1, 1, 4, 100), (1, 2, "x", 101)], ML100K_MOVIES, ML100K_GENRES,
     r"u.data: line 2, column 'rating': unparseable number 'x'"),
    ("100k", [(1, 1, 4, 100)], ML100K_MOVIES + [(3, "C", [])], ML100K_GENRES,
     r"u.item: line 3, column 'flag unknown': movie 3 has no genre flag set"),
    ("100k", [(1, 1, 4, 100)], ML100K_MOVIES, ML100K_GENRES[:-1], r"u.genre: genre indices .* expected 0..18"),
])
def test_ml1m_and_ml100k_errors_name_file_line_and_column(tmp_path, layout, ratings, movies, genres, where):
    folder = write_ml1m(tmp_path, ratings, movies) if layout == "1m" else write_ml100k(tmp_path, ratings, movies, genres)
    with pytest.raises(ValueError, match=where):
        rd.read_movielens(folder)


def test_a_folder_of_no_known_layout_names_them_all(tmp_path):
    (tmp_path / "u.item").write_text("1|A|||x|" + "|".join("0" * 19) + "\n")
    with pytest.raises(ValueError, match=r"holds no MovieLens rating file .*ratings.csv.*ratings.dat.*u.data"):
        rd.read_movielens(tmp_path)


def test_config_errors():
    with pytest.raises(ValueError, match="min_user_interactions"):
        rd.RecsysConfig(min_user_interactions=52)
    with pytest.raises(ValueError, match="n_regimes"):
        rd.RecsysConfig(n_regimes=1)
    with pytest.raises(ValueError, match="max_segments"):
        rd.RecsysConfig(max_segments=9, min_segment_len=6)
    with pytest.raises(ValueError, match="max_len"):
        rd.SyntheticConfig(n_items=100, max_len=120)


# --------------------------------------------------------------------------- synthetic round trip

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ml")
    taste = rd.write_synthetic(folder, SYN)
    ratings, movies = rd.read_movielens(folder)
    # every user also rates an untagged movie: it must be dropped, not indexed
    extra = pd.DataFrame({"userId": np.arange(1, SYN.n_users + 1), "movieId": UNTAGGED, "rating": 4.0,
                          "timestamp": 2_000_000_000})
    ratings = pd.concat([ratings, extra], ignore_index=True)
    return folder, taste, ratings, movies, rd.prepare(ratings, movies, CFG)


def test_generator_round_trip(synthetic):
    folder, taste, _, _, _ = synthetic
    ratings, movies, planted = rd.synthetic_frames(SYN)
    got_r, got_m = rd.read_movielens(folder)
    pd.testing.assert_frame_equal(got_r.reset_index(drop=True), ratings, check_dtype=False)
    pd.testing.assert_frame_equal(got_m[["movieId", "title", "genres"]].reset_index(drop=True), movies,
                                  check_dtype=False)
    np.testing.assert_array_equal(taste, planted)
    genre_index = {g: k for k, g in enumerate(SYN.genres)}
    first = got_m.set_index("movieId")["genre"].reindex(got_r["movieId"]).map(genre_index).to_numpy()
    match = np.mean(first == taste)  # planted regimes: stickiness plus chance
    assert SYN.stickiness - 0.05 < match < SYN.stickiness + (1 - SYN.stickiness) / len(SYN.genres) + 0.05


def test_prepared_dataset(synthetic):
    _, _, ratings, movies, data = synthetic
    T, U, V = CFG.horizon, CFG.max_users, data.n_items
    known = ratings["movieId"] != UNTAGGED
    keep = rd.core_filter(ratings["userId"].to_numpy()[known], ratings["movieId"].to_numpy()[known],
                          CFG.min_user_interactions, CFG.min_item_ratings)
    eligible = np.unique(ratings["userId"].to_numpy()[known][keep])
    assert eligible.size > U and data.user_ids.shape == (U,)  # seeded sample of the eligible users
    assert set(data.user_ids) <= set(eligible) and np.all(np.diff(data.user_ids) > 0)
    assert UNTAGGED not in set(data.item_ids) and np.all(np.diff(data.item_ids) > 0)
    for split in (data.train, data.valid, data.test):
        assert all(x.shape == (U, T) for x in jax.tree.leaves(split))
    np.testing.assert_array_equal(data.valid.items[:, 1:], data.test.items[:, :-1])
    np.testing.assert_array_equal(data.train.items[:, 2:], data.test.items[:, :-2])
    np.testing.assert_array_equal(data.test.next_items[:, :-1], data.test.items[:, 1:])
    np.testing.assert_array_equal(data.valid.regimes[:, 1:], data.test.regimes[:, :-1])
    # the test window is the user's last T + 1 ratings of kept items, in timestamp order
    frame = ratings[known][keep]
    frame = frame[frame["userId"].isin(data.user_ids) & frame["movieId"].isin(data.item_ids)]
    item_of = pd.Series(np.arange(V), index=data.item_ids)
    for u, uid in enumerate(data.user_ids):
        log = frame[frame["userId"] == uid].sort_values(["timestamp", "movieId"])
        last = item_of[log["movieId"].to_numpy()[-(T + 1):]].to_numpy()
        np.testing.assert_array_equal(np.r_[data.test.items[u], data.test.next_items[u, -1]], last)
        np.testing.assert_allclose(data.test.ratings[u], log["rating"].to_numpy()[-(T + 1):-1])
    # reward and expert target follow C.1 / C.2 on every step
    for w in (data.train, data.valid, data.test):
        match = data.item_genre[w.items] == w.regimes
        np.testing.assert_allclose(w.rewards, np.where(match, w.ratings / 5, -0.2), rtol=1e-6)
        hit = data.item_genre[w.next_items] == w.regimes
        np.testing.assert_array_equal(w.targets[hit], w.next_items[hit])
        assert np.all(data.item_genre[w.targets] == w.regimes)
    assert set(data.genre_names) == set(SYN.genres) and w.regimes.max() < CFG.n_regimes


def test_candidates_never_hold_user_items(synthetic):
    _, _, ratings, _, data = synthetic
    for cands, w in ((data.valid_candidates, data.valid), (data.test_candidates, data.test)):
        assert cands.shape == (CFG.max_users, 1 + CFG.n_negatives)
        np.testing.assert_array_equal(cands[:, 0], w.targets[:, -1])
        for u, uid in enumerate(data.user_ids):
            rated = set(np.searchsorted(data.item_ids, ratings.loc[ratings["userId"] == uid, "movieId"])
                        [np.isin(ratings.loc[ratings["userId"] == uid, "movieId"], data.item_ids)])
            negatives = set(cands[u, 1:])
            assert len(negatives) == CFG.n_negatives and not negatives & (rated | {cands[u, 0]})

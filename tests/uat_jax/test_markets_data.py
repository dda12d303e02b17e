"""Domain C data layer (uat_jax.markets_data): indicators against plain numpy loops,
both file layouts through the generator, malformed files, the training-only scaling,
padding and windows, and the post-hoc regime labels."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from uat_jax import markets_data as md

# ------------------------------------------------------------ numpy reference indicators
# Plain loops written from the indicator definitions (Wilder 1978 for RSI/ATR/ADX; Appel
# for MACD; Lambert for CCI; Lane for the stochastic), with TA-Lib's seeding conventions.


def ref_rsi(c, n=14):
    out = np.full(len(c), np.nan)
    d = np.diff(c)
    up, down = np.maximum(d, 0), np.maximum(-d, 0)
    au, ad = up[:n].mean(), down[:n].mean()
    out[n] = 100 * au / (au + ad)
    for i in range(n + 1, len(c)):
        au = (au * (n - 1) + up[i - 1]) / n
        ad = (ad * (n - 1) + down[i - 1]) / n
        out[i] = 100 * au / (au + ad)
    return out


def ref_ema(x, n, end):
    """EMA of x with alpha 2 / (n + 1), seeded at index ``end`` by the mean of x[end-n+1..end]."""
    out = np.full(len(x), np.nan)
    out[end] = x[end - n + 1:end + 1].mean()
    a = 2.0 / (n + 1)
    for i in range(end + 1, len(x)):
        out[i] = a * x[i] + (1 - a) * out[i - 1]
    return out


def ref_macd(c, fast=12, slow=26, signal=9):
    start = slow - 1  # both EMAs start on the slow one's first day
    line = ref_ema(c, fast, start) - ref_ema(c, slow, start)
    sig = ref_ema(line, signal, start + signal - 1)
    line = np.where(np.isnan(sig), np.nan, line)
    return line, sig, line - sig


def true_range(h, l, c):
    tr = np.full(len(c), np.nan)
    for i in range(1, len(c)):
        tr[i] = max(h[i] - l[i], abs(h[i] - c[i - 1]), abs(l[i] - c[i - 1]))
    return tr


def ref_atr(h, l, c, n=14):
    tr = true_range(h, l, c)
    out = np.full(len(c), np.nan)
    out[n] = tr[1:n + 1].mean()
    for i in range(n + 1, len(c)):
        out[i] = (out[i - 1] * (n - 1) + tr[i]) / n
    return out


def ref_adx(h, l, c, n=14):
    tr = true_range(h, l, c)
    pdm, mdm = np.zeros(len(c)), np.zeros(len(c))
    for i in range(1, len(c)):
        up, dn = h[i] - h[i - 1], l[i - 1] - l[i]
        if dn > 0 and up < dn:
            mdm[i] = dn
        elif up > 0 and up > dn:
            pdm[i] = up
    # Wilder sums seeded with the first n - 1 days, then s <- s - s / n + x.
    sp, sm, st = pdm[1:n].sum(), mdm[1:n].sum(), tr[1:n].sum()
    dx = np.full(len(c), np.nan)
    for i in range(n, len(c)):
        sp, sm, st = sp - sp / n + pdm[i], sm - sm / n + mdm[i], st - st / n + tr[i]
        pdi, mdi = 100 * sp / st, 100 * sm / st
        dx[i] = 100 * abs(pdi - mdi) / (pdi + mdi)
    out = np.full(len(c), np.nan)
    out[2 * n - 1] = dx[n:2 * n].mean()
    for i in range(2 * n, len(c)):
        out[i] = (out[i - 1] * (n - 1) + dx[i]) / n
    return out


def ref_cci(h, l, c, n=14):
    tp = (h + l + c) / 3
    out = np.full(len(c), np.nan)
    for i in range(n - 1, len(c)):
        w = tp[i - n + 1:i + 1]
        out[i] = (tp[i] - w.mean()) / (0.015 * np.abs(w - w.mean()).mean())
    return out


def ref_mfi(h, l, c, v, n=14):
    tp = (h + l + c) / 3
    out = np.full(len(c), np.nan)
    for i in range(n, len(c)):
        pos = neg = 0.0
        for j in range(i - n + 1, i + 1):
            if tp[j] > tp[j - 1]:
                pos += tp[j] * v[j]
            elif tp[j] < tp[j - 1]:
                neg += tp[j] * v[j]
        out[i] = 100 * pos / (pos + neg)
    return out


def ref_obv(c, v):
    out = np.empty(len(c))
    out[0] = v[0]
    for i in range(1, len(c)):
        out[i] = out[i - 1] + np.sign(c[i] - c[i - 1]) * v[i]
    return out


def ref_stoch(h, l, c, k=5, slow_k=3, slow_d=3):
    fast = np.full(len(c), np.nan)
    for i in range(k - 1, len(c)):
        hh, ll = h[i - k + 1:i + 1].max(), l[i - k + 1:i + 1].min()
        fast[i] = 100 * (c[i] - ll) / (hh - ll)
    sma = lambda x, n: np.array([x[i - n + 1:i + 1].mean() if i >= n - 1 else np.nan for i in range(len(x))])
    kk = sma(fast, slow_k)
    dd = sma(kk, slow_d)
    return np.where(np.isnan(dd), np.nan, kk), dd  # TA-Lib starts both outputs on %D's first day


def ref_indicators(h, l, c, v):
    line, sig, hist = ref_macd(c)
    kk, dd = ref_stoch(h, l, c)
    return np.stack([ref_rsi(c), line, sig, hist, ref_atr(h, l, c), ref_adx(h, l, c), ref_cci(h, l, c),
                     ref_mfi(h, l, c, v), ref_obv(c, v), kk, dd], axis=1)


@pytest.fixture(scope="module")
def tiny_ohlcv():
    rng = np.random.default_rng(3)
    days = 70
    c = 50 * np.exp(np.cumsum(0.02 * rng.standard_normal(days)))
    o = np.concatenate([[50.0], c[:-1]]) * np.exp(0.005 * rng.standard_normal(days))
    h = np.maximum(o, c) * np.exp(np.abs(0.01 * rng.standard_normal(days)))
    l = np.minimum(o, c) * np.exp(-np.abs(0.01 * rng.standard_normal(days)))
    v = np.round(1e5 * np.exp(0.3 * rng.standard_normal(days)))
    c[20] = c[19]  # an unchanged close (OBV, RSI) ...
    h[30], l[30], c[30] = h[29], l[29], c[29]  # ... and an unchanged typical price (MFI)
    return h, l, c, v


@pytest.mark.parametrize("j", range(len(md.INDICATORS)), ids=md.INDICATORS)
def test_indicator_matches_numpy_reference(tiny_ohlcv, j):
    got = md.indicators(*tiny_ohlcv)[:, j]
    want = ref_indicators(*tiny_ohlcv)[:, j]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


def test_obv_and_stochastic_by_hand():
    c = np.array([10.0, 11.0, 11.0, 10.0, 12.0, 13.0, 12.0])
    v = np.array([100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0])
    h, l = c + 1, c - 1
    f = md.indicators(h, l, c, v)
    np.testing.assert_allclose(f[:, md.INDICATORS.index("obv")], [100, 300, 300, -100, 400, 1000, 300])
    # Too short for STOCH's 8-day warm-up: undefined everywhere.
    assert np.isnan(f[:, md.INDICATORS.index("stoch_k")]).all()


# ----------------------------------------------------------------- files and layouts

SMALL = md.SyntheticSpec(n_assets=4, n_days=300, seed=1)


def market_folder(tmp_path, layout, spec=SMALL, name="mkt"):
    sim = md.simulate_market(spec, layout)
    md.write_market(sim, tmp_path / name, layout)
    return sim, tmp_path / name


@pytest.mark.parametrize("layout", md.LAYOUTS)
def test_layout_round_trip(tmp_path, layout):
    sim, folder = market_folder(tmp_path, layout)
    first = pd.read_csv(folder / f"{sim.tickers[0]}.csv", nrows=0).columns
    assert md.detect_layout(first) == layout
    panel = md.load_market(folder)
    assert panel.tickers == sim.tickers
    on = sim.present.all(axis=1)
    np.testing.assert_array_equal(panel.dates, sim.dates[on])
    for f in ("open", "high", "low", "close"):
        np.testing.assert_allclose(getattr(panel, f), getattr(sim, f)[on], rtol=1e-6, err_msg=f)
    lot = 100.0 if layout == "akshare" else 1.0  # AkShare 成交量 is in lots
    np.testing.assert_array_equal(panel.volume * lot, sim.volume[on])


def write_yahoo(path, rows, header="Date,Open,High,Low,Close,Adj Close,Volume"):
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


GOOD = [f"2020-01-{d:02d},10,11,9,10.5,10.5,1000" for d in range(2, 9)]


def akshare_rows():
    return ["日期,开盘,收盘,最高,最低,成交量,成交额"] + [f"2020-01-{d:02d},10,10.5,11,9,50,1" for d in range(2, 9)]


def malformed(tmp_path, case):
    """(file written, expected fragments of the message besides the file name)."""
    p = tmp_path / "BAD.csv"
    if case == "missing_column":
        return write_yahoo(p, [r.rsplit(",", 1)[0] for r in GOOD], "Date,Open,High,Low,Close,Adj Close"), \
            ["row 1", "'Volume'"]
    if case == "missing_akshare_column":
        rows = [",".join(x for k, x in enumerate(r.split(",")) if k != 2) for r in akshare_rows()]
        p.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return p, ["row 1", "'收盘'"]
    if case == "bad_date":
        rows = list(GOOD)
        rows[2] = "2020-13-45" + rows[2][10:]
        return write_yahoo(p, rows), ["row 4", "'Date'", "2020-13-45"]
    if case == "nan_price":
        rows = list(GOOD)
        rows[3] = "2020-01-05,10,11,9,,10.5,1000"
        return write_yahoo(p, rows), ["row 5", "'Close'", "'BAD'", "2020-01-05"]
    if case == "null_akshare_price":
        rows = akshare_rows()
        rows[6] = "2020-01-07,10,10.5,null,9,50,1"
        p.write_text("\n".join(rows) + "\n", encoding="utf-8")
        return p, ["row 7", "'最高'", "'BAD'", "2020-01-07"]
    if case == "nonpositive_price":
        rows = list(GOOD)
        rows[1] = "2020-01-03,10,11,0,10.5,10.5,1000"
        return write_yahoo(p, rows), ["row 3", "'Low'", "2020-01-03", "non-positive"]
    if case == "duplicate_date":
        return write_yahoo(p, GOOD + [GOOD[0]]), ["row 9", "'Date'", "duplicate", "row 2"]
    if case == "empty":
        p.write_text("", encoding="utf-8")
        return p, ["row 1", "empty"]
    if case == "header_only":
        return write_yahoo(p, []), ["row 2", "empty"]
    if case == "unknown_header":
        return write_yahoo(p, GOOD, "Day,Open,High,Low,Close,Adj Close,Volume"), ["row 1", "'Date'", "'日期'"]
    raise AssertionError(case)


CASES = ("missing_column", "missing_akshare_column", "bad_date", "nan_price", "null_akshare_price",
         "nonpositive_price", "duplicate_date", "empty", "header_only", "unknown_header")


@pytest.mark.parametrize("case", CASES)
def test_malformed_file_names_file_row_column(tmp_path, case):
    path, fragments = malformed(tmp_path, case)
    with pytest.raises(ValueError) as err:
        md.load_market(tmp_path)
    msg = str(err.value)
    assert str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, (frag, msg)


def test_ticker_without_overlap_is_named(tmp_path):
    write_yahoo(tmp_path / "AAA.csv", GOOD)
    late = [r.replace("2020-", "2031-") for r in GOOD]
    path = write_yahoo(tmp_path / "ZZZ.csv", late)
    with pytest.raises(ValueError) as err:
        md.load_market(tmp_path)
    msg = str(err.value)
    for frag in (str(path), "rows 2-8", "'Date'", "'ZZZ'", "'AAA'", "no date in common"):
        assert frag in msg, (frag, msg)


def test_yahoo_adjustment_and_alignment(tmp_path):
    write_yahoo(tmp_path / "A.csv", ["2020-01-03,20,22,18,21,10.5,1000", "2020-01-02,20,22,18,20,10,1000",
                                     "2020-01-06,20,22,18,20,5,1000"])
    write_yahoo(tmp_path / "B.csv", ["2020-01-02,1,1,1,1,1,5", "2020-01-03,1,1,1,1,1,6"])
    p = md.load_market(tmp_path)
    np.testing.assert_array_equal(p.dates, np.array(["2020-01-02", "2020-01-03"], "datetime64[D]"))
    np.testing.assert_allclose(p.close[:, 0], [10, 10.5])
    np.testing.assert_allclose(p.high[:, 0], [11, 11])  # 22 * 10 / 20, 22 * 10.5 / 21
    np.testing.assert_allclose(p.volume[:, 1], [5, 6])


# ------------------------------------------------------------- prepared markets


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    _, folder = market_folder(tmp_path_factory.mktemp("m"), "yahoo", md.SyntheticSpec(n_assets=3, n_days=260, seed=2))
    return md.load_market(folder)


W = 20  # a short window keeps the fixtures tiny


def test_warmup_and_training_zscore(panel):
    m = md.prepare_market(panel, window=W)
    feats = np.stack([ref_indicators(panel.high[:, i], panel.low[:, i], panel.close[:, i], panel.volume[:, i])
                      for i in range(3)], axis=1)
    warm = 33  # MACD signal: 25 + 8 days
    assert np.isnan(feats[warm - 1]).any() and np.isfinite(feats[warm:]).all()
    np.testing.assert_array_equal(m.dates, panel.dates[warm:])
    feats = feats[warm:]
    n_train = int(0.8 * len(m.dates))
    assert m.n_train == n_train
    train = feats[:n_train]
    z = np.clip((feats - train.mean(0)) / train.std(0), -5, 5)
    np.testing.assert_allclose(m.train.features[:, :3], z[:n_train - 1], atol=1e-4)
    np.testing.assert_allclose(m.test.features[:, :3], z[n_train:-1], atol=1e-4)
    assert np.abs(m.test.features).max() <= 5.0


def test_test_period_never_reaches_training(panel):
    m = md.prepare_market(panel, window=W)
    later = (panel.dates >= m.dates[m.n_train])[:, None]
    bumped = dataclasses.replace(panel, **{f: np.where(later, getattr(panel, f) * 1.5 + 3.0, getattr(panel, f))
                                           for f in ("open", "high", "low", "close")},
                                 volume=np.where(later, panel.volume * 7, panel.volume))
    b = md.prepare_market(bumped, window=W)
    np.testing.assert_array_equal(b.train.features, m.train.features)
    np.testing.assert_array_equal(b.train.returns, m.train.returns)
    np.testing.assert_array_equal(b.mean, m.mean)
    assert not np.allclose(b.test.features, m.test.features)
    assert np.abs(b.test.features).max() == 5.0  # the bumped test period is clipped to [-5, 5]


def test_padding_mask_and_windows(panel):
    m = md.prepare_market(panel, window=W, n_max=5)
    np.testing.assert_array_equal(m.mask, [True, True, True, False, False])
    for s in (m.train, m.test):
        assert s.features.shape == (len(s.dates), 5, len(md.INDICATORS)) and s.returns.shape == (len(s.dates), 5)
        assert not s.features[:, 3:].any() and not s.returns[:, 3:].any()
        x, r = s.window_features(), s.window_returns()
        assert x.shape == (s.n_windows, W, 5, 11) and r.shape == (s.n_windows, W, 5)
        for w in (0, s.n_windows // 2, s.n_windows - 1):
            np.testing.assert_array_equal(x[w], s.features[w:w + W])
            np.testing.assert_array_equal(r[w], s.returns[w:w + W])
            np.testing.assert_array_equal(s.last_returns[w], r[w, -1])
        # Next-day close-to-close returns, recomputed from the calendar by date.
        d = s.last_day_index
        want = m.close[d + 1] / m.close[d] - 1
        np.testing.assert_allclose(s.last_returns[:, :3], want, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(s.last_dates, m.dates[d])
    # Windows never straddle the split: every training target is realised before the test segment.
    assert m.train.day_index[-1] + 1 == m.n_train - 1
    assert m.test.day_index[0] == m.n_train and m.test.day_index[-1] == len(m.dates) - 2
    assert m.train.n_windows == m.n_train - 1 - W + 1
    with pytest.raises(ValueError, match="n_max"):
        md.prepare_market(panel, window=W, n_max=2)


@pytest.mark.parametrize("kwargs, field", [({"window": 0}, "window"), ({"train_frac": 1.0}, "train_frac"),
                                           ({"clip": 0.0}, "clip"), ({"window": 200}, "window")])
def test_bad_arguments(panel, kwargs, field):
    with pytest.raises(ValueError, match=field):
        md.prepare_market(panel, **kwargs)


def test_prepare_markets_reads_each_subfolder(tmp_path):
    market_folder(tmp_path, "yahoo", name="DJIA")
    market_folder(tmp_path, "akshare", name="CSI300")
    markets = md.prepare_markets(tmp_path, window=W)
    assert [m.name for m in markets] == ["CSI300", "DJIA"]
    assert markets[0].tickers[0] == "600000" and markets[1].tickers[0] == "SYN00"


# ------------------------------------------------------------------------ regimes


def ref_posthoc(close):
    """Appendix D's rule, day by day."""
    proxy = np.log(1 + (close[1:] / close[:-1] - 1).mean(1))
    r = np.concatenate([[np.nan], proxy])  # r[t]: day t's log return
    out = np.full(len(close), -1)
    for t in range(63, len(close) - 21):
        sigma = np.std(r[t - 62:t + 1], ddof=1)
        wealth = np.exp(np.cumsum(np.concatenate([[0.0], r[t + 1:t + 6]])))
        dd = max(1 - wealth[k] / wealth[:k + 1].max() for k in range(6))
        fwd = r[t + 1:t + 22].sum()
        if abs(r[t]) / sigma > 1.5 and dd > 0.015:
            out[t] = 2
        elif fwd > 0.01:
            out[t] = 0
        elif fwd < -0.01:
            out[t] = 1
        else:
            out[t] = 3
    return out


def test_posthoc_regimes_against_loop():
    rng = np.random.default_rng(5)
    r = 0.01 * rng.standard_normal((200, 3))
    r[100] -= 0.08  # a crash ...
    r[101:104] -= 0.01  # ... that keeps falling
    r[130:160] += 0.003  # a rally
    close = 100 * np.exp(np.cumsum(r, 0))
    got = md.posthoc_regimes(close)
    np.testing.assert_array_equal(got, ref_posthoc(close))
    assert got[100] == md.REGIMES.index("shock")
    assert set(got[63:179]) == {0, 1, 2, 3} and (got[:63] == -1).all() and (got[179:] == -1).all()


@pytest.mark.parametrize("ratio, label", [(1.497, "bear"), (1.503, "shock")])
def test_posthoc_shock_threshold_by_hand(ratio, label):
    """Day 63 follows 62 alternating +-1% days; its drop x has |x| / sigma_63 = ratio
    (sample std, ddof 1, of the 63 returns through day 63); the next 5 days fall 0.5%
    each (drawdown 2.5% > 1.5%), then nothing moves: the 21-day return is x-independent
    -2.5% (bear) unless the day is a shock."""
    alt = 0.01 * (-1.0) ** np.arange(62)
    lo, hi = 1e-3, 0.1
    for _ in range(80):  # bisection on |x|
        x = (lo + hi) / 2
        lo, hi = (x, hi) if x / np.std(np.append(alt, -x), ddof=1) < ratio else (lo, x)
    r = np.concatenate([alt, [-x], np.full(5, -0.005), np.zeros(30)])
    close = np.exp(np.concatenate([[0.0], np.cumsum(r)]))
    assert md.posthoc_regimes(close)[63] == md.REGIMES.index(label)


def test_generator_regimes_and_prices(tmp_path):
    sim, folder = market_folder(tmp_path, "yahoo", md.SyntheticSpec(n_assets=6, n_days=3000, seed=4))
    assert set(np.unique(sim.regimes)) == {0, 1, 2, 3}
    assert (sim.low > 0).all() and (sim.high >= np.maximum(sim.open, sim.close)).all()
    assert (sim.low <= np.minimum(sim.open, sim.close)).all()
    ew = np.log(sim.close[1:] / sim.close[:-1]).mean(1)
    mean = {k: ew[sim.regimes[1:] == k].mean() for k in range(4)}
    assert mean[2] < mean[1] < 0 < mean[0]  # shock < bear < 0 < bull
    runs = np.diff(np.flatnonzero(np.diff(sim.regimes)))
    assert 20 < runs.mean() < 100  # geometric durations of mean 6..90 days
    m = md.prepare_market(folder, window=W)
    labels = sim.regimes_on(m.dates)
    assert labels.shape == m.dates.shape
    with pytest.raises(ValueError, match="calendar"):
        sim.regimes_on(np.array(["1999-01-01"], "datetime64[D]"))
    with pytest.raises(ValueError, match="n_assets"):
        md.SyntheticSpec(n_assets=0)

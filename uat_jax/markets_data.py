"""Domain C data (cross-market portfolio allocation) of "Breaking Feedback-Blindness:
Utility-Augmented Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910),
Appendix C.1 (data source, observation, protocol), C.2 (expert) and C.3 (metrics), and the
post-hoc regime labels of the Figure 3 (right) HSI regime-gate diagnostic (Appendix D).

numpy/pandas only; the study converts the final arrays.

Files (C.1 "Data source"). A market is a folder of daily OHLCV CSVs, one file per ticker,
the ticker being the file name without ``.csv``. Two layouts, detected per file from the
header:

- Yahoo Finance (DJIA, HSI in the paper): ``Date, Open, High, Low, Close, Adj Close, Volume``.
  With ``Adj Close`` present, Open/High/Low/Close are multiplied by ``Adj Close / Close``
  (split- and dividend-adjusted, so that close-to-close relatives are total returns, as
  the forward-adjusted AkShare prices are); without it (``yfinance`` with
  ``auto_adjust=True``) the prices are taken as already adjusted. Volume is read as is.
- AkShare daily history (``stock_zh_a_hist`` for CSI 300 members, ``stock_hk_hist``),
  fetched with ``adjust="qfq"`` (forward-adjusted): ``日期, [股票代码,] 开盘, 收盘, 最高, 最低,
  成交量, 成交额, 振幅, 涨跌幅, 涨跌额, 换手率`` (date, [code,] open, CLOSE, HIGH, LOW,
  volume, turnover, amplitude, % change, change, turnover rate; note the order: close
  comes before high and low). Only the first six named columns are read; prices are taken
  as given (already adjusted), 成交量 (lots of 100 shares for A-shares) as the volume.

Extra columns (an unnamed index column, 成交额, ...) are ignored. UTF-8 (with or without
BOM), falling back to GB18030. Dates: the leading ``YYYY-MM-DD`` / ``YYYYMMDD`` of the
cell (a time or time-zone suffix is dropped). Rows are sorted by date. A "row" in an error
message is the line number in the file (the header is row 1; blank lines are skipped by
the CSV reader and not counted).

Bad input (issue "Bad input"): every one of these is a ``uat_jax.errors.DataError`` (a
ValueError) naming the file, the row and the column: an empty file (no header, or no data
rows); a header of neither layout; a missing column; an unparseable or duplicated date; a
missing, non-numeric or non-positive price, or a missing/negative volume (also naming the
ticker and date; never propagated into features); a ticker whose dates share none with the
calendar of the tickers read before it (the market calendar being their intersection); a
ticker missing more than ``max_gap_days`` consecutive trading days (below).

Alignment (C.1): the market calendar is the intersection of the tickers' dates; every
series is restricted to it BEFORE the indicators are computed. A day missing from one
ticker's file is dropped for every ticker, and the return across it spans two days. The
market's trading days are the days on which any ticker has a row; a ticker with no rows on
more than ``max_gap_days`` (default ``MAX_GAP_DAYS``) consecutive trading days, at its start,
its end or between, is an error naming the ticker and the first and last missing dates:
aligning it away would silently shorten every ticker (a 150-day hole in one file once cut
496 days to 348 and made a 227-day jump one step). A larger ``max_gap_days`` accepts it;
``Panel.dropped_days`` (and ``Market.dropped_days``) count the trading days alignment dropped.

Indicators (C.1 "Observation", 11 per asset and day, after Kara et al. 2011), TA-Lib
(the ``ta-lib`` wheel, which bundles the C library) with its default parameters (the
paper states none): ``INDICATORS`` in this order,
  RSI(close, 14) (Wilder smoothing, seeded by the mean gain / loss of the first 14
  changes); MACD(close, 12, 26, 9): MACD line EMA12 - EMA26, signal EMA9 of the line,
  histogram line - signal (EMA alpha = 2 / (n + 1); both price EMAs start on day 25,
  each seeded by the mean of its last n closes, the signal on day 33 by the mean of the
  first 9 line values); ATR(14) and ADX(14) (Wilder); CCI(14) (typical price, mean
  absolute deviation, constant 0.015); MFI(14); OBV (starting at the first day's volume);
  STOCH(5, 3, 3): %K = the 3-day SMA of the 5-day fast %K ("slow %K"), %D = the 3-day
  SMA of %K (TA-Lib reports both from %D's first day).
Warm-up: an indicator is undefined on its first ``lookback`` days (MACD signal: 33,
ADX: 27, MFI/RSI/ATR: 14, CCI: 13, STOCH: 8, OBV: 0); the leading days on which any
indicator of any asset is undefined (33 with these parameters) are dropped from the
calendar before the split. An indicator undefined later (e.g. ADX of a constant price) is
an error naming the ticker, indicator and date.

Split, scaling, windows (C.1 "Training and evaluation protocol"): the calendar (after the
warm-up) of D days is split chronologically, the first ``floor(0.8 D)`` days training, the
rest test. Features are z-scored per asset and per indicator with the mean and standard
deviation (ddof 0) of the training days only (a standard deviation below 1e-12 is
replaced by 1), then clipped to [-5, 5]. Assets are padded to N_max = 45 slots (zero
features and returns, ``mask`` False). The target of day d is the next-day close-to-close
simple return ``close[d+1] / close[d] - 1`` (price relative minus one; C.1 "Targets use
next-day close-to-close price relatives"). A split's decision days are those whose target
is realised inside the split: the last training day (whose target needs the first test
close) and the last test day (no next close) are dropped, so no test price enters
anything of the training split. Stride-1 windows of T = 60 decision days are built inside
each split, never across the boundary.

Storage (a departure from storing [W, T, N_max, 11]): a split keeps its day panel
``features`` [D_s, N_max, 11] and ``returns`` [D_s, N_max]; window w is days
w .. w + T - 1 of the split (``window_features`` / ``window_returns`` gather
[W, T, N_max, 11] / [W, T, N_max]). The gathered array is T = 60 times larger (HSI:
~2100 training windows x 60 x 45 x 11 floats = 250 MB), so the study should gather
batches, e.g. ``panel[starts[:, None] + arange(T)]`` under jit.

Expert (C.2; the Domain C paragraph is lost from the text, only its objective L_KL =
(1 / BT) sum_{b,t} KL(pi*_{b,t} || pi_theta(. | H_{b,t})) survives). Reading: pi*_{b,t} is
a privileged allocation over cash + the N active assets at EVERY step t of a window,
built from the hindsight next-day price relatives of step t (what the expert knows and
the model does not), with cash earning 0. Its input is therefore ``window_returns``
[W, T, N_max] with ``mask``; the rollout reward of a portfolio w_t is
``sum_i w_{t,i} returns[t, i]`` from the same array, and evaluation (one prediction per
window, its last step) uses ``last_returns`` [W, N_max] on ``last_dates``. The expert's
form (e.g. a softmax of the next-day returns at a temperature) is left to the study.

Post-hoc regimes (``posthoc_regimes``, Appendix D "Regime Gate on HSI"): equal-weight
proxy of the constituents' simple returns, in log returns r_t; sigma_63 the trailing 63-day
standard deviation (ddof 1) of r through day t; shock if |r_t| / sigma_63 > 1.5 and the
maximum peak-to-trough drawdown of the proxy over the next 5 days (the path starting at
day t's close) exceeds 1.5%; otherwise bull if the sum of r over the next 21 days
exceeds +1%, bear if below -1%, else chop. Days without 63 trailing or 21 following
returns get -1.

Synthetic markets (``simulate_market``, ``write_market``): a hidden market regime
(``REGIMES`` bull, bear, shock, chop; ``REGIME_PARAMS``) follows a semi-Markov chain with
geometric durations (mean ``mean_duration`` days) and, at each switch, a next regime
drawn uniformly among the other three. The market factor's daily log return is
N(drift_k, vol_k^2) in regime k; asset i's log return is beta_i * factor + alpha_{i,k} +
idio_i * N(0, 1), with beta_i ~ U(0.6, 1.4), idio_i ~ U(0.005, 0.015) and a
regime-dependent tilt alpha_{i,k} ~ N(0, 0.0005^2), so the best allocation changes with
the regime. Prices are exponentials (positive). Open = previous close x exp(N(0,
(0.25 s)^2)), High / Low = max / min(Open, Close) x exp(+-|N(0, (0.5 s)^2)|) with s the
asset's regime volatility; volume = base_i exp(N(0, 0.3^2)) (1 + 2 |factor shock| / vol_k),
rounded to lots of 100 shares.
Files are written in either layout on a business-day calendar (the market's holidays are
days of no file; each ticker also misses a few random days, suspensions, so that
alignment is exercised); Yahoo files carry a dividend factor (Close = adjusted / f,
Adj Close = adjusted), so the adjustment path is exercised too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import talib

from uat_jax.errors import DataError

N_MAX = 45
"""C.1: all markets padded to 45 asset slots."""
WINDOW = 60
"""Table 3, Domain C: sequence length T."""
TRAIN_FRAC = 0.8
"""C.1: chronological 80/20 split."""
CLIP = 5.0
"""C.1: z-scores clipped to [-5, 5]."""
MAX_GAP_DAYS = 10
"""The most consecutive trading days one ticker may miss before alignment is an error (two weeks:
a suspension; longer shortens the whole market, see the module docstring)."""

INDICATORS = ("rsi", "macd", "macd_signal", "macd_hist", "atr", "adx", "cci", "mfi", "obv", "stoch_k", "stoch_d")
"""C.1: the 11 per-asset features, in this order."""
INDICATOR_PARAMS = {"rsi": 14, "macd": (12, 26, 9), "atr": 14, "adx": 14, "cci": 14, "mfi": 14, "stoch": (5, 3, 3)}
"""TA-Lib defaults (periods; STOCH = fast %K, slow %K, slow %D, simple moving averages)."""

LAYOUTS = ("yahoo", "akshare")
_PRICES = ("open", "high", "low", "close")
_COLUMNS = {
    "yahoo": {"date": "Date", "open": "Open", "high": "High", "low": "Low", "close": "Close", "volume": "Volume"},
    "akshare": {"date": "日期", "open": "开盘", "close": "收盘", "high": "最高", "low": "最低", "volume": "成交量"},
}
"""Header name of each field per layout (AkShare: stock_zh_a_hist / stock_hk_hist)."""
_YAHOO_ADJ = "Adj Close"

REGIMES = ("bull", "bear", "shock", "chop")
"""Regime codes 0..3, of the generator and of ``posthoc_regimes`` (-1: undefined)."""


# ----------------------------------------------------------------------------- reading


@dataclasses.dataclass(frozen=True)
class OHLCV:
    """One ticker's file: ``dates`` [D] datetime64[D] ascending; ``open``, ``high``,
    ``low``, ``close``, ``volume`` [D] float64 (prices adjusted, module docstring);
    ``rows`` [D] the line number of each day in ``path``."""

    ticker: str
    path: str
    layout: str
    dates: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    rows: np.ndarray


@dataclasses.dataclass(frozen=True)
class Panel:
    """A market aligned to its calendar (C.1): ``dates`` [D]; ``tickers`` (N); ``open``,
    ``high``, ``low``, ``close``, ``volume`` [D, N] float64; ``paths`` (N); ``dropped_days``:
    trading days (some ticker has a row) that are not on the calendar (one ticker lacks it)."""

    name: str
    dates: np.ndarray
    tickers: tuple[str, ...]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    paths: tuple[str, ...]
    dropped_days: int = 0


def _read_table(path: Path) -> pd.DataFrame:
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return pd.read_csv(path, dtype=str, keep_default_na=False, encoding=encoding)
        except UnicodeDecodeError:
            continue
        except pd.errors.EmptyDataError:
            raise DataError(f"{path}: row 1: empty file (no header)") from None
    raise DataError(f"{path}: row 1: not UTF-8 or GB18030 text")


def detect_layout(header, path="<file>") -> str:
    """``"yahoo"`` or ``"akshare"`` from a header (C.1 data sources); ValueError otherwise."""
    names = [str(h).strip() for h in header]
    for layout in LAYOUTS:
        if _COLUMNS[layout]["date"] in names:
            return layout
    raise DataError(f"{path}: row 1: cannot detect the layout: the header has neither column 'Date' (Yahoo) "
                    f"nor column '日期' (AkShare); got {names} (flatten a yfinance multi-row header first: "
                    f"yf.download(..., multi_level_index=False))")


def _parse_dates(cells: pd.Series, path: Path, column: str, rows: np.ndarray) -> np.ndarray:
    head = cells.str.strip().str.split(r"[ T]", n=1, regex=True).str[0]
    parsed = pd.to_datetime(head, format="ISO8601", errors="coerce")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        i = bad[0]
        raise DataError(f"{path}: row {rows[i]}, column {column!r}: cannot parse the date {cells.iloc[i]!r}")
    return parsed.to_numpy().astype("datetime64[D]")


def _parse_numbers(cells: pd.Series, path: Path, column: str, ticker: str, dates: np.ndarray,
                   rows: np.ndarray, positive: bool) -> np.ndarray:
    values = pd.to_numeric(cells.str.strip(), errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(values)
    what = "a missing or non-numeric value"
    if not bad.any():
        bad = values <= 0 if positive else values < 0
        what = "a non-positive price" if positive else "a negative volume"
    if bad.any():
        i = np.flatnonzero(bad)[0]
        raise DataError(f"{path}: row {rows[i]}, column {column!r}: ticker {ticker!r} has {what} "
                        f"{cells.iloc[i]!r} on {dates[i]}")
    return values


def read_ohlcv(path) -> OHLCV:
    """Read one ticker's daily OHLCV CSV in either layout (C.1 data sources; module
    docstring for the layouts, the adjustment and the errors)."""
    path = Path(path)
    table = _read_table(path)
    table.columns = [str(c).strip() for c in table.columns]
    layout = detect_layout(table.columns, path)
    names = _COLUMNS[layout]
    for field in ("date", *_PRICES, "volume"):
        if names[field] not in table.columns:
            expected = ", ".join(names.values())
            raise DataError(f"{path}: row 1 (header): missing column {names[field]!r} of the {layout} layout "
                            f"(expected {expected}); got {list(table.columns)}")
    if len(table) == 0:
        raise DataError(f"{path}: row 2: empty file (a header but no data rows)")
    ticker = path.stem
    rows = np.arange(len(table)) + 2
    dates = _parse_dates(table[names["date"]], path, names["date"], rows)
    order = np.argsort(dates, kind="stable")
    dates, rows, table = dates[order], rows[order], table.iloc[order]
    dup = np.flatnonzero(dates[1:] == dates[:-1])
    if dup.size:
        i = dup[0]
        raise DataError(f"{path}: row {rows[i + 1]}, column {names['date']!r}: duplicate date {dates[i + 1]} "
                        f"(also at row {rows[i]})")
    values = {f: _parse_numbers(table[names[f]], path, names[f], ticker, dates, rows, positive=f != "volume")
              for f in (*_PRICES, "volume")}
    if layout == "yahoo" and _YAHOO_ADJ in table.columns:
        factor = _parse_numbers(table[_YAHOO_ADJ], path, _YAHOO_ADJ, ticker, dates, rows, True) / values["close"]
        values.update({f: values[f] * factor for f in _PRICES})
    return OHLCV(ticker=ticker, path=str(path), layout=layout, dates=dates, rows=rows, **values)


def _check_gaps(series: list[OHLCV], max_gap_days: int) -> np.ndarray:
    """The market's trading days (any ticker has a row); DataError naming the first ticker
    that misses more than ``max_gap_days`` of them in a row, with the missing dates."""
    trading = np.unique(np.concatenate([s.dates for s in series]))
    for s in series:
        missing = np.concatenate([[0], ~np.isin(trading, s.dates), [0]]).astype(np.int8)
        starts, ends = np.flatnonzero(np.diff(missing) == 1), np.flatnonzero(np.diff(missing) == -1)
        if starts.size and (ends - starts).max() > max_gap_days:
            k = int(np.argmax(ends - starts))
            lo, hi = starts[k], ends[k]
            where = (f"before its first row ({s.dates[0]})" if lo == 0 else
                     f"after its last row ({s.dates[-1]})" if hi == len(trading) else
                     f"between rows {s.rows[np.searchsorted(s.dates, trading[lo]) - 1]} and "
                     f"{s.rows[np.searchsorted(s.dates, trading[lo])]}")
            raise DataError(f"{s.path}: column {_COLUMNS[s.layout]['date']!r}: ticker {s.ticker!r} has no rows on "
                            f"{hi - lo} consecutive trading days, {trading[lo]} .. {trading[hi - 1]} ({where}), more "
                            f"than max_gap_days = {max_gap_days}; aligning would drop them from every ticker. Fill "
                            f"the gap, remove the file, or accept it with a max_gap_days of at least {hi - lo}")
    return trading


def load_market(folder, name: str | None = None, max_gap_days: int = MAX_GAP_DAYS) -> Panel:
    """Read every ``*.csv`` of ``folder`` (one ticker each, sorted by ticker) and align
    them to the common trading-date intersection (C.1); DataError naming the first
    ticker whose dates share none with the calendar of the tickers before it, or that
    misses more than ``max_gap_days`` consecutive trading days (module docstring)."""
    if not (isinstance(max_gap_days, int) and max_gap_days >= 0):
        raise ValueError(f"max_gap_days must be an integer >= 0, got {max_gap_days!r}")
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"data folder {str(folder)!r} is not a directory")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == ".csv")
    if not files:
        raise DataError(f"{folder}: no .csv files (expected one daily OHLCV file per ticker)")
    series = [read_ohlcv(p) for p in files]
    calendar = series[0].dates
    for k, s in enumerate(series[1:], 1):
        common = np.intersect1d(calendar, s.dates)
        if common.size == 0:
            before = ", ".join(repr(t.ticker) for t in series[:k])
            raise DataError(f"{s.path}: rows {s.rows.min()}-{s.rows.max()}, column "
                            f"{_COLUMNS[s.layout]['date']!r}: ticker {s.ticker!r} ({s.dates[0]} .. {s.dates[-1]}) "
                            f"has no date in common with the market calendar of {before} "
                            f"({calendar[0]} .. {calendar[-1]})")
        calendar = common
    trading = _check_gaps(series, max_gap_days)
    pick = [np.searchsorted(s.dates, calendar) for s in series]
    stack = {f: np.stack([getattr(s, f)[i] for s, i in zip(series, pick)], axis=1) for f in (*_PRICES, "volume")}
    return Panel(name=name or folder.name, dates=calendar, tickers=tuple(s.ticker for s in series),
                 paths=tuple(s.path for s in series), dropped_days=len(trading) - len(calendar), **stack)


# ------------------------------------------------------------------------- indicators


def indicators(high, low, close, volume) -> np.ndarray:
    """The 11 C.1 indicators of one asset, [D, 11] float64 in ``INDICATORS`` order, by
    TA-Lib with ``INDICATOR_PARAMS`` (module docstring); NaN on each indicator's warm-up."""
    h, l, c, v = (np.ascontiguousarray(x, np.float64) for x in (high, low, close, volume))
    fast, slow, signal = INDICATOR_PARAMS["macd"]
    k_fast, k_slow, d_slow = INDICATOR_PARAMS["stoch"]
    macd, macd_signal, macd_hist = talib.MACD(c, fastperiod=fast, slowperiod=slow, signalperiod=signal)
    stoch_k, stoch_d = talib.STOCH(h, l, c, fastk_period=k_fast, slowk_period=k_slow, slowk_matype=0,
                                   slowd_period=d_slow, slowd_matype=0)
    return np.stack([
        talib.RSI(c, timeperiod=INDICATOR_PARAMS["rsi"]), macd, macd_signal, macd_hist,
        talib.ATR(h, l, c, timeperiod=INDICATOR_PARAMS["atr"]),
        talib.ADX(h, l, c, timeperiod=INDICATOR_PARAMS["adx"]),
        talib.CCI(h, l, c, timeperiod=INDICATOR_PARAMS["cci"]),
        talib.MFI(h, l, c, v, timeperiod=INDICATOR_PARAMS["mfi"]),
        talib.OBV(c, v), stoch_k, stoch_d], axis=1)


def panel_indicators(panel: Panel) -> tuple[np.ndarray, int]:
    """Indicators of every asset on the aligned calendar, [D, N, 11], and the warm-up
    length: the number of leading days on which any indicator is undefined (C.1 order:
    align, then indicators). ValueError if one is undefined after the warm-up."""
    feats = np.stack([indicators(panel.high[:, i], panel.low[:, i], panel.close[:, i], panel.volume[:, i])
                      for i in range(len(panel.tickers))], axis=1)
    defined = np.isfinite(feats).all(axis=(1, 2))
    if not defined.any():
        raise DataError(f"{panel.name}: the calendar's {len(panel.dates)} common days are fewer than the "
                        f"indicators' warm-up")
    warmup = int(np.argmax(defined))
    late = ~np.isfinite(feats[warmup:])
    if late.any():
        d, i, f = np.argwhere(late)[0]
        raise DataError(f"{panel.paths[i]}: ticker {panel.tickers[i]!r}: indicator {INDICATORS[f]!r} is undefined "
                        f"on {panel.dates[warmup + d]} after the warm-up (e.g. a constant price)")
    return feats, warmup


# ------------------------------------------------------------------- prepared market


@dataclasses.dataclass(frozen=True)
class MarketSplit:
    """One chronological split of a market on its decision days (module docstring).

    ``features`` [D_s, N_max, 11] float32: z-scored (training statistics), clipped,
    zero on padded slots. ``returns`` [D_s, N_max] float32: next-day simple return of
    each day (0 on padded slots). ``dates`` [D_s] datetime64[D]; ``day_index`` [D_s] each
    day's index into ``Market.dates``. Window w (0 <= w < ``n_windows`` = D_s - T + 1) is
    days w .. w + T - 1."""

    features: np.ndarray
    returns: np.ndarray
    dates: np.ndarray
    day_index: np.ndarray
    window: int

    @property
    def n_windows(self) -> int:
        return len(self.dates) - self.window + 1

    def _days(self, idx) -> np.ndarray:
        idx = np.arange(self.n_windows) if idx is None else np.asarray(idx)
        return idx[..., None] + np.arange(self.window)

    def window_features(self, idx=None) -> np.ndarray:
        """[W, T, N_max, 11] features of windows ``idx`` (default: all)."""
        return self.features[self._days(idx)]

    def window_returns(self, idx=None) -> np.ndarray:
        """[W, T, N_max] next-day returns of every step of windows ``idx`` (the expert's
        and the rollout reward's input, module docstring)."""
        return self.returns[self._days(idx)]

    @property
    def last_returns(self) -> np.ndarray:
        """[W, N_max] next-day return of each window's last day (evaluation, C.1)."""
        return self.returns[self.window - 1:]

    @property
    def last_dates(self) -> np.ndarray:
        """[W] each window's last date (the day its prediction is made)."""
        return self.dates[self.window - 1:]

    @property
    def last_day_index(self) -> np.ndarray:
        """[W] index of each window's last day into ``Market.dates``."""
        return self.day_index[self.window - 1:]


@dataclasses.dataclass(frozen=True)
class Market:
    """A prepared market (C.1): ``tickers`` (N <= N_max); ``mask`` [N_max] bool (True on
    the first N slots); ``dates`` [D] the calendar after the warm-up; ``close`` [D, N]
    adjusted closes on it (for ``posthoc_regimes``); ``mean``, ``std`` [N, 11] the
    training statistics; ``n_train`` the training segment's length in days; ``train``
    and ``test`` the splits; ``dropped_days`` as ``Panel.dropped_days``."""

    name: str
    tickers: tuple[str, ...]
    mask: np.ndarray
    dates: np.ndarray
    close: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n_train: int
    train: MarketSplit
    test: MarketSplit
    dropped_days: int = 0


def prepare_market(source, *, window: int = WINDOW, train_frac: float = TRAIN_FRAC, n_max: int = N_MAX,
                   clip: float = CLIP, name: str | None = None, max_gap_days: int = MAX_GAP_DAYS) -> Market:
    """Read (a folder, with ``max_gap_days`` as in ``load_market``) or take (a ``Panel``) a
    market and build its C.1 training and test splits: indicators, warm-up drop, 80/20
    split, training-only z-score, clip, padding, next-day returns (module docstring)."""
    if not (isinstance(window, int) and window >= 1):
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if not 0 < train_frac < 1:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac!r}")
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip!r}")
    panel = source if isinstance(source, Panel) else load_market(source, name, max_gap_days)
    n = len(panel.tickers)
    if n > n_max:
        raise DataError(f"{panel.name}: {n} tickers exceed n_max = {n_max}")
    feats, warmup = panel_indicators(panel)
    feats, close, dates = feats[warmup:], panel.close[warmup:], panel.dates[warmup:]
    days = len(dates)
    n_train = int(train_frac * days)
    need = window + 1
    if n_train < need or days - n_train < need:
        raise DataError(f"{panel.name}: {days} days after the {warmup}-day warm-up give {n_train} training and "
                        f"{days - n_train} test days; each split needs window + 1 = {need}")
    mean = feats[:n_train].mean(0)
    std = feats[:n_train].std(0)
    std = np.where(std < 1e-12, 1.0, std)
    z = np.clip((feats - mean) / std, -clip, clip)
    ret = close[1:] / close[:-1] - 1.0
    z_pad = np.zeros((days, n_max, len(INDICATORS)), np.float32)
    z_pad[:, :n] = z
    r_pad = np.zeros((days, n_max), np.float32)
    r_pad[:-1, :n] = ret

    def split(lo: int, hi: int) -> MarketSplit:
        return MarketSplit(features=z_pad[lo:hi], returns=r_pad[lo:hi], dates=dates[lo:hi],
                           day_index=np.arange(lo, hi), window=window)

    return Market(name=panel.name, tickers=panel.tickers, mask=np.arange(n_max) < n, dates=dates, close=close,
                  mean=mean, std=std, n_train=n_train, dropped_days=panel.dropped_days,
                  train=split(0, n_train - 1), test=split(n_train, days - 1))


def prepare_markets(root, **kwargs) -> tuple[Market, ...]:
    """Every sub-folder of ``root`` holding ``*.csv`` files is one market (sorted by
    name), prepared by ``prepare_market(folder, **kwargs)``."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"data_dir {str(root)!r} is not a directory")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and any(q.suffix.lower() == ".csv" for q in p.iterdir()))
    if not folders:
        raise DataError(f"{root}: no market sub-folder with .csv files (expected e.g. {root}/DJIA/AAPL.csv)")
    return tuple(prepare_market(f, **kwargs) for f in folders)


# ----------------------------------------------------------------- post-hoc regimes


def posthoc_regimes(close, *, vol_window: int = 63, shock_ratio: float = 1.5, shock_days: int = 5,
                    shock_drawdown: float = 0.015, horizon: int = 21, threshold: float = 0.01) -> np.ndarray:
    """Post-hoc regime label of each day (Appendix D, Figure 3 right; module docstring):
    ``close`` [D, N] (or [D]) adjusted closes -> [D] int32 codes into ``REGIMES``, -1
    where the 63 trailing or the 21 following returns are not all available."""
    close = np.asarray(close, np.float64)
    close = close[:, None] if close.ndim == 1 else close
    if close.ndim != 2 or not np.all(np.isfinite(close) & (close > 0)):
        raise ValueError("close must be a [D] or [D, N] array of positive finite prices")
    days = close.shape[0]
    labels = np.full(days, -1, np.int32)
    first, last = vol_window, days - 1 - max(horizon, shock_days)
    if last < first:
        return labels
    log_ret = np.log1p((close[1:] / close[:-1] - 1.0).mean(1))  # log_ret[t - 1]: day t
    level = np.concatenate([[0.0], np.cumsum(log_ret)])  # log proxy level of each day
    t = np.arange(first, last + 1)
    trailing = np.lib.stride_tricks.sliding_window_view(log_ret, vol_window)[t - vol_window]
    sigma = trailing.std(axis=1, ddof=1)
    path = level[t[:, None] + np.arange(shock_days + 1)] - level[t, None]
    drawdown = 1.0 - np.exp(path - np.maximum.accumulate(path, axis=1))
    shock = (np.abs(log_ret[t - 1]) > shock_ratio * sigma) & (drawdown.max(1) > shock_drawdown)
    ahead = level[t + horizon] - level[t]
    labels[t] = np.where(shock, 2, np.where(ahead > threshold, 0, np.where(ahead < -threshold, 1, 3)))
    return labels


# ------------------------------------------------------------------ synthetic market


@dataclasses.dataclass(frozen=True)
class RegimeParams:
    """Daily log-return drift and volatility of the market factor in one regime, and
    the regime's mean duration in days (geometric)."""

    drift: float
    vol: float
    mean_duration: float


REGIME_PARAMS = {
    "bull": RegimeParams(drift=0.0012, vol=0.009, mean_duration=90.0),
    "bear": RegimeParams(drift=-0.0015, vol=0.016, mean_duration=60.0),
    "shock": RegimeParams(drift=-0.0120, vol=0.035, mean_duration=6.0),
    "chop": RegimeParams(drift=0.0, vol=0.007, mean_duration=50.0),
}
"""Generator regimes (annualised: bull +30% / 14%, bear -38% / 25%, chop 0% / 11%;
shock about -7% over its 6 days at 56% volatility)."""


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
    """A synthetic market: ``n_assets`` tickers on ``n_days`` trading days from
    ``start``; ``holiday_rate`` business days are market holidays, ``missing_rate`` of
    each ticker's days are missing from its file only; ``params`` as REGIME_PARAMS."""

    n_assets: int = 8
    n_days: int = 500
    start: str = "2015-01-05"
    seed: int = 0
    holiday_rate: float = 0.02
    missing_rate: float = 0.005
    params: tuple = tuple(REGIME_PARAMS[k] for k in REGIMES)

    def __post_init__(self):
        if not (isinstance(self.n_assets, int) and self.n_assets >= 1):
            raise ValueError(f"n_assets must be an integer >= 1, got {self.n_assets!r}")
        if not (isinstance(self.n_days, int) and self.n_days >= 2):
            raise ValueError(f"n_days must be an integer >= 2, got {self.n_days!r}")
        for field in ("holiday_rate", "missing_rate"):
            if not 0 <= getattr(self, field) < 0.5:
                raise ValueError(f"{field} must be in [0, 0.5), got {getattr(self, field)!r}")
        if len(self.params) != len(REGIMES) or any(p.vol <= 0 or p.mean_duration < 1 for p in self.params):
            raise ValueError(f"params must hold {len(REGIMES)} RegimeParams with vol > 0 and mean_duration >= 1")


@dataclasses.dataclass(frozen=True)
class SyntheticMarket:
    """A simulated market on its full calendar: ``dates`` [D]; ``tickers`` (N);
    ``open``, ``high``, ``low``, ``close``, ``volume`` [D, N] (adjusted prices);
    ``present`` [D, N] bool (False: the day is missing from that ticker's file);
    ``dividend`` [D, N] the Yahoo adjustment factor (raw Close = close / dividend);
    ``regimes`` [D] int32 true regime codes into ``REGIMES``."""

    dates: np.ndarray
    tickers: tuple[str, ...]
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    present: np.ndarray
    dividend: np.ndarray
    regimes: np.ndarray

    def regimes_on(self, dates) -> np.ndarray:
        """The true regime codes on ``dates`` (e.g. ``Market.dates``); ValueError for a
        date outside the simulated calendar."""
        dates = np.asarray(dates, "datetime64[D]")
        idx = np.clip(np.searchsorted(self.dates, dates), 0, len(self.dates) - 1)
        if not np.all(self.dates[idx] == dates):
            raise ValueError("dates must lie on the simulated calendar")
        return self.regimes[idx]


def simulate_market(spec: SyntheticSpec = SyntheticSpec(), layout: str = "yahoo") -> SyntheticMarket:
    """Simulate a regime-switching market (module docstring); ``layout`` only names the
    tickers (Yahoo ``SYN00``..., AkShare six-digit codes ``600000``...)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rng = np.random.default_rng(spec.seed)
    n, days = spec.n_assets, spec.n_days
    drift, vol, dur = (np.array([getattr(p, f) for p in spec.params]) for f in ("drift", "vol", "mean_duration"))
    k = len(REGIMES)
    # Semi-Markov chain: segment s has regime (first + sum of offsets in 1..k-1) mod k
    # (never its predecessor's) and a geometric length of mean dur[regime]; at most
    # ``days`` segments are needed (each lasts >= 1 day).
    seg = (rng.integers(k) + np.concatenate([[0], np.cumsum(rng.integers(1, k, days - 1))])) % k
    regimes = np.repeat(seg, rng.geometric(1.0 / dur[seg]))[:days].astype(np.int32)
    factor = drift[regimes] + vol[regimes] * rng.standard_normal(days)
    beta = rng.uniform(0.6, 1.4, n)
    idio = rng.uniform(0.005, 0.015, n)
    tilt = 0.0005 * rng.standard_normal((k, n))
    log_ret = factor[:, None] * beta + tilt[regimes] + idio * rng.standard_normal((days, n))
    scale = np.sqrt((beta * vol[regimes][:, None]) ** 2 + idio ** 2)  # [D, N] daily volatility
    p0 = rng.uniform(20.0, 200.0, n)
    close = p0 * np.exp(np.cumsum(log_ret, axis=0))
    prev = np.vstack([p0[None], close[:-1]])
    open_ = prev * np.exp(0.25 * scale * rng.standard_normal((days, n)))
    high = np.maximum(open_, close) * np.exp(np.abs(0.5 * scale * rng.standard_normal((days, n))))
    low = np.minimum(open_, close) * np.exp(-np.abs(0.5 * scale * rng.standard_normal((days, n))))
    base = 10.0 ** rng.uniform(5.0, 7.0, n)
    volume = 100.0 * np.round(0.01 * base * np.exp(0.3 * rng.standard_normal((days, n)))
                      * (1.0 + 2.0 * np.abs(factor - drift[regimes]) / vol[regimes])[:, None])
    bdays = pd.bdate_range(spec.start, periods=int(np.ceil(days / (1.0 - spec.holiday_rate))) + 10)
    keep = np.sort(rng.choice(len(bdays), days, replace=False))
    dates = bdays.to_numpy().astype("datetime64[D]")[keep]
    present = rng.random((days, n)) >= spec.missing_rate
    dividend = np.exp(-rng.uniform(0.0, 0.03, n) * (days - 1 - np.arange(days))[:, None] / 252.0)
    tickers = tuple(f"SYN{i:02d}" if layout == "yahoo" else f"{600000 + i:06d}" for i in range(n))
    return SyntheticMarket(dates=dates, tickers=tickers, open=open_, high=high, low=low, close=close,
                           volume=volume, present=present, dividend=dividend, regimes=regimes)


def write_market(sim: SyntheticMarket, folder, layout: str = "yahoo") -> list[Path]:
    """Write ``sim`` as a market folder, one CSV per ticker in ``layout`` ("yahoo":
    raw prices plus Adj Close; "akshare": the stock_zh_a_hist columns with forward-adjusted
    prices), each without its missing days; returns the paths."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, ticker in enumerate(sim.tickers):
        rows = sim.present[:, i]
        o, h, l, c, v = (x[rows, i] for x in (sim.open, sim.high, sim.low, sim.close, sim.volume))
        dates = pd.DatetimeIndex(sim.dates[rows]).strftime("%Y-%m-%d")
        if layout == "yahoo":
            f = sim.dividend[rows, i]
            table = pd.DataFrame({"Date": dates, "Open": o / f, "High": h / f, "Low": l / f, "Close": c / f,
                                  "Adj Close": c, "Volume": v.astype(np.int64)})
        else:
            prev = np.concatenate([[o[0]], c[:-1]])
            lots = np.round(v / 100.0).astype(np.int64)  # AkShare 成交量 is in lots of 100 shares
            table = pd.DataFrame({"日期": dates, "股票代码": ticker, "开盘": o, "收盘": c, "最高": h, "最低": l,
                                  "成交量": lots, "成交额": lots * 100.0 * (o + c) / 2.0,
                                  "振幅": 100.0 * (h - l) / prev, "涨跌幅": 100.0 * (c / prev - 1.0),
                                  "涨跌额": c - prev, "换手率": np.round(lots / 1e4, 2)})
        path = folder / f"{ticker}.csv"
        table.to_csv(path, index=False, float_format="%.6f")
        paths.append(path)
    return paths

"""How much knowing the hidden regime could lower the expert KL on ``uat.markets``' synthetic markets,
and how much of the regime a linear decoder reads from the indicators (Vanilla-TF's input) with and
without the realised returns (what UAT's feedback adds), with the study's expert allocation and KL
(``uat_jax.markets``); no model is trained; the numbers are in docs/uat.md section 20.

    python docs/analysis/markets_regime_power.py 1 3 6     # regime drift scales

For each scale s, the three quick synthetic markets are simulated with every regime's factor drift
times s (volatilities and durations unchanged), written and read back as ``uat.markets`` does, and
on each market's test days the expert allocation pi*_d (tau = 0.01) is compared (mean KL) with:
``constant``, the training days' mean pi*; ``oracle``, the training days' mean pi* in the true
regime of the target day d + 1; and the same per-regime means at the regime predicted by linear
discriminant analysis (fitted on the training days) from ``indicators`` (the day's 11 features
averaged over the active assets) or ``indicators+returns`` (plus the equal-weight return realised
at day d, in percent, and its EMA with decay 0.8). ``*_acc``: the decoders' test accuracy on the
regime; ``base_acc``: the most frequent regime's share.
"""
from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

import numpy as np

from experiments.studies.uat.markets import QUICK, SYNTHETIC
from uat_jax import markets
from uat_jax import markets_data as md

EMA_DECAY = 0.8


def mean_kl(expert: np.ndarray, q: np.ndarray, mask: np.ndarray) -> float:
    """Mean over days of the study's KL(pi*_d || q_d) over the active slots (``markets.kl_to_expert``;
    q is 0 on the padded slots, which it masks)."""
    return float(np.mean(markets.kl_to_expert(expert, np.log(np.where(q > 0, q, 1.0)), mask)))


def lda(x: np.ndarray, y: np.ndarray, k: int):
    """A linear discriminant (shared covariance, class priors) fitted on (x, y): x -> predicted class."""
    mu = np.stack([x[y == c].mean(0) if np.any(y == c) else np.zeros(x.shape[1]) for c in range(k)])
    resid = x - mu[y]
    inv = np.linalg.inv(resid.T @ resid / len(x) + 1e-3 * np.eye(x.shape[1]))
    log_prior = np.log(np.maximum(np.bincount(y, minlength=k) / len(y), 1e-6))
    return lambda z: np.argmax(z @ inv @ mu.T - 0.5 * np.sum(mu @ inv * mu, 1) + log_prior, 1)


def split_inputs(split: md.MarketSplit, mask: np.ndarray, truth: np.ndarray) -> dict:
    target_regime = truth[np.minimum(split.day_index + 1, len(truth) - 1)]
    indicators = split.features[:, mask].mean(1)
    realised = np.concatenate([[0.0], split.returns[:-1, mask].mean(1)])  # day d-1's next-day return
    ema, acc = np.zeros_like(realised), 0.0
    for t, r in enumerate(realised):
        acc = EMA_DECAY * acc + (1 - EMA_DECAY) * r
        ema[t] = acc
    expert = markets.expert_allocation(split.returns, mask, QUICK.expert_temperature)  # [D, N_max + 1]
    return {"pi": np.asarray(expert), "y": target_regime, "indicators": indicators,
            "indicators+returns": np.column_stack([indicators, 100 * realised, 100 * ema])}


def market_rows(scale: float) -> list[dict]:
    params = tuple(dataclasses.replace(md.REGIME_PARAMS[k], drift=md.REGIME_PARAMS[k].drift * scale)
                   for k in md.REGIMES)
    rows, k = [], len(md.REGIMES)
    with tempfile.TemporaryDirectory() as tmp:
        sims = {}
        for i, (name, n, layout) in enumerate(SYNTHETIC):
            spec = md.SyntheticSpec(n_assets=n, n_days=QUICK.synthetic_days, seed=QUICK.synthetic_seed + i,
                                    params=params)
            sims[name] = md.simulate_market(spec, layout)
            md.write_market(sims[name], Path(tmp) / name, layout)
        for m in md.prepare_markets(tmp, window=QUICK.size.horizon):
            truth = sims[m.name].regimes_on(m.dates)
            train, test = (split_inputs(s, m.mask, truth) for s in (m.train, m.test))
            constant = train["pi"].mean(0)
            per_regime = np.stack([train["pi"][train["y"] == c].mean(0) if np.any(train["y"] == c) else constant
                                   for c in range(k)])
            row = {"market": m.name, "constant": mean_kl(test["pi"], constant[None], m.mask),
                   "oracle": mean_kl(test["pi"], per_regime[test["y"]], m.mask)}
            for name in ("indicators", "indicators+returns"):
                predicted = lda(train[name], train["y"], k)(test[name])
                row[name] = mean_kl(test["pi"], per_regime[predicted], m.mask)
                row[f"{name}_acc"] = float(np.mean(predicted == test["y"]))
            row["base_acc"] = float(np.bincount(test["y"], minlength=k).max() / len(test["y"]))
            rows.append(row)
    return rows


if __name__ == "__main__":
    for scale in (float(s) for s in sys.argv[1:] or ["1"]):
        for row in market_rows(scale):
            print(f"scale {scale:g}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                   for k, v in row.items()), flush=True)

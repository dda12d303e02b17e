"""Domain C training and evaluation (``uat_jax.markets``) against independent computations:
the allocation, expert, KL and portfolio return by hand and in numpy on padded asset slots;
Sharpe and CAGR by their formulas; the window gather against ``MarketSplit``'s own windows;
the causal rollout against a step-by-step loop of plain parallel passes on growing prefixes;
no leak of a step's next-day returns into its own or earlier allocations; evaluation and the
first epoch's loss against that loop and numpy; bad input.

The data: two tiny synthetic markets (5 Yahoo assets, 3 AkShare assets) prepared with
window T = 10 and padded to ``N_MAX`` = 45 slots, so the model sees 495 features and 46 outputs
(cash first). The model horizon equals the data window (evaluation's return is the window's
last step, ``MarketSplit.last_returns``). Dropout is 0 throughout (the passes compared are the
deterministic ones), so a single model configuration per kind is compiled.
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from uat_jax import cells, markets
from uat_jax import markets_data as md
from uat_jax.model import DecisionTransformer, init_params, parallel_logits
from uat_jax.train import CellKeys

T = 10  # model horizon = data window
N_MAX = md.N_MAX
A = N_MAX + 1
SIZE = cells.Size(d_model=8, n_heads=2, d_ff=16, n_layers=1, horizon=T, batch_size=2, epochs=2, d_u=4, dropout=0.0)
CLEAN = markets.MarketsTask.make("clean")


@pytest.fixture(scope="module")
def mkts(tmp_path_factory):
    root = tmp_path_factory.mktemp("markets")
    md.write_market(md.simulate_market(md.SyntheticSpec(n_assets=5, n_days=400, seed=0), "yahoo"), root / "a", "yahoo")
    md.write_market(md.simulate_market(md.SyntheticSpec(n_assets=3, n_days=350, seed=1), "akshare"), root / "b",
                    "akshare")
    out = md.prepare_markets(root, window=T)
    assert [m.name for m in out] == ["a", "b"] and [int(m.mask.sum()) for m in out] == [5, 3]
    return out


@pytest.fixture(scope="module")
def data(mkts):
    return jax.tree.map(jnp.asarray, markets.data_arrays(mkts, T))


def perturbed(params, seed=2, scale=0.3):
    """Every parameter moved off its initialisation (UAT's gates start at zero: reward-blind)."""
    leaves, tree = jax.tree.flatten(params)
    noise = jax.random.split(jax.random.key(seed), len(leaves))
    return tree.unflatten([p + scale * jax.random.normal(k, p.shape) for p, k in zip(leaves, noise)])


class Kit:
    """One model kind: its config, model, perturbed parameters and jitted programs (compiled
    once per shape for the whole module)."""

    def __init__(self, kind):
        self.cfg = markets.train_config(SIZE, N_MAX, kind)
        self.model = DecisionTransformer(self.cfg.model)
        self.params = perturbed(init_params(self.model, jax.random.key(0)))
        model = self.model
        self.logits = jax.jit(lambda p, o, w, r: parallel_logits(model, p, o, w, r))
        self.rollout = jax.jit(lambda p, o, r, m, ch, k: markets.rollout(model, p, o, r, m, ch, k))
        self.evaluate = jax.jit(markets.make_evaluate(self.cfg))


@pytest.fixture(scope="module")
def kit():
    return functools.cache(Kit)


def np_log_softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def np_active(mask):
    return np.concatenate([np.ones(np.shape(mask)[:-1] + (1,), bool), mask], -1)


def np_allocation(logits, mask):
    """Weights [A] (float64): softmax over cash + the active assets, 0 on padded slots."""
    act = np_active(mask)
    w = np.zeros(np.shape(logits))
    w[act] = np.exp(np_log_softmax(np.asarray(logits)[act]))
    return w


def np_expert(returns, mask, tau):
    act = np_active(mask)
    z = np.concatenate([[0.0], np.asarray(returns, np.float64)]) / tau
    p = np.zeros(len(z))
    p[act] = np.exp(np_log_softmax(z[act]))
    return p


def np_kl(p, q, mask):
    act = np_active(mask)
    return float(np.sum(p[act] * (np.log(p[act]) - np.log(q[act]))))


def reference_rollout(k: Kit, params, obs, R, mask, feed=lambda x: x):
    """The policy step by step with plain parallel passes: at step t, the pass over the window
    with the pairs (w_{s-1}, r~_{s-1}) built so far (later pairs still zero; position t of the
    causally masked pass reads positions <= t only, so this is the pass over the prefix
    obs[:t+1], compiled once; a pass that leaked a later position would differ from the rollout); w_t the numpy softmax of its last
    logits over cash + active assets; r_t = w_t . R_t; the next fed reward feed(100 r_t)."""
    obs, R, mask = np.asarray(obs), np.asarray(R), np.asarray(mask)
    prev_w, prev_r = np.zeros((T, A), np.float32), np.zeros(T, np.float32)
    w, rets, fed = np.zeros((T, A)), np.zeros(T), np.zeros(T)
    for t in range(T):
        logits = np.asarray(k.logits(params, obs, prev_w, prev_r), np.float64)  # one compile: see the docstring
        w[t] = np_allocation(logits[t], mask)
        rets[t] = w[t, 1:] @ R[t]
        fed[t] = feed(100.0 * rets[t])
        if t + 1 < T:
            prev_w[t + 1], prev_r[t + 1] = w[t], fed[t]
    return {"w": w, "returns": rets, "fed": fed, "prev_w": prev_w, "prev_r": prev_r, "logits": logits}


def window(m: md.Market, split: str, idx: int):
    s = getattr(m, split)
    return s.window_features([idx])[0].reshape(T, -1), s.window_returns([idx])[0], m.mask


# ------------------------------------------------------------- allocations and loss


def test_allocation_expert_kl_and_return_by_hand():
    """Allocations: softmax over cash + active assets only, exactly 0 on padded slots (whose
    logits are large, so keeping them would move every weight). Expert: softmax of (0, R) / tau
    over the active slots, by hand for tau = 0.01, R = (0.01, -0.01): softmax(0, 1, -1). KL over
    the active slots and w . R against numpy. The KL loss's gradient w.r.t. the logits is
    finite, q - p on the active slots and exactly 0 on the padded ones."""
    mask = np.array([[True, True, False, False], [True, False, True, False]])
    logits = np.array([[0.5, -1.0, 2.0, 40.0, -30.0], [0.3, 1.2, 25.0, -0.7, 9.0]], np.float32)
    R = np.array([[0.01, -0.01, 0.3, -0.2], [0.02, 0.5, -0.015, 0.4]], np.float32)
    tau = 0.01

    log_w = np.asarray(markets.log_allocation(jnp.asarray(logits), jnp.asarray(mask)))
    w = np.exp(log_w)
    act = np_active(mask)
    assert np.all(w[~act] == 0.0) and np.all(np.isneginf(log_w[~act]))
    for b in range(2):
        np.testing.assert_allclose(w[b], np_allocation(logits[b], mask[b]), atol=1e-6)
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
    # by hand: row 0 allocates to slots 0, 1, 2 -> softmax(0.5, -1, 2); row 1 to slots 0, 1, 3 -> softmax(0.3, 1.2, -0.7)
    np.testing.assert_allclose(w[0], [0.17529039, 0.03911257, 0.78559703, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(w[1, [0, 1, 3]], np.exp([0.3, 1.2, -0.7]) / np.exp([0.3, 1.2, -0.7]).sum(), atol=1e-6)

    expert = np.asarray(markets.expert_allocation(jnp.asarray(R), jnp.asarray(mask), tau))
    # softmax(0, 1, -1) = (1, e, 1/e) / (1 + e + 1/e)
    np.testing.assert_allclose(expert[0], [0.24472847, 0.66524096, 0.09003057, 0.0, 0.0], atol=1e-6)
    assert np.all(expert[~act] == 0.0)
    for b in range(2):
        np.testing.assert_allclose(expert[b], np_expert(R[b], mask[b], tau), atol=1e-6)
    # row 1 by hand: slots 0, 1, 3 (assets 0 and 2: R = 0.02, -0.015) -> softmax(0, 2, -1.5)
    np.testing.assert_allclose(expert[1], [0.11611453, 0.85797681, 0.0, 0.02590865, 0.0], atol=1e-6)

    kl = np.asarray(markets.kl_to_expert(jnp.asarray(expert), jnp.asarray(log_w), jnp.asarray(mask)))
    for b in range(2):
        np.testing.assert_allclose(kl[b], np_kl(np_expert(R[b], mask[b], tau), np_allocation(logits[b], mask[b]),
                                                mask[b]), rtol=1e-5, atol=1e-6)
    assert np.all(kl > 0)
    same = markets.kl_to_expert(jnp.asarray(expert), markets.log_allocation(jnp.log(jnp.asarray(expert) + 1e-30),
                                                                            jnp.asarray(mask)), jnp.asarray(mask))
    np.testing.assert_allclose(same, 0.0, atol=1e-5)

    ret = np.asarray(markets.portfolio_return(jnp.asarray(w), jnp.asarray(R)))
    for b in range(2):
        np.testing.assert_allclose(ret[b], sum(w[b, 1 + i] * R[b, i] for i in range(4) if mask[b, i]), atol=1e-7)
    np.testing.assert_allclose(markets.portfolio_return(jnp.asarray([0.2, 0.5, 0.3]), jnp.asarray([0.01, -0.02])),
                               0.5 * 0.01 - 0.3 * 0.02, atol=1e-8)

    loss = lambda z: jnp.sum(markets.kl_to_expert(jnp.asarray(expert), markets.log_allocation(z, jnp.asarray(mask)),
                                                  jnp.asarray(mask)))
    grad = np.asarray(jax.grad(loss)(jnp.asarray(logits)))
    assert np.all(np.isfinite(grad))
    assert np.all(grad[~act] == 0.0)
    np.testing.assert_allclose(grad, np.where(act, w - expert, 0.0), atol=1e-6)


def test_sharpe_and_cagr_formulas():
    """Sharpe sqrt(252) mean / std (ddof 1), NaN for zero spread or one return; CAGR
    prod(1 + r)^(252 / T) - 1, and (1 + c)^252 - 1 for a constant daily return c."""
    r = np.array([0.01, -0.02, 0.03, 0.005, -0.004])
    sd = np.sqrt(np.sum((r - r.sum() / 5) ** 2) / 4)
    np.testing.assert_allclose(markets.sharpe(r), np.sqrt(252) * (r.sum() / 5) / sd, rtol=1e-12)
    np.testing.assert_allclose(markets.sharpe(-r), -np.sqrt(252) * (r.sum() / 5) / sd, rtol=1e-12)
    # by hand: (0.01, -0.01): mean 0, sharpe 0; (0.02, 0.0): mean 0.01, sd 0.01 sqrt(2) -> sqrt(252 / 2)
    assert markets.sharpe([0.01, -0.01]) == 0.0
    np.testing.assert_allclose(markets.sharpe([0.02, 0.0]), np.sqrt(126), rtol=1e-12)
    assert np.isnan(markets.sharpe(np.zeros(7)))
    assert np.isnan(markets.sharpe([0.01, 0.01, 0.01]))
    assert np.isnan(markets.sharpe([0.03]))

    np.testing.assert_allclose(markets.cagr(r), np.prod(1 + r) ** (252 / 5) - 1, rtol=1e-12)
    np.testing.assert_allclose(markets.cagr([0.01, -0.02, 0.03]), (1.01 * 0.98 * 1.03) ** 84 - 1, rtol=1e-12)
    np.testing.assert_allclose(markets.cagr(np.full(10, 0.001)), 1.001 ** 252 - 1, rtol=1e-10)
    np.testing.assert_allclose(markets.cagr(np.full(252, -0.002)), 0.998 ** 252 - 1, rtol=1e-10)
    assert markets.cagr(np.zeros(4)) == 0.0


def test_sharpe_nan_for_constant_series_with_rounding():
    """A constant daily return is zero spread (docstring: NaN) whatever the rounding of its mean."""
    assert np.isnan(markets.sharpe(np.full(10, 0.01)))


# ----------------------------------------------------------------------------- data


def test_data_arrays_and_gather_window(mkts, data):
    """The test windows are enumerated market-major in date order; ``gather_window`` (jitted)
    returns ``MarketSplit.window_features`` flattened to [T, 495], ``window_returns`` and the
    market's mask, for windows of both markets and both splits, including each split's last."""
    n_test = [m.test.n_windows for m in mkts]
    np.testing.assert_array_equal(data["test_market"], np.repeat([0, 1], n_test))
    np.testing.assert_array_equal(data["test_start"], np.concatenate([np.arange(n) for n in n_test]))
    for split in ("train", "test"):
        np.testing.assert_array_equal(data[split]["n_windows"], [getattr(m, split).n_windows for m in mkts])
        np.testing.assert_array_equal(data[split]["mask"], np.stack([m.mask for m in mkts]))
    gather = jax.jit(markets.gather_window, static_argnums=3)
    for split in ("train", "test"):
        for i, m in enumerate(mkts):
            n = getattr(m, split).n_windows
            for w in (0, 1, n // 2, n - 1):
                obs, R, mask = gather(data[split], jnp.int32(i), jnp.int32(w), T)
                o_ref, r_ref, m_ref = window(m, split, w)
                assert obs.shape == (T, N_MAX * 11) and R.shape == (T, N_MAX)
                np.testing.assert_array_equal(obs, o_ref)
                np.testing.assert_array_equal(R, r_ref)
                np.testing.assert_array_equal(mask, m_ref)
                if w == n - 1:
                    np.testing.assert_array_equal(R[-1], getattr(m, split).last_returns[-1])


# ------------------------------------------------------------------ rollout and passes


@pytest.mark.parametrize("kind", ("uat", "adt"))
def test_rollout_matches_stepwise_parallel_passes(mkts, kit, kind):
    """The incremental rollout's log allocations, portfolio returns and fed rewards equal the
    step-by-step reference (prefix parallel passes, numpy softmax, w . R, 100 r), for windows of
    both markets, with the clean and the sign-flip channels; ``fed_pairs`` gives the zero pair at
    t = 0 and the previous step's (w, r~) after, as the reference built them."""
    k = kit(kind)
    cases = [(0, "test", 0, "clean", lambda x: x), (1, "test", mkts[1].test.n_windows - 1, "clean", lambda x: x),
             (1, "train", 17, "sign_flip", lambda x: -x)]
    for m, split, w, corruption, feed in cases:
        obs, R, mask = window(mkts[m], split, w)
        traj = k.rollout(k.params, obs, R, mask, markets.MarketsTask.make(corruption).channel, jax.random.key(5))
        ref = reference_rollout(k, k.params, obs, R, mask, feed)
        weights = np.exp(np.asarray(traj.log_w))
        assert np.all(weights[:, ~np_active(mask)] == 0.0)
        np.testing.assert_allclose(weights, ref["w"], atol=1e-5)
        np.testing.assert_allclose(traj.returns, ref["returns"], atol=1e-6)
        np.testing.assert_allclose(traj.fed, ref["fed"], atol=1e-4)
        assert np.abs(ref["fed"]).max() > 0.05  # the fed rewards are not trivially zero
        prev_w, prev_r = markets.fed_pairs(traj)
        assert np.all(np.asarray(prev_w[0]) == 0.0) and float(prev_r[0]) == 0.0
        np.testing.assert_allclose(prev_w, ref["prev_w"], atol=1e-5)
        np.testing.assert_allclose(prev_r, ref["prev_r"], atol=1e-4)
        np.testing.assert_allclose(prev_w[1:], np.exp(np.asarray(traj.log_w[:-1])), rtol=1e-6, atol=1e-9)
        np.testing.assert_array_equal(prev_r[1:], traj.fed[:-1])


@pytest.mark.parametrize("kind", ("uat", "vt"))
def test_next_day_returns_do_not_leak(mkts, kit, kind):
    """Changing step t's next-day returns R_t (or a later observation) leaves the allocations of
    steps <= t unchanged (bitwise); UAT (perturbed, gates non-zero) reads r_t at step t + 1, so
    its allocation there changes; Vanilla-TF reads no feedback: no allocation changes at all."""
    k = kit(kind)
    obs, R, mask = window(mkts[0], "test", 3)
    t = 4
    run = lambda o, r: np.asarray(k.rollout(k.params, o, r, mask, CLEAN.channel, jax.random.key(0)).log_w)
    base = run(obs, R)
    bumped = run(obs, R.copy() + np.where(np.arange(T)[:, None] == t, 0.05 * mask, 0.0).astype(np.float32))
    np.testing.assert_array_equal(bumped[:t + 1], base[:t + 1])
    later_obs = obs.copy()
    later_obs[t + 1:] += 1.0
    np.testing.assert_array_equal(run(later_obs, R)[:t + 1], base[:t + 1])
    if kind == "vt":
        np.testing.assert_array_equal(bumped, base)
    else:
        assert np.abs(np.exp(bumped[t + 1]) - np.exp(base[t + 1])).max() > 1e-5


# ------------------------------------------------------------------ train and evaluate


@pytest.mark.parametrize("kind", ("uat", "vt"))
def test_evaluate_matches_reference(mkts, data, kit, kind):
    """Each test window's "return" is the reference's last-step allocation dotted with
    ``MarketSplit.last_returns[w]``, its "kl" the numpy mean over steps of KL(expert || w);
    "gate_norm" is 0 for Vanilla-TF (no regime gate) and positive for perturbed UAT."""
    k = kit(kind)
    out = jax.tree.map(np.asarray, k.evaluate(k.params, jax.random.key(3), CLEAN, data))
    W = sum(m.test.n_windows for m in mkts)
    assert all(v.shape == (W,) for v in out.values())
    n0 = mkts[0].test.n_windows
    for m, w in ((0, 0), (0, n0 - 1), (1, 7), (1, mkts[1].test.n_windows - 1)):
        i = w + (n0 if m else 0)
        obs, R, mask = window(mkts[m], "test", w)
        ref = reference_rollout(k, k.params, obs, R, mask)
        np.testing.assert_allclose(out["return"][i], ref["w"][-1, 1:] @ mkts[m].test.last_returns[w], atol=1e-7)
        kl = np.mean([np_kl(np_expert(R[t], mask, k.cfg.expert_temperature), ref["w"][t], mask) for t in range(T)])
        np.testing.assert_allclose(out["kl"][i], kl, rtol=1e-4, atol=1e-5)
    if kind == "vt":
        assert np.all(out["gate_norm"] == 0.0)
    else:
        assert np.all(out["gate_norm"] > 1e-3)


@pytest.mark.parametrize("kind", ("uat", "adt"))
def test_train_runs_and_first_epoch_loss_matches_numpy(mkts, data, kit, kind):
    """Two jitted epochs on the two markets: finite losses and [W] evaluation arrays; epoch 0's
    loss is the numpy mean KL(expert || w) over the B windows per market the cell's run key draws
    (starts = floor(u * n_windows), market-major), with the initial parameters, the fed pairs of
    the step-by-step reference rollout and the logits of one parallel pass (dropout 0)."""
    k = kit(kind)
    cfg = k.cfg
    assert cfg.model.dropout == 0.0
    key = jax.random.key(11)
    res = jax.jit(markets.make_train(cfg))(key, CLEAN, data)
    loss = np.asarray(res.loss)
    W = sum(m.test.n_windows for m in mkts)
    assert loss.shape == (cfg.epochs,) and np.all(np.isfinite(loss))
    assert all(np.asarray(v).shape == (W,) and np.all(np.isfinite(v)) for v in res.eval.values())

    keys = CellKeys.of(key)
    u = np.asarray(jax.random.uniform(keys.run, (cfg.epochs, len(mkts), cfg.batch_size)))
    n_windows = np.array([m.train.n_windows for m in mkts], np.float32)
    starts = (u * n_windows[None, :, None]).astype(np.int32)
    params0 = init_params(k.model, keys.init)
    kls = []
    for m, mk in enumerate(mkts):
        for s in starts[0, m]:
            obs, R, mask = window(mk, "train", int(s))
            ref = reference_rollout(k, params0, obs, R, mask)
            logits = np.asarray(k.logits(params0, obs, ref["prev_w"], ref["prev_r"]), np.float64)
            kls += [np_kl(np_expert(R[t], mask, cfg.expert_temperature), np_allocation(logits[t], mask), mask)
                    for t in range(T)]
    np.testing.assert_allclose(loss[0], np.mean(kls), rtol=1e-5)


# ----------------------------------------------------------------------------- bad input


def test_bad_input(mkts):
    """Each bad field is a ValueError naming it."""
    cfg = markets.train_config(SIZE, N_MAX, "uat")
    with pytest.raises(ValueError, match="obs_dim"):
        markets.MarketsTrainConfig(model=dataclasses.replace(cfg.model, obs_dim=N_MAX * 11 - 1))
    for tau in (0.0, -0.5, float("nan")):
        with pytest.raises(ValueError, match="expert_temperature"):
            dataclasses.replace(cfg, expert_temperature=tau)
    with pytest.raises(ValueError, match="eval_batch"):
        dataclasses.replace(cfg, eval_batch=0)
    for corruption in ("gaussian", "bogus"):
        with pytest.raises(ValueError, match="corruption"):
            markets.MarketsTask.make(corruption)
    with pytest.raises(ValueError, match="variant"):
        markets.MarketsTask.make("clean", variant="nope")
    with pytest.raises(ValueError, match="split"):
        markets.split_arrays(mkts, "valid")
    for n_max in (0, True):
        with pytest.raises(ValueError, match="n_max"):
            markets.train_config(SIZE, n_max)
    with pytest.raises(ValueError, match="at least one market"):
        markets.data_arrays((), T)
    with pytest.raises(ValueError, match="window = model horizon"):
        markets.data_arrays(mkts, T + 2)
    with pytest.raises(ValueError, match="at least one return"):
        markets.cagr([])

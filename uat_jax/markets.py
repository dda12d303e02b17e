"""Domain C training and evaluation: the decision Transformers as portfolio allocators.

Paper: "Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential Decision
Making" (UAT, arXiv 2607.18910), section 4.3, Appendix C.1-C.3 and Table 3 (Domain C). The
data (indicators, splits, windows, next-day returns, post-hoc regimes) are
``uat_jax.markets_data``'s; this module trains ``uat_jax.model.DecisionTransformer`` on them.
Derivations and readings: ``docs/uat.md`` §20.

Action (C.1 "Action"): the head has N_max + 1 = 46 outputs, cash first (slot 0), then the 45
asset slots. A market with N assets uses cash and its first N slots: the softmax of the
logits sliced to those N + 1 and renormalised (:func:`log_allocation`; padded slots get
weight exactly 0). Observation o_t: the day's features [N_max, 11] flattened to 495.

Expert (C.2; the Domain C paragraph is lost, only L_KL survives). Reading: the privileged
expert knows step t's next-day returns R_t [N] (hindsight) and allocates
pi*_t = softmax over (cash, active assets) of (0, R_t) / tau (:func:`expert_allocation`;
``MarketsTrainConfig.expert_temperature`` tau, 0.01: a 1% return difference is a factor e).
The model cannot know R_t; the best it can do is predict pi*_t from the history, which on
regime-switching markets depends on the regime (bull: assets; bear and shock: cash).
Objective: L_KL = 1/(BT) sum_{b,t} KL(pi*_{b,t} || pi_theta(. | H_{b,t})) over the active slots.

Feedback (section 4.3, C.2): the step-t input pair is (w_{t-1}, r~_{t-1}): the model's own
allocation of the day before (a vector, fed through ``feedback.action_vector``: every action
embedding is linear in it) and its realised portfolio return r_{t-1} = sum_i w_{t-1,i} R_{t-1,i}
(cash earns 0, zero transaction costs: C.1), in percent (reading: a unit scale, as DarkRoom's
rewards; the raw daily returns are of order 0.01), then corrupted by the task's channel
(``feedback.corrupt``). r_{t-1} is realised at day t's close, before the day-t decision, so
no future price is fed. The zero pair (zero vector, 0) at t = 0. Since the allocations are
the model's own, training is rollout-then-optimize as in Domain A (``uat_jax.train``):

One epoch: B windows from each market (starts drawn uniformly with replacement, all
epochs' draws made before the epoch loop; Table 3: B = 128 per market, 384 pooled); (1) the
current policy rolled out causally without gradient on each window (its deterministic
allocation, :func:`rollout`) to collect the fed pairs; (2) one causally masked parallel pass
with dropout over the (B M, T) windows; (3) one AdamW step on L_KL (``train.make_optimizer``:
clip 1.0, weight decay 1e-5, base lr 2e-3, the utility encoder and W_rho at the UE lr).

Evaluation (C.1, C.3): every test window of every market is rolled out; a window contributes
its last step's allocation and its realised next-day return (one return per test date),
from which ``sharpe`` and ``cagr`` are computed per market; also the mean test KL to the
expert over the window's steps and the regime gate norm ||rho_{T-1}||_2 of the last step
(UAT's, Figure 3 right; 0 for models without the Q-pathway gate).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from uat_jax import cells
from uat_jax.config import ModelConfig, variant_index
from uat_jax.feedback import CORRUPTIONS, FeedbackChannel, FeedbackNoise, corrupt
from uat_jax.markets_data import INDICATORS, Market
from uat_jax.model import DecisionTransformer, init_cache, init_params, parallel_logits, regime_gates
from uat_jax.train import CellKeys, check_optimizer_fields, make_optimizer, task_model

TRADING_DAYS = 252
REWARD_SCALE = 100.0  # the fed reward is the portfolio return in percent (module docstring)


@dataclasses.dataclass(frozen=True)
class MarketsTrainConfig:
    """Table 3, Domain C optimiser settings; ``batch_size`` windows per market and epoch;
    ``expert_temperature`` tau of :func:`expert_allocation`; ``eval_batch``: test windows rolled
    out at once (memory only, not the result)."""

    model: ModelConfig
    epochs: int = 500
    batch_size: int = 128
    lr: float = 2e-3
    ue_lr: float = 2e-2
    weight_decay: float = 1e-5
    grad_clip: float = 1.0
    expert_temperature: float = 0.01
    eval_batch: int = 128

    def __post_init__(self) -> None:
        n_max = self.model.n_actions - 1
        if self.model.obs_dim != n_max * len(INDICATORS):
            raise ValueError(f"Domain C observes {len(INDICATORS)} features of each of the n_actions - 1 = {n_max} "
                             f"asset slots: model.obs_dim must be {n_max * len(INDICATORS)}, got {self.model.obs_dim}")
        check_optimizer_fields(self, ("eval_batch",))
        if not self.expert_temperature > 0:
            raise ValueError(f"expert_temperature must be > 0, got {self.expert_temperature!r}")


@struct.dataclass
class MarketsTask:
    """What a Domain C sweep varies, as array leaves: the corruption channel of the fed
    portfolio returns and, for a ``traced_variant`` model, the member of ``SWITCHED``."""

    channel: FeedbackChannel
    variant: jax.Array | None = None

    @classmethod
    def make(cls, corruption: str = "clean", variant: str | None = None) -> MarketsTask:
        if corruption not in CORRUPTIONS or corruption == "gaussian":
            raise ValueError(f"corruption must be one of {tuple(c for c in CORRUPTIONS if c != 'gaussian')}, "
                             f"got {corruption!r}")
        task = cls(channel=FeedbackChannel.make(corruption))
        return task if variant is None else task.with_variant(variant)

    def with_variant(self, name: str) -> MarketsTask:
        """This task for member ``name`` of ``SWITCHED`` (a ``traced_variant`` model)."""
        return self.replace(variant=variant_index(name))


# ----------------------------------------------------------------------------- data


def split_arrays(markets: tuple[Market, ...], split: str) -> dict:
    """One split of every market as stacked arrays (the day axis zero-padded to the longest):
    ``features`` [M, D, N_max, 11], ``returns`` [M, D, N_max], ``mask`` [M, N_max] bool,
    ``n_windows`` [M] int32."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    parts = [getattr(m, split) for m in markets]
    days = max(len(p.dates) for p in parts)
    pad = lambda a: np.pad(a, [(0, days - len(a))] + [(0, 0)] * (a.ndim - 1))  # noqa: E731
    return {"features": np.stack([pad(p.features) for p in parts]).astype(np.float32),
            "returns": np.stack([pad(p.returns) for p in parts]).astype(np.float32),
            "mask": np.stack([m.mask for m in markets]),
            "n_windows": np.array([p.n_windows for p in parts], np.int32)}


def data_arrays(markets: tuple[Market, ...], horizon: int) -> dict:
    """What the compiled programs read (the sweep's ``shared`` argument): the training and
    test splits (:func:`split_arrays`) and every test window as (``test_market``, ``test_start``)
    [W], market-major in date order. ``horizon``: the model's T, which must be the markets'
    window length (the programs gather windows of T days; another length would evaluate the
    wrong day or read past a split)."""
    if not markets:
        raise ValueError("data_arrays needs at least one market")
    windows = {m.test.window for m in markets} | {m.train.window for m in markets}
    if windows != {horizon}:
        raise ValueError(f"the markets were prepared with window {sorted(windows)}, the model's horizon is {horizon}: "
                         "prepare them with window = model horizon")
    counts = [m.test.n_windows for m in markets]
    return {"train": split_arrays(markets, "train"), "test": split_arrays(markets, "test"),
            "test_market": np.repeat(np.arange(len(markets), dtype=np.int32), counts),
            "test_start": np.concatenate([np.arange(w, dtype=np.int32) for w in counts])}


def gather_window(split: dict, market: jax.Array, start: jax.Array, horizon: int):
    """Window (``market``, ``start``) of ``split``: observations [T, N_max 11], next-day returns
    [T, N_max] and the market's asset mask [N_max]."""
    feats = split["features"][market]
    n_max, n_feat = feats.shape[1:]
    obs = jax.lax.dynamic_slice(feats, (start, 0, 0), (horizon, n_max, n_feat)).reshape(horizon, -1)
    returns = jax.lax.dynamic_slice(split["returns"][market], (start, 0), (horizon, n_max))
    return obs, returns, split["mask"][market]


# ------------------------------------------------------------- allocations and loss


def active(mask: jax.Array) -> jax.Array:
    """[..., N_max + 1] the slots a market allocates to: cash (slot 0) and its assets."""
    return jnp.concatenate([jnp.ones(mask.shape[:-1] + (1,), bool), mask], -1)


def log_allocation(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """log w [..., N_max + 1]: the softmax of ``logits`` sliced to cash and the active assets of
    ``mask`` [..., N_max] and renormalised (C.1); -inf on padded slots (weight exactly 0)."""
    return jax.nn.log_softmax(jnp.where(active(mask), logits, -jnp.inf), axis=-1)


def expert_allocation(returns: jax.Array, mask: jax.Array, temperature: float) -> jax.Array:
    """pi* [..., N_max + 1] from next-day returns [..., N_max]: softmax of (0, R) / tau over cash
    and the active assets (the module docstring's reading of C.2)."""
    cash = jnp.zeros(returns.shape[:-1] + (1,), returns.dtype)
    return jnp.exp(log_allocation(jnp.concatenate([cash, returns], -1) / temperature, mask))


def kl_to_expert(expert: jax.Array, log_w: jax.Array, mask: jax.Array) -> jax.Array:
    """KL(pi* || w) [...] over the active slots of ``mask``, from pi* and log w [..., N_max + 1]."""
    on = active(mask) & (expert > 0)
    log_ratio = jnp.log(jnp.where(on, expert, 1.0)) - jnp.where(on, log_w, 0.0)
    return jnp.sum(jnp.where(on, expert * log_ratio, 0.0), -1)


def portfolio_return(weights: jax.Array, returns: jax.Array) -> jax.Array:
    """sum_i w_i R_i [...] of an allocation [..., N_max + 1] (cash earns 0) and returns [..., N_max]."""
    return jnp.sum(weights[..., 1:] * returns, -1)


def sharpe(returns) -> float:
    """Annualised Sharpe ratio sqrt(252) mean / std (ddof 1) of simple daily returns (C.3; no
    risk-free rate, as cash earns 0 here); NaN for fewer than 2 returns or no spread (all equal:
    a float standard deviation of equal values can be 1e-18, not 0)."""
    r = np.asarray(returns, np.float64)
    if r.size < 2 or np.ptp(r) == 0:
        return float("nan")
    return float(np.sqrt(TRADING_DAYS) * r.mean() / r.std(ddof=1))


def cagr(returns) -> float:
    """Compound annual growth wealth_T^(252 / T) - 1 of T >= 1 simple daily returns (C.3)."""
    r = np.asarray(returns, np.float64)
    if r.size == 0:
        raise ValueError("cagr needs at least one return")
    return float(np.prod(1.0 + r) ** (TRADING_DAYS / r.size) - 1.0)


# ------------------------------------------------------------------ rollout and passes


@struct.dataclass
class Rollout:
    """One window played causally; every field has leading axis T."""

    log_w: jax.Array  # [T, N_max + 1] log allocation of each step
    returns: jax.Array  # [T] realised portfolio return of each step's allocation
    fed: jax.Array  # [T] the reward fed for each step (scaled, corrupted) at the next step


def rollout(model: DecisionTransformer, params, obs: jax.Array, returns: jax.Array, mask: jax.Array,
            channel: FeedbackChannel, key: jax.Array) -> Rollout:
    """The deterministic policy on one window: at step t the model reads o_t and the pair
    (w_{t-1}, r~_{t-1}), allocates w_t (one incremental decoding step), and w_t earns
    r_t = w_t . R_t, fed as r~_t = corrupt(100 r_t) at step t + 1 (module docstring)."""
    T = obs.shape[0]
    n_actions = model.cfg.n_actions
    noise = FeedbackNoise.draw(key, T)

    def body(c, xs):
        t, o, r, n = xs
        cache, prev_w, prev_r, realised = c
        logits, cache = model.apply(params, o[None], prev_w[None], prev_r[None], cache)
        log_w = log_allocation(logits[0], mask)
        w = jnp.exp(log_w)
        ret = portfolio_return(w, r)
        realised = realised.at[t].set(REWARD_SCALE * ret)
        fed = corrupt(n, t, realised, channel)
        return (cache, w, fed, realised), (log_w, ret, fed)

    carry = (init_cache(model.cfg), jnp.zeros(n_actions), jnp.zeros(()), jnp.zeros(T))
    _, (log_w, rets, fed) = jax.lax.scan(body, carry, (jnp.arange(T), obs, returns, noise))
    return Rollout(log_w=log_w, returns=rets, fed=fed)


def fed_pairs(traj: Rollout) -> tuple[jax.Array, jax.Array]:
    """The inputs (w_{t-1}, r~_{t-1}) [T, A], [T] of every step of a played window (the zero
    pair at t = 0), for the parallel pass."""
    w = jnp.exp(traj.log_w)
    return (jnp.concatenate([jnp.zeros_like(w[:1]), w[:-1]]),
            jnp.concatenate([jnp.zeros_like(traj.fed[:1]), traj.fed[:-1]]))


# ------------------------------------------------------------------ train and evaluate


@struct.dataclass
class MarketsResult:
    params: dict
    loss: jax.Array  # [epochs] training L_KL
    eval: dict  # per test window [W]: "return", "kl", "gate_norm", "gate_pre"


def make_evaluate(cfg: MarketsTrainConfig):
    """``evaluate(params, key, task, data) -> {"return", "kl", "gate_norm", "gate_pre": [W]}`` on every test
    window of ``data_arrays`` ``data`` (module docstring), ``cfg.eval_batch`` windows at a time."""
    T, tau = cfg.model.horizon, cfg.expert_temperature

    def evaluate(params, key, task: MarketsTask, data: dict) -> dict:
        model = task_model(cfg.model, task)
        n = data["test_market"].shape[0]

        def one(x):
            market, start, k = x
            obs, returns, mask = gather_window(data["test"], market, start, T)
            traj = rollout(model, params, obs, returns, mask, task.channel, k)
            kl = kl_to_expert(expert_allocation(returns, mask[None], tau), traj.log_w, mask[None])
            gate, gate_pre = regime_gates(model, params, obs, *fed_pairs(traj))
            return {"return": traj.returns[-1], "kl": kl.mean(), "gate_norm": gate[-1], "gate_pre": gate_pre[-1]}

        keys = jax.random.split(key, n)
        return jax.lax.map(one, (data["test_market"], data["test_start"], keys), batch_size=cfg.eval_batch)

    return evaluate


def make_train(cfg: MarketsTrainConfig):
    """``train(key, task, data) -> MarketsResult`` on ``data_arrays`` ``data`` (pure, jittable)."""
    optimizer, evaluate = make_optimizer(cfg), make_evaluate(cfg)
    T, B, tau = cfg.model.horizon, cfg.batch_size, cfg.expert_temperature

    def train(key, task: MarketsTask, data: dict) -> MarketsResult:
        model = task_model(cfg.model, task)
        windows = data["train"]
        n_markets = windows["mask"].shape[0]
        keys = CellKeys.of(key)  # run: the epochs' window draws (a cell's run of the data)
        u = jax.random.uniform(keys.run, (cfg.epochs, n_markets, B))
        starts = (u * windows["n_windows"][None, :, None]).astype(jnp.int32).reshape(cfg.epochs, -1)
        markets = jnp.repeat(jnp.arange(n_markets), B)
        gather = jax.vmap(lambda m, s: gather_window(windows, m, s, T))

        def loss_fn(params, obs, prev_w, prev_r, expert, masks, k_drop):
            logits = jax.vmap(lambda o, w, r, k: parallel_logits(model, params, o, w, r, k))(
                obs, prev_w, prev_r, jax.random.split(k_drop, obs.shape[0]))
            return jnp.mean(kl_to_expert(expert, log_allocation(logits, masks[:, None]), masks[:, None]))

        def epoch(state, xs):
            i, batch_starts = xs
            k_roll, k_drop = jax.random.split(jax.random.fold_in(keys.epochs, i))
            obs, returns, masks = gather(markets, batch_starts)
            frozen = jax.lax.stop_gradient(state[0])
            trajs = jax.vmap(lambda o, r, m, k: rollout(model, frozen, o, r, m, task.channel, k))(
                obs, returns, masks, jax.random.split(k_roll, obs.shape[0]))
            prev_w, prev_r = jax.vmap(fed_pairs)(trajs)
            expert = expert_allocation(returns, masks[:, None], tau)
            params, opt_state = state
            loss, grads = jax.value_and_grad(loss_fn)(params, obs, prev_w, prev_r, expert, masks, k_drop)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), loss

        params = init_params(model, keys.init)
        (params, _), loss = jax.lax.scan(epoch, (params, optimizer.init(params)), (jnp.arange(cfg.epochs), starts))
        return MarketsResult(params=params, loss=loss, eval=evaluate(params, keys.eval, task, data))

    return train


def make_cell(cfg: MarketsTrainConfig, keep_params: bool = False):
    """``cell(item, data) -> {"return", "kl", "gate_norm", "gate_pre": [W], "loss": [epochs]}``: train ``cfg``
    from ``item["key"]`` (raw key data) on ``item["task"]``, then evaluate (the sweep form of
    ``uat_jax.cells.make_cell``); ``keep_params`` adds the trained ``"params"``."""
    train = make_train(cfg)

    def cell(item: dict, data: dict) -> dict:
        res = train(jax.random.wrap_key_data(item["key"]), item["task"], data)
        out = {**res.eval, "loss": res.loss}
        return {**out, "params": res.params} if keep_params else out

    return cell


TABLE3 = cells.Size(d_model=128, n_heads=4, d_ff=256, n_layers=4, horizon=60, batch_size=128, d_u=32,
                    ema_decay=0.9, dropout=0.05)
"""Table 3, Domain C: d_model 128 / 4 heads / d_ff 256 / 4 layers, B = 128 per market (x 3 = 384),
T = 60, dropout 0.05, d_u 32, EMA decay 0.9 (lr 2e-3: :class:`MarketsTrainConfig`; d_act and the
UE hidden width: ``D_ACT``, ``UE_HIDDEN``)."""
D_ACT = 64  # Table 3, Domain C: action embedding width
UE_HIDDEN = 64  # Table 3, Domain C: utility encoder hidden width


def train_config(size: cells.Size, n_max: int, kind: str = "uat", variant: str | None = None,
                 traced_variant: bool = False) -> MarketsTrainConfig:
    """``size``'s model ``kind`` (or UAT ablation ``variant``, or the switched-family union) over
    ``n_max`` asset slots, with Domain C's d_act and UE hidden width, ``size``'s epochs and batch."""
    if not (isinstance(n_max, int) and not isinstance(n_max, bool) and n_max >= 1):
        raise ValueError(f"n_max must be an integer >= 1, got {n_max!r}")
    model = dataclasses.replace(size.model_config(kind, variant, traced_variant), obs_dim=n_max * len(INDICATORS),
                                n_actions=n_max + 1, d_act=D_ACT, ue_hidden=UE_HIDDEN)
    return MarketsTrainConfig(model=model, epochs=size.epochs, batch_size=size.batch_size)

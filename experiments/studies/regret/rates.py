"""Study ``regret.rates`` (Corollaries 1-2; docs/regret.md §3.3, 14) of "Training with (Swap) Regret Loss in a
Single-Layer Self-Attention Model: A Case Study on the Probability Simplex": equilibrium gaps of LEARNED models
against the horizon T.

Corollary 1: every player runs the Theorem-1 model (smoothed fictitious play at eta = Theta~(1/sqrt T)), so the
time-averaged joint play approaches the CCE set, gap_CCE(T) = max_i Reg_i(T) / T = O~(T^-1/2). Corollary 2: the
Theorem-2 d-head fixed-point model (Blum-Mansour with Hedge heads) gives gap_CE(T) <= gap_swap(T) = O~(T^-1/2).

For every T in ``horizons`` the reduced single-layer model (``model = "attention"``, Eq. (6)) and the d-head model
(``model = "multihead"``, Eq. (10), Gaussian block inputs) are trained at horizon T on N(0, I_d) sequences (seeds
vmapped, never on the game), then played against themselves for T rounds on the weighted RPS game of
docs/regret.md §9.2 (instance (i)) with expected feedback: gap_CCE(T) of the single-layer model, gap_CE(T) and
gap_swap(T) of the d-head model at calibration c_d = d (docs/regret.md §10.6). References at the Theorem-1 step
eta*(T) = kappa* / sqrt(T) (kappa* from the scan at T = min(horizons); it does not depend on T, docs/regret.md §6):
exact FTRL (``ftrl_params``) and Blum-Mansour-Hedge (``bm_params``) at c_d = d, the configuration the d-head model
is trained towards, evaluated like it (c_d = 1, classical BM, is reported too).

One compiled training program per model kind (docs/regret.md §14.1): every (T, seed) item trains at length
T_max = max(horizons) with the losses of rounds t > T set to 0, which leaves the regret, hence the loss and its
gradient, exactly those of horizon T. Horizon T trains at learning_rate (T / min(horizons))^-lr_exponent (default
1/2, the scale of eta*(T); chosen on screening seeds, see QUICK). Self-play also runs T_max rounds; the gap of sigma_T depends on rounds <= T
only, so it is read at t = T.

Slope: per seed, least squares of log gap(T) on log T; reported as the mean over seeds with its standard error
(std / sqrt(S)), beside the -1/2 of the corollaries and the references' slopes. The parameter-level step
kappa_param(T) = eta_fit(T) sqrt(T) (ray fit of b P V, ``regret_jax.param_match``) shows whether the trained step
shrinks like 1/sqrt(T).

No number of the paper survived (docs/regret.md §12), so ``PAPER`` is empty. Checks, and how each could fail:

* ``cce_slope_1layer``, ``ce_slope_multihead``, ``swap_slope_multihead`` (mean fitted slope <= -1/2 + 0.15):
  the learned gaps fall at the corollaries' rate. A learner whose step does not shrink with T (a fixed step makes
  Hedge self-play spiral out, a flat or rising gap) or shrinks too fast (eta ~ 1/T: regret ~ ln d / eta ~ T, a flat
  gap), or training that at larger T stops short of eta*(T), gives a slope near 0.
  Note the slope of an exact Hedge learner is -1/2 only on average: its regret oscillates with the phase of the
  cycling play (docs/regret.md §14), so a fit over four T spreads by about +-0.15 (screening seeds, see QUICK).
* ``cce_within_ref_1layer``, ``ce_within_ref_multihead`` (worst over T of the seed-mean learned gap / reference gap
  at eta*(T) <= 1.5): the learned models are, at every horizon, as good as the algorithm they are trained
  towards; a learned step or rule far from eta*(T) at some T (e.g. unequal heads of an under-trained seed) fails it.
* ``fixed_points_converged`` (fraction == 0): every played fixed point of the learned d-head models converged
  (``SwapState.nonconverged``); a near-periodic learned Q fails it, and its gaps would not be those of the model.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from regret_jax import param_match
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register

PAPER: dict[str, float] = {}  # no numeric result of the paper survived (docs/regret.md §12)

RATE = -0.5  # the corollaries' O~(T^-1/2)
SLOPE_TOL = 0.15  # mean fitted slope at most -1/2 + 0.15 (screening: -0.51, -0.67, -0.75)
WITHIN_REF = 1.5  # learned gap at most 1.5 times the reference's at every T (screening worst: 1.15, 1.18)
KINDS = ("attention", "multihead")


@dataclasses.dataclass(frozen=True)
class RatesConfig:
    """Both models' training runs (``T`` = max(horizons), the program length), the horizons and the seeds."""

    attention: rj.TrainConfig
    multihead: rj.TrainConfig
    horizons: tuple[int, ...] = (16, 32, 64, 128)
    num_seeds: int = 3
    scan_sequences: int = 4000
    lr_exponent: float = 0.5  # horizon h trains at learning_rate (h / min(horizons))^-lr_exponent (eta* ~ h^-1/2)
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)

    def __post_init__(self):
        d = rj.WEIGHTED_RPS.shape[0]
        for kind in KINDS:
            tc = getattr(self, kind)
            if tc.model != kind:
                raise ValueError(f"{kind}.model must be {kind!r}, got {tc.model!r}")
            if tc.d != d:
                raise ValueError(f"{kind}.d must be {d} (actions of the game), got {tc.d}")
        if len(self.horizons) < 2 or min(self.horizons) < 2 or list(self.horizons) != sorted(set(self.horizons)):
            raise ValueError(f"horizons must be at least 2 distinct increasing integers >= 2, got {self.horizons}")
        for kind in KINDS:
            if getattr(self, kind).T != self.horizons[-1]:
                raise ValueError(f"{kind}.T must equal max(horizons) = {self.horizons[-1]} (the program length), "
                                 f"got {getattr(self, kind).T}")
        if self.num_seeds < 2:
            raise ValueError(f"num_seeds must be >= 2 (a standard error over seeds is reported), got {self.num_seeds}")
        if self.scan_sequences < 1000:
            raise ValueError(f"scan_sequences must be >= 1000, got {self.scan_sequences}")
        seeds.check_stream(self.stream)

    @property
    def T(self) -> int:
        return self.horizons[-1]


# Screened on SCREENING-stream seeds (seed_keys(3, 1), ``--set stream=1``). horizons (25, 50, 100, 200), 300 steps,
# batch 32 / 16: the d-head model at T = 200 did not converge (loss 1450-1800 against ~1295 at eta*, a seed with
# gap_CE 0.9 and 134 non-converged fixed points at a constant rate; 1340-1370 with the rate scaled by T^-1/2), so the
# quick grid is (16, 32, 64, 128), with the rate scaled by (T / 16)^-1/2 (``lr_exponent``). There: kappa_param 1.98-2.07
# (kappa* 2.14) for both models at every T; fitted slopes (per seed) 1layer gap_CCE -0.64 -0.42 -0.48 (FTRL at
# eta*(T) -0.55), multihead gap_CE -0.70 -0.64 -0.66 (BM -0.63), gap_swap -0.59 -0.87 -0.80 (BM -0.88); worst learned
# / reference gap over T 1.15 (gap_CCE vs FTRL) and 1.18 (gap_CE vs BM). SLOPE_TOL and WITHIN_REF were set from these.
QUICK = RatesConfig(
    attention=rj.TrainConfig(model="attention", d=3, T=128, batch_size=32, num_steps=300, learning_rate=2e-2,
                             schedule="warmup_cosine", warmup_steps=15, centered=True),
    multihead=rj.TrainConfig(model="multihead", d=3, T=128, batch_size=16, num_steps=300, learning_rate=2e-2,
                             schedule="warmup_cosine", warmup_steps=15, centered=True),
    horizons=(16, 32, 64, 128),
)
# Sized for an accelerator (not run): twice the quick range of T, larger batches and budgets, 5 seeds.
FULL = RatesConfig(
    attention=rj.TrainConfig(model="attention", d=3, T=512, batch_size=256, num_steps=3000, learning_rate=1e-2,
                             schedule="warmup_cosine", warmup_steps=150, centered=True),
    multihead=rj.TrainConfig(model="multihead", d=3, T=512, batch_size=128, num_steps=3000, learning_rate=1e-2,
                             schedule="warmup_cosine", warmup_steps=150, centered=True),
    horizons=(16, 32, 64, 128, 256, 512), num_seeds=5, scan_sequences=16_000,
)


def train_kind(ctx: RunContext, config: RatesConfig, kind: str) -> rj.TrainOutput:
    """Every (horizon, seed) item of one model kind as one program; leaves gain a leading [H * S] axis (horizon-major)."""
    train = rj.make_train(getattr(config, kind))
    S = config.num_seeds
    horizons = np.asarray(config.horizons)
    items = {"key": np.tile(seeds.seed_keys(S, config.stream), (len(horizons), 1)),
             "horizon": np.repeat(horizons.astype(np.int32), S),
             "lr_scale": np.repeat((horizons / horizons[0]) ** -config.lr_exponent, S).astype(np.float32)}
    return seeds.train_grid(ctx, f"train_{kind}",
                            lambda it: train(jax.random.wrap_key_data(it["key"]), it["horizon"], it["lr_scale"]),
                            items, labels=[f"T={h}" for h in config.horizons], num_seeds=S,
                            loss_of=lambda out: out.loss_curve, stream=config.stream)


def compute(config: RatesConfig, ctx: RunContext) -> dict:
    """Gaps at t = T of every learner, parameter-level steps, eta*, training curves.

    ``{"learned": {"gap_cce" [H, S] (single layer), "gap_ce", "gap_swap" [H, S] (d-head, c_d = d),
    "kappa_param" [H, S], "kappa_param_heads" [H, S, d]}, "ftrl": {"gap_cce" [H]}, "bm": {"gap_ce", "gap_swap" [C, H]},
    "root": {eta_star, se}, "curves": {"<kind>_T<h>": {"loss": [S, steps]}}}``, C = (c_d = d, c_d = 1).
    """
    d, T, H, S = rj.WEIGHTED_RPS.shape[0], config.T, len(config.horizons), config.num_seeds
    game = rj.zero_sum_game(rj.WEIGHTED_RPS)
    horizons = np.asarray(config.horizons)
    read = horizons - 1  # gap of sigma_T: index T - 1 of the T_max-round curves
    root = rj.scan(d, config.horizons[0], config.scan_sequences, seeds.map_fn(ctx, "scan", d=d, T=config.horizons[0]))
    eta_star = jnp.asarray(float(root["eta_star"]) * np.sqrt(config.horizons[0] / horizons), jnp.float32)  # [H]
    calibrations = jnp.asarray([d, 1.0], jnp.float32)

    def play(learner):
        return rj.self_play(learner, learner, game, T)

    single = train_kind(ctx, config, "attention")
    multi = train_kind(ctx, config, "multihead")
    heads = single.variables["params"]["head"]
    multi_heads = multi.variables["params"]["heads"]

    def stack(learned, reference):  # learned items first, then the references
        return jax.tree.map(lambda x, y: jnp.concatenate([x, y.astype(x.dtype)]), learned, reference)

    @jax.jit
    def programme(heads, multi_heads, eta_star):
        """Two self-play programs: single heads (learned, then FTRL at eta*(T)) and d-head models (learned at c_d = d,
        then BM-Hedge at eta*(T) for c_d = d and 1, calibration-major)."""
        ftrl = jax.vmap(lambda e: rj.ftrl_params(d, e))(eta_star)
        one = jax.vmap(lambda h: play(rj.attention_learner(h)).gap_cce)(stack(heads, ftrl))
        bm = jax.vmap(lambda e: rj.bm_params(d, e))(jnp.tile(eta_star, 2))
        c = jnp.concatenate([jnp.full(H * S, float(d)), jnp.repeat(calibrations, H)])
        swap = jax.vmap(lambda h, c: play(rj.swap_learner(h, c)))(stack(multi_heads, bm), c)
        eta_param = jax.vmap(lambda h: param_match.ray_fit(param_match.invariants(h)["W"])[0])(heads)
        eta_heads = jax.vmap(lambda h: param_match.swap_head_match(h)["eta"])(multi_heads)
        return one, swap, eta_param, eta_heads

    one, swap, eta_param, eta_heads = jax.tree.map(np.asarray, programme(heads, multi_heads, eta_star))
    n = H * S  # learned items, horizon-major
    grid = (H, S)
    sqrt_t = np.sqrt(horizons)[:, None]
    learned = {
        "gap_cce": one[:n].reshape(*grid, T)[np.arange(H), :, read],
        "gap_ce": swap.gap_ce[:n].reshape(*grid, T)[np.arange(H), :, read],
        "gap_swap": swap.gap_swap[:n].reshape(*grid, T)[np.arange(H), :, read],
        "kappa_param": eta_param.reshape(grid) * sqrt_t,
        "kappa_param_heads": eta_heads.reshape(*grid, d) * sqrt_t[..., None],
        "nonconverged": (swap.row_state.nonconverged + swap.col_state.nonconverged)[:n].reshape(grid),
    }
    return {
        "learned": learned,
        "ftrl": {"gap_cce": one[n:][np.arange(H), read]},
        "bm": {g: getattr(swap, g)[n:].reshape(2, H, T)[:, np.arange(H), read] for g in ("gap_ce", "gap_swap")},
        "root": {"eta_star": root["eta_star"], "se": root["se"]},
        "curves": {f"{kind}_T{h}": {"loss": np.asarray(out.loss_curve).reshape(H, S, -1)[i]}
                   for kind, out in (("attention", single), ("multihead", multi)) for i, h in enumerate(horizons)},
    }


LEARNED = (("1layer", "gap_cce", "ftrl"), ("multihead", "gap_ce", "bm"), ("multihead", "gap_swap", "bm"))  # (model, gap, ref)


def fit_slope(horizons, gaps) -> np.ndarray:
    """Least-squares slope of log gap on log T: ``gaps`` [H] or [H, S] -> scalar or [S] (one slope per seed)."""
    x = np.log(np.asarray(horizons, np.float64))
    y = np.log(np.asarray(gaps, np.float64))
    xc = (x - x.mean()).reshape((-1,) + (1,) * (y.ndim - 1))
    return np.sum(xc * (y - y.mean(axis=0)), axis=0) / np.sum(xc**2)


def rate_metrics(config: RatesConfig, arrays: dict) -> dict[str, np.ndarray]:
    """Per learner: gap at every T (learned: seed mean) [H], slopes (learned: per seed [S]), learned / reference ratios [H]."""
    H = np.asarray(config.horizons)
    learned = {k: np.asarray(v, np.float64) for k, v in arrays["learned"].items()}
    refs = {"ftrl": {"gap_cce": np.asarray(arrays["ftrl"]["gap_cce"], np.float64)},
            "bm": {g: np.asarray(v, np.float64)[0] for g, v in arrays["bm"].items()},  # c_d = d
            "bm_uncalibrated": {g: np.asarray(v, np.float64)[1] for g, v in arrays["bm"].items()}}  # c_d = 1
    out = {}
    for model, gap, ref in LEARNED:
        g = learned[gap]
        out[f"{gap}_{model}"] = g.mean(axis=1)
        out[f"slope_{gap}_{model}_seeds"] = fit_slope(H, g)
        out[f"ratio_{gap}_{model}_to_{ref}"] = g.mean(axis=1) / refs[ref][gap]
    for ref, gaps in refs.items():
        for gap, g in gaps.items():
            out[f"{gap}_{ref}"] = g
            out[f"slope_{gap}_{ref}"] = fit_slope(H, g)
    for model, key in (("1layer", "kappa_param"), ("multihead", "kappa_param_heads")):
        kappa = learned[key].reshape(len(H), config.num_seeds, -1)  # [H, S, heads]
        out[f"kappa_param_{model}"] = kappa.mean(axis=(1, 2))
        out[f"slope_eta_param_{model}_seeds"] = fit_slope(H, kappa.mean(axis=2) / np.sqrt(H)[:, None])
    return out


def summarize(config: RatesConfig, arrays: dict) -> Summary:
    """Gaps against T, fitted slopes (mean and standard error over seeds), ratios to the references, and the checks."""
    H = np.asarray(config.horizons)
    r = rate_metrics(config, arrays)
    S = config.num_seeds
    metrics = {}
    for k, v in r.items():
        if k.endswith("_seeds"):
            name = k.removesuffix("_seeds")
            metrics[name], metrics[f"{name}_se"] = float(v.mean()), float(v.std(ddof=1) / np.sqrt(S))
        elif np.ndim(v) == 0:
            metrics[k] = float(v)
        else:
            metrics.update({f"{k}_T{h}": float(x) for h, x in zip(H, v)})
    eta_s = float(arrays["root"]["eta_star"])
    metrics.update(eta_star=eta_s, eta_star_se=float(arrays["root"]["se"]), kappa_star=eta_s * float(np.sqrt(H[0])))
    nonconv = np.asarray(arrays["learned"]["nonconverged"])
    metrics["nonconverged_fraction"] = float(nonconv.sum() / (2 * config.T * nonconv.size))
    for kind in KINDS:
        metrics[f"final_train_loss_{kind}_T{H[-1]}"] = float(np.mean(np.asarray(arrays["curves"][f"{kind}_T{H[-1]}"]["loss"])[:, -30:]))
    bound = RATE + SLOPE_TOL
    grid = ", ".join(map(str, H))
    found = [
        checks.at_most("cce_slope_1layer", metrics["slope_gap_cce_1layer"], bound,
                       claim=f"Corollary 1: the trained single-layer model's self-play CCE gap falls like T^-1/2 (fitted slope over T = {grid})"),
        checks.at_most("ce_slope_multihead", metrics["slope_gap_ce_multihead"], bound,
                       claim="Corollary 2: the trained d-head fixed-point model's CE gap falls like T^-1/2"),
        checks.at_most("swap_slope_multihead", metrics["slope_gap_swap_multihead"], bound,
                       claim="... and its full-swap gap"),
        checks.at_most("cce_within_ref_1layer", float(np.max(r["ratio_gap_cce_1layer_to_ftrl"])), WITHIN_REF,
                       claim=f"the single-layer model's CCE gap is within {WITHIN_REF}x of exact FTRL at eta*(T), at every T"),
        checks.at_most("ce_within_ref_multihead", float(np.max(r["ratio_gap_ce_multihead_to_bm"])), WITHIN_REF,
                       claim=f"the d-head model's CE gap is within {WITHIN_REF}x of Blum-Mansour-Hedge at eta*(T) (c_d = d), at every T"),
        checks.equals("fixed_points_converged", metrics["nonconverged_fraction"], 0,
                      claim="every played fixed point of the learned d-head models converged"),
    ]
    table = {"T": H.tolist(), **{k: np.asarray(v).tolist() for k, v in r.items() if not k.startswith("slope")}}
    rows = [(m, g) for m, g, _ in LEARNED] + [("ftrl", "gap_cce"), ("bm", "gap_ce"), ("bm", "gap_swap"),
                                               ("bm_uncalibrated", "gap_ce"), ("bm_uncalibrated", "gap_swap")]
    slopes = {"learner": [m for m, _ in rows], "gap": [g for _, g in rows],
              "slope": [metrics[f"slope_{g}_{m}"] for m, g in rows],
              "se": [metrics.get(f"slope_{g}_{m}_se", float("nan")) for m, g in rows], "predicted": [RATE] * len(rows)}
    return Summary(metrics=metrics, checks=found, tables={"table": table, "slopes": slopes})


def _figure(config: RatesConfig, arrays: dict, summary: Summary, path) -> None:
    """Gaps at t = T against T, log-log: learned (seed mean, min-max bars) and references, with a T^-1/2 guide."""
    import matplotlib.pyplot as plt

    H = np.asarray(config.horizons, np.float64)
    m = summary.metrics
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    panels = ((axes[0], "1layer", ("gap_cce",), "ftrl"), (axes[1], "multihead", ("gap_ce", "gap_swap"), "bm"))
    for ax, model, gaps, ref in panels:
        for gap in gaps:
            g = np.asarray(arrays["learned"][gap], np.float64)
            mean = g.mean(axis=1)
            line = ax.errorbar(H, mean, yerr=[mean - g.min(axis=1), g.max(axis=1) - mean], marker="o", capsize=3,
                               label=f"{model} {gap} (slope {m[f'slope_{gap}_{model}']:.2f} +- {m[f'slope_{gap}_{model}_se']:.2f})")
            refg = np.asarray(arrays[ref][gap], np.float64)
            refg = refg if refg.ndim == 1 else refg[0]
            ax.plot(H, refg, ls="--", marker="x", color=line[0].get_color(),
                    label=f"{ref} at eta*(T) {gap} (slope {m[f'slope_{gap}_{ref}']:.2f})")
        anchor = np.asarray(arrays[ref][gaps[0]], np.float64).reshape(-1, len(H))[0][0]
        ax.plot(H, anchor * (H / H[0]) ** RATE, color="k", lw=0.8, ls=":", label="T^-1/2")
        ax.set(xscale="log", yscale="log", xlabel="T (training horizon = self-play length)", ylabel="gap at t = T",
               title="Corollary 1: CCE" if model == "1layer" else "Corollary 2: CE and swap")
        ax.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, path)


def write(config: RatesConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``rates.npz`` (learned gaps [H, S], references [H], kappa_param) and ``rates.png`` (the log-log figure)."""
    out = {"horizons": np.asarray(config.horizons)}
    out.update({f"learned_{k}": np.asarray(v) for k, v in arrays["learned"].items()})
    out.update({f"ftrl_{k}": np.asarray(v) for k, v in arrays["ftrl"].items()})
    out.update({f"bm_{k}": np.asarray(v) for k, v in arrays["bm"].items()})
    io.save_npz(out_dir / "rates.npz", **out)
    _figure(config, arrays, summary, out_dir / "rates.png")


STUDY = register(Study(
    name="regret.rates",
    summary="Corollaries 1-2: CCE / CE / swap gaps of models trained at each T against T, fitted log-log slope vs -1/2",
    config_type=RatesConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="num_seeds",
))

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

Slope: per seed, least squares of log gap(T) on log T, beside the -1/2 of the corollaries and the references'
slopes. The parameter-level step kappa_param(T) = eta_fit(T) sqrt(T) (ray fit of b P V, ``regret_jax.param_match``;
per head for the d-head model) shows whether the trained step shrinks like 1/sqrt(T). Beside the references at
eta*(T), the same program plays the negative controls: FTRL and Blum-Mansour-Hedge at the fixed step eta*(T_min) at
every T, and at 0.5x eta*(T).

No number of the paper survived (docs/regret.md §12), so ``PAPER`` is empty. Checks (per seed, 95% t intervals), and
how each could fail:

* ``eta_scaling_1layer``, ``eta_scaling_multihead`` (per-seed slope of log eta_param(T) on log T within -1/2 +- 0.15):
  the trained step shrinks like T^-1/2, the step the corollaries' rates rest on. Control: FTRL / BM at the fixed
  step eta*(T_min) (slope 0); a step fixed in T, one shrinking like 1/T (slope -1), or training that at larger T
  stops short of eta*(T) fails it.
* ``kappa_param_near_kappa_star_1layer``, ``kappa_param_near_kappa_star_multihead`` (per seed, mean over T of
  kappa_param(T) / kappa* - 1 within 0 +- 0.25): the trained step is the Theorem-1 root at every T, not only
  shrinking at its rate. Control: FTRL / BM at 0.5x eta*(T) (-0.5).
* ``fixed_points_converged`` (exact, count == 0): every played fixed point of the learned d-head models converged
  (``SwapState.nonconverged``); a near-periodic learned Q fails it, and its gaps would not be those of the model.

Reported, not checked, and why: the gaps' fitted slopes (the corollaries' T^-1/2; FTRL at a fixed step gave
-0.35 to -0.63 on them, inside any bar the learned models pass, because the regret of Hedge self-play oscillates
with the phase of the cycling play, docs/regret.md §14) and the worst ratio over T of the learned gap to the
reference's (FTRL at 0.5x eta*(T) is within 1.2x of FTRL at eta*(T) at every quick T, and BM at the fixed step
within 1.0x, so neither ratio can tell the trained step from a mistuned one). Both stay in the tables with the
controls' values beside them.
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

RATE = -0.5  # the corollaries' O~(T^-1/2): the slope of log eta*(T) on log T
STEP_SCALING = {model: checks.Claim(
    f"eta_scaling_{model}", f"the trained {label} step eta_param(T) shrinks like T^-1/2 (per-seed slope of log "
    "eta_param on log T, the step the corollaries' O~(T^-1/2) gaps rest on)", "within", RATE, tol=0.15,
    control=f"{ref} at the fixed step eta*(T_min) at every T (slope 0)",
    fails_if="the trained step does not shrink with T, shrinks like 1/T, or training stops short at large T")
    for model, label, ref in (("1layer", "single-layer", "FTRL"), ("multihead", "d-head (every head's)", "Blum-Mansour-Hedge"))}
STEP_LEVEL = {model: checks.Claim(
    f"kappa_param_near_kappa_star_{model}", f"the trained {label} step is the Theorem-1 root at every T: mean over T "
    "of kappa_param(T) / kappa* - 1", "within", 0.0, tol=0.25, control=f"{ref} at 0.5x eta*(T) (-0.5)",
    fails_if="the trained step sits a factor off eta*(T)")
    for model, label, ref in (("1layer", "single-layer", "FTRL"), ("multihead", "d-head", "Blum-Mansour-Hedge"))}
CONVERGED = checks.Claim(
    "fixed_points_converged", "every played fixed point of the learned d-head models converged", "==", 0, exact=True,
    fails_if="a learned Q is near-periodic: its fixed point iteration does not converge")
CLAIMS = (*STEP_SCALING.values(), *STEP_LEVEL.values(), CONVERGED)
CONTROL_ARMS = ("fixed", "half")  # step eta*(T_min) at every T; 0.5x eta*(T)
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
# quick grid is (16, 32, 64, 128), with the rate scaled by (T / 16)^-1/2 (``lr_exponent``). With the claims of the
# docstring (same config): slope of log eta_param on log T -0.486 [-0.505, -0.467] (1 layer) and -0.485 [-0.534,
# -0.436] (d-head), interval widths 0.04 and 0.10 against a band of 0.3; kappa_param / kappa* - 1 -0.056 [-0.065,
# -0.046] and -0.046 [-0.057, -0.035]; controls 0 (fixed step) and -0.5 (half step), FAIL; 3 seeds decide. Gap slopes
# (reported): learned -0.51 / -0.67 / -0.75, FTRL at eta*(T) -0.55, at the fixed step -0.35, at half the step -0.44;
# worst learned / reference gap over T 1.15 (CCE) and 1.18 (CE). 26 CPU seconds on 2 shared cores.
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
    "controls": {gap_cce, gap_ce, gap_swap, kappa_param [2, H], kappa_param_heads [2, H, d]} (arms CONTROL_ARMS),
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
        """Two self-play programs: single heads (learned, then FTRL at eta*(T), then the controls) and d-head models
        (learned at c_d = d, then BM-Hedge at eta*(T) for c_d = d and 1, then the controls at c_d = d); the controls
        play at eta*(T_min) at every T (``fixed``) and at 0.5x eta*(T) (``half``). Also the ray fits of every step."""
        ctrl = jnp.concatenate([jnp.full(H, eta_star[0]), 0.5 * eta_star])  # [2H]: CONTROL_ARMS, horizon-minor
        ftrl = jax.vmap(lambda e: rj.ftrl_params(d, e))(jnp.concatenate([eta_star, ctrl]))
        one = jax.vmap(lambda h: play(rj.attention_learner(h)).gap_cce)(stack(heads, ftrl))
        bm = jax.vmap(lambda e: rj.bm_params(d, e))(jnp.concatenate([jnp.tile(eta_star, 2), ctrl]))
        c = jnp.concatenate([jnp.full(H * S, float(d)), jnp.repeat(calibrations, H), jnp.full(2 * H, float(d))])
        swap = jax.vmap(lambda h, c: play(rj.swap_learner(h, c)))(stack(multi_heads, bm), c)
        single_fit = jax.vmap(lambda h: param_match.ray_fit(param_match.invariants(h)["W"])[0])
        heads_fit = jax.vmap(lambda h: param_match.swap_head_match(h)["eta"])
        ctrl_ftrl, ctrl_bm = (jax.tree.map(lambda x: x[-2 * H:], p) for p in (ftrl, bm))
        return one, swap, single_fit(heads), heads_fit(multi_heads), single_fit(ctrl_ftrl), heads_fit(ctrl_bm)

    one, swap, eta_param, eta_heads, ctrl_eta, ctrl_heads = jax.tree.map(
        np.asarray, programme(heads, multi_heads, eta_star))
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
    controls = {  # [arm, H] (kappa_param_heads [arm, H, d]), arms CONTROL_ARMS
        "gap_cce": one[n + H:].reshape(2, H, T)[:, np.arange(H), read],
        **{g: getattr(swap, g)[n + 2 * H:].reshape(2, H, T)[:, np.arange(H), read] for g in ("gap_ce", "gap_swap")},
        "kappa_param": ctrl_eta.reshape(2, H) * sqrt_t[:, 0],
        "kappa_param_heads": ctrl_heads.reshape(2, H, d) * sqrt_t,
    }
    return {
        "learned": learned,
        "ftrl": {"gap_cce": one[n:n + H][np.arange(H), read]},
        "bm": {g: getattr(swap, g)[n:n + 2 * H].reshape(2, H, T)[:, np.arange(H), read] for g in ("gap_ce", "gap_swap")},
        "controls": controls,
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
    """Per learner: gap at every T (learned: seed mean) [H], slopes (learned: per seed [S]), learned / reference ratios
    [H]; the controls' gaps and slopes (``<gap>_<ref>_<arm>``); the steps' slopes and levels (learned per seed)."""
    H = np.asarray(config.horizons)
    learned = {k: np.asarray(v, np.float64) for k, v in arrays["learned"].items()}
    ctrl = {k: np.asarray(v, np.float64) for k, v in arrays["controls"].items()}
    refs = {"ftrl": {"gap_cce": np.asarray(arrays["ftrl"]["gap_cce"], np.float64)},
            "bm": {g: np.asarray(v, np.float64)[0] for g, v in arrays["bm"].items()},  # c_d = d
            "bm_uncalibrated": {g: np.asarray(v, np.float64)[1] for g, v in arrays["bm"].items()}}  # c_d = 1
    for i, arm in enumerate(CONTROL_ARMS):
        refs[f"ftrl_{arm}"] = {"gap_cce": ctrl["gap_cce"][i]}
        refs[f"bm_{arm}"] = {g: ctrl[g][i] for g in ("gap_ce", "gap_swap")}
    out = {}
    for model, gap, ref in LEARNED:
        g = learned[gap]
        out[f"{gap}_{model}"] = g.mean(axis=1)
        out[f"slope_{gap}_{model}_seeds"] = fit_slope(H, g)
        out[f"ratio_{gap}_{model}_to_{ref}"] = g.mean(axis=1) / refs[ref][gap]
        for arm in CONTROL_ARMS:
            out[f"ratio_{gap}_{ref}_{arm}_to_{ref}"] = refs[f"{ref}_{arm}"][gap] / refs[ref][gap]
    for ref, gaps in refs.items():
        for gap, g in gaps.items():
            out[f"{gap}_{ref}"] = g
            out[f"slope_{gap}_{ref}"] = fit_slope(H, g)
    kappa_star = float(arrays["root"]["eta_star"]) * np.sqrt(H[0])
    for model, key in (("1layer", "kappa_param"), ("multihead", "kappa_param_heads")):
        kappa = learned[key].reshape(len(H), config.num_seeds, -1).mean(axis=2)  # [H, S], mean over heads
        out[f"kappa_param_{model}"] = kappa.mean(axis=1)
        out[f"slope_eta_param_{model}_seeds"] = fit_slope(H, kappa / np.sqrt(H)[:, None])
        out[f"kappa_rel_{model}_seeds"] = np.mean(kappa / kappa_star - 1, axis=0)
        kc = ctrl[key].reshape(len(CONTROL_ARMS), len(H), -1).mean(axis=2)  # [arm, H]
        for i, arm in enumerate(CONTROL_ARMS):
            out[f"slope_eta_param_{model}_{arm}"] = fit_slope(H, kc[i] / np.sqrt(H))
            out[f"kappa_rel_{model}_{arm}"] = np.mean(kc[i] / kappa_star - 1)
    return out


def summarize(config: RatesConfig, arrays: dict) -> Summary:
    """Gaps against T, fitted slopes (mean and standard error over seeds), ratios to the references and controls, the
    steps' scaling and level against their controls (the checks)."""
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
    for model, gap, ref in LEARNED:
        metrics[f"worst_ratio_{gap}_{model}_to_{ref}"] = float(np.max(r[f"ratio_{gap}_{model}_to_{ref}"]))
    eta_s = float(arrays["root"]["eta_star"])
    metrics.update(eta_star=eta_s, eta_star_se=float(arrays["root"]["se"]), kappa_star=eta_s * float(np.sqrt(H[0])))
    nonconv = np.asarray(arrays["learned"]["nonconverged"])
    metrics["nonconverged_fraction"] = float(nonconv.sum() / (2 * config.T * nonconv.size))
    for kind in KINDS:
        metrics[f"final_train_loss_{kind}_T{H[-1]}"] = float(np.mean(np.asarray(arrays["curves"][f"{kind}_T{H[-1]}"]["loss"])[:, -30:]))

    def constant(x):  # a deterministic control arm, as per-seed values of zero spread
        return np.full(S, float(x))

    found = [STEP_SCALING[m].judge(r[f"slope_eta_param_{m}_seeds"], control=constant(r[f"slope_eta_param_{m}_fixed"]))
             for m in STEP_SCALING]
    found += [STEP_LEVEL[m].judge(r[f"kappa_rel_{m}_seeds"], control=constant(r[f"kappa_rel_{m}_half"])) for m in STEP_LEVEL]
    found.append(CONVERGED.judge(metrics["nonconverged_fraction"]))
    table = {"T": H.tolist(), **{k: np.asarray(v).tolist() for k, v in r.items() if np.ndim(v) == 1 and len(v) == len(H)
                                 and not k.startswith("slope") and not k.endswith("_seeds")}}
    rows = [(m, g) for m, g, _ in LEARNED] + [(f"{ref}{arm}", g) for ref, gaps in (("ftrl", ("gap_cce",)), ("bm", ("gap_ce", "gap_swap")))
                                               for arm in ("", "_fixed", "_half") for g in gaps]
    rows += [("bm_uncalibrated", "gap_ce"), ("bm_uncalibrated", "gap_swap")]
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
    cost_fields=("attention.num_steps", "attention.warmup_steps", "multihead.num_steps", "multihead.warmup_steps", "scan_sequences"),
    summary="Corollaries 1-2: CCE / CE / swap gaps of models trained at each T against T, fitted log-log slope vs -1/2",
    config_type=RatesConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="num_seeds", claims=CLAIMS,
    quick_s=12,
))

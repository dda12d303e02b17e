"""Study ``rate.mrv``: the MRV retention bound ||M_{n+1} - M_n||_F <= sqrt(2(1 - alpha/m)) ||M_n||_F.

Seed ``003``, "关键设计 3" and "局限与展望": the bound holds for one MRV update under
row normalisation and alpha-alignment, and the alignment is said to hold empirically
in trained models. ``rate_jax.retention`` states the assumptions (A1)-(A5) and
derives the bound. This study (1) checks it on many random instances meeting the
assumptions, for a grid of m and alpha (vectorised, one program per m); (2) shows
instances where it fails once (A1), (A3) or (A4) is dropped; (3) trains RATE on
T-Maze (the rate.tmaze quick/full model) and measures, on every MRV update of the
held-out trajectories, how often the assumptions hold.

Reading for trained models (several heads, affine maps): with H heads,
M_{n+1} = sum_h sum_j A^h_ij (v^h_j W_M^h) + b_M = sum_{h,j} (A^h_ij / H) vt_{hj},
vt_{hj} = H v^h_j W_M^h + b_M, because each head's attention rows sum to one. So the
update is a convex combination of H*m effective value rows vt, and the assumptions
are tested with m replaced by H*m; the decomposition is checked numerically.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import rate_jax  # noqa: E402
from experiments import io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, study  # noqa: E402
from experiments.studies import rate_tmaze  # noqa: E402


@dataclasses.dataclass(frozen=True)
class MRVStudyConfig:
    ms: tuple[int, ...]
    alphas: tuple[float, ...]
    d: int
    instances: int
    align_alpha: float  # the alpha at which the trained-model assumption rate is reported
    tmaze: rate_tmaze.TMazeStudyConfig
    seeds: int
    seed: int = 0


QUICK = MRVStudyConfig(ms=(1, 2, 4, 8, 15), alphas=(0.0, 0.25, 0.5, 0.75, 0.9, 1.0), d=16, instances=4096,
                       align_alpha=0.5, tmaze=rate_tmaze.QUICK, seeds=2)
FULL = MRVStudyConfig(ms=(1, 2, 4, 8, 15, 32), alphas=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0), d=64,
                      instances=65536, align_alpha=0.5, tmaze=rate_tmaze.FULL, seeds=3)


def random_instances(config: MRVStudyConfig) -> dict[str, np.ndarray]:
    """ratio ||M_{n+1} - M_n||_F / ||M_n||_F and the bound, [len(ms), len(alphas), instances],
    on instances meeting (A1)-(A5). (At alpha = 1, m = 1 the bound is 0, so compare differences.)"""
    out = []
    for m in config.ms:
        def cell(alpha, key, m=m):
            memory, values, attention = rate_jax.sample_instances(key, config.instances, m, config.d, alpha)
            ratio = rate_jax.retention_ratio(memory, rate_jax.mrv_update(attention, values))
            return ratio, jnp.broadcast_to(rate_jax.retention_bound(alpha, m), ratio.shape)

        keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(config.seed), m), len(config.alphas))
        out.append(jax.jit(jax.vmap(cell))(jnp.asarray(config.alphas), keys))
    return {"ratio": np.stack([np.asarray(r) for r, _ in out]), "bound": np.stack([np.asarray(b) for _, b in out])}


def trained_alignment(config: MRVStudyConfig, ctx: RunContext) -> dict[str, np.ndarray]:
    """Per MRV update of trained RATE on held-out trajectories: empirical alpha, (A4), ratios.

    Arrays are [seeds, segments, trajectories]; every segment of every held-out trajectory
    counts as one update, including segments after a short episode ended (padding).
    """
    tcfg = config.tmaze.train_config("RATE")
    cfg = tcfg.model
    if cfg.n_head_ca == 0:
        raise ValueError("the RATE configuration has no MRV")
    seeds = ctx.seeds or config.seeds
    state, _, turn, _ = rate_tmaze.train_variant(config.tmaze, "RATE", seeds, ctx.checkpoint_dir("ckpt_rate"),
                                                 ctx.resume)
    model = rate_jax.RATE(cfg)
    h, m, d = cfg.n_head_ca, cfg.num_mem_tokens, cfg.d_model

    def per_seed(st):
        segs = rate_jax.to_segments(st.val_data, cfg.segment_len)
        start = model.apply(st.params, tcfg.num_val, method=rate_jax.RATE.initial_carry)
        outs = rate_jax.unroll(model, st.params, segs, start)
        new = outs.carry.memory  # [N, B, m, d]
        old = jnp.concatenate([start.memory[None], new[:-1]], 0)
        p = st.params["params"]["mrv"]
        v = rate_jax.mrv_activation(cfg.mrv_act)(outs.write) @ p["w_v"]["kernel"] + p["w_v"]["bias"]
        v = v.reshape(v.shape[:-1] + (h, d // h))  # [N, B, m, H, d/H]
        w_m = p["w_m"]["kernel"].reshape(h, d // h, d)
        eff_v = h * jnp.einsum("nbjhk,hkd->nbhjd", v, w_m) + p["w_m"]["bias"]
        eff_v = eff_v.reshape(eff_v.shape[:2] + (h * m, d))
        eff_a = jnp.moveaxis(outs.mrv_attention, 2, 3).reshape(new.shape[:2] + (m, h * m)) / h
        decomposition_error = jnp.max(jnp.abs(rate_jax.mrv_update(eff_a, eff_v) - new))
        alpha = rate_jax.alignment_alpha(old, eff_v, eff_a)
        a4 = rate_jax.no_anti_alignment(old, eff_v)
        raw_ratio = rate_jax.retention_ratio(old, new)
        unit_ratio = rate_jax.retention_ratio(rate_jax.normalize_rows(old),
                                              rate_jax.mrv_update(eff_a, rate_jax.normalize_rows(eff_v)))
        return alpha, a4, raw_ratio, unit_ratio, decomposition_error

    alpha, a4, raw, unit, err = jax.jit(jax.vmap(per_seed))(state)
    return {"alpha": np.asarray(alpha), "a4": np.asarray(a4), "raw_ratio": np.asarray(raw),
            "unit_ratio": np.asarray(unit), "decomposition_error": np.asarray(err), "keys": h * m,
            "val_turn_accuracy": turn}


def _figure(config: MRVStudyConfig, rand: dict, trained: dict, path) -> None:
    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(config.ms):
        line, = a0.plot(config.alphas, rand["ratio"][i].max(-1), "o-", label=f"m={m}: max ratio")
        a0.plot(config.alphas, rand["bound"][i, :, 0], "--", color=line.get_color(), lw=1)
    a0.set_xlabel("alpha")
    a0.set_ylabel("||M' - M||_F / ||M||_F (dashed: bound)")
    a0.legend(fontsize=8)
    a1.hist(trained["alpha"].ravel(), bins=30, range=(-1, 1))
    a1.axvline(config.align_alpha, color="k", ls="--", lw=1)
    a1.set_xlabel("empirical alpha of trained MRV updates")
    a1.set_ylabel("count")
    io.save_figure(fig, path)


@study("rate.mrv", "MRV retention bound: random instances, counterexamples, alignment in trained RATE")
def run(ctx: RunContext) -> StudyOutput:
    config = QUICK if ctx.quick else FULL
    rand = random_instances(config)
    excess = rand["ratio"] - rand["bound"]
    counter = {}
    for which in ("A1", "A3", "A4"):
        memory, values, attention, alpha = rate_jax.counterexample(which)
        ratio = rate_jax.retention_ratio(memory, rate_jax.mrv_update(attention, values))
        counter[which] = float(ratio / rate_jax.retention_bound(alpha, memory.shape[0]))
    trained = trained_alignment(config, ctx)
    alpha, a4 = trained["alpha"], trained["a4"]
    hold = (alpha >= config.align_alpha) & a4
    bound_unit = rate_jax.retention_bound(np.clip(alpha, 0.0, 1.0), trained["keys"])
    theorem_cases = (alpha >= 0.0) & a4
    metrics = {
        "random_max_excess_over_bound": float(excess.max()),
        "random_violations": float((excess > 1e-5).sum()),
        "random_instances": float(excess.size),
        "random_max_ratio_over_bound_alpha0": float((rand["ratio"] / rand["bound"])[:, 0].max()),
        **{f"counterexample_{k}_ratio_over_bound": v for k, v in counter.items()},
        "trained_alpha_median": float(np.median(alpha)),
        "trained_frac_a3": float((alpha >= config.align_alpha).mean()),
        "trained_frac_a4": float(a4.mean()),
        "trained_frac_assumptions_hold": float(hold.mean()),
        **{f"trained_frac_assumptions_hold_segment{n}": float(hold[:, n].mean()) for n in range(hold.shape[1])},
        "trained_raw_ratio_median": float(np.median(trained["raw_ratio"])),
        "trained_unit_violations_under_assumptions": float(
            (theorem_cases & (trained["unit_ratio"] > bound_unit + 1e-4)).sum()),
        "trained_decomposition_error": float(trained["decomposition_error"].max()),
        "trained_val_turn_accuracy": float(np.mean(trained["val_turn_accuracy"])),
    }
    checks = [
        Check("random_violations", metrics["random_violations"], "== 0", metrics["random_violations"] == 0),
        *[Check(f"counterexample_{k}_ratio_over_bound", v, "> 1 (bound fails without the assumption)", v > 1.0)
          for k, v in counter.items()],
        Check("trained_decomposition_error", metrics["trained_decomposition_error"], "< 1e-3",
              metrics["trained_decomposition_error"] < 1e-3),
        Check("trained_unit_violations_under_assumptions", metrics["trained_unit_violations_under_assumptions"],
              "== 0", metrics["trained_unit_violations_under_assumptions"] == 0),
        Check("trained_frac_assumptions_hold", metrics["trained_frac_assumptions_hold"],
              f">= 0.5 (alpha >= {config.align_alpha} and no anti-alignment in most trained updates)",
              metrics["trained_frac_assumptions_hold"] >= 0.5),
    ]
    io.save_npz(ctx.out_dir / "mrv.npz", ms=np.asarray(config.ms), alphas=np.asarray(config.alphas),
                random_ratio_max=rand["ratio"].max(-1), random_bound=rand["bound"][..., 0], trained_alpha=alpha,
                trained_a4=a4, trained_raw_ratio=trained["raw_ratio"], trained_unit_ratio=trained["unit_ratio"])
    io.write_csv(ctx.out_dir / "random_instances.csv", {
        "m": [m for m in config.ms for _ in config.alphas], "alpha": [a for _ in config.ms for a in config.alphas],
        "bound": rand["bound"][..., 0].ravel(), "max_ratio": rand["ratio"].max(-1).ravel(),
        "mean_ratio": rand["ratio"].mean(-1).ravel()})
    _figure(config, rand, trained, ctx.out_dir / "mrv_retention.png")
    cfg = {"ms": config.ms, "alphas": config.alphas, "d": config.d, "instances": config.instances,
           "align_alpha": config.align_alpha, "seeds": ctx.seeds or config.seeds,
           "tmaze_model": dataclasses.asdict(config.tmaze.base), "num_steps": config.tmaze.num_steps,
           "effective_keys": int(trained["keys"]),
           "assumptions": "A1 unit rows, A2 row-stochastic A, A3 alpha-alignment with weight >= 1/m, "
                          "A4 no negative cosines, A5 update = A V (see rate_jax.retention)"}
    return StudyOutput(config=cfg, metrics=metrics, checks=checks, paper={})

"""Study ``rate.mrv``: the MRV retention bound ||M_{n+1} - M_n||_F <= sqrt(2(1 - alpha/m)) ||M_n||_F.

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv
2306.09459, ICLR 2026 version), the retention theorem of the Memory Retention Valve and
the limitation the paper states about it: the bound holds for one MRV update under row
normalisation and alpha-alignment, and the alignment is said to hold empirically in
trained models. ``rate_jax.retention`` states the assumptions (A1)-(A5) and derives the
bound (see also ``docs/rate.md``). This study (1) checks it on many random instances
meeting the assumptions, for a grid of m and alpha (vectorised, one program per m);
(2) shows instances where it fails once (A1), (A3) or (A4) is dropped; (3) trains RATE
on T-Maze (the model and training of rate.tmaze's RATE run at the same preset, kept
equal by a test) and measures, on every MRV update of the held-out trajectories, how
often the assumptions hold.

Reading for trained models (several heads, affine maps): with H heads,
M_{n+1} = sum_h sum_j A^h_ij (v^h_j W_M^h) + b_M = sum_{h,j} (A^h_ij / H) vt_{hj},
vt_{hj} = H v^h_j W_M^h + b_M, because each head's attention rows sum to one. So the
update is a convex combination of H*m effective value rows vt, and the assumptions
are tested with m replaced by H*m; the decomposition is checked numerically.

Checks, and how each could fail:

* ``random_violations`` == 0: instances drawn to meet (A1)-(A5) whose ratio exceeds
  the bound (+1e-5). Fails if the derivation, the bound or the sampler is wrong.
* ``counterexample_{A1,A3,A4}_ratio_over_bound`` > 1: each assumption is needed. Fails
  if an instance that drops one assumption still meets the bound (then that
  assumption would not be needed, or the instance does not drop it).
* ``trained_decomposition_error`` < 1e-3: the trained multi-head MRV update equals the
  convex combination of the H*m effective value rows. Fails if the reading of the
  MRV's heads and projections above is wrong.
* ``trained_unit_violations_under_assumptions`` == 0: trained updates that meet (A3)
  for some alpha >= 0 and (A4), with rows normalised (A1), never exceed the bound.
  Fails if the bound does not carry over to the trained update's structure.
* ``trained_frac_assumptions_hold`` >= 0.5: the paper's statement that alignment holds
  empirically, at alpha = ``align_alpha`` with (A4). Fails if trained RATE's updates
  are mostly not alpha-aligned or are anti-aligned.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import rate_jax
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register

PAPER: dict[str, float] = {}  # the paper states the bound, no measured numbers
COUNTEREXAMPLES = ("A1", "A3", "A4")


@dataclasses.dataclass(frozen=True)
class MRVStudyConfig:
    """The random-instance grid and the trained RATE run.

    ``train`` is the RATE training run on T-Maze (``num_steps`` in ``chunks``
    checkpointed chunks, ``seeds`` seeds vmapped, keys ``split(PRNGKey(seed), seeds)``);
    the random instances of each m use ``fold_in(PRNGKey(seed), m)``.
    """

    ms: tuple[int, ...]
    alphas: tuple[float, ...]
    d: int
    instances: int
    align_alpha: float  # the alpha at which the trained-model assumption rate is reported
    train: rate_jax.TrainConfig
    chunks: int
    seeds: int
    seed: int = 0

    def __post_init__(self):
        def need(cond, field, allowed, value):
            if not cond:
                raise ValueError(f"MRVStudyConfig.{field} must be {allowed}, got {value!r}")

        need(len(self.ms) > 0 and min(self.ms) >= 1, "ms", "a non-empty tuple of integers >= 1", self.ms)
        need(len(self.alphas) > 0 and all(0.0 <= a <= 1.0 for a in self.alphas) and self.alphas[0] == 0.0,
             "alphas", "a non-empty tuple in [0, 1] starting at 0.0", self.alphas)
        need(self.d >= 2, "d", "an integer >= 2", self.d)
        need(self.instances >= 1, "instances", "an integer >= 1", self.instances)
        need(0.0 <= self.align_alpha <= 1.0, "align_alpha", "in [0, 1]", self.align_alpha)
        model = self.train.model
        need(model.num_mem_tokens >= 1 and model.n_head_ca >= 1, "train.model",
             "a RATE configuration with memory tokens and an MRV (num_mem_tokens, n_head_ca >= 1)",
             (model.num_mem_tokens, model.n_head_ca))
        need(self.chunks >= 1 and self.train.num_steps % self.chunks == 0, "chunks",
             f"a divisor of train.num_steps={self.train.num_steps}", self.chunks)
        need(self.seeds >= 1, "seeds", "an integer >= 1", self.seeds)

    @property
    def effective_keys(self) -> int:
        """H*m: the effective value rows of one multi-head MRV update."""
        return self.train.model.n_head_ca * self.train.model.num_mem_tokens


# The RATE run of rate.tmaze's presets (its train_config("RATE"), corridors left to the default
# K*n - 2, n = 1..N, which is the same set); tests/experiments/test_rate_mrv.py keeps them equal.
QUICK = MRVStudyConfig(
    ms=(1, 2, 4, 8, 15), alphas=(0.0, 0.25, 0.5, 0.75, 0.9, 1.0), d=16, instances=4096, align_alpha=0.5,
    train=rate_jax.TrainConfig(
        model=rate_jax.ModelConfig(segment_len=6, n_layer=2, d_model=64, n_head=2, d_head=32, d_inner=0,
                                   num_mem_tokens=3, mem_len=0, n_head_ca=1, dropout=0.1),
        num_segments=3, num_train=256, num_val=64, batch_size=16, num_steps=400, learning_rate=1e-3,
        warmup_steps=20, weight_decay=0.01),
    chunks=2, seeds=2)
FULL = MRVStudyConfig(
    ms=(1, 2, 4, 8, 15, 32), alphas=(0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0), d=64, instances=65536,
    align_alpha=0.5,
    train=rate_jax.TrainConfig(
        model=rate_jax.ModelConfig(segment_len=50, n_layer=10, d_model=64, n_head=4, d_head=32, d_inner=0,
                                   num_mem_tokens=15, mem_len=0, n_head_ca=2, dropout=0.2),
        num_segments=3, num_train=6000, num_val=600, batch_size=128, num_steps=10_000, learning_rate=3e-4,
        warmup_steps=1000, weight_decay=0.01),
    chunks=20, seeds=3)


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


def counterexamples() -> dict[str, dict[str, np.ndarray]]:
    """{A1, A3, A4: {ratio, bound}} of ``rate_jax.counterexample``'s instances."""
    out = {}
    for which in COUNTEREXAMPLES:
        memory, values, attention, alpha = rate_jax.counterexample(which)
        ratio = rate_jax.retention_ratio(memory, rate_jax.mrv_update(attention, values))
        out[which] = {"ratio": np.asarray(ratio), "bound": np.asarray(rate_jax.retention_bound(alpha, memory.shape[0]))}
    return out


def train_rate(config: MRVStudyConfig, ctx: RunContext):
    """``config.seeds`` seeds of RATE in one vmapped program, checkpointed per chunk.

    Returns (TrainState [S, ...] as host arrays, curves {metric: [S, num_steps]}, val turn accuracy [S]).
    """
    tcfg = config.train
    keys = jax.random.split(jax.random.PRNGKey(config.seed), config.seeds)  # raw uint32 keys: checkpointable
    per_chunk = tcfg.num_steps // config.chunks
    state = seeds.train_chunked(ctx, "ckpt_rate", rate_jax.make_chunk(tcfg, config.chunks),
                                rate_jax.init_chunked(tcfg, keys), config.chunks,
                                loss_so_far=lambda run, items, done: run.curves["loss"][items, : done * per_chunk])
    turn, _ = jax.jit(jax.vmap(rate_jax.make_validate(tcfg)))(state.train)
    return state.train, {k: np.asarray(v) for k, v in state.curves.items()}, np.asarray(turn)


def trained_alignment(config: MRVStudyConfig, state) -> dict[str, np.ndarray]:
    """Per MRV update of trained RATE on held-out trajectories: empirical alpha, (A4), ratios.

    Arrays are [seeds, segments, trajectories]; every segment of every held-out trajectory
    counts as one update, including segments after a short episode ended (padding).
    ``decomposition_error`` is [seeds].
    """
    tcfg = config.train
    cfg = tcfg.model
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
        return {"alpha": alpha, "a4": a4, "raw_ratio": raw_ratio, "unit_ratio": unit_ratio,
                "decomposition_error": decomposition_error}

    return {k: np.asarray(v) for k, v in jax.jit(jax.vmap(per_seed))(state).items()}


def compute(config: MRVStudyConfig, ctx: RunContext) -> dict:
    """``random`` {ratio, bound}, ``counterexample`` {A*: {ratio, bound}}, ``trained`` per-update arrays,
    ``val_turn_accuracy`` [S] and the RATE training ``curves``."""
    random = random_instances(config)
    counter = counterexamples()
    state, curves, turn = train_rate(config, ctx)
    return {"random": random, "counterexample": counter, "trained": trained_alignment(config, state),
            "val_turn_accuracy": turn, "curves": {"RATE": curves}}


def summarize(config: MRVStudyConfig, arrays: dict) -> Summary:
    """The bound on random instances, the counterexamples, and the assumption rates of trained updates."""
    rand, trained = arrays["random"], arrays["trained"]
    excess = rand["ratio"] - rand["bound"]
    counter = {k: float(v["ratio"] / v["bound"]) for k, v in arrays["counterexample"].items()}
    alpha, a4 = np.asarray(trained["alpha"]), np.asarray(trained["a4"]).astype(bool)
    hold = (alpha >= config.align_alpha) & a4
    bound_unit = np.sqrt(2.0 * (1.0 - np.clip(alpha, 0.0, 1.0) / config.effective_keys))
    theorem_cases = (alpha >= 0.0) & a4
    metrics = {
        "random_max_excess_over_bound": float(excess.max()),
        "random_violations": float((excess > 1e-5).sum()),
        "random_instances": float(excess.size),
        "random_max_ratio_over_bound_alpha0": float((rand["ratio"][:, 0] / rand["bound"][:, 0]).max()),
        **{f"counterexample_{k}_ratio_over_bound": v for k, v in counter.items()},
        "trained_alpha_median": float(np.median(alpha)),
        "trained_frac_a3": float((alpha >= config.align_alpha).mean()),
        "trained_frac_a4": float(a4.mean()),
        "trained_frac_assumptions_hold": float(hold.mean()),
        **{f"trained_frac_assumptions_hold_segment{n}": float(hold[:, n].mean()) for n in range(hold.shape[1])},
        "trained_raw_ratio_median": float(np.median(trained["raw_ratio"])),
        "trained_unit_violations_under_assumptions": float(
            (theorem_cases & (np.asarray(trained["unit_ratio"]) > bound_unit + 1e-4)).sum()),
        "trained_decomposition_error": float(np.max(trained["decomposition_error"])),
        "trained_val_turn_accuracy": float(np.mean(arrays["val_turn_accuracy"])),
    }
    found = [
        checks.equals("random_violations", metrics["random_violations"], 0,
                      claim="the retention bound holds for every instance meeting its assumptions"),
        *[checks.above(f"counterexample_{k}_ratio_over_bound", v, 1.0,
                       claim="the bound needs alpha-alignment: without (A3) it fails" if k == "A3" else "")
          for k, v in counter.items()],
        checks.below("trained_decomposition_error", metrics["trained_decomposition_error"], 1e-3),
        checks.equals("trained_unit_violations_under_assumptions",
                      metrics["trained_unit_violations_under_assumptions"], 0),
        checks.at_least("trained_frac_assumptions_hold", metrics["trained_frac_assumptions_hold"], 0.5,
                        claim=f"alpha >= {config.align_alpha:g} and no anti-alignment in most updates of trained RATE"),
    ]
    table = {
        "m": [m for m in config.ms for _ in config.alphas], "alpha": [a for _ in config.ms for a in config.alphas],
        "bound": rand["bound"][..., 0].ravel(), "max_ratio": rand["ratio"].max(-1).ravel(),
        "mean_ratio": rand["ratio"].mean(-1).ravel(),
    }
    segments = {
        "segment": list(range(hold.shape[1])),
        "frac_a3": (alpha >= config.align_alpha).mean(axis=(0, 2)), "frac_a4": a4.mean(axis=(0, 2)),
        "frac_assumptions_hold": hold.mean(axis=(0, 2)), "alpha_median": np.median(alpha, axis=(0, 2)),
        "raw_ratio_median": np.median(trained["raw_ratio"], axis=(0, 2)),
    }
    return Summary(metrics=metrics, checks=found, tables={"table": table, "trained_segments": segments})


def _figure(config: MRVStudyConfig, rand: dict, alpha: np.ndarray, path) -> None:
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 4))
    for i, m in enumerate(config.ms):
        line, = a0.plot(config.alphas, rand["ratio"][i].max(-1), "o-", label=f"m={m}: max ratio")
        a0.plot(config.alphas, rand["bound"][i, :, 0], "--", color=line.get_color(), lw=1)
    a0.set_xlabel("alpha")
    a0.set_ylabel("||M' - M||_F / ||M||_F (dashed: the paper's bound)")
    a0.legend(fontsize=8)
    a1.hist(alpha.ravel(), bins=30, range=(-1, 1))
    a1.axvline(config.align_alpha, color="k", ls="--", lw=1)
    a1.set_xlabel("empirical alpha of trained MRV updates")
    a1.set_ylabel("count")
    io.save_figure(fig, path)


def write(config: MRVStudyConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``mrv.npz``, ``random_instances.csv`` (the headline table) and ``mrv_retention.png``."""
    rand, trained = arrays["random"], arrays["trained"]
    io.save_npz(out_dir / "mrv.npz", ms=np.asarray(config.ms), alphas=np.asarray(config.alphas),
                random_ratio_max=rand["ratio"].max(-1), random_bound=rand["bound"][..., 0],
                trained_alpha=trained["alpha"], trained_a4=trained["a4"], trained_raw_ratio=trained["raw_ratio"],
                trained_unit_ratio=trained["unit_ratio"])
    io.write_csv(out_dir / "random_instances.csv", summary.tables["table"])
    _figure(config, rand, np.asarray(trained["alpha"]), out_dir / "mrv_retention.png")


STUDY = register(Study(
    name="rate.mrv",
    summary="MRV retention bound: random instances, counterexamples, alignment in trained RATE",
    config_type=MRVStudyConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds",
))

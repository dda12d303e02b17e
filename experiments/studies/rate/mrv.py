"""Study ``rate.mrv``: what the Memory Retention Valve does in trained RATE, against the paper's claims.

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv
2306.09459, ICLR 2026 version): the MRV, MRV(M_n, M_{n+1}) = FFN(MultiHead(Q=M_n,
K=M_{n+1}, V=M_{n+1})), lets the old memory decide what of the new one to keep, so that a
sparse cue is not overwritten by later updates (naive carry-over "accumulates errors or
overwrites useful old information"); the retention theorem, ||M_{n+1} - M_n||_F <=
sqrt(2(1 - alpha/m)) ||M_n||_F under unit rows and alpha-alignment; and the limitation the
paper states, that alpha-alignment "holds empirically in trained models". The theorem
itself, its assumptions (A1)-(A5), the counterexamples without them and the multi-head
reading below are identities, tested in ``tests/rate_jax/test_rate_retention.py`` (see
``docs/rate.md`` §8); this study only measures trained models.

It trains RATE and RATE-noMRV on T-Maze (the model and training of rate.tmaze's runs at
the same preset, kept equal by a test; seeds ``seed_keys(seeds, stream)``) and runs both,
teacher-forced, on ``long_trajectories`` oracle trajectories of a corridor of
``long_segments`` segments (K*long_segments - 2 steps, far beyond the K*N of training),
each beside its mirror (the same trajectory with the other cue, ``rate_jax.mirror``).
Before the last segment the cue is the only input that differs between the two.

Multi-head reading: M_{n+1} = sum_{h,j} (A^h_ij / H) vt_{hj} with vt_{hj} = H v^h_j W_M^h +
b_M (``rate_jax.mrv_convex_form``), so the assumptions are measured on the H*m effective
value rows, m replaced by H*m. The first update (n = 0) is left out of the alignment
measurement: its query M_0 is a learned parameter shared by every trajectory and drawn
from N(0, 1), whose rows have signs unrelated to the value rows, so it is (almost surely)
anti-aligned somewhere and fails (A4) whatever the training (reported as
``trained_frac_aligned_first``). From n = 1 on, M_n is itself an MRV output, and whether
the next update's values point its way is what training decides.

Checks (declared claims, judged per seed: seeds are the unit, 95% t interval). The negative
control of each is a **copy valve** (M_{n+1} = M_n, computed from the run's arrays by
``copy_valve``): it is perfectly aligned (alpha 1, (A4)) and moves nothing, so it passes
alignment alone and the retention bound, but it never writes the cue (M_0 is shared by a
trajectory and its mirror). How each claim could fail:

* ``trained_frac_aligned`` > 0.5: per seed, the fraction of MRV updates n >= 1 on the long
  corridors meeting (A3) at alpha = ``align_alpha`` and (A4) *and* whose output still holds
  the cue (its cue separation above ``KEEP`` = 0.5 times M_1's, trajectory by trajectory):
  the paper's alignment, on the updates that do the valve's work. Alignment alone
  (``trained_frac_aligned_any_cue``, a metric) passes for the copy valve. Fails if trained
  RATE's new memories mostly point away from the old ones (a valve that overwrites), or if
  the aligned updates are those of a memory that has lost the cue.
* ``rate_cue_retention`` > 0.5: per seed, the cue separation of RATE's memory (||M - M'||_F /
  mean norm, M' the mirror's memory) at the last memory before the junction over that of
  M_1, capped at 1 (0 where M_1 holds no cue). Fails if iterated updates wash the cue out
  of the memory (a contraction to one cue-free state) or if it was never written.
* ``rate_minus_no_mrv_cue_retention`` > 0: the same retention for RATE minus that for
  RATE-noMRV, paired by seed (the paper: the valve is what keeps sparse information).
  Control: the copy valve minus RATE-noMRV. Fails if memory passed on without the valve
  keeps the cue as well.

The retention bound is a metric (``trained_frac_within_bound``, ``trained_ratio_over_bound_*``):
at alpha <= 1 it is never below sqrt(2 (1 - 1/(H m))) of the old norm (1.15 at the quick
H m = 3) while trained updates move the memory by about 0.1 of it, so it cannot fail there
(``tests/experiments/test_rate_mrv.py``); the theorem itself is tested in
``tests/rate_jax/test_rate_retention.py``.

Retention is all or nothing per seed at quick size (a seed's memory keeps the cue over 32
segments or loses it), so these intervals are wide: on the screening seeds (stream 1, 3
seeds, QUICK comment) RATE's retention was 0.00, 0.97, 0.98 and RATE-noMRV's 1.00, 1.00,
0.003, i.e. RATE - RATE-noMRV -1.0, -0.03, +0.98: no measurable difference at this size.
``rate_cue_retention`` (mean 0.65, sd 0.56) would need about 50 seeds to be decided and the
comparison thousands. The judged seeds (stream 0, 2 seeds, once) both kept the cue in RATE
(retention 0.95, 1.00) and both lost it in RATE-noMRV (0.006, 0.15), so all three claims PASS
there (QUICK comment); two seeds that agree give a narrow t interval, but the screening
seeds show that the verdict rests on which seeds are drawn: read these PASSes as "the judged
seeds agree with the paper", not as a decided effect. The full preset needs about 50 seeds.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import rate_jax
from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.rate import training

PAPER: dict[str, float] = {}  # the paper states the bound and its assumption, no measured numbers
MODELS = ("RATE", "RATE-noMRV")
LONG_TAG = 2  # a seed's long-corridor key is fold_in(its training key, LONG_TAG)
KEEP = 0.5  # an update keeps the cue when M_{n+1}'s cue separation is above KEEP times M_1's
COPY = "a copy valve (M_{n+1} = M_n: alpha 1, no anti-alignment, the cue never written)"
ALIGNED = checks.Claim(
    "trained_frac_aligned",
    "most MRV updates of trained RATE (n >= 1, long corridors) are alpha-aligned without anti-alignment "
    "while the memory keeps the cue",
    ">", 0.5, control=COPY,
    fails_if="trained RATE's new memories mostly point away from the old ones (a valve that overwrites), or the "
             "aligned updates are those of a memory that has lost the cue (or never wrote it)")
RETENTION = checks.Claim(
    "rate_cue_retention", "RATE's memory keeps the cue over many segments beyond training",
    ">", 0.5, control=COPY,
    fails_if="iterated updates wash the cue out of the memory (a contraction to one cue-free state), or it was "
             "never written")
OVER_NO_MRV = checks.Claim(
    "rate_minus_no_mrv_cue_retention", "the MRV keeps the sparse cue better than memory passed on without it",
    ">", 0.0, control=f"{COPY}, minus RATE-noMRV",
    fails_if="memory passed on without the valve keeps the cue as well as RATE's")
CLAIMS = (ALIGNED, RETENTION, OVER_NO_MRV)


@dataclasses.dataclass(frozen=True)
class MRVStudyConfig:
    """The trained runs and the long-corridor measurement.

    ``train`` is the RATE training run on T-Maze (``num_steps`` in ``chunks`` checkpointed
    chunks, ``seeds`` seeds vmapped, keys ``experiments.seeds.seed_keys(seeds, stream)``);
    RATE-noMRV is ``rate_jax.variant("RATE-noMRV", train.model, ...)`` trained alike.
    Each seed is measured on ``long_trajectories`` oracle trajectories of
    ``long_segments`` segments (key ``fold_in(training key, LONG_TAG)``).
    """

    align_alpha: float  # the alpha at which the trained-model alignment is reported
    train: rate_jax.TrainConfig
    chunks: int
    seeds: int
    long_segments: int
    long_trajectories: int
    stream: int = seeds.JUDGED

    def __post_init__(self):
        def need(cond, field, allowed, value):
            if not cond:
                raise ValueError(f"MRVStudyConfig.{field} must be {allowed}, got {value!r}")

        need(0.0 <= self.align_alpha <= 1.0, "align_alpha", "in [0, 1]", self.align_alpha)
        model = self.train.model
        need(model.num_mem_tokens >= 1 and model.n_head_ca >= 1, "train.model",
             "a RATE configuration with memory tokens and an MRV (num_mem_tokens, n_head_ca >= 1)",
             (model.num_mem_tokens, model.n_head_ca))
        need(self.chunks >= 1 and self.train.num_steps % self.chunks == 0, "chunks",
             f"a divisor of train.num_steps={self.train.num_steps}", self.chunks)
        need(self.seeds >= 1, "seeds", "an integer >= 1", self.seeds)
        need(self.long_segments > self.train.num_segments + 1, "long_segments",
             f"an integer > train.num_segments + 1 = {self.train.num_segments + 1} (beyond training)",
             self.long_segments)
        need(self.long_trajectories >= 1, "long_trajectories", "an integer >= 1", self.long_trajectories)
        seeds.check_stream(self.stream)

    @property
    def effective_keys(self) -> int:
        """H*m: the effective value rows of one multi-head MRV update."""
        return self.train.model.n_head_ca * self.train.model.num_mem_tokens

    def train_config(self, name: str) -> rate_jax.TrainConfig:
        model, segments = rate_jax.variant(name, self.train.model, self.train.num_segments)
        return dataclasses.replace(self.train, model=model, num_segments=segments)


# The RATE run of rate.tmaze's presets (its train_config("RATE"), corridors left to the default
# K*n - 2, n = 1..N, which is the same set); tests/experiments/test_rate_mrv.py keeps them equal.
# Long corridors: 32 segments (190 steps, ~10x the training length) at quick size, 32 trajectories.
# Screening (stream SCREENING = 1, 3 seeds, `--set stream=1 --seeds 3`), this config:
# trained_frac_aligned 1.00 (alpha median 0.997, 5th percentile 0.79; update 0: 0.00),
# trained_frac_within_bound 1.00 (ratio / bound: median 0.07, max 0.91), cue retention RATE 0.65
# (per seed 0.00, 0.97, 0.98: one seed's memory loses the cue by segment ~20) against RATE-noMRV
# 0.67 (1.00, 1.00, 0.003; uncapped 1.61, 2.11, 0.003). The cap at 1 of the retention was added
# after this screen (uncapped, a separation that grows would count as more than full retention);
# the comparison with RATE-noMRV fails on the screening seeds either way, and was kept as the
# paper's claim: no size was tuned to make it pass. (trained_frac_aligned above is the alignment-only
# fraction, now the metric trained_frac_aligned_any_cue.)
# Seeds, with the interval verdicts: those 3 screening seeds give 95% t intervals of 0.65 +- 1.40
# for RATE's retention and -0.02 +- 2.5 for RATE - RATE-noMRV (per seed all-or-nothing: see the
# module docstring); about 50 seeds would decide the first, so no affordable quick size decides
# them. The quick size stays at 2 seeds (the same training as rate.tmaze's first two seeds).
# Judged seeds (stream 0, 2 seeds, once): trained_frac_aligned 1.00 [1, 1] (alignment alone 1.00
# too; copy valve 0, FAIL); retention RATE 0.98 [0.67, 1.28] (copy valve 0, FAIL); RATE - RATE-noMRV
# +0.90 [0.33, 1.48] (control -0.08, INCONCLUSIVE): 3 PASS, 281 s wall under a load of ~20.
# Since then two seeds that agree exactly carry no PASS (experiments.checks): trained_frac_aligned's
# 1.00 [1, 1] is INCONCLUSIVE, so 2 PASS, 1 INCONCLUSIVE (the same numbers again on an AVX2-only CPU).
QUICK = MRVStudyConfig(
    align_alpha=0.5,
    train=rate_jax.TrainConfig(
        model=training.quick_model(64, segment_len=6, d_inner=0, n_head_ca=1, dropout=0.1),
        num_segments=3, num_train=256, num_val=64, batch_size=16, num_steps=400, learning_rate=1e-3,
        warmup_steps=20, weight_decay=0.01),
    chunks=2, seeds=2, long_segments=32, long_trajectories=32)
FULL = MRVStudyConfig(
    align_alpha=0.5,
    train=rate_jax.TrainConfig(
        model=rate_jax.ModelConfig(segment_len=50, n_layer=10, d_model=64, n_head=4, d_head=32, d_inner=0,
                                   num_mem_tokens=15, mem_len=0, n_head_ca=2, dropout=0.2),
        num_segments=3, num_train=6000, num_val=600, batch_size=128, num_steps=10_000, learning_rate=3e-4,
        warmup_steps=1000, weight_decay=0.01),
    chunks=20, seeds=3, long_segments=64, long_trajectories=100)


def train_model(config: MRVStudyConfig, name: str, ctx: RunContext):
    """``config.seeds`` seeds of model ``name`` (``training.train_seeds``): (state, curves, val turn accuracy)."""
    state, curves, turn, _ = training.train_seeds(ctx, name, config.train_config(name), config.seeds, config.stream,
                                                  config.chunks)
    return state, curves, turn


def long_memories(config: MRVStudyConfig, name: str, params) -> dict[str, np.ndarray]:
    """Teacher-forced runs on long corridors and their mirrors, per seed.

    Returns ``memory`` and ``mirrored`` [S, long_segments + 1, B, m, d] (M_0 .. M_{N'}) and,
    for RATE, ``write`` [S, N', B, m, d] (the write outputs) and ``attention`` [S, N', B, H, m, m].
    """
    cfg = config.train_config(name).model
    model = rate_jax.RATE(cfg)
    k_seg, n_long = cfg.segment_len, config.long_segments
    lengths = jnp.full((config.long_trajectories,), k_seg * n_long - 2, jnp.int32)

    def per_seed(p, key):
        traj = rate_jax.generate(jax.random.fold_in(key, LONG_TAG), lengths, k_seg * n_long)
        start = model.apply(p, config.long_trajectories, method=rate_jax.RATE.initial_carry)

        def run(t):
            outs = rate_jax.unroll(model, p, rate_jax.to_segments(t, k_seg), start)
            return jnp.concatenate([start.memory[None], outs.carry.memory], 0), outs

        memory, outs = run(traj)
        mirrored, _ = run(rate_jax.mirror(traj))
        return {"memory": memory, "mirrored": mirrored, "write": outs.write, "attention": outs.mrv_attention}

    keys = jnp.asarray(seeds.seed_keys(config.seeds, config.stream))
    out = jax.jit(jax.vmap(per_seed))(params, keys)
    if name != "RATE":
        out = {k: out[k] for k in ("memory", "mirrored")}
    return {k: np.asarray(v) for k, v in out.items()}


def alignment(config: MRVStudyConfig, params, runs: dict) -> dict[str, np.ndarray]:
    """Per MRV update n = 0 .. N'-1 of RATE's long runs: alpha, (A4), the update ratio. [S, N', B]."""
    cfg = config.train.model

    def per_seed(p, memory, write, attention):
        old, new = memory[:-1], memory[1:]
        weights, values = rate_jax.mrv_convex_form(p["params"]["mrv"], rate_jax.mrv_activation(cfg.mrv_act)(write),
                                                   attention)
        return {"alpha": rate_jax.alignment_alpha(old, values, weights),
                "a4": rate_jax.no_anti_alignment(old, values),
                "ratio": rate_jax.retention_ratio(old, new)}

    out = jax.jit(jax.vmap(per_seed))(params, runs["memory"], runs["write"], runs["attention"])
    return {k: np.asarray(v) for k, v in out.items()}


def compute(config: MRVStudyConfig, ctx: RunContext) -> dict:
    """``trained`` per-update arrays of RATE [S, N', B]; ``separation`` {model: [S, N'+1, B]} (the
    cue separation of M_0 .. M_{N'}); ``val_turn_accuracy`` {model: [S]} and the training ``curves``."""
    trained, separation, turn, curves = {}, {}, {}, {}
    for name in MODELS:
        state, curves[name], turn[name] = train_model(config, name, ctx)
        runs = long_memories(config, name, state.params)
        separation[name] = np.asarray(rate_jax.cue_separation(runs["memory"], runs["mirrored"]))
        if name == "RATE":
            trained = alignment(config, state.params, runs)
    return {"trained": trained, "separation": separation, "val_turn_accuracy": turn, "curves": curves}


def _retention(separation: np.ndarray) -> np.ndarray:
    """Per seed: the cue separation at the last memory before the junction (M_{N'-1}) over that of
    M_1, capped at 1 (a separation that grows keeps the cue, it does not keep more than all of it);
    0 where M_1 holds no cue (a cue never written is not retained)."""
    mean = np.asarray(separation).mean(-1)  # [S, N'+1]
    written = mean[:, 1] > 0
    return np.where(written, np.minimum(mean[:, -2] / np.where(written, mean[:, 1], 1.0), 1.0), 0.0)


def _aligned_keeping_cue(alpha, a4, separation, align_alpha: float) -> np.ndarray:
    """[S, N', B]: update n meets (A3) at ``align_alpha`` and (A4), and its output M_{n+1} keeps
    the cue (separation above ``KEEP`` times M_1's, trajectory by trajectory; none where M_1 has none)."""
    sep = np.asarray(separation)  # [S, N'+1, B]
    keeps = sep[:, 1:] > KEEP * sep[:, 1:2]
    return (np.asarray(alpha) >= align_alpha) & np.asarray(a4, bool) & keeps


def copy_valve(trained: dict, separation: np.ndarray) -> tuple[dict, np.ndarray]:
    """The negative control's arrays: a valve that copies the old memory keeps M_0 (a learned
    parameter shared by every trajectory) forever, so every update is perfectly aligned (alpha 1,
    (A4)) and moves nothing, and every memory's cue separation is M_0's (0: the mirror has the same M_0)."""
    alpha = np.ones_like(np.asarray(trained["alpha"], float))
    sep = np.broadcast_to(np.asarray(separation)[:, :1], np.shape(separation))
    return {"alpha": alpha, "a4": np.ones_like(alpha, bool), "ratio": np.zeros_like(alpha)}, sep


def summarize(config: MRVStudyConfig, arrays: dict) -> Summary:
    """Alignment and bound of RATE's updates, cue retention of RATE and RATE-noMRV; the three checks."""
    trained, separation = arrays["trained"], arrays["separation"]
    alpha, a4, ratio = (np.asarray(trained[k]) for k in ("alpha", "a4", "ratio"))
    a4 = a4.astype(bool)
    aligned = (alpha >= config.align_alpha) & a4  # [S, N', B]
    bound = np.sqrt(2.0 * (1.0 - np.clip(alpha, 0.0, 1.0) / config.effective_keys))
    later = slice(1, None)  # updates n >= 1 (M_0 is a shared learned parameter, see the docstring)
    in_training = slice(1, config.train.num_segments)  # n = 1 .. N-1: the updates training sees
    retention = {name: _retention(separation[name]) for name in MODELS}
    keeping = _aligned_keeping_cue(alpha, a4, separation["RATE"], config.align_alpha)
    copy, copy_sep = copy_valve(trained, separation["RATE"])
    copy_keeping = _aligned_keeping_cue(copy["alpha"], copy["a4"], copy_sep, config.align_alpha)
    metrics = {
        "trained_frac_aligned": keeping[:, later].mean(),
        "trained_frac_aligned_any_cue": aligned[:, later].mean(),
        "trained_frac_aligned_first": aligned[:, 0].mean(),
        "trained_frac_aligned_training_segments": aligned[:, in_training].mean(),
        "trained_frac_aligned_beyond_training": aligned[:, config.train.num_segments:].mean(),
        "trained_alpha_median": np.median(alpha[:, later]),
        "trained_alpha_p05": np.percentile(alpha[:, later], 5),
        "trained_frac_a4": a4[:, later].mean(),
        "trained_frac_within_bound": (ratio[:, later] <= bound[:, later]).mean(),
        "trained_ratio_over_bound_median": np.median(ratio[:, later] / bound[:, later]),
        "trained_ratio_over_bound_max": np.max(ratio[:, later] / bound[:, later]),
        "trained_update_ratio_median": np.median(ratio[:, later]),
        "rate_cue_retention": retention["RATE"].mean(),
        "rate_no_mrv_cue_retention": retention["RATE-noMRV"].mean(),
        "rate_cue_separation_first": np.asarray(separation["RATE"])[:, 1].mean(),
        "rate_no_mrv_cue_separation_first": np.asarray(separation["RATE-noMRV"])[:, 1].mean(),
        **{f"{k}_val_turn_accuracy": np.mean(arrays["val_turn_accuracy"][n])
           for n, k in zip(MODELS, ("rate", "rate_no_mrv"))},
    }
    metrics["rate_minus_no_mrv_cue_retention"] = metrics["rate_cue_retention"] - metrics["rate_no_mrv_cue_retention"]
    metrics = {k: float(v) for k, v in metrics.items()}
    copy_retention = _retention(copy_sep)
    found = [
        ALIGNED.judge(keeping[:, later].mean((1, 2)), control=copy_keeping[:, later].mean((1, 2))),
        RETENTION.judge(retention["RATE"], control=copy_retention),
        OVER_NO_MRV.judge(checks.paired(retention["RATE"], retention["RATE-noMRV"]),
                          control=checks.paired(copy_retention, retention["RATE-noMRV"])),
    ]
    segments = {
        "segment": list(range(alpha.shape[1])),
        "frac_aligned": aligned.mean(axis=(0, 2)), "frac_aligned_keeping_cue": keeping.mean(axis=(0, 2)), "frac_a4": a4.mean(axis=(0, 2)),
        "alpha_median": np.median(alpha, axis=(0, 2)), "update_ratio_median": np.median(ratio, axis=(0, 2)),
        "bound_median": np.median(bound, axis=(0, 2)),
        **{f"cue_separation_{k}": np.asarray(separation[n]).mean(axis=(0, 2))[1:]
           for n, k in zip(MODELS, ("rate", "rate_no_mrv"))},
    }
    return Summary(metrics=metrics, checks=found, tables={"table": segments})


def _figure(config: MRVStudyConfig, arrays: dict, path) -> None:
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 4))
    alpha = np.asarray(arrays["trained"]["alpha"])
    a0.hist(alpha[:, 1:].ravel(), bins=30, range=(-1, 1), label="n >= 1")
    a0.hist(alpha[:, 0].ravel(), bins=30, range=(-1, 1), alpha=0.6, label="n = 0 (query M_0)")
    a0.axvline(config.align_alpha, color="k", ls="--", lw=1)
    a0.set_xlabel("empirical alpha of trained MRV updates")
    a0.set_ylabel("count")
    a0.legend(fontsize=8)
    for name in MODELS:
        sep = np.asarray(arrays["separation"][name]).mean(-1)  # [S, N'+1]
        a1.plot(np.arange(1, sep.shape[1]), sep[:, 1:].mean(0), "o-", ms=3, label=name)
    a1.axvline(config.train.num_segments, color="k", ls=":", lw=1, label="training segments")
    a1.set_xlabel("memory M_n after segment n-1 (long corridor)")
    a1.set_ylabel("cue separation ||M - M'|| / ||M||")
    a1.legend(fontsize=8)
    io.save_figure(fig, path)


def write(config: MRVStudyConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``mrv.npz`` (per-update arrays, cue separations) and ``mrv_retention.png``."""
    trained = arrays["trained"]
    io.save_npz(out_dir / "mrv.npz", trained_alpha=trained["alpha"], trained_a4=trained["a4"],
                trained_ratio=trained["ratio"],
                **{f"separation_{k}": np.asarray(v) for k, v in arrays["separation"].items()})
    _figure(config, arrays, out_dir / "mrv_retention.png")


STUDY = register(Study(
    name="rate.mrv",
    cost_fields=("train.num_steps", "train.warmup_steps", "long_trajectories"),
    summary="MRV in trained RATE: alpha-alignment, the retention bound, cue retention vs RATE-noMRV",
    config_type=MRVStudyConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=CLAIMS,
    quick_s=60,
))

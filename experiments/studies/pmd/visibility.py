"""Study ``pmd.visibility``: does cross-state visibility open the leak channel in learned actors?

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for Closed-Loop Control"
(arXiv 2609.30500), EvoRobust companion, section 10 ("paired actors on a packet holding all 12 memories, with
and without a state-local mask (same seed, data and initial weights; 3 seeds, 3,200 steps). Replacing only the
other states' memories, which leaves the PMD target unchanged, moved the visible actor's row by 0.255 on average
on IID inputs (0.320 at low entropy) and the masked actor's by exactly 0. The masked actor was also closer to
PMD: row error 0.022 against 0.084 on IID inputs") and section 11 ("12.8% of the masked actor's low-entropy
inputs still lose value, against 22.7% visible").

Models: :class:`pmd_jax.visibility.FullPacketActor` (pre-LN causal Transformer, ``config.train.model``; every
state's packet holds all ``S A = 12`` memories, then that state's query), trained with the label-free
KL-proximal objective on the ``iid`` family as ``pmd.learned_actor`` trains its actor (S = 4, A = 3,
gamma = 0.8, a fixed ``train`` pool, fresh prior inputs each step). ``2 x seeds`` runs in ONE vmapped program:
run ``i < seeds`` visible, run ``i + seeds`` the same seed (same initial weights and data keys) with the
state-local mask (a traced per-run flag, identical parameter shapes). Kept in ``models/visibility_actor``.

Evaluation on the ``test`` split, one input per test MDP at ``eta`` = 0.8 (the paper's inputs for its
failure-mode tables), on IID inputs (prior band ``any``) and low-entropy inputs (band ``low``):

* row error: mean over runs of a variant, inputs and states of ``||pi'(.|s) - PMD(.|s)||_1``;
* movement: state ``s``'s row read from its packet with the other states' memories replaced
  (:meth:`pmd_jax.visibility.FullPacketActor.log_policy_replaced`; rows ``s' != s`` of ``(log pi, Q)`` from an
  independent input: another test MDP of the family, the next one in the split, with a policy of the same band
  drawn with other keys), ``||pi'_replaced(.|s) - pi'(.|s)||_1``, mean over states and inputs; the PMD target is
  unchanged.
  ``movement_max_masked`` (max over states, inputs, bands and masked runs) tests the mask and must be exactly
  0: a metric, not a claim (the mask's invariance is tested bit for bit in ``tests/pmd_jax/test_visibility.py``);
* negative-gain share: the share of inputs whose returned policy has ``audit.value_gain < 0`` (exact values in
  float64 through :func:`pmd_jax.audit.audit_call`, which also gives PMD's gain, never negative).

Files: ``per_input.csv`` (run, masked, band, input, state-mean row error and movement, gain, ideal gain),
``visibility.npz`` (inputs, PMD rows and every run's outputs), ``visibility.png`` (movement and row error, ours
and paper, both variants), the kept model.

Checks (interval claims over seeds, 95% t intervals; a seed is a pair of runs that share seed, data and initial
weights), and how each could fail:

* ``visible_reads_other_states`` (per-seed IID movement of the visible actor above ``move_threshold`` = 0.01;
  control: the masked actor, whose movement is exactly 0): the PMD target never depends on other states, so a
  visible actor that learned to ignore them (as a perfect PMD actor does) moves by about 0.
* ``masked_closer_to_pmd_iid`` (per-seed paired IID row error, visible minus masked, above 0): fails if seeing
  every state's memories costs the visible actor nothing (or helps it, e.g. by more context per packet).
* ``masked_loses_value_less_low`` (per-seed paired low-entropy negative-gain share, visible minus masked, above
  0; paper 22.7% against 12.8%): fails if the low-entropy failures are not caused by cross-state reading at all.

The control of the last two is a placebo pair: the same difference between the visible actor and a third arm,
a visible actor trained on another seed of the stream (run ``i + 2 seeds``, seed ``seeds + i``), which differs
from it by its seed alone. The IID inputs are no control here: on stream 1 the visible actors also lose value on
4-8% of IID inputs, the masked ones on 0-1.6%.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io
from experiments.registry import RunContext, Study, Summary, register
from experiments.seeds import JUDGED, check_stream, seed_keys
from experiments.studies.pmd import training
from pmd_jax import audit, tasks, visibility
from pmd_jax.pmd import pmd_step
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

PAPER = {
    "movement_iid_visible": 0.255, "movement_low_visible": 0.320, "movement_iid_masked": 0.0,
    "row_error_iid_masked": 0.022, "row_error_iid_visible": 0.084,
    "negative_gain_share_low_masked": 0.128, "negative_gain_share_low_visible": 0.227,
}
VARIANTS = ("visible", "masked")
ARMS = VARIANTS + ("placebo",)  # run i of arm a is run a * seeds + i; placebo: visible, seed seeds + i (control)
BANDS = {"iid": "any", "low": "low"}  # metric band -> prior entropy band of pmd_jax.tasks
KEPT = "visibility_actor"

# Interval claims over seeds (pairs: visible and masked share seed, data and initial weights).
READS_OTHERS = checks.Claim(
    "visible_reads_other_states", "replacing only the other states' memories (PMD target unchanged) moves the "
    "visible actor's row on IID inputs (per-seed mean row-L1 movement)", ">", 0.01, control="the masked actor",
    paper=PAPER["movement_iid_visible"],
    fails_if="the visible actor learned to ignore the other states' memories, as a perfect PMD actor does")
MASKED_CLOSER = checks.Claim(
    "masked_closer_to_pmd_iid", "the state-locally masked actor is closer to PMD than the visible one on IID inputs "
    "(per-seed paired row-L1 difference, visible minus masked)", ">", 0.0,
    control="placebo pair: the visible actor against a visible actor of another seed",
    paper=PAPER["row_error_iid_visible"] - PAPER["row_error_iid_masked"],
    fails_if="seeing every state's memories costs the visible actor nothing (or helps it)")
MASKED_LOSES_LESS = checks.Claim(
    "masked_loses_value_less_low", "the masked actor loses value less often on low-entropy inputs (per-seed paired "
    "negative-gain share, visible minus masked)", ">", 0.0,
    control="placebo pair: the visible actor against a visible actor of another seed",
    paper=PAPER["negative_gain_share_low_visible"] - PAPER["negative_gain_share_low_masked"],
    fails_if="the low-entropy failures are not caused by cross-state reading")


@dataclasses.dataclass(frozen=True)
class VisibilityConfig:
    train: TrainConfig = TrainConfig()
    seeds: int = 3  # pairs (paper: 3 seeds)
    stream: int = JUDGED
    chunks: int = 4
    eta: float = 0.8
    n_test_mdps: int = 512  # inputs per band (one per test MDP)
    eval_seed: int = 13  # PRNG seed of the held-out policies (eval_seed + 1: the replacement inputs)
    move_threshold: float = 0.01

    def __post_init__(self):
        check_stream(self.stream)
        for name in ("seeds", "chunks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_test_mdps < 2:
            raise ValueError(f"n_test_mdps must be >= 2 (replacement rows come from another test MDP), "
                             f"got {self.n_test_mdps}")
        if self.train.num_steps % self.chunks:
            raise ValueError(f"chunks={self.chunks} must divide train.num_steps={self.train.num_steps}")
        lo, hi = tasks.ETA_RANGE
        if not lo <= self.eta <= hi:
            raise ValueError(f"eta must lie in the training range {tasks.ETA_RANGE}, got {self.eta}")
        if self.train.family != "iid":
            raise ValueError(f"train.family must be 'iid' (the paper's paired actors), got {self.train.family!r}")
        if not self.move_threshold > 0:
            raise ValueError(f"move_threshold must be > 0, got {self.move_threshold}")


# Screened on stream 1 (2 pairs, 128 test MDPs per band, d_model 32, 2 layers, 800 steps; whole run, 2 cores shared
# with other jobs at load ~6): batch 32 -> 108 s wall / 74 CPU-s (IID movement 0.104, IID row error 0.023 masked /
# 0.076 visible, low-entropy negative share 0.016 / 0.164); batch 16 -> 90 s / 65 CPU-s (0.140; 0.025 / 0.098;
# 0.020 / 0.191). QUICK takes batch 16. For intervals (t at n - 1 = 1 is 12.7) it takes 4 pairs, screened on
# stream 1 at batch 16 (154 s wall at load ~15, before the placebo arm): per-seed IID movement 0.131 +- 0.053
# (95% half-width), paired row-error gap 0.066 +- 0.030, low-entropy negative-share gap 0.160 +- 0.050: each
# interval clear of its margin.
QUICK = VisibilityConfig(train=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=800, warmup=80,
                                           batch_size=16),
                         seeds=4, chunks=2, n_test_mdps=128)
FULL = VisibilityConfig(train=TrainConfig(num_steps=3200))


def _draw_inputs(cfg: VisibilityConfig):
    """``(x, y)``: per band (``BANDS`` order, concatenated) one input per test MDP at ``eta``, and its
    replacement input: the next test MDP (cyclically) with a policy of the same band from other keys (the second
    draw of :func:`training.heldout_inputs` at a repeated step)."""
    n = cfg.n_test_mdps
    xs, ys = [], []
    for entropy in BANDS.values():
        both = training.heldout_inputs("iid", "test", n, entropy, [cfg.eta, cfg.eta], cfg.eval_seed)
        xs.append(jax.tree.map(lambda a: np.asarray(a)[:n], both))
        ys.append(jax.tree.map(lambda a: np.roll(np.asarray(a)[n:], -1, axis=0), both))
    return tuple(jax.tree.map(lambda *a: np.concatenate(a), *v) for v in (xs, ys))


def evaluate(cfg: VisibilityConfig, params, masked: np.ndarray) -> dict:
    """Per band: inputs, PMD rows, every run's rows on the input and on the replaced packets, exact gains.

    Both bands (:func:`_draw_inputs`) go through one compiled program per stage.
    """
    actor = cfg.train.full_packet_actor()
    n = cfg.n_test_mdps
    x, y = _draw_inputs(cfg)

    @jax.jit
    def outputs(params, masked):
        def per_input(p, m, pi, Q, e, po, qo):  # row s with the others' memories kept (own) or replaced
            rows = jax.vmap(lambda a, b: actor.log_policy_replaced(p, pi, Q, e, a, b, m))
            out = rows(jnp.stack([pi, po]), jnp.stack([Q, qo]))  # one program for both: bit-exact comparison
            return out[0], out[1]

        return jax.vmap(lambda p, m: jax.vmap(lambda *a: per_input(p, m, *a))(x.pi, x.Q, x.eta, y.pi, y.Q))(
            params, masked)

    log_base, log_moved = (np.asarray(a, np.float64) for a in outputs(params, masked))
    pi_out = np.exp(log_base)
    with jax.enable_x64(True):
        x64 = jax.tree.map(lambda a: np.asarray(a, np.float64), x)
        call = jax.vmap(jax.vmap(audit.audit_call), in_axes=(None, None, None, None, 0))
        found = jax.jit(call)(x64.mdp, x64.pi, x64.Q, x64.eta, pi_out / pi_out.sum(-1, keepdims=True))
        pmd = np.asarray(pmd_step(x64.pi, x64.Q, x64.eta[:, None, None]))
    full = {"log_pi": np.log(x64.pi), "Q": x64.Q, "eta": x64.eta, "pmd": pmd}
    per_run = {"pi_out": pi_out, "pi_replaced": np.exp(log_moved), "gain": np.asarray(found.gain_implemented),
               "gain_ideal": np.asarray(found.gain_ideal)}
    return {band: {**{k: v[b * n:(b + 1) * n] for k, v in full.items()},
                   **{k: v[:, b * n:(b + 1) * n] for k, v in per_run.items()}} for b, band in enumerate(BANDS)}


def compute(cfg: VisibilityConfig, ctx: RunContext) -> dict:
    """Pair i is runs i (visible) and i + seeds (masked), same seed; run i + 2 seeds is the placebo: visible, seed
    seeds + i of the stream (the control arm: two visible actors differ by their seed alone)."""
    keys = seed_keys(2 * cfg.seeds, cfg.stream)
    keys = np.concatenate([keys[:cfg.seeds], keys[:cfg.seeds], keys[cfg.seeds:]])
    arm = np.repeat(np.arange(len(ARMS)), cfg.seeds)
    masked = (arm == ARMS.index("masked")).astype(float)
    flags = {"supervised": np.zeros(len(arm)), "masked": masked}  # label-free KL-proximal objective
    params, curves = training.train_runs(ctx, KEPT, cfg.train, visibility.ROLE, keys, flags, cfg.chunks)
    return {"params": params, "masked": masked, "arm": arm, "eval": evaluate(cfg, params, masked),
            "curves": {v: {"loss": curves["loss"][arm == i]} for i, v in enumerate(ARMS)}}


def _per_input(arrays: dict) -> dict:
    """Per band ``(row error [runs, N, S], movement [runs, N, S], gain [runs, N])`` from the outputs."""
    found = {}
    for band, e in arrays["eval"].items():
        pi_out = np.asarray(e["pi_out"], np.float64)
        found[band] = (np.abs(pi_out - np.asarray(e["pmd"])[None]).sum(-1),
                       np.abs(np.asarray(e["pi_replaced"], np.float64) - pi_out).sum(-1), np.asarray(e["gain"]))
    return found


def per_seed(arrays: dict) -> dict[str, dict[str, np.ndarray]]:
    """Per arm of :data:`ARMS` and band, each seed's mean row error, mean movement and negative-gain share
    (``{f"{quantity}_{band}": {arm: [seeds]}}``)."""
    arm = np.asarray(arrays["arm"])
    out = {}
    for band, (err, move, gain) in _per_input(arrays).items():
        for name, value in (("row_error", err.mean(axis=(1, 2))), ("movement", move.mean(axis=(1, 2))),
                            ("negative_gain_share", (gain < 0).mean(1))):
            out[f"{name}_{band}"] = {a: value[arm == i] for i, a in enumerate(ARMS)}
    return out


def summarize(cfg: VisibilityConfig, arrays: dict) -> Summary:
    arm = np.asarray(arrays["arm"])
    per = _per_input(arrays)
    metrics = {}
    for band, (err, move, gain) in per.items():
        for variant in VARIANTS:
            rows = arm == ARMS.index(variant)
            metrics[f"row_error_{band}_{variant}"] = float(err[rows].mean())
            metrics[f"movement_{band}_{variant}"] = float(move[rows].mean())
            metrics[f"movement_max_{band}_{variant}"] = float(move[rows].max())
            metrics[f"negative_gain_share_{band}_{variant}"] = float((gain[rows] < 0).mean())
        metrics[f"gain_ideal_min_{band}"] = float(np.min(arrays["eval"][band]["gain_ideal"]))
    metrics["movement_max_masked"] = max(metrics[f"movement_max_{b}_masked"] for b in per)
    seeds = per_seed(arrays)
    row, neg = seeds["row_error_iid"], seeds["negative_gain_share_low"]
    found = [
        READS_OTHERS.judge(seeds["movement_iid"]["visible"], control=seeds["movement_iid"]["masked"]),
        MASKED_CLOSER.judge(checks.paired(row["visible"], row["masked"]),
                            control=checks.paired(row["visible"], row["placebo"])),
        MASKED_LOSES_LESS.judge(checks.paired(neg["visible"], neg["masked"]),
                                control=checks.paired(neg["visible"], neg["placebo"])),
    ]
    quantities = [("movement", "iid"), ("movement", "low"), ("row_error", "iid"), ("row_error", "low"),
                  ("negative_gain_share", "iid"), ("negative_gain_share", "low")]
    table = {"quantity": [f"{q} ({b})" for q, b in quantities]}
    for variant in VARIANTS:
        table[variant] = [metrics[f"{q}_{b}_{variant}"] for q, b in quantities]
        table[f"{variant}_paper"] = [PAPER.get(f"{q}_{b}_{variant}", float("nan")) for q, b in quantities]
    per_run = {"run": list(range(len(arm))), "arm": [ARMS[a] for a in arm]}
    for band, (err, move, gain) in per.items():
        per_run[f"row_error_{band}"] = err.mean(axis=(1, 2)).tolist()
        per_run[f"movement_{band}"] = move.mean(axis=(1, 2)).tolist()
        per_run[f"negative_gain_share_{band}"] = (gain < 0).mean(1).tolist()
    return Summary(metrics=metrics, checks=found, tables={"table": table, "per_run": per_run})


def write(cfg: VisibilityConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``per_input.csv``, ``visibility.npz``, the kept model and ``visibility.png``."""
    masked = np.asarray(arrays["masked"])
    per = _per_input(arrays)
    cols = {k: [] for k in ("run", "arm", "masked", "band", "input", "row_error", "movement", "gain", "gain_ideal")}
    for band, (err, move, gain) in per.items():
        runs, n = gain.shape
        cols["run"] += np.repeat(np.arange(runs), n).tolist()
        cols["arm"] += [ARMS[a] for a in np.repeat(arrays["arm"], n)]
        cols["masked"] += np.repeat(masked, n).tolist()
        cols["band"] += [band] * (runs * n)
        cols["input"] += np.tile(np.arange(n), runs).tolist()
        cols["row_error"] += err.mean(-1).reshape(-1).tolist()
        cols["movement"] += move.mean(-1).reshape(-1).tolist()
        cols["gain"] += gain.reshape(-1).tolist()
        cols["gain_ideal"] += np.asarray(arrays["eval"][band]["gain_ideal"]).reshape(-1).tolist()
    io.write_csv(out_dir / "per_input.csv", cols)
    io.save_npz(out_dir / "visibility.npz", masked=masked, arm=np.asarray(arrays["arm"]),
                **{f"{band}_{k}": v for band, e in arrays["eval"].items() for k, v in e.items()})
    training.keep(out_dir, KEPT, cfg.train, visibility.ROLE, arrays["params"],
                  {"masked": masked.tolist(), "arm": [ARMS[a] for a in arrays["arm"]], "stream": cfg.stream, "seeds": cfg.seeds, "train": dataclasses.asdict(cfg.train)})
    import matplotlib.pyplot as plt

    m = summary.metrics
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (title, keys) in zip(axes, (
            ("row movement when only other states' memories are replaced",
             [("movement", "iid"), ("movement", "low")]),
            ("row-L1 to PMD", [("row_error", "iid"), ("row_error", "low")]))):
        labels = [f"{v}\n{b}" for b in ("iid", "low") for v in VARIANTS]
        x = np.arange(len(labels))
        ours = [m[f"{q}_{b}_{v}"] for q, b in keys for v in VARIANTS]
        paper = [PAPER.get(f"{q}_{b}_{v}", np.nan) for q, b in keys for v in VARIANTS]
        ax.bar(x - 0.2, ours, 0.4, label="ours")
        ax.bar(x + 0.2, paper, 0.4, color="0.7", label="paper (none where not given)")
        ax.set_xticks(x, labels)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Visible and state-locally masked learned actors on the full packet (test MDPs, eta = "
                 f"{cfg.eta})", fontsize=10)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "visibility.png")


STUDY = register(Study(
    name="pmd.visibility",
    cost_fields=("train.num_steps", "train.warmup"),
    summary="PolicyAttention visible vs state-locally masked learned actors: movement under replaced memories",
    config_type=VisibilityConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds", claims=(READS_OTHERS, MASKED_CLOSER, MASKED_LOSES_LESS),
    quick_s=30,
))

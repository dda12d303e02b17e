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

Checks, and how each could fail:

* ``visible actor reads the other states' memories`` (IID movement above ``move_threshold`` = 0.01): the PMD
  target never depends on other states, so a visible actor that learned to ignore them (as a perfect PMD actor
  does) moves by about 0.
* ``masked actor closer to PMD (IID row error)``: masked row error below visible; fails if seeing every state's
  memories costs the visible actor nothing (or helps it, e.g. by more context per packet).
* ``masked actor loses value less often at low entropy`` (negative-gain share, masked below visible; paper 12.8%
  against 22.7%): fails if the low-entropy failures are not caused by cross-state reading at all.
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
BANDS = {"iid": "any", "low": "low"}  # metric band -> prior entropy band of pmd_jax.tasks
KEPT = "visibility_actor"


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
# 0.020 / 0.191). Every claim holds with a wide margin at both, so QUICK takes batch 16.
QUICK = VisibilityConfig(train=TrainConfig(model=ModelConfig(d_model=32, num_layers=2), num_steps=800, warmup=80,
                                           batch_size=16),
                         seeds=2, chunks=2, n_test_mdps=128)
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
    keys = np.concatenate([seed_keys(cfg.seeds, cfg.stream)] * 2)  # pair i: runs i and i + seeds
    masked = np.repeat([0.0, 1.0], cfg.seeds)
    flags = {"supervised": np.zeros(2 * cfg.seeds), "masked": masked}  # label-free KL-proximal objective
    params, curves = training.train_runs(ctx, KEPT, cfg.train, visibility.ROLE, keys, flags, cfg.chunks)
    return {"params": params, "masked": masked, "eval": evaluate(cfg, params, masked),
            "curves": {v: {"loss": curves["loss"][masked == float(i)]} for i, v in enumerate(VARIANTS)}}


def _per_input(arrays: dict) -> dict:
    """Per band ``(row error [runs, N, S], movement [runs, N, S], gain [runs, N])`` from the outputs."""
    found = {}
    for band, e in arrays["eval"].items():
        pi_out = np.asarray(e["pi_out"], np.float64)
        found[band] = (np.abs(pi_out - np.asarray(e["pmd"])[None]).sum(-1),
                       np.abs(np.asarray(e["pi_replaced"], np.float64) - pi_out).sum(-1), np.asarray(e["gain"]))
    return found


def summarize(cfg: VisibilityConfig, arrays: dict) -> Summary:
    masked = np.asarray(arrays["masked"]) > 0.5
    per = _per_input(arrays)
    metrics = {}
    for band, (err, move, gain) in per.items():
        for variant, rows in (("visible", ~masked), ("masked", masked)):
            metrics[f"row_error_{band}_{variant}"] = float(err[rows].mean())
            metrics[f"movement_{band}_{variant}"] = float(move[rows].mean())
            metrics[f"movement_max_{band}_{variant}"] = float(move[rows].max())
            metrics[f"negative_gain_share_{band}_{variant}"] = float((gain[rows] < 0).mean())
        metrics[f"gain_ideal_min_{band}"] = float(np.min(arrays["eval"][band]["gain_ideal"]))
    metrics["movement_max_masked"] = max(metrics[f"movement_max_{b}_masked"] for b in per)
    found = [
        checks.above("visible actor reads the other states' memories", metrics["movement_iid_visible"],
                     cfg.move_threshold, paper=PAPER["movement_iid_visible"],
                     claim="replacing only the other states' memories (PMD target unchanged) moves the visible "
                           "actor's row on IID inputs"),
        checks.below("masked actor closer to PMD (IID row error)", metrics["row_error_iid_masked"],
                     metrics["row_error_iid_visible"], paper=PAPER["row_error_iid_masked"],
                     claim="row-L1 to PMD of the state-locally masked actor below the visible actor's "
                           f"(paper {PAPER['row_error_iid_masked']} against {PAPER['row_error_iid_visible']})"),
        checks.below("masked actor loses value less often at low entropy", metrics["negative_gain_share_low_masked"],
                     metrics["negative_gain_share_low_visible"], paper=PAPER["negative_gain_share_low_masked"],
                     claim="share of low-entropy inputs with negative gain, masked below visible (paper "
                           f"{PAPER['negative_gain_share_low_masked']} against "
                           f"{PAPER['negative_gain_share_low_visible']})"),
    ]
    quantities = [("movement", "iid"), ("movement", "low"), ("row_error", "iid"), ("row_error", "low"),
                  ("negative_gain_share", "iid"), ("negative_gain_share", "low")]
    table = {"quantity": [f"{q} ({b})" for q, b in quantities]}
    for variant in VARIANTS:
        table[variant] = [metrics[f"{q}_{b}_{variant}"] for q, b in quantities]
        table[f"{variant}_paper"] = [PAPER.get(f"{q}_{b}_{variant}", float("nan")) for q, b in quantities]
    per_seed = {"run": list(range(len(masked))), "masked": masked.tolist()}
    for band, (err, move, gain) in per.items():
        per_seed[f"row_error_{band}"] = err.mean(axis=(1, 2)).tolist()
        per_seed[f"movement_{band}"] = move.mean(axis=(1, 2)).tolist()
        per_seed[f"negative_gain_share_{band}"] = (gain < 0).mean(1).tolist()
    return Summary(metrics=metrics, checks=found, tables={"table": table, "per_run": per_seed})


def write(cfg: VisibilityConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``per_input.csv``, ``visibility.npz``, the kept model and ``visibility.png``."""
    masked = np.asarray(arrays["masked"])
    per = _per_input(arrays)
    cols = {k: [] for k in ("run", "masked", "band", "input", "row_error", "movement", "gain", "gain_ideal")}
    for band, (err, move, gain) in per.items():
        runs, n = gain.shape
        cols["run"] += np.repeat(np.arange(runs), n).tolist()
        cols["masked"] += np.repeat(masked, n).tolist()
        cols["band"] += [band] * (runs * n)
        cols["input"] += np.tile(np.arange(n), runs).tolist()
        cols["row_error"] += err.mean(-1).reshape(-1).tolist()
        cols["movement"] += move.mean(-1).reshape(-1).tolist()
        cols["gain"] += gain.reshape(-1).tolist()
        cols["gain_ideal"] += np.asarray(arrays["eval"][band]["gain_ideal"]).reshape(-1).tolist()
    io.write_csv(out_dir / "per_input.csv", cols)
    io.save_npz(out_dir / "visibility.npz", masked=masked,
                **{f"{band}_{k}": v for band, e in arrays["eval"].items() for k, v in e.items()})
    training.keep(out_dir, KEPT, cfg.train, visibility.ROLE, arrays["params"],
                  {"masked": masked.tolist(), "stream": cfg.stream, "seeds": cfg.seeds, "train": dataclasses.asdict(cfg.train)})
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
    summary="PolicyAttention visible vs state-locally masked learned actors: movement under replaced memories",
    config_type=VisibilityConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    paper=PAPER, seeds_field="seeds",
))

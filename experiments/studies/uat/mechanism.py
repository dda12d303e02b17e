"""Study ``uat.mechanism``: Figure 2 and the recovery curve of Figure 4 (DarkRoom) of
"Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential Decision
Making" (UAT, arXiv 2607.18910, section 6.5, Appendix C mechanism analysis).

UAT and Vanilla-TF trained by ``uat.darkroom`` on the cyclic schedule (its kept cells, or
one vmapped program over models x seeds here, ``experiments.studies.uat.training``) are rolled
out greedily, without retraining, on shift episodes (``uat_jax.mechanism``): one episode
of the training horizon whose hidden goal shifts at T/3 and 2T/3, the three goals being
the cell's next cyclic waypoints (episode i of the diagnostic: the goals of the run's
episodes i, i + 1, i + 2 after training, where its plain evaluation starts). One further
program plays ``episodes`` of them per trained cell and reads, from the causal parallel pass over each played episode,
every layer's attention weights, the attention of UAT's base pathway (the same
parameters with both utility pathways switched off, on the same episode: panel (c)'s
"base"; modulation = UAT minus base) and the log-probability of the expert action.
Seed ``s`` of both models plays the same start states and goals. The trained cells are
``uat.darkroom``'s (its kept model ``models/<schedule>``) when that study ran in the same
results folder with the same size, seed stream and at least as many seeds; else trained
here from the same seeds and config (a differently batched program: float rounding, over
200 epochs, gives different networks; ``models.csv`` names the origin).

Reported: per-step accuracy against the oracle (the recovery curve), accuracy per
segment, post-shift accuracy (the first 5 steps after each shift, C.3), the accuracy
of the recovered steps (5 or more after a shift) and after the first shift, the attention
mass on the active segment's steps (mean over layers, heads and the queries after the
first shift; uniform causal attention gives ``active_mass_uniform``) and the per-step
UAT - VT oracle log-probability. The paper gives no numbers for this diagnostic, so
the checks are its statements ("VT recalls pre-shift prototypes, UAT refocuses on the
active regime"). Departure: T is the training horizon (30 at ``--quick``), not 150 (the
models learn a position table of their horizon).

UAT fed null feedback (``uat_null``: UAT trained and played with every fed reward zeroed,
kept by ``uat.darkroom`` beside UAT and VT) is played on the same shift episodes: the
negative control of every check.

Checks (interval claims over seeds, on per-seed paired differences of cells trained from
the same key; ``experiments.checks``), and how each could fail:

* ``uat_recovers_after_shift`` (UAT - VT accuracy over the recovered steps, those 5
  or more after a shift, > 0.2; Figure 4: UAT recovers within 5 steps): UAT must re-find
  a goal that moved inside the episode from the fed feedback. It fails if UAT's utility
  state stays locked on the first goal (the shift is outside its training episodes) or if
  VT tracks the shift from the cue alone. Control: UAT fed null feedback against VT.
* ``modulation_adds_post_shift_attention`` (UAT's active-segment mass minus its base
  pathway's > 0.02; Figure 2 c: "the modulation pathway concentrates after each
  shift"): the feedback modulation must move attention to the steps since the shift. It
  fails if the utility gates leave the attention pattern as the base projections make it,
  or move it to the pre-shift steps. Control: the same difference for UAT fed null
  feedback (gates that see no feedback must not concentrate attention after a shift).
* ``uat_attends_to_active_segment`` (UAT minus VT active-segment mass > 0.05, a
  reallocation of 5% of the attention; Figure 2 a, b: "VT recalls pre-shift
  prototypes, UAT refocuses on the active regime"). It fails if VT's attention is as
  focused on the recent steps as UAT's. Control: UAT fed null feedback against VT.

Sizing, on the SCREENING stream (stream=1, 2 seeds, the quick size, before any judged
run): UAT fell from 0.80 to 0.08 accuracy at each shift and climbed back to 0.6-0.7
within 5 steps; VT stayed at 0.2-0.5 throughout. The first definition of the recovery
check, UAT minus VT over every step after the first shift, gave +0.177 (the 5 steps of
re-finding the goal included), so the check reads the recovered steps (+0.32 there). The
active-segment mass was 0.396 for UAT, 0.395 for VT (uniform attention: 0.268; both
attend mostly to recent steps) and 0.339 for UAT's base pathway: the modulation adds
+0.057, while UAT against VT is +0.002, so ``uat_attends_to_active_segment`` was expected
to fail at this size before the judged run; its margin was not moved.

Judged quick run (stream 0, once, after the checks were fixed): 1 of 3 pass.
``uat_recovers_after_shift`` FAILS, +0.014: on these seeds UAT fell from 0.83 to 0.05 at
the first shift and climbed back only to 0.42 (segment 1) and 0.56 (segment 2), level
with VT's 0.44-0.46, while on fixed-goal episodes the same UAT cells score 0.88 against
VT's 0.39. Re-finding a goal inside an episode, which training never asked for, is
seed-dependent at this size (0.65 recovered on the screening seeds). The modulation check
passes (+0.058, as on the screening seeds). ``uat_attends_to_active_segment`` fails at
+0.031 (UAT 0.369, VT 0.338), short of the 5% margin, as expected.

Since ``uat.mechanism`` plays ``uat.darkroom``'s kept cells (the same cells, trained in that
study's 12-cell program instead of a 4-cell one: float rounding, amplified over 200 epochs,
makes them different networks), the judged quick run gives, on the cells of the judged
``uat.darkroom`` run (UAT 0.879, VT 0.373 on fixed-goal episodes): recovery +0.072 FAILS (UAT
0.47 on the recovered steps, VT 0.40; UAT's segments 0.69 / 0.33 / 0.48), modulation +0.053
passes, reallocation +0.022 fails (UAT 0.369, VT 0.347, base 0.316). The same 1 of 3.
The recovery margin moves whenever float rounding in ``uat.darkroom``'s program changes (its cells
are retrained): +0.092 in one ``make run`` on 2026-12-05 (O1) and +0.072 in two later ones that
day (each with other cells: the modulation margin read +0.052 and +0.056), a fail each time.

Judged quick run with the interval checks and the null-feedback control (stream 0, once, 3 seeds, the
cells kept by that run of ``uat.darkroom``): recovery +0.077 [0.010, 0.144] FAILS; modulation +0.033 [-0.049,
0.116] INCONCLUSIVE, and its control (the null-feedback UAT's own modulation, +0.031) is as large, so the
modulation is not shown to come from the feedback; reallocation +0.011 [-0.039, 0.061] INCONCLUSIVE.

Budget probe (2026-12-05, screening seeds, after the judged runs; nothing changed):
``run uat.mechanism --quick --set stream=1 --set size.epochs=800`` (four times the training) gives
recovery +0.198 (UAT 0.567, VT 0.369 on the recovered steps; fixed-goal 0.893 and 0.403), modulation
+0.037 and reallocation -0.090: VT puts more attention on the active segment (0.461) than UAT
(0.371). More training does not bring the reallocation of Figure 2 at this width.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from experiments import checks, io, seeds
from experiments.registry import RunContext, Study, Summary, register
from experiments.studies.uat.training import reuse_or_train_cells
from uat_jax import cells, mechanism
from uat_jax.config import SWITCHED
from uat_jax.domains import POST_SHIFT_STEPS
from uat_jax.model import DecisionTransformer
from uat_jax.rollout import post_shift_accuracy, regime_accuracy, rollout
from uat_jax.schedules import SCHEDULES
from uat_jax.train import CellKeys, Task, default_env, episode_settings, eval_episodes, task_model

MODELS = ("uat", "vt", "uat_null")  # uat.darkroom's KEPT: UAT, VT and the control, UAT fed null feedback
NULL_CONTROL = "UAT fed null feedback"

RECOVERS = checks.Claim(
    "uat_recovers_after_shift", "after a hidden goal shift inside an episode UAT re-finds the goal from the feedback "
    "within 5 steps, VT does not (UAT - VT accuracy 5+ steps after a shift)", ">", 0.2,
    control=f"{NULL_CONTROL}, against VT",
    fails_if="UAT's utility state stays locked on the first goal, or VT tracks the shift from the cue alone")
MODULATION = checks.Claim(
    "modulation_adds_post_shift_attention", "UAT's feedback modulation moves attention to the steps since the shift "
    "(Figure 2 c: active-segment mass, UAT - its base pathway)", ">", 0.02,
    control=f"{NULL_CONTROL}, against its own base pathway",
    fails_if="the utility gates leave attention as the base projections make it, or move it to pre-shift steps")
REALLOCATION = checks.Claim(
    "uat_attends_to_active_segment", "after a shift UAT's attention moves to the steps since the shift more than "
    "VT's (Figure 2 a, b: active-segment mass, UAT - VT)", ">", 0.05, control=f"{NULL_CONTROL}, against VT",
    fails_if="VT's attention is as focused on the steps since the shift as UAT's")
CLAIMS = (RECOVERS, MODULATION, REALLOCATION)


@dataclasses.dataclass(frozen=True)
class MechanismConfig:
    """At which size, over how many seeds, on which schedule, with how many shift episodes."""

    size: cells.Size = cells.TABLE3
    seeds: int = 3
    stream: int = 0  # seed stream of experiments.seeds: JUDGED = 0 (the checks), SCREENING = 1 (sizing)
    schedule: str = "cyclic"
    episodes: int = 32  # shift episodes per trained cell (the paper's 32-seed mean)
    recovered_after: int = POST_SHIFT_STEPS  # the recovered steps: this many or more after a shift (Figure 4's 5)

    def __post_init__(self):
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        seeds.check_stream(self.stream)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        s1, s2 = mechanism.shift_steps(self.size.horizon)
        if not 0 <= self.recovered_after < min(s2 - s1, self.size.horizon - s2):
            raise ValueError(f"recovered_after must be >= 0 and below the length of segments 1 and 2 "
                             f"({s2 - s1}, {self.size.horizon - s2} at horizon {self.size.horizon}: the recovered "
                             f"steps the checks read), got {self.recovered_after}")


FULL = MechanismConfig()
# Quick size: uat.darkroom's (cells.CPU, 3 seeds: its kept cells are played here; see its QUICK comment). The
# diagnostic itself was not re-screened for the interval checks; the module docstring gives its 2-seed history.
QUICK = MechanismConfig(size=cells.CPU, seeds=3)


def make_diagnostic_cell(cfg: MechanismConfig):
    """``cell(item) -> {name: [...]}``: the trained ``item["params"]`` of ``item["task"]``'s member
    played on ``cfg.episodes`` shift episodes (episode i from key i of split(fold_in(eval key, 1))),
    every output a mean over them."""
    train_cfg = cfg.size.train_config(traced_variant=True)
    base_member = jnp.asarray(SWITCHED.index("vt"), jnp.int32)

    def cell(item: dict) -> dict:
        keys = CellKeys.of(jax.random.wrap_key_data(item["key"]))
        task, params = item["task"], item["params"]
        model, base = task_model(train_cfg.model, task), DecisionTransformer(train_cfg.model, variant=base_member)
        env = default_env(train_cfg)
        after_training = eval_episodes(train_cfg)[0] + jnp.arange(cfg.episodes + mechanism.N_SEGMENTS - 1)
        goals = episode_settings(train_cfg, task, keys.run, after_training)
        segment_goals = mechanism.consecutive_goals(goals, cfg.episodes)

        def play(key, sg):
            traj = rollout(model, params, key, mechanism.SHIFT_DARKROOM, mechanism.ShiftEnv.make(env, sg),
                           task.channel, greedy=True)
            return traj, (mechanism.attention_weights(model, params, traj),
                          mechanism.attention_weights(base, params, traj),
                          mechanism.oracle_log_prob(model, params, traj))

        ep_keys = jax.random.split(jax.random.fold_in(keys.eval, 1), cfg.episodes)
        traj, (weights, base_weights, log_prob) = jax.vmap(play)(ep_keys, segment_goals)
        return {"step_accuracy": jnp.mean(traj.actions == traj.expert, 0),
                "segment_accuracy": regime_accuracy(traj, mechanism.N_SEGMENTS),
                "post_shift_accuracy": post_shift_accuracy(traj, POST_SHIFT_STEPS),
                "attention": weights.mean((0, 2)), "base_attention": base_weights.mean((0, 2)),
                "active_mass": mechanism.active_mass(weights).mean((0, 2)),
                "base_active_mass": mechanism.active_mass(base_weights).mean((0, 2)),
                "oracle_log_prob": log_prob.mean(0)}

    return cell


def compute(cfg: MechanismConfig, ctx: RunContext) -> dict:
    """Per model {output: [seeds, ...]} of the diagnostic (``make_diagnostic_cell``), plus the
    models' plain (fixed-goal) evaluation ``accuracy`` [seeds]; ``origin``: where the trained cells came from."""
    tasks = [Task.make(cfg.schedule, "null" if m == "uat_null" else "clean", variant=m.removesuffix("_null"))
             for m in MODELS]
    labels = [f"{m}, schedule {cfg.schedule}" for m in MODELS]
    grid, origin = reuse_or_train_cells(ctx, "uat.darkroom", cfg.schedule, "mechanism",
                                        cfg.size.train_config(traced_variant=True), tasks, MODELS, labels,
                                        cfg.seeds, cfg.stream)
    items = {**cells.cell_inputs(tasks, seeds.seed_keys(cfg.seeds, cfg.stream)), "params": grid["params"]}
    diag = cells.split_cells(seeds.train_grid(ctx, "mechanism_diagnostic", make_diagnostic_cell(cfg), items,
                                              labels=labels, num_seeds=cfg.seeds), len(MODELS))
    out = {m: {"accuracy": grid["accuracy"][i], **{k: v[i] for k, v in diag.items()}} for i, m in enumerate(MODELS)}
    return {**out, "origin": origin}


def summarize(cfg: MechanismConfig, arrays: dict) -> Summary:
    """Seed mean/std of the diagnostic numbers; the three checks."""
    T = cfg.size.horizon
    after = np.asarray(mechanism.segment_of(T)) >= 1  # the steps after the first shift
    recovered_steps = after & (np.asarray(mechanism.since_shift(T)) >= cfg.recovered_after)
    recovered = {m: arrays[m]["step_accuracy"][:, recovered_steps].mean(-1) for m in MODELS}  # [seeds] each
    mass = {m: arrays[m]["active_mass"][..., after].mean((-1, -2)) for m in MODELS}
    base = {m: arrays[m]["base_active_mass"][..., after].mean((-1, -2)) for m in MODELS}
    metrics: dict[str, float] = {}
    for m in MODELS:
        a = arrays[m]
        metrics.update(cells.mean_std(f"fixed_goal_acc_{m}", a["accuracy"]))
        metrics.update(cells.mean_std(f"after_shift_acc_{m}", a["step_accuracy"][:, after].mean(-1)))
        metrics.update(cells.mean_std(f"recovered_acc_{m}", recovered[m]))
        metrics.update(cells.mean_std(f"post_shift_acc_{m}", a["post_shift_accuracy"]))
        for k in range(mechanism.N_SEGMENTS):
            metrics.update(cells.mean_std(f"segment{k}_acc_{m}", a["segment_accuracy"][:, k]))
        metrics.update(cells.mean_std(f"active_mass_{m}", mass[m]))
        metrics.update(cells.mean_std(f"active_mass_{m}_base", base[m]))
    metrics["active_mass_uniform"] = float(np.asarray(mechanism.uniform_active_mass(T))[after].mean())
    diff = arrays["uat"]["oracle_log_prob"] - arrays["vt"]["oracle_log_prob"]
    metrics.update(cells.mean_std("oracle_log_prob_gain_after_shift", diff[:, after].mean(-1)))
    found = [
        RECOVERS.judge(checks.paired(recovered["uat"], recovered["vt"]),
                       control=checks.paired(recovered["uat_null"], recovered["vt"])),
        MODULATION.judge(checks.paired(mass["uat"], base["uat"]),
                         control=checks.paired(mass["uat_null"], base["uat_null"])),
        REALLOCATION.judge(checks.paired(mass["uat"], mass["vt"]), control=checks.paired(mass["uat_null"], mass["vt"])),
    ]
    steps = np.arange(T)
    table = {"step": steps.tolist(), "segment": np.asarray(mechanism.segment_of(T)).tolist(),
             **{f"accuracy_{m}": arrays[m]["step_accuracy"].mean(0).tolist() for m in MODELS},
             **{f"active_mass_{m}": arrays[m]["active_mass"].mean((0, 1)).tolist() for m in MODELS},
             "active_mass_uat_base": arrays["uat"]["base_active_mass"].mean((0, 1)).tolist(),
             "oracle_log_prob_uat_minus_vt": diff.mean(0).tolist()}
    models_table = {"models": [", ".join(MODELS)], "schedule": [cfg.schedule], "origin": [str(arrays["origin"])]}
    return Summary(metrics=metrics, checks=found, tables={"table": table, "models": models_table})


def write(cfg: MechanismConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``mechanism.png``: Figure 2 (a) VT and (b) UAT attention, (c) UAT's modulation (UAT minus
    its base pathway), (d) the UAT - VT oracle log-probability, and the recovery curve; the
    last layer's maps, head- and episode-averaged, seed mean."""
    import matplotlib.pyplot as plt

    T = cfg.size.horizon
    shifts = mechanism.shift_steps(T)
    last = lambda m, k="attention": arrays[m][k][:, -1].mean(0)  # noqa: E731
    causal = np.tril(np.ones((T, T), bool))
    masked = lambda w: np.where(causal, w, np.nan)  # noqa: E731
    fig, axes = plt.subplots(1, 5, figsize=(19, 3.6))
    panels = [("(a) VT attention", masked(last("vt")), "viridis"),
              ("(b) UAT attention", masked(last("uat")), "viridis"),
              ("(c) UAT modulation (UAT - base)", masked(last("uat") - last("uat", "base_attention")), "coolwarm")]
    for ax, (title, image, cmap) in zip(axes, panels):
        lim = np.nanmax(np.abs(image)) if cmap == "coolwarm" else None
        im = ax.imshow(image, cmap=cmap, vmin=-lim if lim else None, vmax=lim)
        for s in shifts:
            ax.axhline(s - 0.5, color="w", lw=0.8)
            ax.axvline(s - 0.5, color="w", lw=0.8)
        ax.set(title=title, xlabel="key step j", ylabel="query step t")
        fig.colorbar(im, ax=ax, fraction=0.046)
    summary_table = summary.tables["table"]
    axes[3].plot(summary_table["oracle_log_prob_uat_minus_vt"])
    axes[3].set(title="(d) log pi(a*) UAT - VT", xlabel="step t")
    for m in MODELS:
        axes[4].plot(summary_table[f"accuracy_{m}"], label=m)
    axes[4].set(title="recovery: accuracy per step", xlabel="step t", ylim=(0, 1))
    axes[4].legend()
    for ax in axes[3:]:
        for s in shifts:
            ax.axvline(s, color="k", ls=":", lw=0.8)
    fig.tight_layout()
    io.save_figure(fig, out_dir / "mechanism.png")


STUDY = register(Study(
    name="uat.mechanism",
    cost_fields=("size.epochs",),
    summary="attention and recovery of trained UAT vs VT at hidden goal shifts inside a DarkRoom episode (Figure 2)",
    config_type=MechanismConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize, write=write,
    seeds_field="seeds", quick_s=10, after=("uat.darkroom",), claims=CLAIMS,
))

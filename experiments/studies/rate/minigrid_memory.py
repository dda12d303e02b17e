"""Study ``rate.minigrid_memory``: RATE against DT (and RMT, TrXL) on MiniGrid-Memory, success against corridor size.

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv
2306.09459, ICLR 2026 version), the Minigrid-Memory experiment: trained on one corridor
size, evaluated on sizes 11, 21, ..., 91 (``minigrid_memory.AUTHORS_EVAL_SIZES``), where the
cue seen in the start room must be matched with one of two objects at the hallway's end.
docs/rate.md records no numbers of the paper for this task, so ``PAPER`` is empty.

Task (``rate_jax.minigrid_memory``, ``rate_jax.tasks.MinigridTask``: one-hot 3 x 3 views, 3
actions, episodes cut at 96 steps). Offline data: oracle episodes (the oracle acts only on
what it has seen) at ``train_size`` (fixed hallway length unless ``random_length``). RATE's
K = ceil((T + 1) / N) for the longest oracle episode of T steps, N segments (whole episodes,
as ``rate.popgym``); DT has context K (``rate_jax.variant`` with ``dt_context="segment"``:
trained on K-step windows) and at evaluation slides it, as the authors' Minigrid-Memory
validation does (``dt_window="sliding"``; ``"restart"`` restarts it every K steps); RMT and TrXL (full size)
as in ``rate.popgym``. Evaluation: online, argmax
actions, return-to-go from 1, 96 steps, ``eval_episodes`` episodes per seed at the training
task and at each of ``eval_sizes`` in the authors' setting (random length,
``minigrid_memory.authors_params``), one compiled program per model (every size one vmapped
batch of environment parameters). References per evaluation point: the oracle's success and
a uniformly random policy's, and ``cue_in_dt_context``: the fraction of oracle episodes whose
choice (the first observation at the split with the north object seen) is taken with the last
sight of the cue inside DT's current K-step window. Where it is 0, DT can only guess the side
(success 0.5 at best) and only a memory that crosses a segment boundary can do better.

Checks (declared claims, judged per seed: seeds are the unit, RATE and DT paired by seed,
95% t interval; margins from the screening seeds, stream 1; judged seeds stream 0). The
control of both is RATE evaluated with noise in place of the memory passed between segments
(``rate_jax.make_env_evaluate``'s ``memory_noise``, the same compiled program): it cannot
carry the cue past a boundary, so where the cue has left DT's context it guesses as DT does.
How each could fail:

* ``rate_minus_dt_success_train`` > 0.2: RATE's success minus DT's on the training task
  (where ``cue_in_dt_context`` is about 0.03 at the quick size, so DT can do little better
  than 0.55). Fails if RATE's memory tokens do not carry the cue's identity across the
  segment boundaries to the choice (RATE then guesses as DT does, gap about 0), or if RATE
  navigates worse than DT.
* ``rate_minus_dt_success_cue_outside`` > 0.1: the same, averaged per seed over the evaluated
  sizes whose ``cue_in_dt_context`` is at most ``OUTSIDE_FRACTION`` (the paper's claim in kind:
  RATE above DT where the cue leaves DT's context, at sizes other than the training one).
  Fails if RATE's memory does not survive the longer hallways and more segments of larger
  corridors, so that it guesses like DT, or if its walk back for the cue runs into the
  96-step cut more often than DT's (which skips it once the cue has left its context); NaN (a
  failure) if no evaluated size has the cue outside DT's context.

The quick size runs 3 seeds of 2,000 steps, the seed-steps of the 2 seeds of 3,000 it ran
before: at 2 seeds the t interval has one degree of freedom (12.7 standard errors wide each
side), so neither check could be decided there (judged once at 2 x 3,000: training size +0.39
[0.19, 0.59], sizes +0.43 [0.006, 0.84], both INCONCLUSIVE). Judged once at 3 x 2,000 (stream 0),
DT's context restarting: training size +0.50 [0.23, 0.77] PASS (success RATE 0.95 against DT
0.45; control +0.01, FAIL) and the sizes +0.27 [0.12, 0.42] PASS (control -0.03, FAIL). Then
with DT's window sliding (the authors' evaluation; RATE the same models): training size +0.48
[0.26, 0.70] PASS (DT 0.47; control -0.01, FAIL) and the sizes +0.28 [0.07, 0.48] INCONCLUSIVE
(about 4 seeds; RATE 0.74 against DT 0.47 over sizes 21-91, size 11 now counting as the cue
inside DT's last K steps in 22% of episodes; control -0.01, FAIL).
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
from rate_jax import minigrid_memory
from rate_jax.tasks import MinigridTask

METRIC_NAMES = training.METRIC_NAMES
NOISE = training.NOISE
CONTROL = "RATE with noise in place of its memory (minus DT)"
TRAIN_CLAIM = checks.Claim(
    "rate_minus_dt_success_train", "RATE's memory carries the cue past DT's context on the training size",
    ">", 0.2, control=CONTROL,
    fails_if="RATE's memory tokens do not carry the cue's identity across the segment boundaries to the choice "
             "(RATE then guesses as DT does, gap about 0), or RATE navigates worse than DT")
OUTSIDE_CLAIM = checks.Claim(
    "rate_minus_dt_success_cue_outside", "RATE above DT on the evaluated sizes where the cue leaves DT's context",
    ">", 0.1, control=CONTROL,
    fails_if="RATE's memory does not survive the longer hallways and more segments of larger corridors, or its "
             "walk back for the cue runs into the 96-step cut more often than DT's; NaN (a failure) if no "
             "evaluated size has the cue outside DT's context")
OUTSIDE_FRACTION = 0.1  # a size counts as "cue outside DT's context" when cue_in_dt_context <= this
EVAL_TAG = 1  # a seed's evaluation key is fold_in(its training key, EVAL_TAG)
REFERENCE_TAG = 2  # oracle and random-policy episodes: fold_in(the first seed's key, REFERENCE_TAG)
EVAL_STEPS = minigrid_memory.AUTHORS_TIME_LIMIT  # every evaluation episode is cut at 96 steps


def _need(cond: bool, field: str, allowed: str, value) -> None:
    if not cond:
        raise ValueError(f"MinigridMemoryStudyConfig.{field} must be {allowed}, got {value!r}")


def _corridor_size(size) -> bool:
    return isinstance(size, int) and size >= minigrid_memory.MIN_SIZE and size % 2 == 1


@dataclasses.dataclass(frozen=True)
class MinigridMemoryStudyConfig:
    """Sizes of the study. ``base`` is RATE (obs_dim, num_actions and segment_len are set from
    the training task); baselines from ``rate_jax.variant``. ``seeds`` models per variant train
    in one vmapped program (keys ``seed_keys(seeds, stream)``: stream 0 judged, 1 screening)
    with ``training``'s budget on oracle episodes at ``train_size``."""

    train_size: int
    random_length: bool
    eval_sizes: tuple[int, ...]
    base: rate_jax.ModelConfig
    num_segments: int
    variants: tuple[str, ...]
    seeds: int
    training: training.Budget
    eval_episodes: int
    stream: int = seeds.JUDGED
    dt_window: str = "sliding"  # DT's context at evaluation: "sliding" (the authors') or "restart" every K steps

    def __post_init__(self):
        _need(_corridor_size(self.train_size) and minigrid_memory.oracle_max_steps(self.train_size) < EVAL_STEPS,
              "train_size", f"an odd integer >= {minigrid_memory.MIN_SIZE} whose longest oracle episode "
              f"(2 * size - 3 steps) fits the {EVAL_STEPS}-step cut, i.e. <= 49", self.train_size)
        _need(isinstance(self.random_length, bool), "random_length", "a bool", self.random_length)
        _need(len(self.eval_sizes) > 0 and len(set(self.eval_sizes)) == len(self.eval_sizes)
              and all(_corridor_size(s) for s in self.eval_sizes), "eval_sizes",
              f"distinct odd integers >= {minigrid_memory.MIN_SIZE}", self.eval_sizes)
        _need(len(set(self.variants)) == len(self.variants) and set(self.variants) <= set(METRIC_NAMES),
              "variants", f"distinct names from {tuple(METRIC_NAMES)}", self.variants)
        _need("RATE" in self.variants and "DT" in self.variants, "variants", "a tuple including RATE and DT",
              self.variants)
        _need(isinstance(self.num_segments, int) and self.num_segments >= 2, "num_segments",
              "an integer >= 2 (memory must cross a segment)", self.num_segments)
        for name in ("seeds", "eval_episodes"):
            _need(isinstance(getattr(self, name), int) and getattr(self, name) >= 1, name, "an integer >= 1",
                  getattr(self, name))
        seeds.check_stream(self.stream)
        _need(self.dt_window in training.DT_WINDOWS, "dt_window", f"one of {training.DT_WINDOWS}", self.dt_window)

    @property
    def task(self) -> MinigridTask:
        return MinigridTask(self.train_size, random_length=self.random_length)

    @property
    def segment_len(self) -> int:
        """K = ceil((T + 1) / N): K*N steps hold the longest oracle episode and its final observation."""
        return -(-(self.task.oracle_steps + 1) // self.num_segments)

    def train_config(self, variant: str) -> rate_jax.TrainConfig:
        task = self.task
        base = dataclasses.replace(self.base, obs_dim=task.obs_dim, num_actions=task.num_actions,
                                   segment_len=self.segment_len)
        model, segments = rate_jax.variant(variant, base, self.num_segments, dt_context="segment")
        return self.training.train_config(model, segments, task)

    def eval_points(self) -> tuple[tuple[int, bool], ...]:
        """(size, random_length) of each evaluation point: the training task, then ``eval_sizes``
        in the authors' setting (random length)."""
        return ((self.train_size, self.random_length),) + tuple((s, True) for s in self.eval_sizes)

    def eval_params(self) -> minigrid_memory.EnvParams:
        """``eval_episodes`` episodes per point, point-major [P * E]; the authors' reward
        denominator, 96-step cut and 3 x 3 view (as the training task's)."""
        sizes, random_length = (np.repeat(np.asarray(x), self.eval_episodes) for x in zip(*self.eval_points()))
        task = self.task
        return minigrid_memory.make_params(sizes, random_length=random_length, max_steps=task.max_steps,
                                           time_limit=task.time_limit, view_size=task.view_size)


# Quick size (why; docs/rate.md section 15 reads the larger sizes). Size 15 with a random
# hallway length (as MiniGrid's MemorySxRandom; the authors train on random lengths too): the
# longest oracle episode is 27 steps, N = 5 segments of K = 6, and the cue's last sight is in an
# earlier K-window than the choice in about 97% of episodes, so DT mostly guesses the side while
# RATE must carry the cue across up to four boundaries. d 32, 2 layers, a feed-forward block of
# 64, m = 3 memory tokens, 2 MRV heads (the authors' T-Maze and POPGym RATE have 2; with 1,
# RATE's choice stayed at chance where RMT learned it), no dropout, lr 3e-3, batch 32, 3,000
# steps. The earlier quick size (9, N = 3, batch 16, 1,000 steps) taught RATE the choice on the
# training task but its memory did not survive the 10-16 segments of the larger sizes (judged
# over the nine sizes -0.03, a fail). Screening (stream 1): size 15, N = 5 with batch 16 learned
# the choice in some seeds only (sizes check +0.08 / +0.27 / +0.11 at 2,000 / 3,000 / 4,000
# steps, RATE's teacher-forced choice 0.71-0.91); with batch 32, 3,000 steps, every one of 6
# screening seeds (two runs, 2 and 4 seeds) learned it: training task 0.88-1.00 against DT's
# 0.31-0.69, sizes check per seed +0.15 to +0.38 (+0.31 and +0.24 per run); batch 16 with 1,024
# training episodes, or size 21 with N = 7, learned nothing in 3,000 steps. Margins (set before
# these screens, kept): 0.2 on the training task; 0.1 on the sizes, about 3 standard errors of a
# difference of two means over 576 episodes each. 182 s on 2 idle cores in screening.
# Screened later for power at the same cost (stream 1): 3 seeds x 2,000 steps (QUICK's earlier 2 x 3,000 seed-steps)
# gave the training size +0.32 [0.20, 0.44] PASS (control -0.06, INCONCLUSIVE) and the sizes +0.22 [-0.05, 0.49]
# INCONCLUSIVE (about 4 seeds); 3 seeds x 1,600 steps (for the make run budget) +0.23 [0.07, 0.39] and +0.13
# [0.06, 0.20], both INCONCLUSIVE: RATE learns less in fewer steps, so that cut was not taken. QUICK became
# 3 x 2,000 (a third seed for a third of the steps: an interval with two degrees of freedom at the same cost);
# judged once: module docstring. 227 s beside a neighbour (uat.sepsis); in make run 265 s, as 2 x 3,000 (266 s).
# DT's window sliding (the authors' evaluation), screened on stream 1 at 3 x 2,000: DT at chance at every size
# (0.40-0.59; the cue inside its last K steps in 0-13% of episodes), training size +0.46 [0.16, 0.75] and the
# sizes +0.21 [0.06, 0.37], both INCONCLUSIVE (about 4 seeds). Judged once: module docstring.
QUICK = MinigridMemoryStudyConfig(
    train_size=15, random_length=True, eval_sizes=minigrid_memory.AUTHORS_EVAL_SIZES,
    base=training.quick_model(32, d_inner=64, n_head_ca=2, dropout=0.0),
    num_segments=5, variants=("RATE", "DT"), seeds=3,
    training=training.Budget(num_steps=2000, chunks=1, batch_size=32, num_train=256, num_val=64, learning_rate=3e-3,
                             warmup_steps=20, weight_decay=0.01),
    eval_episodes=32)
# Closer to the authors' Minigrid-Memory RATE (training on size 31, random length, K*N = 90
# steps, 100 evaluation episodes per size), on CPU sizes: K = 20 (N = 3 holds the 59-step
# longest oracle episode at size 31), 4 layers, d 64, m = 15.
FULL = MinigridMemoryStudyConfig(
    train_size=31, random_length=True, eval_sizes=minigrid_memory.AUTHORS_EVAL_SIZES,
    base=rate_jax.ModelConfig(n_layer=4, d_model=64, n_head=4, d_head=16, d_inner=128, num_mem_tokens=15,
                              mem_len=0, n_head_ca=2, dropout=0.05),
    num_segments=3, variants=("RATE", "DT", "RMT", "TrXL"), seeds=3,
    training=training.Budget(num_steps=5000, chunks=10, batch_size=32, num_train=4000, num_val=200,
                             learning_rate=1e-3, warmup_steps=100, weight_decay=0.01),
    eval_episodes=100)


def cue_in_context(traj: rate_jax.Trajectories, segment_len: int, window: str = "restart") -> jax.Array:
    """[B] bool: the last observation holding the cue before the choice lies in DT's context at the
    choice c: its K-step window jK .. c (``window="restart"``: the context restarts every K steps) or
    c - K + 1 .. c (``"sliding"``: the last K steps, the authors' DT). ``traj.obs`` raw
    (object, colour, state) views; before the choice (``corridor_length``) the only key or
    ball in view is the cue (the end objects come into view only facing north at the split).
    False where the episode never reaches the choice (``corridor_length`` 0)."""
    objects = traj.obs[..., ::3]
    t = jnp.arange(traj.obs.shape[1])
    choice = traj.corridor_length[:, None]
    cue = jnp.any((objects == minigrid_memory.KEY) | (objects == minigrid_memory.BALL), -1) & (t < choice)
    last_cue = jnp.max(jnp.where(cue, t, -1), axis=1)
    if window not in training.DT_WINDOWS:
        raise ValueError(f"window must be one of {training.DT_WINDOWS}, got {window!r}")
    if window == "sliding":
        start = traj.corridor_length - segment_len + 1
    else:
        start = traj.corridor_length // segment_len * segment_len
    return (traj.corridor_length > 0) & (last_cue >= start)


def random_success(key: jax.Array, params: minigrid_memory.EnvParams, num_steps: int) -> jax.Array:
    """[E] bool: a uniformly random policy over the 3 actions reached the success cell within
    ``num_steps`` steps, one episode per entry of ``params``."""

    def episode(k, p):
        k_reset, k_run = jax.random.split(k)
        _, state = minigrid_memory.reset(k_reset, p)

        def body(carry, k_step):
            state, done, hit = carry
            action = jax.random.randint(k_step, (), 0, minigrid_memory.NUM_ACTIONS)
            _, state, _, step_done, info = minigrid_memory.step(None, state, action, p)
            return (state, done | step_done, hit | (~done & info["success"])), None

        init = (state, jnp.zeros((), bool), jnp.zeros((), bool))
        (_, _, hit), _ = jax.lax.scan(body, init, jax.random.split(k_run, num_steps))
        return hit

    return jax.vmap(episode)(jax.random.split(key, params.size.shape[0]), params)


def _references(config: MinigridMemoryStudyConfig, key: jax.Array) -> dict[str, np.ndarray]:
    """Per evaluation point [P]: the oracle's success, a random policy's, ``cue_in_dt_context``."""
    params = config.eval_params()
    k_oracle, k_random = jax.random.split(jax.random.fold_in(key, REFERENCE_TAG))
    steps = minigrid_memory.oracle_max_steps(max(s for s, _ in config.eval_points())) + 1
    traj = jax.jit(minigrid_memory.generate, static_argnums=2)(k_oracle, params, steps)
    per_point = lambda x: np.asarray(x, np.float64).reshape(-1, config.eval_episodes).mean(-1)
    return {"oracle": per_point(traj.rtg[:, 0] > 0),
            "random": per_point(jax.jit(random_success, static_argnums=2)(k_random, params, EVAL_STEPS)),
            "cue_in_dt_context": per_point(cue_in_context(traj, config.segment_len, config.dt_window))}


def compute(config: MinigridMemoryStudyConfig, ctx: RunContext) -> dict:
    """``success`` and ``chose`` (the episode ended beside an end object, right or wrong) {variant:
    [S, P, E]} for the evaluation points P (``eval_points``; RATE also with memory noise, ``NOISE``),
    ``val_choice_accuracy`` / ``val_accuracy`` {variant: [S]} (teacher forced: the choice, all
    actions), ``final_loss`` {variant: [S]}, and the references {name: [P]}."""
    keys = jnp.asarray(seeds.seed_keys(config.seeds, config.stream))
    eval_keys = jax.vmap(lambda k: jax.random.fold_in(k, EVAL_TAG))(keys)
    params = config.eval_params()
    success, chose, choice, accuracy, final_loss = {}, {}, {}, {}, {}
    tail = max(1, config.training.num_steps // 20)
    for variant in config.variants:
        tcfg = config.train_config(variant)
        state, curves, choice[variant], accuracy[variant] = training.train_seeds(
            ctx, variant, tcfg, config.seeds, config.stream, config.training.chunks)
        final_loss[variant] = curves["loss"][:, -tail:].mean(-1)
        noise = (False, True) if variant == "RATE" else (False,)
        results = training.evaluate_seeds(ctx, variant, tcfg.model, config.task, params, EVAL_STEPS, state.params,
                                          eval_keys, noise=noise, window=config.dt_window if variant == "DT" else "restart")
        shape = (config.seeds, len(config.eval_points()), config.eval_episodes)
        for arm, result in zip((variant, NOISE), results):
            success[arm], chose[arm] = (result[k].reshape(shape) for k in ("success", "chose"))
    return {"success": success, "chose": chose, "val_choice_accuracy": choice, "val_accuracy": accuracy, "final_loss": final_loss,
            **_references(config, keys[0])}


def _point_names(config: MinigridMemoryStudyConfig) -> list[str]:
    return ["train"] + [f"s{s}" for s in config.eval_sizes]


def summarize(config: MinigridMemoryStudyConfig, arrays: dict) -> Summary:
    """Success per model and evaluation point, the episodes that reached a choice (beside an end
    object, right or wrong; the rest were cut at 96 steps), RATE's margins over each baseline, the checks."""
    names = _point_names(config)
    metrics = {}
    for i, point in enumerate(names):
        for ref in ("oracle", "random", "cue_in_dt_context"):
            metrics[f"{ref}_{point}"] = arrays[ref][i]
    for variant in config.variants:
        key = METRIC_NAMES[variant]
        per_point, chose = (np.asarray(arrays[k][variant]).mean((0, 2)) for k in ("success", "chose"))
        for i, point in enumerate(names):
            metrics[f"{key}_success_{point}"] = per_point[i]
            metrics[f"{key}_chose_{point}"] = chose[i]
        for name in ("val_choice_accuracy", "val_accuracy", "final_loss"):
            metrics[f"{key}_{name}"] = np.asarray(arrays[name][variant]).mean()
    outside = [p for i, p in enumerate(names) if i > 0 and arrays["cue_in_dt_context"][i] <= OUTSIDE_FRACTION]
    for variant in config.variants:
        key = METRIC_NAMES[variant]
        metrics[f"{key}_success_cue_outside"] = np.mean([metrics[f"{key}_success_{p}"] for p in outside]) \
            if outside else np.nan
        if variant != "RATE":
            for point in names + ["cue_outside"]:
                metrics[f"rate_minus_{key}_success_{point}"] = (metrics[f"rate_success_{point}"]
                                                                - metrics[f"{key}_success_{point}"])
    metrics["sizes_cue_outside"] = len(outside)
    metrics["rate_noise_success_train"] = np.asarray(arrays["success"][NOISE])[:, 0].mean()
    metrics["rate_noise_chose_train"] = np.asarray(arrays["chose"][NOISE])[:, 0].mean()
    metrics = {k: float(v) for k, v in metrics.items()}
    per_seed = {arm: np.asarray(arrays["success"][arm]).mean(-1) for arm in ("RATE", NOISE, "DT")}  # [S, P]
    cols = [i for i, p in enumerate(names) if p in outside]

    def outside_mean(x):  # [S]: the mean over the sizes with the cue outside DT's context (NaN if none)
        return x[:, cols].mean(-1) if cols else np.full(x.shape[0], np.nan)

    gap, ctrl = (per_seed[arm] - per_seed["DT"] for arm in ("RATE", NOISE))  # paired: the same seeds, [S, P]
    found = [TRAIN_CLAIM.judge(gap[:, 0], control=ctrl[:, 0]),
             OUTSIDE_CLAIM.judge(outside_mean(gap), control=outside_mean(ctrl))]
    table = {"point": names, "size": [s for s, _ in config.eval_points()],
             "length": ["random" if r else "fixed" for _, r in config.eval_points()],
             **{ref: [metrics[f"{ref}_{p}"] for p in names] for ref in ("oracle", "random", "cue_in_dt_context")},
             **{v: [metrics[f"{METRIC_NAMES[v]}_success_{p}"] for p in names] for v in config.variants},
             **{f"{v} chose": [metrics[f"{METRIC_NAMES[v]}_chose_{p}"] for p in names] for v in config.variants}}
    return Summary(metrics=metrics, checks=found, tables={"table": table})


def _figure(config: MinigridMemoryStudyConfig, arrays: dict, path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    sizes = np.asarray(config.eval_sizes)
    for i, variant in enumerate(config.variants):
        per_seed = np.asarray(arrays["success"][variant]).mean(-1)  # [S, P]
        ax.plot(sizes, per_seed[:, 1:].mean(0), "o-", color=f"C{i}", label=variant)
        ax.plot(np.repeat(sizes[None], len(per_seed), 0).ravel(), per_seed[:, 1:].ravel(), ".", color=f"C{i}", ms=3)
        ax.plot([config.train_size], [per_seed[:, 0].mean()], "*", color=f"C{i}", ms=12)
    ax.plot(sizes, arrays["oracle"][1:], "k--", lw=0.8, label="oracle")
    ax.plot(sizes, arrays["random"][1:], "k:", lw=0.8, label="uniform random policy")
    ax.axhline(0.5, color="grey", lw=0.5)
    length = "random" if config.random_length else "fixed"
    ax.set_xlabel(f"corridor size (star: the training task, size {config.train_size}, {length} length; "
                  "lines: random length)", fontsize=8)
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.05)
    ax.set_title("MiniGrid-Memory: online success (small dots: seeds)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    io.save_figure(fig, path)


def write(config: MinigridMemoryStudyConfig, arrays: dict, summary: Summary, out_dir) -> None:
    """``success.csv`` (point, size, model, seed, success, chose: the fraction of episodes that
    reached a choice), ``minigrid_memory.npz`` (every episode's success and choice), ``success_vs_size.png``."""
    names = _point_names(config)
    arms = (*config.variants, NOISE)
    rows = [(p, s, v, seed, *(float(np.asarray(arrays[k][v])[seed, i].mean()) for k in ("success", "chose")))
            for i, (p, (s, _)) in enumerate(zip(names, config.eval_points())) for v in arms
            for seed in range(config.seeds)]
    columns = ("point", "size", "model", "seed", "success", "chose")
    io.write_csv(out_dir / "success.csv", {col: [r[j] for r in rows] for j, col in enumerate(columns)})
    io.save_npz(out_dir / "minigrid_memory.npz", **{f"{k}_{v}": np.asarray(arrays[k][v]) for k in ("success", "chose")
                                                   for v in arms})
    _figure(config, arrays, out_dir / "success_vs_size.png")


STUDY = register(Study(
    name="rate.minigrid_memory",
    cost_fields=("training.num_steps", "training.warmup_steps", "eval_episodes"),
    summary="RATE vs DT/RMT/TrXL on MiniGrid-Memory: online success against corridor size (11 .. 91)",
    config_type=MinigridMemoryStudyConfig, quick=QUICK, full=FULL, compute=compute, summarize=summarize,
    write=write, seeds_field="seeds", claims=(TRAIN_CLAIM, OUTSIDE_CLAIM),
    quick_s=230,
))

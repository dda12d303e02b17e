"""Study ``regret.cce`` (paper section 3.4, spec 9): CCE gap of regret-loss-trained models in self-play.

Game: the weighted zero-sum rock-paper-scissors of spec 9.2, instance (i) ("scissors'
wins and losses count double", ``regret_jax.WEIGHTED_RPS``, equilibrium marginal
x* = y* = (0.4, 0.4, 0.2)); recorded in the config as ``game``.  Protocol (spec 9.3):
both players run the same learner, with expected full-information feedback
l^1_t = -A y_t, l^2_t = A^T x_t, for T rounds; the gap is the maximum CCE-deviation
gap of the time-averaged joint mixed play sigma_t = (1/t) sum_{s<=t} x_s y_s^T.

Learners: uniform play; entropic FTRL at the Theorem-1 root eta* of (d = 3, T); and
the 1-, 2- and 4-layer models trained on the squared regret loss Eq. (6) on
N(0, I_3) sequences of length T (seeds vmapped), never on the game.  Reading of "the
one-layer model" (the paper does not say more): the reduced single-layer
self-attention of Eq. (2) trained in section 3.2 (``model="attention"``); the 2- and
4-layer models are the section-3.3 causal softmax Transformers with 4 heads.  The
Transformers have learned positions up to the training length, so the game horizon
equals their training T.
"""
from __future__ import annotations

import dataclasses

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import regret_jax as rj  # noqa: E402
from experiments import io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, study  # noqa: E402
from experiments.studies.regret_stationarity import root_at  # noqa: E402
from experiments.studies.regret_training import train_seeds  # noqa: E402

FAR_BELOW = 0.5  # "far below uniform": final CCE gap at most half of uniform play's (1/3)
UNIFORM_TOL = 1e-6  # float32 rounding of the exact uniform gap 1/3


@dataclasses.dataclass(frozen=True)
class CCEConfig:
    """The 1-layer model's and the Transformers' training runs; the game horizon is their T."""

    attention: rj.TrainConfig  # the one-layer model (model="attention")
    transformer: rj.TrainConfig  # num_layers is replaced by each depth
    depths: tuple[int, ...] = (2, 4)  # may be empty (only the one-layer model)
    num_seeds: int = 3
    scan_sequences: int = 8000

    def __post_init__(self):
        if self.attention.model != "attention":
            raise ValueError(f"attention.model must be 'attention', got {self.attention.model!r}")
        if self.transformer.model != "transformer":
            raise ValueError(f"transformer.model must be 'transformer', got {self.transformer.model!r}")
        for name in ("attention", "transformer"):
            if getattr(self, name).d != rj.WEIGHTED_RPS.shape[0]:
                raise ValueError(f"{name}.d must be {rj.WEIGHTED_RPS.shape[0]} (actions of the game), got {getattr(self, name).d}")
        if self.attention.T != self.transformer.T:
            raise ValueError(f"attention.T must equal transformer.T (the game horizon), got {self.attention.T} and {self.transformer.T}")
        if self.depths and min(self.depths) < 2:
            raise ValueError(f"every depth must be >= 2 (depth 1 is the attention model), got {self.depths}")
        if self.num_seeds < 2:
            raise ValueError(f"num_seeds must be >= 2 (a std over seeds is reported), got {self.num_seeds}")
        if self.scan_sequences < 1000:
            raise ValueError(f"scan_sequences must be >= 1000, got {self.scan_sequences}")

    @property
    def T(self) -> int:
        return self.transformer.T

    def models(self) -> dict[str, rj.TrainConfig]:
        """Training config per reported model name ("1layer", "2layer", ...)."""
        deep = {f"{L}layer": dataclasses.replace(self.transformer, num_layers=L) for L in self.depths}
        return {"1layer": self.attention, **deep}


# Quick Transformers (engineer's choices, spec 8.2; regret_jax.train and .transformer):
# the centred estimate of the Eq. (6) gradient (same expected gradient, lower variance),
# warmup + cosine decay from a peak rate 1e-2, and a zero read-out (uniform policies at
# init).  With these, 600 steps reach a held-out Eq. (6) loss of about 36.7-36.9 (FTRL at
# eta* 36.5, uniform 47.1) where 1200 plain constant-rate steps stopped near 39.7.
QUICK = CCEConfig(
    attention=rj.TrainConfig(model="attention", d=3, T=50, batch_size=128, num_steps=600, learning_rate=2e-2),
    transformer=rj.TrainConfig(model="transformer", d=3, T=50, batch_size=32, num_steps=600, learning_rate=1e-2, d_model=16,
                               schedule="warmup_cosine", warmup_steps=60, zero_readout=True, centered=True),
    num_seeds=2,
)
# Paper size (section 3.4 / Figure 4 left; the paper's T and model sizes are lost, these are ours):
# T = 200 rounds, d_model 64, 3 seeds.  Sized for an accelerator.
FULL = CCEConfig(
    attention=rj.TrainConfig(model="attention", d=3, T=200, batch_size=512, num_steps=4000, learning_rate=1e-2),
    transformer=rj.TrainConfig(model="transformer", d=3, T=200, batch_size=128, num_steps=8000, learning_rate=1e-3, d_model=64),
    scan_sequences=40_000,
)


def equilibrium(A: np.ndarray) -> np.ndarray:
    """The equilibrium strategy of a symmetric zero-sum game with skew-symmetric A: the x in the simplex with A x = 0.

    For weighted RPS [[0, -a, b], [a, 0, -c], [-b, c, 0]] this is (c, b, a) / (a + b + c)
    (spec 9.2); here it is computed as the null vector of A, independently of that formula.
    """
    x = np.linalg.svd(A)[2][-1]
    return x / x.sum()


def self_play_seeds(module, variables, game: rj.GameParams, T: int) -> rj.SelfPlay:
    """Self-play of every seed's model against itself (spec 9.3); variables [S, ...] -> SelfPlay with leading S."""
    d = game.row_payoff.shape[0]

    def one(v):
        learner = rj.sequence_model_learner(module, v, T, d)
        return rj.self_play(learner, learner, game, T)

    return jax.vmap(one)(variables)


def _figure(gaps: dict[str, np.ndarray], path) -> None:
    """gap_CCE(t) per learner; learned models: mean over seeds with a min-max band."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, g in gaps.items():
        g = g.reshape(-1, g.shape[-1])
        t = np.arange(1, g.shape[-1] + 1)
        ax.plot(t, g.mean(0), label=name)
        if g.shape[0] > 1:
            ax.fill_between(t, g.min(0), g.max(0), alpha=0.2)
    ax.set(xscale="log", yscale="log", xlabel="t", ylabel="max CCE-deviation gap",
           title="weighted RPS self-play, expected feedback (ftrl at eta*)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    io.save_figure(fig, path)


def cce_study(config: CCEConfig, ctx: RunContext) -> StudyOutput:
    """Train the 1-, 2-, 4-layer models, self-play every learner in weighted RPS, write gaps, curves and figure."""
    T, d = config.T, rj.WEIGHTED_RPS.shape[0]
    game = rj.zero_sum_game(rj.WEIGHTED_RPS)
    x_star = equilibrium(rj.WEIGHTED_RPS)
    root, compile_s = root_at(d, T, config.scan_sequences, ctx.checkpoint_dir("scan"), ctx.resume)
    eta = root["eta_star"]
    play = jax.jit(lambda learner: rj.self_play(learner, learner, game, T))
    runs = {"uniform": play(rj.uniform_learner(d)), "ftrl": play(rj.attention_learner(rj.ftrl_params(d, eta)))}
    metrics = {}
    for name, tc in config.models().items():
        res = train_seeds(ctx, tc, config.num_seeds, f"train_{name}")
        compile_s += res.compile_s
        runs[name] = jax.jit(lambda v, module=rj.build_model(tc): self_play_seeds(module, v, game, T))(res.outputs.variables)
        metrics[f"gap_cce_{name}_std"] = float(np.std(np.asarray(runs[name].gap_cce[:, -1]), ddof=1))
        metrics[f"final_train_loss_{name}"] = float(np.mean(res.outputs.loss_curve[:, -50:]))

    gaps = {name: np.asarray(r.gap_cce) for name, r in runs.items()}  # [T] or [S, T]
    for name, r in runs.items():
        metrics[f"gap_cce_{name}"] = float(gaps[name][..., -1].mean())
        metrics[f"gap_cce_{name}_second_half_mean"] = float(gaps[name][..., T // 2:].mean())
        marginal = np.asarray(r.row_policy).mean(axis=-2)  # time-averaged row strategy, [d] or [S, d]
        metrics[f"dist_to_equilibrium_{name}"] = float(np.abs(marginal - x_star).sum(axis=-1).mean())
    metrics.update(eta_star=eta, kappa_star=root["kappa_star"], eta_star_se=root["se"])

    io.write_csv(ctx.out_dir / "cce_gap.csv", {"t": np.arange(1, T + 1), **{k: g.reshape(-1, T).mean(0) for k, g in gaps.items()}})
    io.save_npz(ctx.out_dir / "cce_gap.npz", **gaps)
    _figure(gaps, ctx.out_dir / "cce_gap.png")

    u = metrics["gap_cce_uniform"]
    checks = [Check("uniform_gap_is_one_third", u, f"|gap_cce_uniform - 1/3| < {UNIFORM_TOL}", abs(u - 1 / 3) < UNIFORM_TOL)]
    checks += [
        Check(f"{name}_far_below_uniform", metrics[f"gap_cce_{name}"] / u, f"gap_cce_{name} / gap_cce_uniform < {FAR_BELOW}",
              metrics[f"gap_cce_{name}"] / u < FAR_BELOW)
        for name in ("ftrl", *config.models())
    ]
    return StudyOutput(
        config={"T": T, "eta": eta, "game": rj.WEIGHTED_RPS.tolist(), "equilibrium": x_star.tolist(), "num_seeds": config.num_seeds,
                "feedback": "expected full information", "one_layer_model": "reduced Eq. (2) attention (section 3.2)",
                "models": {k: dataclasses.asdict(v) for k, v in config.models().items()}, "scan_sequences": config.scan_sequences,
                "train_law": "N(0, I_3)", "optimiser": "adam + global-norm clip (schedule per model)"},
        metrics=metrics, checks=checks, paper={}, compile_s=compile_s,
    )


@study("regret.cce", "Sec. 3.4: CCE gap of 1-, 2-, 4-layer regret-trained models in weighted RPS self-play")
def run(ctx: RunContext) -> StudyOutput:
    config = QUICK if ctx.quick else FULL
    if ctx.seeds is not None:
        config = dataclasses.replace(config, num_seeds=ctx.seeds)
    return cce_study(config, ctx)

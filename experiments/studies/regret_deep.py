"""Study ``regret.deep`` (paper section 3.3, spec 8): deeper causal softmax Transformers on the regret loss.

2- and 4-layer causal softmax Transformers with 4 heads per layer
(:class:`regret_jax.CausalTransformer`, architecture of spec 8.2, engineer's choice)
are trained on the same objective as the single-layer model, squared external regret
Eq. (6) on N(0, I_d) sequences, seeds ``jax.vmap``-ed in one program.  No FTRL fit.
Evaluation is on held-out *biased*-Gaussian sequences l_t ~ N(mu, I_d), one mean per
sequence, mu ~ N(0, bias_scale^2 I_d) (our choice of the unknown law of mu, spec 8.2):
the sequence-specific mean makes a best action that must be learned from history.
Cumulative regret Reg(t) (spec 8.1) is compared with uniform play (linear growth,
spec 8.3) and with entropic FTRL at the Theorem-1 root eta* of the same (d, T).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import regret_jax as rj  # noqa: E402
from experiments import io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, study  # noqa: E402
from experiments.studies.regret_stationarity import root_at  # noqa: E402
from experiments.studies.regret_training import train_seeds  # noqa: E402

FAR_BELOW = 0.5  # "far below uniform": final regret at most half of uniform play's


@dataclasses.dataclass(frozen=True)
class DeepConfig:
    """The Transformer training run (``num_layers`` is replaced by each depth) and the evaluation."""

    train: rj.TrainConfig
    depths: tuple[int, ...] = (2, 4)
    num_seeds: int = 3
    heldout_sequences: int = 2000
    bias_scale: float = 1.0  # mu ~ N(0, bias_scale^2 I_d) per held-out sequence
    scan_sequences: int = 8000
    eval_batch: int = 500  # held-out sequences per evaluation batch (memory only)

    def __post_init__(self):
        if self.train.model != "transformer":
            raise ValueError(f"train.model must be 'transformer', got {self.train.model!r}")
        if not self.depths or min(self.depths) < 1:
            raise ValueError(f"depths must be non-empty with every depth >= 1, got {self.depths}")
        if self.num_seeds < 2:
            raise ValueError(f"num_seeds must be >= 2 (a std over seeds is reported), got {self.num_seeds}")
        if self.heldout_sequences < 10 or self.eval_batch < 1:
            raise ValueError(f"heldout_sequences must be >= 10 and eval_batch >= 1, got {self.heldout_sequences}, {self.eval_batch}")
        if not self.bias_scale > 0:
            raise ValueError(f"bias_scale must be > 0, got {self.bias_scale}")
        if self.scan_sequences < 1000:
            raise ValueError(f"scan_sequences must be >= 1000, got {self.scan_sequences}")

    def depth_config(self, depth: int) -> rj.TrainConfig:
        return dataclasses.replace(self.train, num_layers=depth)


QUICK = DeepConfig(rj.TrainConfig(model="transformer", d=3, T=25, batch_size=32, num_steps=1500, learning_rate=3e-3, d_model=16),
                   num_seeds=2, heldout_sequences=1000)
# Paper size (section 3.3 / Figure 2 right; the paper's d, T and model sizes are lost, these are ours):
# d = 5 actions, T = 100 rounds, d_model 64, 3 seeds.  Sized for an accelerator.
FULL = DeepConfig(rj.TrainConfig(model="transformer", d=5, T=100, batch_size=128, num_steps=8000, learning_rate=1e-3, d_model=64),
                  heldout_sequences=4000, scan_sequences=40_000)


def biased_sequences(key: jax.Array, num: int, T: int, d: int, bias_scale: float) -> tuple[jax.Array, jax.Array]:
    """Biased-Gaussian held-out sequences l_t ~ N(mu, I_d), mu ~ N(0, bias_scale^2 I_d) per sequence (spec 8.1).

    Returns (losses [num, T, d], mu [num, d]).
    """
    mean_key, loss_key = jax.random.split(key)
    mu = bias_scale * jax.random.normal(mean_key, (num, d))
    return rj.sample_losses(loss_key, num, T, d, mean=mu), mu


def model_regret_curves(model, variables, losses: jax.Array, batch: int) -> jax.Array:
    """Reg(t) of every seed's model on every sequence: variables [S, ...], losses [N, T, d] -> [S, N, T].

    Seeds are vmapped; sequences go through ``lax.map`` in batches of ``batch`` (memory).
    """
    def one(l):
        return jax.vmap(lambda v: rj.cumulative_regret(model.apply(v, l), l))(variables)

    return jnp.moveaxis(jax.lax.map(one, losses, batch_size=batch), 0, 1)


def baseline_regret_curves(losses: jax.Array, eta) -> dict[str, jax.Array]:
    """Reg(t) [N, T] of uniform play and of entropic FTRL softmax(-eta L_{t-1}) (spec 2.3, 8.3)."""
    uniform = jnp.full_like(losses, 1.0 / losses.shape[-1])
    ftrl = jax.vmap(rj.ftrl_policies, in_axes=(0, None))(losses, eta)
    return {"uniform": jax.vmap(rj.cumulative_regret)(uniform, losses),
            "ftrl": jax.vmap(rj.cumulative_regret)(ftrl, losses)}


def _figure(curves: dict[str, np.ndarray], path) -> None:
    """Mean Reg(t) with a +-1 standard-error band over (seed, sequence) pairs."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in curves.items():
        flat = c.reshape(-1, c.shape[-1])
        mean, se = flat.mean(0), flat.std(0) / np.sqrt(flat.shape[0])
        t = np.arange(1, flat.shape[-1] + 1)
        ax.plot(t, mean, label=name)
        ax.fill_between(t, mean - se, mean + se, alpha=0.25)
    ax.set(xlabel="t", ylabel="cumulative regret Reg(t)", title="held-out biased-Gaussian sequences (ftrl at eta*)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    io.save_figure(fig, path)


def deep_study(config: DeepConfig, ctx: RunContext) -> StudyOutput:
    """Train every depth, evaluate all learners on the same held-out sequences, write curves and figure."""
    tc = config.train
    d, T = tc.d, tc.T
    root, compile_s = root_at(d, T, config.scan_sequences, ctx.checkpoint_dir("scan"), ctx.resume)
    eta = root["eta_star"]
    biased, mu = biased_sequences(jax.random.key(123), config.heldout_sequences, T, d, config.bias_scale)
    gauss = jax.random.normal(jax.random.key(321), (config.heldout_sequences, T, d))
    baselines = jax.jit(baseline_regret_curves)
    curves = {k: np.asarray(v) for k, v in baselines(biased, eta).items()}
    sq_regret = {k: float(np.mean(np.asarray(v)[:, -1] ** 2)) for k, v in baselines(gauss, eta).items()}
    metrics = {}
    for depth in config.depths:
        name = f"{depth}layer"
        dc = config.depth_config(depth)
        res = train_seeds(ctx, dc, config.num_seeds, f"train_{name}")
        compile_s += res.compile_s
        evaluate = jax.jit(lambda v, l, model=rj.build_model(dc): model_regret_curves(model, v, l, config.eval_batch))
        curves[name] = np.asarray(evaluate(res.outputs.variables, biased))  # [S, N, T]
        sq_regret[name] = float(np.mean(np.asarray(evaluate(res.outputs.variables, gauss))[..., -1] ** 2))
        per_seed = curves[name][..., -1].mean(axis=1)
        metrics[f"regret_final_{name}_seed_std"] = float(per_seed.std(ddof=1))
        metrics[f"final_train_loss_{name}"] = float(np.mean(res.outputs.loss_curve[:, -50:]))

    for name, c in curves.items():
        final = c[..., -1]
        metrics[f"regret_final_{name}"] = float(final.mean())
        metrics[f"regret_final_{name}_std"] = float(final.std())
        metrics[f"normalized_regret_{name}"] = float(final.mean() / T)
        metrics[f"sq_regret_gauss_{name}"] = sq_regret[name]
    gap = np.asarray(jnp.mean(mu, axis=-1) - jnp.min(mu, axis=-1))
    metrics.update(eta_star=eta, kappa_star=root["kappa_star"], eta_star_se=root["se"],
                   uniform_linear_reference=float(T * gap.mean()), sq_regret_gauss_uniform_exact=rj.exact_F0(d, T))

    mean_curves = {name: c.reshape(-1, T).mean(axis=0) for name, c in curves.items()}
    io.write_csv(ctx.out_dir / "regret_curves.csv", {"t": np.arange(1, T + 1), **mean_curves})
    io.save_npz(ctx.out_dir / "regret_curves.npz", mu=np.asarray(mu), **curves)
    _figure(curves, ctx.out_dir / "regret_curves.png")

    u = metrics["regret_final_uniform"]
    checks = [
        Check(f"{depth}layer_far_below_uniform", metrics[f"regret_final_{depth}layer"] / u,
              f"Reg_{depth}layer(T) / Reg_uniform(T) < {FAR_BELOW} (means over seeds and sequences)",
              metrics[f"regret_final_{depth}layer"] / u < FAR_BELOW)
        for depth in config.depths
    ]
    return StudyOutput(
        config={**dataclasses.asdict(tc), "depths": list(config.depths), "num_seeds": config.num_seeds,
                "heldout_sequences": config.heldout_sequences, "bias_law": f"mu ~ N(0, {config.bias_scale}^2 I_d) per sequence",
                "bias_scale": config.bias_scale, "train_law": "N(0, I_d)", "eta": eta, "scan_sequences": config.scan_sequences,
                "optimiser": "adam + global-norm clip"},
        metrics=metrics, checks=checks, paper={}, compile_s=compile_s,
    )


@study("regret.deep", "Sec. 3.3: 2- and 4-layer causal softmax Transformers on the regret loss, regret on biased sequences")
def run(ctx: RunContext) -> StudyOutput:
    config = QUICK if ctx.quick else FULL
    if ctx.seeds is not None:
        config = dataclasses.replace(config, num_seeds=ctx.seeds)
    return deep_study(config, ctx)

"""Study ``regret.ftrl_match`` (paper section 3.2, spec 7): does regret-loss training find entropic FTRL?

The reduced Eq. (2) model is trained from random initialisation with the squared
regret loss on N(0, I_d) sequences (3 seeds, ``jax.vmap`` over keys, no FTRL
supervision).  On held-out sequences a scalar eta_hat is fitted per seed by policy MSE
against softmax(-eta L_{t-1}) (spec 7.2) and compared with the root eta* of the
Theorem-1 scan at the same (d, T) (``regret.stationarity``'s estimator).
Metrics as in Figure 2(a): eta_hat mean/std, policy MSE, mean TV (% mass) and the
error per action in percentage points, read as 100 mean ||.||_1 / d (spec 7.3, [U]).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import regret_jax as rj
from experiments import io
from experiments.registry import Check, RunContext, StudyOutput, study
from experiments.studies.regret_stationarity import root_at
from experiments.studies.regret_training import train_seeds

TV_MAX = 0.10  # learned policy within 10% total-variation mass of the fitted FTRL policy
ETA_REL_MAX = 0.25  # |mean eta_hat - eta*| / eta* allowed


@dataclasses.dataclass(frozen=True)
class MatchConfig:
    train: rj.TrainConfig
    num_seeds: int = 3
    heldout_sequences: int = 2000
    scan_sequences: int = 16_000

    def __post_init__(self):
        if self.num_seeds < 2:
            raise ValueError(f"num_seeds must be >= 2 (a std is reported), got {self.num_seeds}")
        if self.heldout_sequences < 100 or self.scan_sequences < 1000:
            raise ValueError("heldout_sequences must be >= 100 and scan_sequences >= 1000")


QUICK = MatchConfig(rj.TrainConfig(model="attention", d=3, T=25, batch_size=256, num_steps=1000, learning_rate=2e-2))
FULL = MatchConfig(rj.TrainConfig(model="attention", d=5, T=50, batch_size=512, num_steps=4000, learning_rate=1e-2),
                   heldout_sequences=8000, scan_sequences=40_000)


def fit_seed(model, variables, heldout: jax.Array, etas: jax.Array) -> dict:
    """eta_hat, policy MSE, TV and error/action of one trained model on held-out sequences."""
    pols = jax.vmap(model.apply, in_axes=(None, 0))(variables, heldout)
    eta = rj.fit_eta(pols, heldout, etas)
    ref = jax.vmap(rj.ftrl_policies, in_axes=(0, None))(heldout, eta)
    l1 = jnp.mean(jnp.sum(jnp.abs(pols - ref), axis=-1))
    return {"eta_hat": eta, "mse": rj.policy_mse(pols, heldout, eta), "tv_pct": 50 * l1,
            "err_per_action_pp": 100 * l1 / heldout.shape[-1],
            "heldout_loss": rj.squared_regret_loss(pols, heldout)}


@study("regret.ftrl_match", "Sec. 3.2: regret-loss-trained attention vs entropic FTRL, eta_hat vs eta*")
def run(ctx: RunContext) -> StudyOutput:
    config = QUICK if ctx.quick else FULL
    num_seeds = ctx.seeds or config.num_seeds
    tc = config.train
    res = train_seeds(ctx, tc, num_seeds)
    model = rj.build_model(tc)
    heldout = jax.random.normal(jax.random.key(123), (config.heldout_sequences, tc.T, tc.d))
    etas = jnp.geomspace(0.05, 8.0, 60) / np.sqrt(tc.T)
    fit = jax.jit(lambda v, h: fit_seed(model, v, h, etas))  # held-out data as an argument, not a constant
    per_seed = [jax.tree.map(float, fit(jax.tree.map(lambda x: x[s], res.outputs.variables), heldout)) for s in range(num_seeds)]

    root, scan_compile = root_at(tc.d, tc.T, config.scan_sequences, ctx.checkpoint_dir("scan"), ctx.resume)
    eta_star, eta_se = root["eta_star"], root["se"]

    def stat(name):
        vals = np.array([p[name] for p in per_seed])
        return float(vals.mean()), float(vals.std(ddof=1))

    metrics = {}
    for name in ("eta_hat", "mse", "tv_pct", "err_per_action_pp", "heldout_loss"):
        metrics[f"{name}_mean"], metrics[f"{name}_std"] = stat(name)
    metrics.update(eta_star=eta_star, eta_star_se=eta_se, kappa_hat=metrics["eta_hat_mean"] * np.sqrt(tc.T),
                   kappa_star=eta_star * np.sqrt(tc.T), uniform_loss=rj.exact_F0(tc.d, tc.T),
                   final_train_loss=float(np.mean(res.outputs.loss_curve[:, -50:])))
    io.write_csv(ctx.out_dir / "seeds.csv", {"seed": list(range(num_seeds)), **{k: [p[k] for p in per_seed] for k in per_seed[0]}})
    io.save_npz(ctx.out_dir / "loss_curves.npz", loss_curve=res.outputs.loss_curve)
    rel = abs(metrics["eta_hat_mean"] - eta_star) / eta_star
    checks = [
        Check("policy_close_to_ftrl", metrics["tv_pct_mean"] / 100, f"mean TV to fitted FTRL < {TV_MAX}", metrics["tv_pct_mean"] / 100 < TV_MAX),
        Check("eta_hat_near_eta_star", rel, f"|mean eta_hat - eta*| / eta* < {ETA_REL_MAX}", rel < ETA_REL_MAX),
        Check("trained_beats_uniform", metrics["heldout_loss_mean"] / metrics["uniform_loss"], "held-out E[R^2] / F(0) < 0.9",
              metrics["heldout_loss_mean"] / metrics["uniform_loss"] < 0.9),
    ]
    return StudyOutput(
        config={**dataclasses.asdict(tc), "num_seeds": num_seeds, "heldout_sequences": config.heldout_sequences,
                "scan_sequences": config.scan_sequences, "optimiser": "adam + global-norm clip", "init": "N(0, init_scale^2), b = 1"},
        metrics=metrics, checks=checks, paper={}, compile_s=res.compile_s + scan_compile,
    )

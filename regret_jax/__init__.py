"""regret_jax: regret-loss-trained linear self-attention on the probability simplex.

Implements "Training with (Swap) Regret Loss in a Single-Layer Self-Attention Model: A
Case Study on the Probability Simplex" (seed 002; equations reconstructed in
shared/regret_spec.md): the Eq. (1)-(2) attention with softmax, external and swap
regret, the squared regret loss, the Theorem-1 ray scan, entropic FTRL, the d-head
fixed-point (Blum-Mansour) model and its swap loss, and equilibrium gaps in games.
"""
from regret_jax.attention import (
    AttentionLogits,
    MultiHeadSimplexAttention,
    SimplexAttention,
    bm_params,
    causal_logits,
    ftrl_params,
    full_to_reduced,
    head_matrix,
    token_contributions,
)
from regret_jax.fixed_point import fixed_point, power_iteration
from regret_jax.ftrl import fit_eta, ftrl_policies, policy_mse
from regret_jax.games import (
    WEIGHTED_RPS,
    Feedback,
    GameParams,
    GameState,
    JointPolicy,
    SelfPlay,
    ce_gap,
    cce_gap,
    reset,
    self_play,
    step,
    swap_gap,
    zero_sum_game,
)
from regret_jax.learners import (
    Learner,
    Rollout,
    attention_learner,
    run_online,
    sequence_model_learner,
    swap_learner,
    uniform_learner,
)
from regret_jax.regret import cumulative_regret, external_regret, head_regrets, swap_regret
from regret_jax.regret_loss import sample_losses, squared_regret_loss, swap_regret_loss
from regret_jax.stationarity import (
    RayEstimate,
    Root,
    block_gradients,
    exact_dF0,
    exact_F0,
    find_root,
    mu_d,
    ray_estimate,
    ray_regret,
    swap_ray_regret,
)
from regret_jax.train import MODELS, TrainConfig, TrainOutput, build_model, make_loss, make_train
from regret_jax.transformer import CausalTransformer

__all__ = [
    "AttentionLogits",
    "CausalTransformer",
    "Feedback",
    "GameParams",
    "GameState",
    "JointPolicy",
    "Learner",
    "MODELS",
    "MultiHeadSimplexAttention",
    "RayEstimate",
    "Rollout",
    "Root",
    "SelfPlay",
    "SimplexAttention",
    "TrainConfig",
    "TrainOutput",
    "WEIGHTED_RPS",
    "attention_learner",
    "block_gradients",
    "bm_params",
    "build_model",
    "causal_logits",
    "cce_gap",
    "ce_gap",
    "cumulative_regret",
    "exact_F0",
    "exact_dF0",
    "external_regret",
    "find_root",
    "fit_eta",
    "fixed_point",
    "ftrl_params",
    "ftrl_policies",
    "full_to_reduced",
    "head_matrix",
    "head_regrets",
    "make_loss",
    "make_train",
    "mu_d",
    "policy_mse",
    "power_iteration",
    "ray_estimate",
    "ray_regret",
    "reset",
    "run_online",
    "sample_losses",
    "self_play",
    "sequence_model_learner",
    "squared_regret_loss",
    "step",
    "swap_gap",
    "swap_learner",
    "swap_ray_regret",
    "swap_regret",
    "swap_regret_loss",
    "token_contributions",
    "uniform_learner",
    "zero_sum_game",
]

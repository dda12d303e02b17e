"""uat_jax: the Utility-Augmented Transformer (UAT) on DarkRoom, with its baselines,
ablations and theory checks, after "Breaking Feedback-Blindness: Utility-Augmented
Transformer for Sequential Decision Making" (UAT, arXiv 2607.18910): Domain A (DarkRoom), the
Domain B environment (``sepsis``, on the ICU-Sepsis tables) and its offline-RL baseline
(``iql``), Domain C (``markets_data``, OHLCV
files; ``markets``, portfolio training and evaluation) and Domain D (``recsys_data``, MovieLens
files; ``recsys``, teacher-forced training and ranking). ``markets_data``, ``markets``,
``recsys_data`` and ``recsys`` are imported on their own (they read files with pandas and TA-Lib).
Derivations and readings: ``docs/uat.md``."""
from uat_jax import cells, darkroom, domains, iql, schedules, sepsis, theory, tta
from uat_jax.attention import FeedbackAttention, KVCache
from uat_jax.config import ABLATIONS, KINDS, SWITCHED, ModelConfig, ablation, member, switch_table
from uat_jax.feedback import CORRUPTIONS, NO_ACTION, FeedbackChannel, corrupt, corrupt_episode, shift
from uat_jax.gtrxl import GRUGate
from uat_jax.model import DecisionTransformer, DecodeCache, init_cache, init_params, sequence_logits
from uat_jax.rollout import Trajectory, accuracy, efficiency, play, rollout
from uat_jax.schedules import SCHEDULES, goal_at
from uat_jax.train import (Task, TrainConfig, TrainResult, cross_entropy,
                           make_evaluate, make_optimizer, make_train)
from uat_jax.utility import GateReadout, Switches, UtilityEncoder, regime_state

__all__ = [
    "ABLATIONS", "CORRUPTIONS", "KINDS", "NO_ACTION", "SCHEDULES", "SWITCHED",
    "DecisionTransformer", "DecodeCache", "FeedbackAttention", "FeedbackChannel",
    "GRUGate", "GateReadout", "KVCache", "ModelConfig", "Switches", "Task", "TrainConfig", "TrainResult",
    "Trajectory", "UtilityEncoder",
    "ablation", "accuracy", "cells", "corrupt", "corrupt_episode", "cross_entropy", "darkroom", "domains",
    "efficiency", "goal_at", "init_cache", "iql", "init_params", "make_evaluate", "make_optimizer",
    "make_train", "member", "play", "regime_state", "rollout", "schedules", "sepsis", "sequence_logits", "shift", "switch_table", "theory", "tta",
]

"""rate_jax: RATE (Recurrent Action Transformer with memory), its baselines, T-Maze, MRV retention.

Paper: "Recurrent Action Transformer with Memory" (RATE; Cherepanov et al., arXiv
2306.09459, ICLR 2026 version); semantics follow the authors' code
(CognitiveAISystems/RATE). One module per idea:
``config`` (model sizes, baselines as configurations), ``masks`` (segment mask),
``attention`` (Transformer-XL relative attention), ``mrv`` (Memory Retention Valve),
``model`` (segment processing and recurrence), ``tmaze`` (environment), ``popgym`` (POPGym
memory tasks: RepeatPrevious, Autoencode, CountRecall, with oracle datasets), ``minigrid_memory``
(MiniGrid's Memory task, oracle and datasets), ``bc_lstm`` (the BC-LSTM baseline), ``tasks`` (those two as training data and
evaluation environments), ``dataset``
(oracle data), ``train`` (``make_train``; ``make_chunk`` for chunked runs), ``evaluate`` (online success rate),
``retention`` (the MRV retention bound and its assumptions).
"""
from rate_jax import bc_lstm, minigrid_memory, popgym, tasks, tmaze
from rate_jax.config import DT_CONTEXTS, MRV_ACTIVATIONS, VARIANTS, ModelConfig, variant
from rate_jax.dataset import Trajectories, generate, mirror, sample_corridor_lengths, segment_corridor_lengths
from rate_jax.evaluate import (EvalResult, PackedResult, Schedule, make_env_evaluate, make_evaluate,
                               make_packed_evaluate, make_sliding_evaluate, segments_needed, slot_queues)
from rate_jax.masks import segment_mask
from rate_jax.model import RATE, Carry, DecodeState, Segment, SegmentOutput, split_segments, step_groups, unroll
from rate_jax.mrv import MRV, mrv_activation
from rate_jax.retention import (alignment_alpha, cosines, counterexample, cue_separation, mrv_convex_form, mrv_update,
                                no_anti_alignment, normalize_rows, retention_bound, retention_ratio, sample_instances)
from rate_jax.train import (STEP_METRICS, ChunkedRun, TrainConfig, TrainMetrics, TrainState, bptt_loss, init_chunked,
                            init_state, make_chunk, make_train, make_update, make_validate, masked_cross_entropy,
                            to_segments)

__all__ = [
    "DT_CONTEXTS", "MRV", "MRV_ACTIVATIONS", "RATE", "STEP_METRICS", "VARIANTS", "Carry", "ChunkedRun", "DecodeState", "EvalResult", "ModelConfig",
    "PackedResult", "Schedule", "Segment", "SegmentOutput", "TrainConfig", "TrainMetrics", "TrainState", "Trajectories", "alignment_alpha",
    "bc_lstm", "bptt_loss", "cosines", "counterexample", "cue_separation", "generate", "init_chunked", "init_state",
    "make_chunk", "make_env_evaluate", "make_evaluate", "make_packed_evaluate", "make_sliding_evaluate", "make_train", "make_update", "make_validate", "masked_cross_entropy", "minigrid_memory", "mirror",
    "mrv_activation", "mrv_convex_form", "mrv_update", "no_anti_alignment", "normalize_rows", "popgym", "retention_bound",
    "retention_ratio", "sample_corridor_lengths", "sample_instances", "segment_corridor_lengths", "segment_mask",
    "segments_needed", "slot_queues", "split_segments", "step_groups", "tasks", "tmaze", "to_segments", "unroll", "variant",
]

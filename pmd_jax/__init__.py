"""pmd_jax: softmax attention as policy mirror descent.

Paper: "PolicyAttention: Softmax Attention Implements Policy Mirror Descent for
Closed-Loop Control" (arXiv 2609.30500); the derivations the code relies on that the
paper does not give are written out in ``docs/pmd.md``.

An exact, normalization-free decoder whose actor call performs the PMD step and whose
critic call performs TD evaluation, the tabular MDP tools it is checked against, the
section-13 bound, the two-state reversal family, and the task families, input prior, fixed rules and fitted
step of the learned-model studies. The learned pre-LN actor and critic, their packets, objectives and training
are the modules ``pmd_jax.transformer``, ``pmd_jax.learned`` and ``pmd_jax.train``.
"""
from pmd_jax.bound import (
    ReturnedPolicyBound,
    critic_error_bound,
    critic_leak_bounds,
    greedy_defect,
    returned_policy_bound,
    routing_error_bound,
    routing_ratio_bound,
    sampling_error,
)
from pmd_jax.decoder import (
    DecoderConfig,
    Layout,
    NormFreeDecoder,
    Transitions,
    actor_call,
    apply_actor,
    apply_critic,
    attention_mask,
    construct_params,
    critic_call,
)
from pmd_jax.loop import CriticStep, LoopTrace, closed_loop, decoder_critic, exact_critic
from pmd_jax.mdp import (
    CombinationLockFamily,
    FiniteMDP,
    RandomMDPFamily,
    bellman_operator,
    optimal_q,
    policy_evaluation,
    state_values,
    two_state_family,
    uniform_policy,
)
from pmd_jax.pmd import pmd_step
from pmd_jax.sampling import ARM_NAMES, Arm, Packet, sample_packet
from pmd_jax.reversal import ReversalCell, closed_form_cell, decoder_cell, reversal_threshold
from pmd_jax.rules import RULES, apply_rules, fitted_slope, fitted_step, project_simplex, row_l1
from pmd_jax.tasks import (
    ETA_RANGE,
    FAMILIES,
    POLICY_ENTROPY,
    POLICY_LOG_FLOOR,
    SPLITS,
    ActorInputs,
    sample_actor_inputs,
    sample_mdp,
    sample_policy,
    split_key,
    split_mdps,
)

__all__ = [
    "ARM_NAMES", "Arm", "CombinationLockFamily", "CriticStep", "DecoderConfig", "Packet", "decoder_critic", "sample_packet", "FiniteMDP", "Layout", "LoopTrace", "NormFreeDecoder", "RandomMDPFamily",
    "ReturnedPolicyBound", "ReversalCell", "Transitions", "actor_call", "apply_actor", "apply_critic",
    "attention_mask", "bellman_operator", "closed_form_cell", "closed_loop", "construct_params",
    "critic_call", "critic_error_bound", "critic_leak_bounds", "decoder_cell", "exact_critic",
    "greedy_defect", "optimal_q", "pmd_step", "policy_evaluation", "returned_policy_bound",
    "reversal_threshold", "routing_error_bound", "routing_ratio_bound", "sampling_error",
    "state_values", "two_state_family", "uniform_policy",
    "ETA_RANGE", "FAMILIES", "POLICY_ENTROPY", "POLICY_LOG_FLOOR", "RULES", "SPLITS", "ActorInputs", "apply_rules",
    "fitted_slope", "fitted_step", "project_simplex", "row_l1", "sample_actor_inputs", "sample_mdp",
    "sample_policy", "split_key", "split_mdps",
]

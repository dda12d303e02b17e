"""Negative-entropy policy mirror descent (PolicyAttention, arXiv 2609.30500, section 1).

``pi_{k+1}(a|s) = pi_k(a|s) exp(eta Q_k(s,a)) / sum_b pi_k(b|s) exp(eta Q_k(s,b))``,
i.e. state by state ``pi_{k+1} = softmax(log pi_k + eta Q_k)``.
"""
import jax
import jax.numpy as jnp


def pmd_step(pi: jax.Array, Q: jax.Array, eta) -> jax.Array:
    """The ideal PMD update ``softmax(log pi + eta Q)`` row by row; ``pi, Q: [S, A]``."""
    return jax.nn.softmax(jnp.log(pi) + eta * Q, axis=-1)

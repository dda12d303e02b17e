"""Shared tiny configurations for the uat_jax tests (kept small for 2 CPU cores)."""
import numpy as np
import pytest

from uat_jax.config import ModelConfig

TINY = dict(horizon=6, d_model=16, n_heads=2, d_ff=16, n_layers=2, d_u=4, d_act=3, ue_hidden=5)


def tiny(kind: str = "uat", **overrides) -> ModelConfig:
    return ModelConfig(kind=kind, **{**TINY, **overrides})


@pytest.fixture
def rng():
    return np.random.default_rng(0)

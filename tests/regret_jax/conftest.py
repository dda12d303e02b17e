"""Fixtures for the regret_jax tests."""
import jax
import pytest


@pytest.fixture
def x64():
    """Run one test in float64 (theorem identities to machine precision) without leaking the flag."""
    with jax.enable_x64(True):
        yield

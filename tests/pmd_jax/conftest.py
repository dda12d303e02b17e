"""pmd_jax tests run in float64: the theorem checks are identities to ~1e-10."""
import jax
import pytest


@pytest.fixture(autouse=True)
def _float64():
    with jax.enable_x64(True):
        yield

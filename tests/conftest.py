"""Test-wide set-up: four fake CPU devices, so every sweep in the suite is sharded.

XLA_FLAGS must be set before JAX initialises its backends, hence at import time here.
A test that needs one device runs a subprocess with its own environment.
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

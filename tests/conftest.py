"""Test-wide set-up: four fake CPU devices, so every sweep in the suite is sharded, fast compilation,
and one JAX compilation cache per test session.

XLA_FLAGS must be set before JAX initialises its backends, hence at import time here.
A test that needs one device runs a subprocess with its own environment.

The cache: many tests compile the same programs (a study's tiny model in its unit tests and in
its end-to-end runs, a study in two processes), and compiling is most of their time. The
session's master process creates the folder before the xdist workers start; the workers and the
subprocesses that tests launch inherit it through the environment. A cache hit returns the
executable XLA would compile for the same program, so nothing a test checks depends on it; a
fresh clone (CI) starts with an empty cache. The folder is removed when the session ends.
"""
import os
import shutil
import tempfile

# Tests check what programs compute, not how fast: XLA's CPU backend at optimisation level 0 compiles a
# program in about half the time (most of a tiny end-to-end test) and computes the same functions, and
# the older loop emitters for fused elementwise code compile faster again (the suite on 2 workers:
# 11 min 55 s -> 7 min 29 s on 2026-12-05). Speed is measured by `python -m experiments bench`, at
# XLA's defaults.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0 "
                                   "--xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA's older partitioner (GSPMD) instead of JAX's default, Shardy: the two partition a program alike, and
# Shardy's pass alone took 11 of the 36 s that XLA spent compiling uat.darkroom's tiny run on four devices
# (the suite on 2 workers: 15 min 43 s -> 13 min 40 s on 2026-12-07). A test in test_harness_sweep.py runs
# a sharded sweep under Shardy and compares its bits with this session's.
os.environ.setdefault("JAX_USE_SHARDY_PARTITIONER", "false")

_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax-test-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


def pytest_sessionfinish(session):
    if _OWN_CACHE and not hasattr(session.config, "workerinput"):  # the master process, after the workers
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)

"""The experiment harness: study registry, CLI, sweep engine, checkpoints, result files.

Submodules (import them explicitly; importing the package loads nothing heavy):
``registry`` (studies and their contract), ``cli`` (``python -m experiments``),
``sweep`` (vmapped, sharded, chunked, checkpointed sweeps), ``checkpoint`` (Orbax
chunk checkpoints), ``io`` (atomic result files), ``benchmark`` (timings),
``provenance`` (code and machine versions).
"""
__all__ = ["benchmark", "checkpoint", "cli", "io", "provenance", "registry", "sweep"]

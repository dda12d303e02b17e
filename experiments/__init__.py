"""The experiment harness: CLI, study registry, config overrides, sweep engine, checkpoints, results, report.

Submodules (import them explicitly; importing the package loads nothing heavy):
``cli`` (``python -m experiments``: parse and dispatch), ``registry`` (the study shape),
``configs`` (``--set``/``--config``/``--sweep`` values), ``runner`` (the run pipeline),
``checks`` (check constructors), ``results`` (the result schema), ``report``
(``REPORT.md``), ``sweep`` (vmapped, sharded, chunked, checkpointed programs),
``seeds`` (key streams and the study-facing training sweeps), ``checkpoint`` (Orbax
chunk checkpoints), ``codehash`` (code fingerprints), ``distributed`` (multi-process
runs), ``curves`` (training curves), ``io`` (atomic files), ``benchmark`` (timings),
``provenance`` (code and machine versions).
"""
__all__ = [
    "benchmark", "checkpoint", "checks", "cli", "codehash", "configs", "curves", "distributed", "io",
    "provenance", "registry", "report", "results", "runner", "seeds", "sweep",
]

"""Benchmarks: each times a study's vectorised program against Python loops (``python -m experiments bench STUDY``)."""

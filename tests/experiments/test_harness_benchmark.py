"""experiments.benchmark timings and experiments.provenance."""
import re
import subprocess
import time

import jax
import jax.numpy as jnp
import pytest

from experiments import benchmark, provenance


def test_time_call_and_time_python():
    timing = benchmark.time_call(lambda x: jnp.sin(x) @ x, jnp.ones((64, 64)), repeats=3)
    assert set(timing) == {"compile_s", "mean_s", "min_s"}
    assert timing["compile_s"] > 0 and 0 < timing["min_s"] <= timing["mean_s"]
    slow = benchmark.time_python(lambda s: time.sleep(s), 0.02, repeats=2)
    assert set(slow) == {"mean_s", "min_s"} and slow["min_s"] >= 0.02
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        benchmark.time_python(lambda: None, repeats=0)


def test_provenance_and_git_sha(tmp_path):
    prov = provenance.provenance()
    assert prov["jax"] == jax.__version__ and prov["devices"] == 4 and prov["backend"] == "cpu"
    assert provenance.git_sha(tmp_path) == "unknown"  # not a git repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    assert provenance.git_sha(tmp_path) == "unknown"  # no commits yet
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = provenance.git_sha(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    head = (tmp_path / ".git" / "HEAD").read_text().split()[-1]
    assert (tmp_path / ".git" / head).read_text().strip() == sha

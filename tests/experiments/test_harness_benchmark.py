"""experiments.benchmark timings and experiments.provenance."""
import re
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import benchmark, provenance


def test_time_call_and_time_python():
    timing = benchmark.time_call(lambda x: jnp.sin(x) @ x, jnp.ones((64, 64)), repeats=3)
    assert set(timing) == {"compile_s", "mean_s", "min_s", "calls"} and timing["calls"] == 3
    assert timing["compile_s"] > 0 and 0 < timing["min_s"] <= timing["mean_s"]
    slow = benchmark.time_python(lambda s: time.sleep(s), 0.02, repeats=2)
    assert set(slow) == {"mean_s", "min_s", "calls"} and slow["min_s"] >= 0.02 and slow["calls"] == 2


def test_time_python_calls_until_the_minimum_total_time():
    """A 20 ms call timed for at least 0.1 s in all is called at least 5 times (1 repeat asked),
    and not far more; a call longer than the minimum total is called ``repeats`` times."""
    fast = benchmark.time_python(lambda: time.sleep(0.02), repeats=1, min_total_s=0.1)
    assert 5 <= fast["calls"] <= 6 and fast["min_s"] >= 0.02
    slow = benchmark.time_python(lambda: time.sleep(0.06), repeats=2, min_total_s=0.05)
    assert slow["calls"] == 2
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        benchmark.time_python(lambda: None, repeats=0)


def test_time_alternating_alternates_the_order_and_times_each_call(monkeypatch):
    """On a fake clock that each call advances by its own planned durations: every call is timed
    by its own durations (not its neighbour's), and the order alternates between rounds."""
    clock, order = [0.0], []
    monkeypatch.setattr(benchmark.time, "perf_counter", lambda: clock[0])
    planned = {"a": [5.0, 2.0, 4.0], "b": [1.0, 1.5, 7.0]}

    def call(name):
        def run():
            order.append(name)
            clock[0] += planned[name][len([o for o in order if o == name]) - 1]
        return run

    out = benchmark.time_alternating({"a": call("a"), "b": call("b")}, rounds=3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert out["a"] == {"mean_s": pytest.approx(11 / 3), "min_s": 2.0, "calls": 3}
    assert out["b"] == {"mean_s": pytest.approx(9.5 / 3), "min_s": 1.0, "calls": 3}
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        benchmark.time_alternating({"a": call("a")}, rounds=0)


def test_provenance_and_git_sha(tmp_path):
    prov = provenance.provenance()
    assert prov["jax"] == jax.__version__ and prov["devices"] == 4 and prov["backend"] == "cpu"
    assert prov["cpu"] == provenance.cpu()
    assert provenance.git_sha(tmp_path) == "unknown"  # not a git repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    assert provenance.git_sha(tmp_path) == "unknown"  # no commits yet
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "x"], check=True)
    sha = provenance.git_sha(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", sha)
    head = (tmp_path / ".git" / "HEAD").read_text().split()[-1]
    assert (tmp_path / ".git" / head).read_text().strip() == sha


def test_cpu_model_and_vector_features_from_cpuinfo():
    two = ("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse4_2 avx avx2 fma avx512fake\n\n"
           "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu avx512f\n")
    assert provenance.cpu(two) == {"model": "AMD EPYC 7B13", "vector_features": ["sse4_2", "avx", "avx2", "fma"]}
    assert provenance.cpu("processor\t: 0\n") == {"model": "unknown", "vector_features": []}
    here = provenance.cpu()
    assert isinstance(here["model"], str) and here["model"]


# --- dot_flops: matrix-multiply FLOPs counted on the jaxpr ------------------------------------


def test_dot_flops_counts_products_batches_scans_and_gradients():
    dot_flops = benchmark.dot_flops
    a, b, w = jnp.ones((64, 32)), jnp.ones((32, 16)), jnp.ones((32, 32))
    assert dot_flops(lambda x, y: x @ y, a, b) == 2 * 64 * 32 * 16
    assert dot_flops(lambda x, y: jnp.einsum("bij,bjk->bik", x, y), jnp.ones((3, 4, 5)), jnp.ones((3, 5, 6))) \
        == 2 * 3 * 4 * 5 * 6
    scanned = lambda x, n: jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=n)[0].sum()  # noqa: E731
    assert dot_flops(lambda x: scanned(x, 7), a) == 7 * 2 * 64 * 32 * 32  # XLA's cost_analysis counts the body once
    # reverse mode: each forward product x @ w costs two more of the same size (dx = g w^T, dw = x^T g)
    assert dot_flops(jax.grad(lambda x, v: jnp.tanh(x @ v).sum(), argnums=(0, 1)), a, w) == 3 * 2 * 64 * 32 * 32
    nested = lambda x: jax.lax.scan(lambda c, _: (jax.jit(lambda y: scanned(y, 2))(c) * c, None), x, None,  # noqa: E731
                                    length=3)[0]
    assert dot_flops(nested, a) == 3 * 2 * 2 * 64 * 32 * 32
    with pytest.raises(ValueError, match="while loop"):
        dot_flops(lambda x: jax.lax.while_loop(lambda c: c.sum() < 0, lambda c: c @ w, x), a)


def test_op_profile_groups_a_programs_operations_by_kind():
    """A product, a tanh and a transpose: every kind named like an HLO instruction without its number, each
    positive; with top=1 the rest is one "other" entry."""
    a = jnp.ones((128, 128))
    f = jax.jit(lambda a: jnp.tanh(a @ a).T @ a + 1.0)
    full = benchmark.op_profile(lambda: f(a), calls=2, top=50)
    assert full and all(v > 0 and not any(c.isdigit() for c in k.split("_")[-1]) for k, v in full.items()), full
    assert list(full.values()) == sorted(full.values(), reverse=True)
    short = benchmark.op_profile(lambda: f(a), calls=1, top=1)
    assert len(short) <= 2 and (len(full) == 1 or "other" in short)


def test_peak_rss_counts_bytes_held_at_once():
    """A block larger than the peak so far, written, raises the peak past its size (in bytes, not KiB)."""
    size = benchmark.peak_rss_bytes() + 128 * 2**20
    block = np.ones(size // 8)
    assert benchmark.peak_rss_bytes() >= size and block[-1] == 1.0

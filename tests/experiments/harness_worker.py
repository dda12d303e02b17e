"""A fixed sweep for the sweep tests, importable in-process and runnable as a subprocess.

``python harness_worker.py OUT.npz [--ckpt DIR] [--resume] [--sleep S]
[--coordinator HOST:PORT --num-processes N --process-id I]`` runs :func:`run` and saves
its outputs (process 0 only); the device count comes from ``XLA_FLAGS``.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import distributed, io, sweep
from experiments.checkpoint import CheckpointSpec

N = 50  # not a multiple of CHUNK: 16 chunks of 3 items and one of 2 (padded) ...
CHUNK = 3  # ... so 5 steps on the 4 test devices (the last runs 1 chunk + 3 of padding), 17 on one


def make_fn(sleep_s: float):
    """A per-item program with PRNG, a matmul in a scan and an integer output.

    A host callback sleeps ``sleep_s`` per step and returns its input unchanged,
    so the kill test can stop the sweep between steps; it is in the program for
    every ``sleep_s``, so all runs compile the same program.
    """

    def nap(x):
        time.sleep(sleep_s)
        return x

    def fn(item):
        x = jax.random.normal(item["key"], (8,))
        m = jnp.outer(x, x) / 8.0 + jnp.eye(8) * item["w"]

        def body(c, _):
            c = jnp.tanh(m @ c + 0.1)
            return c, c.sum()

        c, trace = jax.lax.scan(body, x, None, length=6)
        c = jax.pure_callback(nap, jax.ShapeDtypeStruct(c.shape, c.dtype), c, vmap_method="expand_dims")
        return {"final": c, "trace": trace, "twice": item["i"] * 2}

    return fn


def inputs():
    return {
        "key": jax.random.split(jax.random.PRNGKey(0), N),
        "w": jnp.linspace(0.0, 1.0, N, dtype=jnp.float32),
        "i": jnp.arange(N, dtype=jnp.int32),
    }


def run(ckpt_dir=None, resume=False, sleep_s=0.0):
    return sweep.sweep_map(
        make_fn(sleep_s),
        inputs(),
        chunk_size=CHUNK,
        checkpoint=None if ckpt_dir is None else CheckpointSpec(ckpt_dir, {"worker": "harness", "n": N}, resume=resume),
        desc="worker",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--coordinator")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    args = parser.parse_args()
    if args.coordinator:
        distributed.initialize(args.coordinator, args.num_processes, args.process_id, 60)
    res = run(args.ckpt, args.resume, args.sleep)
    if distributed.is_writer():
        io.save_npz(args.out, devices=np.int64(jax.device_count()), shardy=np.bool_(jax.config.jax_use_shardy_partitioner),
                    resumed=np.int64(res.resumed_chunks), **res.outputs)

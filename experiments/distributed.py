"""Several processes on JAX's own multi-process runtime (``jax.distributed``).

One process per host (or per launcher task) runs the same command with
``--coordinator HOST:PORT --num-processes N --process-id I``. Every process computes
the same program over a global device mesh; the sweep engine places its inputs with
:func:`global_array` (each process supplies the shards of its own devices) and
gathers outputs with :func:`to_host` (``multihost_utils.process_allgather``), so
every process ends with the same host arrays. Only process 0 writes result files
(:func:`is_writer`); checkpoints are written by all processes through Orbax, which
coordinates them. With one process every function here is the plain single-host
operation.
"""
from __future__ import annotations

import re
import socket
import sys
import time
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

__all__ = ["DistributedError", "barrier", "global_array", "initialize", "is_writer", "to_host"]

_ADDRESS = re.compile(r"^[A-Za-z0-9_.\-]+:\d{1,5}$|^\[[0-9A-Fa-f:]+\]:\d{1,5}$")


class DistributedError(RuntimeError):
    """Multi-process set-up failed (bad arguments, unreachable coordinator)."""


def check_arguments(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """Raise DistributedError unless the three flags are all absent or all valid."""
    given = [x is not None for x in (coordinator, num_processes, process_id)]
    if any(given) and not all(given):
        raise DistributedError("--coordinator, --num-processes and --process-id must be given together")
    if not any(given):
        return
    if not _ADDRESS.match(coordinator):
        raise DistributedError(f"--coordinator must be HOST:PORT, got {coordinator!r}")
    if not 0 < int(coordinator.rsplit(":", 1)[1]) < 65536:
        raise DistributedError(f"--coordinator port must lie in 1..65535, got {coordinator!r}")
    if num_processes < 1:
        raise DistributedError(f"--num-processes must be >= 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise DistributedError(f"--process-id must lie in 0..{num_processes - 1}, got {process_id}")


def _wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within ``timeout_s`` (retrying)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)


def initialize(coordinator: str, num_processes: int, process_id: int, timeout_s: int) -> None:
    """``jax.distributed.initialize`` with a clear failure when the coordinator is unreachable.

    A process other than 0 first waits up to ``timeout_s`` for the coordinator's port
    to accept connections and raises DistributedError naming it otherwise. JAX's own
    runtime then gets the same timeout for every process to register; when a process
    never joins, JAX aborts the waiting processes after it (DEADLINE_EXCEEDED), which
    cannot be caught, so the line printed before says what is awaited.
    """
    check_arguments(coordinator, num_processes, process_id)
    host, port = coordinator.rsplit(":", 1)
    if process_id != 0 and not _wait_for_port(host.strip("[]"), int(port), timeout_s):
        raise DistributedError(
            f"process {process_id}: no coordinator answers at {coordinator} within {timeout_s} s; "
            "start process 0 there first (it hosts the coordinator), or fix --coordinator"
        )
    print(f"process {process_id}/{num_processes}: joining {coordinator} (up to {timeout_s} s for every process)",
          file=sys.stderr, flush=True)
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout_s,
    )


def is_writer() -> bool:
    """Whether this process writes result files (process 0)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process reaches ``name`` (nothing with one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def global_array(host: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array with ``sharding`` from a host array every process holds in full."""
    host = np.asarray(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _leaf_to_host(x: Any) -> Any:
    if not isinstance(x, jax.Array):
        return np.asarray(x)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(_leaf_to_host(jax.random.key_data(x)), impl=jax.random.key_impl(x))
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def to_host(tree: Any) -> Any:
    """Every leaf as a host numpy array (typed PRNG keys stay keys), gathered from all processes."""
    return jax.tree.map(_leaf_to_host, tree)

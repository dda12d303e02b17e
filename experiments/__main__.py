"""``python -m experiments``: see :mod:`experiments.cli`."""
import sys

from experiments import compile_flags, cores, huge_pages

huge_pages.reexec_with_huge_pages()  # first: glibc reads its tunables when the process starts
try:
    cores.pin_from_environment()  # before JAX: XLA sizes its CPU thread pool by the cores it may use
except ValueError as err:
    print(f"error: {err}", file=sys.stderr)
    raise SystemExit(2) from None
compile_flags.configure(sys.argv[1:])  # before anything imports JAX (XLA reads XLA_FLAGS once)

from experiments.cli import main  # noqa: E402
from experiments.jobs import dump_stacks_on_signal  # noqa: E402

dump_stacks_on_signal()  # run all --jobs asks a study's process that runs past its limit where it is

raise SystemExit(main())

"""``python -m experiments``: see :mod:`experiments.cli`."""
import sys

from experiments import compile_flags, huge_pages

huge_pages.reexec_with_huge_pages()  # first: glibc reads its tunables when the process starts
compile_flags.configure(sys.argv[1:])  # before anything imports JAX (XLA reads XLA_FLAGS once)

from experiments.cli import main  # noqa: E402
from experiments.jobs import dump_stacks_on_signal  # noqa: E402

dump_stacks_on_signal()  # run all --jobs asks a study's process that runs past its limit where it is

raise SystemExit(main())

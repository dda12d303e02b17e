"""``python -m experiments``: see :mod:`experiments.cli`."""
import sys

from experiments import compile_flags

compile_flags.configure(sys.argv[1:])  # before anything imports JAX (XLA reads XLA_FLAGS once)

from experiments.cli import main  # noqa: E402

raise SystemExit(main())

"""``python -m experiments``: see :mod:`experiments.cli`."""
from experiments.cli import main

raise SystemExit(main())

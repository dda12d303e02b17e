"""Run ``uat.sepsis`` with the learning rate of UAT's utility encoder and regime readout changed, a
setting that is not a study option (docs/uat.md section 21's probe):

    python docs/analysis/sepsis_probe.py ue_lr=0.002 run uat.sepsis --quick --set stream=1 --out DIR

The first argument is ``ue_lr=VALUE`` (``uat_jax.train.TrainConfig.ue_lr``, every trained model's; Table
3's 2e-2 by default); the rest is the command line of ``python -m experiments``. The simulator's knobs
(observation noise, regime contrast, resistance, ...) are study options: ``--set sim.obs_noise=50``.
Probes are for the screening seeds (stream 1).
"""
from __future__ import annotations

import dataclasses
import sys

from experiments import compile_flags


def main(argv: list[str]) -> int:
    knob, _, value = (argv[0] if argv else "").partition("=")
    if knob != "ue_lr" or not value:
        raise SystemExit(f"first argument must be ue_lr=VALUE, got {argv[:1]}")
    args = argv[1:]
    compile_flags.configure(args)  # before JAX is imported, as python -m experiments does
    from experiments.cli import main as experiments_main
    from uat_jax import cells

    train_config = cells.Size.train_config
    cells.Size.train_config = lambda self, *a, **k: dataclasses.replace(train_config(self, *a, **k), ue_lr=float(value))
    return experiments_main(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

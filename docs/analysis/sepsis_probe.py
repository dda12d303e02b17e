"""Run ``uat.sepsis`` with one setting that is not a study option changed (docs/uat.md section 21's probes):
the learning rate of UAT's utility encoder and regime readout, or the observation noise of the simulator.

    python docs/analysis/sepsis_probe.py ue_lr=0.002 run uat.sepsis --quick --set stream=1 --out DIR
    python docs/analysis/sepsis_probe.py obs_noise=50 run uat.sepsis --quick --set stream=1 --out DIR

The first argument is ``ue_lr=VALUE`` (``uat_jax.train.TrainConfig.ue_lr``, every trained model's; Table
3's 2e-2 by default) or ``obs_noise=VALUE`` (``uat_jax.sepsis.EnvParams.obs_noise``, the standard deviation
of the noise on each observed component; 0.1 by default, against component variances of 0.73 to 6.4);
the rest is the command line of ``python -m experiments``. Probes are for the screening seeds (stream 1).
"""
from __future__ import annotations

import dataclasses
import functools
import sys

from experiments import compile_flags

KNOBS = ("ue_lr", "obs_noise")


def main(argv: list[str]) -> int:
    knob, _, value = (argv[0] if argv else "").partition("=")
    if knob not in KNOBS or not value:
        raise SystemExit(f"first argument must be one of {[k + '=VALUE' for k in KNOBS]}, got {argv[:1]}")
    args = argv[1:]
    compile_flags.configure(args)  # before JAX is imported, as python -m experiments does
    from experiments.cli import main as experiments_main
    from uat_jax import cells, sepsis

    if knob == "ue_lr":
        train_config = cells.Size.train_config
        cells.Size.train_config = lambda self, *a, **k: dataclasses.replace(train_config(self, *a, **k),
                                                                             ue_lr=float(value))
    else:
        sepsis.make_params = functools.partial(sepsis.make_params, obs_noise=float(value))
    return experiments_main(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Study ``uat.boundary``: feedback-quality boundary on gradual DarkRoom (section 6.3,
Appendix D.2, Figure 1 left) of the UAT paper (arXiv 2607.18910).

UAT is trained and evaluated with the fed rewards clean, with Gaussian noise
(sigma in {0.5, 1, 2, 5}), null, shuffled within the episode (causal reading, see
``uat_jax.feedback``) and sign-flipped; all conditions are one vmapped program.
Vanilla-TF never reads the fed rewards, and the corruption draws its own keys, so its
training and evaluation are bitwise the same under every condition: it is run once.
``--quick`` keeps clean, sigma = 2, null, shuffle and sign flip.
Checks: clean gap > 0.2 (paper +0.52); sigma = 2 gap below the clean gap (paper +0.18);
null and shuffled gaps < 0.1 (paper +0.05, +0.02); sign flip moves UAT by <= 0.05.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import uat_jax as uat  # noqa: E402
from experiments import io  # noqa: E402
from experiments.registry import Check, RunContext, StudyOutput, study  # noqa: E402
from experiments.studies.uat_common import mean_std, run_cells, size_for  # noqa: E402

FULL_CONDITIONS = (("clean", 0.0), ("gaussian", 0.5), ("gaussian", 1.0), ("gaussian", 2.0),
                   ("gaussian", 5.0), ("null", 0.0), ("shuffle", 0.0), ("sign_flip", 0.0))
QUICK_CONDITIONS = (("clean", 0.0), ("gaussian", 2.0), ("null", 0.0), ("shuffle", 0.0),
                    ("sign_flip", 0.0))
PAPER_GAP = {"gap_clean": 0.52, "gap_gaussian_2": 0.18, "gap_null": 0.05, "gap_shuffle": 0.02}


def label(name: str, sigma: float) -> str:
    return f"gaussian_{sigma:g}".replace(".", "p") if name == "gaussian" else name


@study("uat.boundary", "UAT - VT gap as the fed rewards degrade (noise, null, shuffle, sign flip)")
def run(ctx: RunContext) -> StudyOutput:
    size = size_for(ctx)
    conditions = QUICK_CONDITIONS if ctx.quick else FULL_CONDITIONS
    tasks = [uat.Task.make("gradual", name, sigma) for name, sigma in conditions]
    out_uat, c1 = run_cells(ctx, "boundary_uat", size.train_config("uat"), tasks, size.seeds)
    out_vt, c2 = run_cells(ctx, "boundary_vt", size.train_config("vt"), tasks[:1], size.seeds)
    metrics = mean_std("acc_vt", out_vt["accuracy"][0])
    for i, cond in enumerate(conditions):
        name = label(*cond)
        metrics.update(mean_std(f"acc_uat_{name}", out_uat["accuracy"][i]))
        metrics.update(mean_std(f"gap_{name}", out_uat["accuracy"][i] - out_vt["accuracy"][0]))
    g = lambda name: metrics[f"gap_{name}"]
    flip = abs(metrics["acc_uat_sign_flip"] - metrics["acc_uat_clean"])
    checks = [Check("gap_clean_wide", g("clean"), "> 0.2", g("clean") > 0.2),
              Check("gap_shrinks_at_sigma_2", g("gaussian_2") - g("clean"), "< 0", g("gaussian_2") < g("clean")),
              Check("gap_null_small", g("null"), "< 0.1", g("null") < 0.1),
              Check("gap_shuffle_small", g("shuffle"), "< 0.1", g("shuffle") < 0.1),
              Check("sign_flip_unchanged", flip, "<= 0.05", flip <= 0.05)]
    names = [label(*c) for c in conditions]
    io.write_csv(ctx.out_dir / "boundary.csv",
                 {"condition": names, "acc_uat": [metrics[f"acc_uat_{n}"] for n in names],
                  "acc_uat_std": [metrics[f"acc_uat_{n}_std"] for n in names],
                  "gap": [g(n) for n in names], "gap_std": [metrics[f"gap_{n}_std"] for n in names]})
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.errorbar(np.arange(len(names)), [g(n) for n in names],
                yerr=[metrics[f"gap_{n}_std"] for n in names], marker="o")
    ax.set_xticks(np.arange(len(names)), names, fontsize=7, rotation=20)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("accuracy gap UAT - VT")
    io.save_figure(fig, ctx.out_dir / "boundary.png")
    plt.close(fig)
    return StudyOutput(config={"size": size.__dict__, "conditions": conditions}, metrics=metrics,
                       checks=checks, paper=dict(PAPER_GAP), compile_s=c1 + c2)

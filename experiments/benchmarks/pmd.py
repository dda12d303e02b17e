"""Benchmarks of the PolicyAttention studies (arXiv 2609.30500): vectorised programs against Python loops.

* ``bench pmd.reversal``: the whole grid as one vectorised program against per-cell loops
  calling the jitted single-cell program and the plain numpy forward map.
* ``bench pmd.coverage``: the whole coverage study (every MDP, arm and round) as one
  program against a Python loop over MDPs, arms and rounds calling one jitted round.
* ``bench pmd.repeated_control``: the FULL training sizes (5 actors x 51,200 steps, one
  critic x 12,800): seconds per step with the runs vmapped against a loop over runs, and
  the extrapolated minutes of a full run on this machine.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import benchmark
from experiments.registry import bench
from experiments.studies.pmd import coverage as coverage_study
from experiments.studies.pmd import reversal as reversal_study
from experiments.studies.pmd.reversal import ReversalConfig
from pmd_jax import decoder, numpy_reference
from pmd_jax.loop import decoder_critic
from pmd_jax.mdp import FiniteMDP, two_state_family, uniform_policy


def _numpy_cell(base_tokens, masks, params_np, layout, eta, kappa_index, masked, cfg: ReversalConfig):
    """One cell with the plain numpy forward map and numpy policy evaluation."""
    tokens = base_tokens.copy()
    tokens[: layout.S * layout.A, layout.index("eta")] = eta
    out = numpy_reference.decoder_forward(params_np[kappa_index], tokens, masks[masked])
    pi_hat = out[layout.S * layout.A :, layout.slice("pi_out")]
    mdp = two_state_family(cfg.c, cfg.gamma)
    P, R = np.asarray(mdp.P), np.asarray(mdp.R)
    pi0 = np.full((2, 2), 0.5)
    Q = numpy_reference.policy_evaluation(P, R, cfg.gamma, pi0)
    p = numpy_reference.pmd_step(pi0, Q, eta)
    v = lambda pi: (pi * numpy_reference.policy_evaluation(P, R, cfg.gamma, pi)).sum(1)[0] - (pi0 * Q).sum(1)[0]
    return v(p), v(pi_hat), np.abs(pi_hat[0] - p[0]).sum()


@bench("pmd.reversal")
def reversal(out_dir) -> dict:
    """Vectorised grid (after compilation) against per-cell Python loops: jitted cell and numpy."""
    cfg = ReversalConfig()
    grid = cfg.grid()
    n = len(grid["eta"])
    loop_cells = 300  # the loops are timed on the first cells of a fixed random order, per cell
    order = np.random.default_rng(0).permutation(n)[:loop_cells]
    with jax.enable_x64(True):
        vectorised = jax.vmap(reversal_study.row_fn(cfg.etas))
        t_vec = benchmark.time_call(vectorised, {k: jnp.asarray(v) for k, v in cfg.rows().items()}, repeats=5)
        one = jax.jit(reversal_study.cell_fn)
        cells = [{**{k: jnp.asarray(grid[k][i]) for k in grid}, **{k: jnp.asarray(float(getattr(cfg, k))) for k in reversal_study.TRACED}} for i in order]
        jax.block_until_ready(one(cells[0]))
        t0 = time.perf_counter()
        for cell in cells:
            jax.block_until_ready(one(cell))
        jit_loop_per_cell = (time.perf_counter() - t0) / loop_cells

        layout = decoder.Layout(2, 2)
        mdp = two_state_family(cfg.c, cfg.gamma)
        pi0 = uniform_policy(2, 2, jnp.float64)
        Q = numpy_reference.policy_evaluation(np.asarray(mdp.P), np.asarray(mdp.R), cfg.gamma, np.asarray(pi0))
        base = decoder.actor_tokens(layout, pi0, jnp.asarray(Q), 0.0)
        masks = {m: np.asarray(decoder.attention_mask(layout, base, state_local=m)) for m in (False, True)}
        params_np = [jax.tree.map(np.asarray, decoder.construct_params(2, 2, cfg.gamma, k, cfg.nu)) for k in cfg.kappas]
    base = np.asarray(base)
    kappa_index = {k: j for j, k in enumerate(cfg.kappas)}
    t0 = time.perf_counter()
    for i in order:
        _numpy_cell(base, masks, params_np, layout, grid["eta"][i], kappa_index[grid["kappa"][i]], bool(grid["masked"][i]), cfg)
    numpy_loop_per_cell = (time.perf_counter() - t0) / loop_cells
    vec_per_cell = t_vec["min_s"] / n
    out = {
        "cells": n,
        "loop_cells_timed": loop_cells,
        "vectorised_compile_s": t_vec["compile_s"],
        "vectorised_grid_s": t_vec["min_s"],
        "vectorised_per_cell_s": vec_per_cell,
        "jit_loop_per_cell_s": jit_loop_per_cell,
        "numpy_loop_per_cell_s": numpy_loop_per_cell,
        "ratio_vs_jit_loop": jit_loop_per_cell / vec_per_cell,
        "ratio_vs_numpy_loop": numpy_loop_per_cell / vec_per_cell,
    }
    return out


@bench("pmd.coverage")
def coverage(out_dir) -> dict:
    """The whole study (full size) as one program against a Python loop over MDPs and arms calling one jitted round."""
    cfg = coverage_study.FULL
    items = coverage_study.mdp_items(cfg)
    program = jax.vmap(coverage_study.runner_on_raw_keys(cfg))
    t_vec = benchmark.time_call(program, {k: jnp.asarray(v) for k, v in items.items()}, repeats=2)

    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)

    @jax.jit
    def one_round(P, R, arm, m, key, pi, Q, stream):
        mdp = FiniteMDP(P=P, R=R, gamma=jnp.asarray(cfg.gamma, R.dtype))
        pi_hat = decoder.apply_actor(params, layout, pi, Q, cfg.eta)
        step = decoder_critic(params, layout, mdp, arm, m, cfg.n_max, cfg.explore_eps)(key, pi_hat, Q, stream)
        return pi_hat, step.Q_next, step.stream_state

    n_loop = 4  # MDPs timed in the loop; reported per MDP
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
    one_round(items["P"][0], items["R"][0], 0, 6, jax.random.key(0), pi0, Q0, 0)
    t0 = time.perf_counter()
    for i in range(n_loop):
        for arm, m in coverage_study.ARMS:
            pi, Q, stream = pi0, Q0, jnp.asarray(0)
            for key in jax.random.split(jax.random.key(i), cfg.rounds):
                pi, Q, stream = one_round(items["P"][i], items["R"][i], int(arm), m, key, pi, Q, stream)
            jax.block_until_ready(Q)
    loop_per_mdp = (time.perf_counter() - t0) / n_loop
    vec_per_mdp = t_vec["min_s"] / cfg.n_mdps
    return {"mdps": cfg.n_mdps, "arms": len(coverage_study.ARMS), "rounds": cfg.rounds,
            "program_compile_s": t_vec["compile_s"], "program_s": t_vec["min_s"], "program_per_mdp_s": vec_per_mdp,
            "loop_mdps_timed": n_loop, "loop_per_mdp_s": loop_per_mdp, "ratio_loop_vs_program": loop_per_mdp / vec_per_mdp}


@bench("pmd.repeated_control")
def repeated_control(out_dir) -> dict:
    """Training cost of the FULL sizes: every run vmapped in one chunk program against a Python loop over runs
    (one single-run program each), timed over ``steps`` steps and extrapolated to the full step counts."""
    from experiments.studies.pmd import repeated_control as rc_study
    from pmd_jax import train

    cfg, steps = rc_study.FULL, 50
    out = {"runs": cfg.runs, "steps_timed": steps}
    for role, tcfg in (("actor", cfg.actor), ("critic", cfg.critic)):
        short = dataclasses.replace(tcfg, num_steps=steps, warmup=0)
        runs = cfg.runs if role == "actor" else 1
        keys = jax.random.key_data(jax.random.split(jax.random.key(0), runs))
        chunk = train.make_chunk(short, role, 1)
        t_vec = benchmark.time_call(chunk, train.init_run(short, role, keys, np.zeros(runs)), jnp.int32(0), repeats=2)
        one = jax.jit(chunk)
        singles = [train.init_run(short, role, keys[i:i + 1], np.zeros(1)) for i in range(runs)]
        jax.block_until_ready(one(singles[0], jnp.int32(0)))
        loop = benchmark.time_python(lambda f, ss: [f(s, jnp.int32(0)) for s in ss], one, singles, repeats=2)
        per_step = t_vec["min_s"] / steps
        out |= {f"{role}_compile_s": t_vec["compile_s"], f"{role}_vmapped_per_step_s": per_step,
                f"{role}_loop_per_step_s": loop["min_s"] / steps, f"{role}_ratio_loop_vs_vmapped": loop["min_s"] / t_vec["min_s"],
                f"{role}_full_steps": tcfg.num_steps, f"{role}_full_estimate_min": per_step * tcfg.num_steps / 60}
    return out

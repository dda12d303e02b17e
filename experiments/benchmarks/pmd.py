"""Benchmarks of the PolicyAttention studies (arXiv 2609.30500): vectorised programs against Python loops.

* ``bench pmd.reversal``: the whole grid as one vectorised program against per-cell loops
  calling the jitted single-cell program and the plain numpy forward map.
* ``bench pmd.coverage``: the whole coverage study (every MDP, arm and round) as one
  program against a Python loop over MDPs, arms and rounds calling one jitted round; the
  program's FLOPs (:mod:`pmd_jax.flops`), its achieved GFLOP/s beside this CPU's float32
  matrix-multiply peak, and the same FLOPs timed as the decoder calls alone and as their
  matrix products alone (where the time goes).
* ``bench pmd.repeated_control``: the FULL training sizes (5 actors x 51,200 steps, one
  critic x 12,800): seconds per step with the runs vmapped against a loop over runs, and
  the extrapolated minutes of a full run on this machine.
"""
from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from experiments import benchmark
from experiments.registry import bench
from experiments.studies.pmd import coverage as coverage_study
from experiments.studies.pmd import reversal as reversal_study
from experiments.studies.pmd.reversal import ReversalConfig
from pmd_jax import decoder, flops, numpy_reference
from pmd_jax.loop import decoder_critic, exact_critic
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


def _peak_gflops(dtype, n: int = 2048, repeats: int = 5) -> float:
    """This CPU's matrix-multiply peak in ``dtype``: the best of ``repeats`` ``[n, n] x [n, n]`` ``jnp.dot``
    calls (``2 n^3`` FLOPs each), after compilation."""
    k1, k2 = jax.random.split(jax.random.key(0))
    a, b = (jax.random.normal(k, (n, n), dtype) for k in (k1, k2))
    return 2 * n**3 / benchmark.time_call(jnp.dot, a, b, repeats=repeats)["min_s"] / 1e9


def _round_calls(cfg, n_mdps: int, slots) -> list[tuple[str, int, int]]:
    """``(call, tokens T, batch)`` of the decoder calls of one round of the coverage program over ``n_mdps``
    MDPs: one actor call per (MDP, arm), one critic call per (MDP, arm with a packet), grouped by packet size."""
    layout = decoder.Layout(cfg.num_states, cfg.num_actions)
    calls = [("actor", flops.actor_tokens_count(layout), n_mdps * len(slots))]
    for n in dict.fromkeys(s for s in slots if s is not None):
        calls.append((f"critic_n{n}", flops.critic_tokens_count(layout, n), n_mdps * list(slots).count(n)))
    return calls


def _time_decoder_calls(cfg, calls, matmuls_only: bool) -> float:
    """Seconds of ``cfg.rounds`` rounds of the decoder calls ``calls`` alone (each vmapped over its batch,
    float32; one ``lax.scan`` over rounds, each round's output the next round's input, as in the program),
    best of 3 after compilation: :func:`~pmd_jax.decoder.apply_actor` / :func:`~pmd_jax.decoder.apply_critic`
    as the program calls them (tokens and masks built inside), or (``matmuls_only``) only the decoder's
    matrix products on random tokens -- the same shapes and FLOPs with the masks, the softmax (scores
    used as weights) and the token building removed, random weights (scale 0.05) and each round's
    tokens rescaled to max 1 so nothing overflows."""
    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)
    rng = np.random.default_rng(0)
    uniform = lambda *shape: jnp.asarray(rng.uniform(-1, 1, shape), jnp.float32)
    if matmuls_only:
        params = jax.tree.map(lambda w: jnp.asarray(rng.normal(0, 0.05, w.shape), jnp.float32), params)
        inputs = [uniform(batch, T, layout.width) for _, T, batch in calls]
    else:
        inputs = []
        for name, T, batch in calls:
            Q = 5 * uniform(batch, S, A)
            if name == "actor":
                inputs.append((jnp.asarray(rng.dirichlet(np.ones(A), (batch, S)), jnp.float32), Q))
            else:
                n = T - 2 * S * A
                s, a, s_next, a_next = (jnp.asarray(rng.integers(0, k, (batch, n)), jnp.int32) for k in (S, A, S, A))
                inputs.append((Q, decoder.Transitions(s, a, uniform(batch, n), s_next, a_next, jnp.ones((batch, n), bool))))

    def dots(p, x):
        y = x
        for b in range(decoder.NUM_BLOCKS):
            att, ffn = p["params"][f"attn_{b}"], p["params"][f"ffn_{b}"]
            q, k, v = (jnp.einsum("btd,hde->bhte", y, att[w]) for w in ("wq", "wk", "wv"))
            scores = jnp.einsum("bhte,bhse->bhts", q, k)
            y = y + jnp.einsum("bhte,hed->btd", jnp.einsum("bhts,bhse->bhte", scores, v), att["wo"])
            y = y + ((y @ ffn["w_gate"]) * (y @ ffn["w_up"])) @ ffn["w_down"]
        return y / jnp.max(jnp.abs(y))

    actor = jax.vmap(lambda p, pi, Q: decoder.apply_actor(p, layout, pi, Q, cfg.eta), (None, 0, 0))
    critic = jax.vmap(lambda p, Q, tr: decoder.apply_critic(p, layout, Q, tr), (None, 0, 0))

    def one_round(p, state):
        if matmuls_only:
            return [dots(p, x) for x in state]
        return [(actor(p, *x), x[1]) if name == "actor" else (critic(p, *x), x[1]) for (name, _, _), x in zip(calls, state)]

    def rounds(p, state):
        return jax.lax.scan(lambda st, _: (one_round(p, st), None), state, None, length=cfg.rounds)[0]

    return benchmark.time_call(rounds, params, inputs, repeats=3)["min_s"]


@bench("pmd.coverage")
def coverage(out_dir) -> dict:
    """The whole study (full size) as one program against a Python loop over MDPs and arms calling one jitted
    round; its FLOPs (:mod:`pmd_jax.flops`), achieved GFLOP/s against this CPU's matrix-multiply peak, and
    where the time goes: the decoder's forward passes alone, and their matrix products alone."""
    cfg = coverage_study.FULL
    items = coverage_study.mdp_items(cfg)
    program = jax.vmap(coverage_study.runner_on_raw_keys(cfg))
    t_vec = benchmark.time_call(program, {k: jnp.asarray(v) for k, v in items.items()}, repeats=2)

    S, A = cfg.num_states, cfg.num_actions
    layout = decoder.Layout(S, A)
    params = decoder.construct_params(S, A, cfg.gamma, cfg.kappa, cfg.nu, jnp.float32)
    slots = coverage_study.packet_slots(cfg)

    @functools.partial(jax.jit, static_argnames=("n",))
    def one_round(P, R, arm, m, key, pi, Q, stream, n):
        mdp = FiniteMDP(P=P, R=R, gamma=jnp.asarray(cfg.gamma, R.dtype))
        pi_hat = decoder.apply_actor(params, layout, pi, Q, cfg.eta)
        critic = exact_critic(mdp) if n is None else decoder_critic(params, layout, mdp, arm, m, cfg.n_max, cfg.explore_eps, n)
        step = critic(key, pi_hat, Q, stream)
        return pi_hat, step.Q_next, step.stream_state

    n_loop = 4  # MDPs timed in the loop; reported per MDP
    pi0, Q0 = uniform_policy(S, A), jnp.zeros((S, A))
    for (arm, m), n in zip(coverage_study.ARMS, slots):  # compile every packet size
        one_round(items["P"][0], items["R"][0], int(arm), m, jax.random.key(0), pi0, Q0, jnp.asarray(0), n=n)
    t0 = time.perf_counter()
    for i in range(n_loop):
        for (arm, m), n in zip(coverage_study.ARMS, slots):
            pi, Q, stream = pi0, Q0, jnp.asarray(0)
            for key in jax.random.split(jax.random.key(i), cfg.rounds):
                pi, Q, stream = one_round(items["P"][i], items["R"][i], int(arm), m, key, pi, Q, stream, n=n)
            jax.block_until_ready(Q)
    loop_per_mdp = (time.perf_counter() - t0) / n_loop
    vec_per_mdp = t_vec["min_s"] / cfg.n_mdps

    count = flops.closed_loop_flops(layout, slots, cfg.rounds, cfg.n_mdps)
    padded = flops.closed_loop_flops(layout, [cfg.n_max] * len(slots), cfg.rounds, cfg.n_mdps)  # the layout before
    peak = _peak_gflops(jnp.float32)  # the study's dtype (its weights, MDPs and policies are float32)
    achieved = count["total"] / t_vec["min_s"] / 1e9
    calls = _round_calls(cfg, cfg.n_mdps, slots)
    decoder_s = _time_decoder_calls(cfg, calls, matmuls_only=False)
    matmul_s = _time_decoder_calls(cfg, calls, matmuls_only=True)
    assert cfg.rounds * sum(b * (flops.actor_call_flops(layout) if name == "actor" else flops.critic_call_flops(layout, T - 2 * S * A))
                            for name, T, b in calls) == count["total"]
    padded_calls = [calls[0], (f"critic_n{cfg.n_max}", flops.critic_tokens_count(layout, cfg.n_max), cfg.n_mdps * len(slots))]
    padded_s = _time_decoder_calls(cfg, padded_calls, matmuls_only=False)
    return {"mdps": cfg.n_mdps, "arms": len(coverage_study.ARMS), "rounds": cfg.rounds,
            "program_compile_s": t_vec["compile_s"], "program_s": t_vec["min_s"], "program_per_mdp_s": vec_per_mdp,
            "loop_mdps_timed": n_loop, "loop_per_mdp_s": loop_per_mdp, "ratio_loop_vs_program": loop_per_mdp / vec_per_mdp,
            "packet_slots": [n or 0 for n in slots],
            "program_gflop": count["total"] / 1e9, "program_gflop_actor": count["actor"] / 1e9,
            "padded_layout_gflop": padded["total"] / 1e9,
            "achieved_gflops": achieved, "peak_gflops_float32": peak, "peak_over_achieved": peak / achieved,
            "decoder_calls_s": decoder_s, "decoder_calls_gflops": count["total"] / decoder_s / 1e9,
            "decoder_share_of_program": decoder_s / t_vec["min_s"],
            "matmuls_only_s": matmul_s, "matmuls_only_gflops": count["total"] / matmul_s / 1e9,
            "matmul_share_of_decoder": matmul_s / decoder_s, "peak_over_matmuls_only": peak * matmul_s * 1e9 / count["total"],
            "padded_layout_decoder_calls_s": padded_s}


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

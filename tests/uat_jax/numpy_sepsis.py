"""Independent numpy reference of one Domain-B step (uat_jax.sepsis), used only by the tests.

Written from the module docstring, in float64 and plain Python control flow; it reads the
processed tables (as numpy) and recomputes cluster members from the labels."""
import dataclasses

import numpy as np


def tables_np(tables) -> dict:
    """The arrays of a SepsisTables as numpy."""
    return {k: np.asarray(v) for k, v in vars(tables).items()}


def knobs_np(params) -> dict:
    """The array-leaf knobs of an EnvParams (not the tables, not the static fields) as numpy."""
    return {f.name: np.asarray(getattr(params, f.name)) for f in dataclasses.fields(params)
            if f.metadata.get("pytree_node", True) and f.name != "tables"}


def first_above(weights: np.ndarray, u: float) -> int:
    """Smallest i with cumsum(weights)[i] > u * sum(weights)."""
    cdf = np.cumsum(weights)
    target = u * cdf[-1]
    for i, c in enumerate(cdf):
        if c > target:
            return i
    return len(weights) - 1


def tilted_row(tb: dict, s: int, combo: int, strength: float) -> np.ndarray:
    """P_k(. | s, a) ∝ P(. | s, a) exp(strength (severity(s) - severity(.))), normalised."""
    sev = tb["severity"].astype(np.float64)
    w = tb["transition"][s, combo].astype(np.float64) * np.exp(strength * (sev[s] - sev))
    return w / w.sum()


def step(tb: dict, kn: dict, horizon: int, state: dict, action: int, draws: dict) -> dict:
    """One step; ``state`` = dict(patient, t, schedule, prev_cluster, run); ``draws`` the
    uniforms member, hazard, next, admit. Returns the next state's fields and the outcome."""
    s, t = int(state["patient"]), int(state["t"])
    run = state["run"] + 1 if action == state["prev_cluster"] else 1
    resistance = float(kn["resistance_decay"]) ** max(run - int(kn["resistance_after"]), 0)
    members = [a for a in range(25) if tb["cluster"][a] == action]
    combo = members[min(int(np.floor(draws["member"] * len(members))), len(members) - 1)]
    regime = int(state["schedule"][min(t, horizon - 1)])
    efficacy = float(kn["efficacy"][regime, combo]) * resistance
    p_die = float(kn["termination_scale"]) * float(tb["p_death"][s, combo])
    in_zone = tb["sofa"][s] < kn["recovery_sofa"] and tb["lactate"][s] < kn["recovery_lactate"]
    p_rec = float(kn["termination_scale"]) * float(tb["p_discharge"][s, combo]) + float(kn["recovery_hazard"]) * in_zone
    p_rec = min(p_rec, 1.0 - p_die)
    died = draws["hazard"] < p_die
    recovered = (not died) and draws["hazard"] < p_die + p_rec
    if died or recovered:
        patient = first_above(tb["d0"].astype(np.float64), draws["admit"])
        reward = float(kn["death_reward"]) if died else float(kn["recovery_bonus"])
        prev_cluster, run = -1, 0
    else:
        patient = first_above(tilted_row(tb, s, combo, float(kn["tilt"]) * efficacy), draws["next"])
        reward = (float(kn["sofa_weight"]) * (float(tb["sofa"][s]) - float(tb["sofa"][patient]))
                  + float(kn["lactate_weight"]) * (float(tb["lactate"][s]) - float(tb["lactate"][patient])))
        prev_cluster = action
    return dict(patient=patient, t=t + 1, prev_cluster=prev_cluster, run=run, reward=reward, died=died,
                recovered=recovered, combination=combo, efficacy=efficacy, regime=regime)


def expected_response(tb: dict, kn: dict, states) -> tuple[np.ndarray, np.ndarray]:
    """[3, 5, len(states)] expected dense reward and next severity (full efficacy, no termination)."""
    dense = np.zeros((3, 5, len(states)))
    sev_next = np.zeros((3, 5, len(states)))
    gain = kn["sofa_weight"] * tb["sofa"].astype(np.float64) + kn["lactate_weight"] * tb["lactate"].astype(np.float64)
    for k in range(3):
        for c in range(5):
            members = [a for a in range(25) if tb["cluster"][a] == c]
            for i, s in enumerate(states):
                rows = [tilted_row(tb, s, a, float(kn["tilt"]) * float(kn["efficacy"][k, a])) for a in members]
                dense[k, c, i] = np.mean([gain[s] - p @ gain for p in rows])
                sev_next[k, c, i] = np.mean([p @ tb["severity"] for p in rows])
    return dense, sev_next

"""Non-stationary sepsis treatment (UAT paper, Appendix C.1-C.3, Domain B), gymnax-style,
built on the ICU-Sepsis tables.

The paper ("Breaking Feedback-Blindness: Utility-Augmented Transformer for Sequential
Decision Making", arXiv 2607.18910) builds Domain B on gym-sepsis with MIMIC-III
admission snapshots, which we cannot fetch. We build it on the tabular MDP of "ICU-Sepsis:
A Benchmark MDP Built from Real Medical Data" (Choudhary, Gupta, Thomas, arXiv 2406.05646;
package ``icu-sepsis`` 2.0.1, itself derived from MIMIC-III) and layer the paper's design
(observation, clustered actions, three efficacy regimes, resistance, hidden schedule,
reward) on top. Every reading and departure is stated here.

Data (read from the package's asset files, never by importing ``icu_sepsis``, whose
``__init__`` imports gym). 716 states: 0..712 patient states (clusters of MIMIC-III
patient-4h windows), 713 death, 714 survival (discharge), 715 s_inf (absorbing; no
patient state reaches it: checked, its column is 0 on all patient rows). 25 actions,
``a = 5 * fluid + vaso`` with ``fluid`` the level of IV fluid (``input_4hourly``) and
``vaso`` the level of vasopressor (``max_dose_vaso``), each 0 (none) .. 4 (highest dose
quartile): this is the package's builder (``icu_sepsis_helpers.mdp_creation``,
``action = n_levels * ac(input_4hourly) + ac(max_dose_vaso)``). Inadmissible
(state, action) pairs (seen fewer than 20 times in MIMIC-III): we follow the package's
default "mean" strategy, which is already baked into ``tx_mat`` (the row of an
inadmissible action is the mean of the state's admissible rows; ``read_assets`` checks
this to 1e-9 and refuses inconsistent files), so every combination is executable and
``info["admissible"]`` only reports whether the executed one was admissible.

Feature columns. ``state_cluster_centers`` [716, 47] are the k-means centres in the AI
Clinician's normalised feature space (Komorowski et al. 2018): binary columns minus 0.5,
"normal" columns z-scored, "log" columns z-scored after log(x + 0.1); order ``FEATURES``
= binary [gender, mechvent, max_dose_vaso, re_admission], normal [age .. cumulated_balance]
(32), log [SpO2 .. output_4hourly] (11). Verified on the data (713 patient rows): the SOFA
column (31, 0-based) tracks ``sofa_scores`` with correlation 0.997 (SOFA = 6.35 + 3.45 z, a
plausible MIMIC sepsis mean and spread); gender and mechvent lie in [-0.5, 0.5];
re_admission in [0.1, 1.1] and input_4hourly with spread 1.94 match the builder's
"+0.6" and "x2" adjustments of its columns 4 and 45 (1-based); physiological pairs correlate as they
must (SysBP/DiaBP with MeanBP 0.92/0.96, PT-INR 0.96, SGOT-SGPT 0.98, BUN-Creatinine
0.86, Arterial_BE-HCO3 0.77, mechvent-GCS -0.77, HR/SysBP with Shock_Index 0.80/-0.72);
the lactate column (30) is right-skewed (median -0.11, max 10.3 in z units), falls with
base excess (-0.43) and pH (-0.41), and rises with the death probability (0.29). The
last three rows (terminal states) are zero and unused.

Normalised units (reading). The paper's recovery thresholds (SOFA < 0.3, lactate < 0.3)
imply [0, 1] units. Raw lactate is not recoverable (only its z-score is stored) and its
min-max scale is dominated by one outlier cluster (97% of states would sit below 0.3), so
both SOFA (``sofa_scores``) and lactate (column 30) are mapped to their rank over the 713
patient states, ``rank / 712`` in [0, 1] (ties, absent in the data, broken by index).
``severity = (2 SOFA + lactate) / 3`` weighs them as the paper's reward does (0.1 : 0.05).

Observation (C.1 "standardize on the training pool and reduce to 20 PCA components"): the
47 features of the current state's cluster centre, standardised with the mean and
standard deviation over the 713 patient states (constant columns left unscaled; the "training
pool" is the patient states, there being no patient split to make), projected on the top
20 principal components (numpy: eigenvectors of z^T z, i.e. the right singular vectors of
the standardised z; sign convention: each component's largest-magnitude loading is
positive). They explain 86.2% of the variance (paper: about 74% on raw 46-dim snapshots;
cluster centres are averages, hence smoother). Plus N(0, obs_noise^2) noise per coordinate
(default 0.1, against component variances 0.73-6.4). The hidden state is the state index;
the regime and its schedule are never observed.

Actions (C.1): the 25 combinations are grouped into 5 clusters by k-means (Lloyd) on the
5 x 5 grid of (fluid, vaso) levels, initialised deterministically by farthest-point
traversal from (0, 0) (ties to the lowest index), and ordered by centroid intensity
fluid + vaso, ties broken by the centroid's fluid-major index 5 fluid + vaso (the package's
order). Result (cluster: members as (fluid, vaso)):
0 minimal {(0,0) (0,1) (0,2) (1,0) (1,1) (2,0)}; 1 vasopressor-led {(0,3) (0,4) (1,3)
(1,4)}; 2 moderate {(1,2) (2,1) (2,2) (2,3) (3,2)}; 3 fluid-led {(3,0) (3,1) (4,0) (4,1)}
(the paper's "moderate-to-high fluid"); 4 high {(2,4) (3,3) (3,4) (4,2) (4,3) (4,4)}.
The agent picks a cluster; the executed combination is drawn uniformly among its members.

Regimes and efficacy (C.1; the mechanism is ours). Regime k gives combination (f, v), with
x = f / 4, y = v / 4, the efficacy
  (0) fluid-responsive       e_0 = x + 0.25 y - 0.75 x y   (fluids strongly help,
      vasopressors mildly; adding vasopressors to full fluids gains nothing),
  (1) vasopressor-dependent  e_1 = -0.75 x + 0.25 y + 1.5 x y   (fluids alone harm by
      overload; vasopressors help and work on a filled circulation, so their effect grows
      with the fluid given alongside; this is what makes the paper's "highest-intensity"
      expert cluster 4 best on a grid where cluster 1 holds more vasopressor and less fluid),
  (2) conservative           e_2 = 0.5 - 1.5 max(x, y)   (helps iff fluid <= 1 and
      vaso <= 1; every more aggressive level harms),
all in [-1, 1]. The regime tilts the data-derived row towards improvement,
  P_k(s' | s, a) ∝ P(s' | s, a) exp(tilt * e * (severity(s) - severity(s'))),
over the patient states s' (``tilt`` = 10), with e the efficacy after resistance. The
expected one-step dense reward (``expected_response``; fresh efficacy, averaged over the
713 patient states) of clusters 0..4 is then
  fluid-responsive       0.013  0.016  0.024  0.037* 0.027
  vasopressor-dependent  0.002  0.017  0.010 -0.016  0.029*
  conservative           0.007* -0.031 -0.014 -0.031 -0.036
so the expert's cluster (*) is the unique best in every regime (and at every single state),
and the regimes answer the same cluster differently (expected next severity after cluster
3: 0.25 / 0.61 / 0.70).

Treatment resistance (C.1 "decaying efficacy after >= 3 consecutive identical actions"):
with n the number of consecutive steps the current cluster has been chosen (the current
step included), e is multiplied by ``resistance_decay ** max(n - resistance_after, 0)``
= 0.8 ** max(n - 3, 0): the first three uses act in full, the 4th at 0.8, the 5th at 0.64,
without floor (set ``resistance_decay`` = 1 to switch it off). The count restarts at a new
admission. The expert repeats its cluster through a segment, so its own efficacy fades
within long segments (0.8 ** 9 = 0.13 at the 12th use) and returns at each switch.

Hidden regime schedule (C.1): each episode of T = 90 steps has 4-6 segments (uniform); the
n - 1 cut points are sorted uniforms on the slack T - n * 8, so every segment lasts at
least ``min_segment_len`` = 8 steps and the lengths sum to T; the first regime is uniform,
each next one uniform among the two others. The schedule is drawn in ``reset`` and kept in
the state; step t acts under ``schedule[t]``.

Reward (C.1): a non-terminal step from s to s' pays 0.1 (SOFA(s) - SOFA(s')) + 0.05
(lactate(s) - lactate(s')) in rank units (improvement = decrease); a terminal step pays
+1 on recovery and -1 on death, without the dense term (C.1 gives the dense term to
non-terminal steps).

Termination (departure). ICU-Sepsis stays last about 10 steps, while T = 90 must hold 4-6
regime segments. Each step first draws termination from the current state s and executed
combination a: death with probability ``termination_scale`` * P(death | s, a), recovery
with ``termination_scale`` * P(survival | s, a) + ``recovery_hazard`` * [SOFA(s) < 0.3 and
lactate(s) < 0.3] (the paper's recovery rule, as a hazard: as a deterministic rule on
the rank units it ended stays after 2-10 steps), with ``termination_scale`` = ``recovery_hazard`` = 0.1;
otherwise the patient moves by the tilted row renormalised over the patient states. On
termination the bonus is paid, the next patient is admitted from d_0 (renormalised over
the patient states) and the bed's episode and regime schedule go on, so every episode has
exactly T labelled steps; ``info`` reports ``terminated``, ``died`` and ``recovered``.
Completed stays then last 16 steps on average under the expert and 21 under uniformly
random clusters (3-4 terminations per episode, 4% of them deaths under the expert, 8%
under random clusters).

Expert (C.2): sees the regime and picks its favoured cluster, ``EXPERT_CLUSTER`` = (3, 4,
0). The tables are arrays of ``EnvParams`` and so reach jitted functions as arguments, never
as closure constants (the transition table alone is 51 MB); to vmap over knobs, pass
``in_axes`` with ``tables=None``.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

N_ACTIONS = 5
OBS_DIM = 20
N_LEVELS = 5
N_COMBOS = N_LEVELS * N_LEVELS
N_TERMINAL = 3  # death, survival, s_inf: the last three states of the tables
REGIMES = ("fluid_responsive", "vasopressor_dependent", "conservative")
EXPERT_CLUSTER = (3, 4, 0)
"""The cluster the expert (C.2) picks in each regime."""
FEATURES = (
    "gender", "mechvent", "max_dose_vaso", "re_admission",
    "age", "Weight_kg", "GCS", "HR", "SysBP", "MeanBP", "DiaBP", "RR", "Temp_C", "FiO2_1",
    "Potassium", "Sodium", "Chloride", "Glucose", "Magnesium", "Calcium", "Hb", "WBC_count",
    "Platelets_count", "PTT", "PT", "Arterial_pH", "paO2", "paCO2", "Arterial_BE", "HCO3",
    "Arterial_lactate", "SOFA", "SIRS", "Shock_Index", "PaO2_FiO2", "cumulated_balance",
    "SpO2", "BUN", "Creatinine", "SGOT", "SGPT", "Total_bili", "INR", "input_total",
    "input_4hourly", "output_total", "output_4hourly")
"""Columns of ``state_cluster_centers`` (AI Clinician order: 4 binary, 32 normal, 11 log)."""
LACTATE_COLUMN = FEATURES.index("Arterial_lactate")
SEVERITY_WEIGHTS = (2.0 / 3.0, 1.0 / 3.0)
"""(SOFA, lactate) weights of the severity the regimes act on (the reward's 0.1 : 0.05)."""
PACKAGE_HINT = "install the ICU-Sepsis tables with `pip install icu-sepsis==2.0.1`"


# ----------------------------------------------------------------------------- tables


@struct.dataclass
class SepsisTables:
    """The domain's arrays, over the N patient states (N = 713 for the package)."""

    transition: jax.Array  # [N, 25, N] P(s' | s, a) renormalised over the patient states
    p_death: jax.Array  # [N, 25] P(death | s, a) of the tables
    p_discharge: jax.Array  # [N, 25] P(survival | s, a) of the tables
    admissible: jax.Array  # [N, 25] bool, the package's admissible actions
    d0: jax.Array  # [N] admission distribution
    sofa: jax.Array  # [N] SOFA in rank units [0, 1]
    lactate: jax.Array  # [N] lactate in rank units [0, 1]
    severity: jax.Array  # [N] (2 SOFA + lactate) / 3
    obs: jax.Array  # [N, obs_dim] standardised-PCA observation of each state
    levels: jax.Array  # [25, 2] int32 (fluid, vaso) level of each combination
    cluster: jax.Array  # [25] int32 intensity cluster of each combination
    members: jax.Array  # [n_clusters, max size] int32 combinations per cluster (increasing, -1 padded)
    cluster_size: jax.Array  # [n_clusters] int32
    components: jax.Array  # [obs_dim, 47] principal axes in the standardised feature space
    explained_variance: jax.Array  # [obs_dim] explained variance ratio of each component
    feature_mean: jax.Array  # [47] standardisation mean over the patient states
    feature_std: jax.Array  # [47] standardisation scale (1 for constant columns)


def treatment_levels() -> np.ndarray:
    """[25, 2] (fluid, vaso) levels of the package's combination index a = 5 fluid + vaso."""
    a = np.arange(N_COMBOS)
    return np.stack([a // N_LEVELS, a % N_LEVELS], 1)


def treatment_clusters(levels: np.ndarray, n_clusters: int = N_ACTIONS, max_iter: int = 100):
    """Deterministic k-means of the treatment-level grid into intensity clusters (C.1).

    Farthest-point initialisation from the first point (ties to the lowest index), Lloyd
    iterations until the assignment is stable (distance ties to the lowest cluster), then
    clusters ordered by centroid intensity (sum of levels), ties by the centroid's
    fluid-major index ``5 fluid + vaso``. Returns (labels [P] int, centroids [k, 2])."""
    x = np.asarray(levels, np.float64)
    if x.ndim != 2 or not 1 <= n_clusters <= len(x):
        raise ValueError(f"levels must be [P, 2] with P >= n_clusters, got {x.shape} and {n_clusters}")
    chosen = [0]
    for _ in range(n_clusters - 1):
        d = ((x[:, None] - x[chosen][None]) ** 2).sum(-1).min(1)
        chosen.append(int(np.argmax(d)))
    centroids = x[chosen]
    labels = None
    for _ in range(max_iter):
        new = np.argmin(((x[:, None] - centroids[None]) ** 2).sum(-1), 1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        if len(np.unique(labels)) < n_clusters:
            raise ValueError("k-means left a cluster empty")
        centroids = np.stack([x[labels == j].mean(0) for j in range(n_clusters)])
    order = np.lexsort((np.round(N_LEVELS * centroids[:, 0] + centroids[:, 1], 9),
                        np.round(centroids.sum(1), 9)))
    rank = np.empty(n_clusters, int)
    rank[order] = np.arange(n_clusters)
    return rank[labels], centroids[order]


def regime_efficacy(levels: np.ndarray) -> np.ndarray:
    """[3, P] efficacy e_k(f, v) in [-1, 1] of each regime (C.1 regimes; formulas in the module docstring)."""
    x = np.asarray(levels, np.float64)[:, 0] / (N_LEVELS - 1)
    y = np.asarray(levels, np.float64)[:, 1] / (N_LEVELS - 1)
    return np.stack([x + 0.25 * y - 0.75 * x * y,
                     -0.75 * x + 0.25 * y + 1.5 * x * y,
                     0.5 - 1.5 * np.maximum(x, y)])


def rank_unit(values: np.ndarray) -> np.ndarray:
    """Rank of each value divided by (n - 1), in [0, 1] (ties broken by index)."""
    v = np.asarray(values)
    r = np.empty(len(v))
    r[np.argsort(v, kind="stable")] = np.arange(len(v))
    return r / max(len(v) - 1, 1)


def standardised_pca(features: np.ndarray, n_components: int):
    """Standardise the rows' columns and project on the top principal components (C.1),
    from the eigendecomposition of z^T z (the right singular vectors of the standardised z).

    Returns (scores [N, k], components [k, F], explained variance ratio [k], mean [F],
    scale [F]); constant columns keep scale 1; each component's largest-magnitude loading
    is made positive."""
    f = np.asarray(features, np.float64)
    if f.ndim != 2 or not 1 <= n_components <= min(f.shape):
        raise ValueError(f"n_components must be in [1, {min(f.shape)}] for features {f.shape}, got {n_components}")
    mean = f.mean(0)
    std = f.std(0)
    scale = np.where(std > 0, std, 1.0)
    z = (f - mean) / scale
    eigval, eigvec = np.linalg.eigh(z.T @ z)  # the right singular vectors of z, ascending
    vt = eigvec[:, ::-1][:, :n_components].T
    vt = vt * np.sign(vt[np.arange(n_components), np.argmax(np.abs(vt), 1)])[:, None]
    ratio = eigval[::-1][:n_components] / eigval.sum()
    return z @ vt.T, vt, ratio, mean, scale


def check_shapes(tx_mat, d_0, sofa_scores, centres, admissible) -> int:
    """Number of patient states N of ICU-Sepsis-shaped arrays (N + 3 states, 25 actions,
    47 features); ValueError naming the first array of the wrong shape."""
    n_all = np.shape(tx_mat)[0] if np.ndim(tx_mat) == 3 else -1
    shapes = {"tx_mat": (np.shape(tx_mat), (n_all, N_COMBOS, n_all)), "d_0": (np.shape(d_0), (n_all,)),
              "sofa_scores": (np.shape(sofa_scores), (n_all,)),
              "state_cluster_centers": (np.shape(centres), (n_all, len(FEATURES))),
              "admissible": (np.shape(admissible), (n_all, N_COMBOS))}
    for name, (got, want) in shapes.items():
        if n_all < N_TERMINAL + 2 or got != want:
            raise ValueError(f"{name} has shape {got}, expected {want} (states = patient states + {N_TERMINAL})")
    return n_all - N_TERMINAL


def build_tables(tx_mat: np.ndarray, d_0: np.ndarray, sofa_scores: np.ndarray, centres: np.ndarray,
                 admissible: np.ndarray, n_components: int = OBS_DIM) -> SepsisTables:
    """SepsisTables from ICU-Sepsis-shaped arrays (the last three states terminal: death,
    survival, s_inf): patient rows renormalised over the patient states, the termination
    probabilities kept apart, SOFA and lactate in rank units, the standardised-PCA
    observation and the treatment clusters (module docstring)."""
    n = check_shapes(tx_mat, d_0, sofa_scores, centres, admissible)
    tx = np.asarray(tx_mat, np.float64)
    stay = tx[:n, :, :n].sum(-1)
    if not np.all(stay > 0):
        raise ValueError("tx_mat: some (state, action) rows have no mass on the patient states")
    d0 = np.asarray(d_0, np.float64)[:n]
    if not d0.sum() > 0:
        raise ValueError("d_0 has no mass on the patient states")
    sofa = rank_unit(np.asarray(sofa_scores)[:n])
    lactate = rank_unit(np.asarray(centres)[:n, LACTATE_COLUMN])
    obs, comps, ratio, mean, scale = standardised_pca(np.asarray(centres)[:n], n_components)
    levels = treatment_levels()
    labels, _ = treatment_clusters(levels)
    size = np.bincount(labels, minlength=N_ACTIONS)
    members = np.full((N_ACTIONS, size.max()), -1)
    for c in range(N_ACTIONS):
        members[c, :size[c]] = np.flatnonzero(labels == c)
    f32 = lambda a: jax.device_put(np.asarray(a, np.float32))
    i32 = lambda a: jax.device_put(np.asarray(a, np.int32))
    return SepsisTables(
        transition=f32(tx[:n, :, :n] / stay[..., None]), p_death=f32(tx[:n, :, n]),
        p_discharge=f32(tx[:n, :, n + 1]), admissible=jax.device_put(np.asarray(admissible[:n], bool)),
        d0=f32(d0 / d0.sum()), sofa=f32(sofa), lactate=f32(lactate),
        severity=f32(SEVERITY_WEIGHTS[0] * sofa + SEVERITY_WEIGHTS[1] * lactate), obs=f32(obs),
        levels=i32(levels), cluster=i32(labels), members=i32(members), cluster_size=i32(size),
        components=f32(comps), explained_variance=f32(ratio), feature_mean=f32(mean),
        feature_std=f32(scale))


def asset_dir() -> Path:
    """The ``envs/assets`` folder of the installed ``icu_sepsis`` package (not imported)."""
    spec = importlib.util.find_spec("icu_sepsis")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the package icu_sepsis is not installed: {PACKAGE_HINT}")
    return Path(list(spec.submodule_search_locations)[0]) / "envs" / "assets"


def read_assets(directory: Path) -> dict[str, np.ndarray]:
    """Read and check ``dynamics.npz`` and ``admissible_actions.txt`` of an ICU-Sepsis
    asset folder; the admissible mask is [states, 25] bool. Checks: shapes, stochastic
    rows, and the "mean" strategy (each inadmissible row is the mean of the admissible ones)."""
    directory = Path(directory)
    names = ("tx_mat", "d_0", "sofa_scores", "state_cluster_centers")
    try:
        with np.load(directory / "dynamics.npz") as data:
            out = {k: np.asarray(data[k], np.float64) for k in names}
        lines = (directory / "admissible_actions.txt").read_text().split("\n")
        counts = [int(c) for c in lines[0].split()]
        rows = [[int(a) for a in line.split()] for line in lines[1:1 + len(counts)]]
    except (OSError, KeyError, ValueError) as err:
        raise ValueError(f"unreadable ICU-Sepsis assets in {directory} ({err}); {PACKAGE_HINT}") from err
    n_all = out["tx_mat"].shape[0]
    if len(counts) != n_all or [len(r) for r in rows] != counts or any(not 0 <= a < N_COMBOS for r in rows for a in r):
        raise ValueError(f"admissible_actions.txt in {directory} does not list {n_all} states of actions in [0, 25)")
    mask = np.zeros((n_all, N_COMBOS), bool)
    for s, r in enumerate(rows):
        mask[s, r] = True
    out["admissible"] = mask
    n = check_shapes(out["tx_mat"], out["d_0"], out["sofa_scores"], out["state_cluster_centers"], mask)
    if not mask[:n].any(1).all():
        raise ValueError(f"admissible_actions.txt in {directory}: a patient state has no admissible action")
    tx = out["tx_mat"]
    if np.abs(tx.sum(-1) - 1.0).max() > 1e-6 or tx.min() < 0:
        raise ValueError("tx_mat rows are not probability distributions")
    mean_rows = np.matmul(mask[:n, None, :].astype(np.float64), tx[:n])[:, 0] / mask[:n].sum(1)[:, None]
    deviation = np.abs(tx[:n] - mean_rows[:, None]).max(-1)
    if np.any(deviation[~mask[:n]] > 1e-9):
        raise ValueError("tx_mat rows of inadmissible actions are not the mean of the admissible ones")
    return out


@functools.lru_cache(maxsize=1)
def _package_assets() -> dict[str, np.ndarray]:
    return read_assets(asset_dir())


@functools.lru_cache(maxsize=4)
def load_tables(n_components: int = OBS_DIM) -> SepsisTables:
    """The ICU-Sepsis tables of the installed package as SepsisTables (cached)."""
    a = _package_assets()
    return build_tables(a["tx_mat"], a["d_0"], a["sofa_scores"], a["state_cluster_centers"],
                        a["admissible"], n_components)


# ----------------------------------------------------------------------------- environment


KNOB_RANGES = {"tilt": (0, np.inf), "resistance_decay": (1e-9, 1), "resistance_after": (1, np.inf),
               "termination_scale": (0, 1), "recovery_hazard": (0, 1), "obs_noise": (0, np.inf)}
"""The closed range of each bounded knob (arrays of knobs are checked element by element)."""


def check_knob_ranges(knobs) -> None:
    """Raise naming the first knob of ``knobs`` (any object with those attributes) outside ``KNOB_RANGES``."""
    for name, (lo, hi) in KNOB_RANGES.items():
        value = np.asarray(getattr(knobs, name))
        if not np.all((lo <= value) & (value <= hi)):
            raise ValueError(f"{name} = {value} outside [{lo}, {hi}]")


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The simulator's knobs a study may set (``uat.sepsis``: ``--set sim.NAME=VALUE``, ``--sweep``): the
    regime contrast ``tilt``, treatment resistance, termination, observation noise and the regime
    schedule, with the defaults of the ``EnvParams`` fields of the same names (module docstring)."""

    tilt: float = 10.0
    resistance_decay: float = 0.8  # 1 switches resistance off
    resistance_after: int = 3
    termination_scale: float = 0.1
    recovery_hazard: float = 0.1
    obs_noise: float = 0.1
    min_segments: int = 4
    max_segments: int = 6
    min_segment_len: int = 8

    def __post_init__(self) -> None:
        check_knob_ranges(self)


@struct.dataclass
class EnvParams:
    """One Domain-B task: the tables plus every knob as an array leaf (module docstring)."""

    tables: SepsisTables
    efficacy: jax.Array = struct.field(  # [3, 25]
        default_factory=lambda: jnp.asarray(regime_efficacy(treatment_levels()), jnp.float32))
    tilt: jax.Array = Knobs.tilt
    resistance_decay: jax.Array = Knobs.resistance_decay
    resistance_after: jax.Array = Knobs.resistance_after
    termination_scale: jax.Array = Knobs.termination_scale
    recovery_hazard: jax.Array = Knobs.recovery_hazard
    recovery_sofa: jax.Array = 0.3
    recovery_lactate: jax.Array = 0.3
    sofa_weight: jax.Array = 0.1
    lactate_weight: jax.Array = 0.05
    recovery_bonus: jax.Array = 1.0
    death_reward: jax.Array = -1.0
    obs_noise: jax.Array = Knobs.obs_noise
    horizon: int = struct.field(pytree_node=False, default=90)
    n_clusters: int = struct.field(pytree_node=False, default=N_ACTIONS)
    obs_dim: int = struct.field(pytree_node=False, default=OBS_DIM)
    min_segments: int = struct.field(pytree_node=False, default=Knobs.min_segments)
    max_segments: int = struct.field(pytree_node=False, default=Knobs.max_segments)
    min_segment_len: int = struct.field(pytree_node=False, default=Knobs.min_segment_len)


def check_schedule(horizon: int, min_segments: int = Knobs.min_segments, max_segments: int = Knobs.max_segments,
                   min_segment_len: int = Knobs.min_segment_len) -> None:
    """Raise unless an episode of ``horizon`` steps can hold ``max_segments`` regime segments of at
    least ``min_segment_len`` steps (defaults: :class:`Knobs`')."""
    if not 1 <= min_segments <= max_segments:
        raise ValueError(f"need 1 <= min_segments <= max_segments, got {min_segments}, {max_segments}")
    if min_segment_len < 1 or horizon < max_segments * min_segment_len:
        raise ValueError(f"horizon {horizon} cannot hold {max_segments} segments of min_segment_len {min_segment_len}")


def make_params(tables: SepsisTables | None = None, **knobs) -> EnvParams:
    """EnvParams over ``tables`` (default: the package's, ``load_tables()``), with checks."""
    tables = load_tables() if tables is None else tables
    params = EnvParams(tables=tables, **{"obs_dim": int(tables.obs.shape[1]), **knobs})
    if params.obs_dim != tables.obs.shape[1]:
        raise ValueError(f"obs_dim {params.obs_dim} != the tables' {tables.obs.shape[1]} components")
    if params.n_clusters != tables.members.shape[0]:
        raise ValueError(f"n_clusters {params.n_clusters} != the tables' {tables.members.shape[0]} clusters")
    check_schedule(params.horizon, params.min_segments, params.max_segments, params.min_segment_len)
    eff = np.asarray(params.efficacy)
    if eff.shape != (len(REGIMES), N_COMBOS) or np.abs(eff).max() > 1:
        raise ValueError(f"efficacy must be [3, 25] in [-1, 1], got shape {eff.shape}")
    check_knob_ranges(params)
    return params


@struct.dataclass
class EnvState:
    """The hidden state of one bed: patient, step, regime schedule and treatment history."""

    patient: jax.Array  # [] int32 hidden patient state (icu-sepsis index)
    t: jax.Array  # [] int32 steps taken
    schedule: jax.Array  # [T] int32 regime of each step
    prev_cluster: jax.Array  # [] int32 cluster chosen at the previous step (-1: none since admission)
    run: jax.Array  # [] int32 consecutive steps prev_cluster has been chosen


@struct.dataclass
class StepDraws:
    """The randomness of one step (exposed so a reference can replay it)."""

    member: jax.Array  # [] uniform: executed combination within the cluster
    hazard: jax.Array  # [] uniform: death / recovery / stay
    next: jax.Array  # [] uniform: next patient state
    admit: jax.Array  # [] uniform: next admission (used on termination)
    noise: jax.Array  # [obs_dim] standard normal observation noise


def inverse_cdf(weights: jax.Array, u: jax.Array) -> jax.Array:
    """Index i with cdf[i - 1] <= u * total < cdf[i] for non-negative ``weights``."""
    cdf = jnp.cumsum(weights)
    return jnp.minimum(jnp.sum(cdf <= u * cdf[-1]), weights.shape[0] - 1).astype(jnp.int32)


def draw_schedule(key: jax.Array, params: EnvParams) -> jax.Array:
    """[T] regime of each step (C.1 hidden regime shift; module docstring)."""
    T, hi, m = params.horizon, params.max_segments, params.min_segment_len
    k_n, k_cut, k_first, k_next = jax.random.split(key, 4)
    n = jax.random.randint(k_n, (), params.min_segments, hi + 1)
    slots = jnp.arange(1, hi)
    valid = slots < n
    u = jnp.sort(jnp.where(valid, jax.random.uniform(k_cut, (hi - 1,)), 2.0))
    cuts = jnp.floor(jnp.where(valid, u, 0.0) * (T - n * m + 1)).astype(jnp.int32)
    bounds = jnp.where(valid, slots * m + cuts, T)
    segment = jnp.sum(jnp.arange(T)[:, None] >= bounds[None, :], axis=1)
    moves = jnp.concatenate([jnp.zeros(1, jnp.int32), 1 + jax.random.randint(k_next, (hi - 1,), 0, 2)])
    regimes = (jax.random.randint(k_first, (), 0, len(REGIMES)) + jnp.cumsum(moves)) % len(REGIMES)
    return regimes[segment].astype(jnp.int32)


def observe(patient: jax.Array, noise: jax.Array, params: EnvParams) -> jax.Array:
    """Standardised-PCA observation of ``patient`` plus ``obs_noise`` * noise (C.1)."""
    return params.tables.obs[patient] + params.obs_noise * noise


def reset(key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
    """Draw the regime schedule and admit a patient from d_0; returns (obs, state)."""
    k_sched, k_admit, k_noise = jax.random.split(key, 3)
    patient = inverse_cdf(params.tables.d0, jax.random.uniform(k_admit))
    state = EnvState(patient=patient, t=jnp.zeros((), jnp.int32), schedule=draw_schedule(k_sched, params),
                     prev_cluster=jnp.full((), -1, jnp.int32), run=jnp.zeros((), jnp.int32))
    return observe(patient, jax.random.normal(k_noise, (params.obs_dim,)), params), state


def regime_at(state: EnvState) -> jax.Array:
    """Regime acting on the transition out of ``state`` (step t of the schedule)."""
    return state.schedule[jnp.minimum(state.t, state.schedule.shape[0] - 1)]


def expert_action(state: EnvState, params: EnvParams) -> jax.Array:
    """The regime-aware expert of C.2: the cluster its regime favours (``params`` unused,
    kept for the domain protocol)."""
    return jnp.asarray(EXPERT_CLUSTER, jnp.int32)[regime_at(state)]


def tilted_weights(patient: jax.Array, combo: jax.Array, strength: jax.Array, tables: SepsisTables) -> jax.Array:
    """Unnormalised P_k(. | s, a) = P(. | s, a) exp(strength (severity(s) - severity(.))), strength = tilt * e."""
    z = strength * (tables.severity[patient] - tables.severity)
    return tables.transition[patient, combo] * jnp.exp(z - jnp.max(z))


def draw_step(key: jax.Array, params: EnvParams) -> StepDraws:
    """The uniforms and noise one ``step`` consumes."""
    k = jax.random.split(key, 5)
    return StepDraws(member=jax.random.uniform(k[0]), hazard=jax.random.uniform(k[1]),
                     next=jax.random.uniform(k[2]), admit=jax.random.uniform(k[3]),
                     noise=jax.random.normal(k[4], (params.obs_dim,)))


def draw_steps(key: jax.Array, params: EnvParams) -> StepDraws:
    """The randomness of a whole episode, drawn before it is played: ``StepDraws`` with a
    leading [horizon] axis, row t = ``draw_step`` of the t-th of horizon split keys (one
    batched draw), consumed by step t's ``transition``."""
    return jax.vmap(draw_step, in_axes=(0, None))(jax.random.split(key, params.horizon), params)


def transition(draws: StepDraws, state: EnvState, action: jax.Array, params: EnvParams):
    """One step given its draws; returns (obs, state, reward, done, info). Order: executed
    combination, resistance, termination hazard at (s, a), tilted move or readmission,
    reward (module docstring)."""
    chex.assert_shape(action, ())
    tb = params.tables
    c = jnp.asarray(action, jnp.int32)
    run = jnp.where(c == state.prev_cluster, state.run + 1, 1)
    resistance = params.resistance_decay ** jnp.maximum(run - params.resistance_after, 0)
    size = tb.cluster_size[c]
    combo = tb.members[c, jnp.minimum(jnp.floor(draws.member * size).astype(jnp.int32), size - 1)]
    regime = regime_at(state)
    efficacy = params.efficacy[regime, combo] * resistance
    s = state.patient
    p_die = params.termination_scale * tb.p_death[s, combo]
    zone = (tb.sofa[s] < params.recovery_sofa) & (tb.lactate[s] < params.recovery_lactate)
    p_rec = jnp.minimum(params.termination_scale * tb.p_discharge[s, combo] + params.recovery_hazard * zone,
                        1.0 - p_die)
    died = draws.hazard < p_die
    recovered = ~died & (draws.hazard < p_die + p_rec)
    terminated = died | recovered
    nxt = inverse_cdf(tilted_weights(s, combo, params.tilt * efficacy, tb), draws.next)
    patient = jnp.where(terminated, inverse_cdf(tb.d0, draws.admit), nxt)
    dense = (params.sofa_weight * (tb.sofa[s] - tb.sofa[nxt])
             + params.lactate_weight * (tb.lactate[s] - tb.lactate[nxt]))
    reward = jnp.where(died, params.death_reward, jnp.where(recovered, params.recovery_bonus, dense))
    new_state = EnvState(patient=patient, t=state.t + 1, schedule=state.schedule,
                         prev_cluster=jnp.where(terminated, -1, c), run=jnp.where(terminated, 0, run))
    previous = state.schedule[jnp.clip(state.t - 1, 0, state.schedule.shape[0] - 1)]
    info = {"regime": regime, "switched": (state.t > 0) & (regime != previous), "terminated": terminated,
            "died": died, "recovered": recovered, "combination": combo, "admissible": tb.admissible[s, combo],
            "efficacy": efficacy, "resistance": resistance}
    done = new_state.t >= params.horizon
    return observe(patient, draws.noise, params), new_state, reward.astype(jnp.float32), done, info


def step(key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    """One transition; returns (obs, state, reward, done, info) (``transition`` of ``draw_step``)."""
    return transition(draw_step(key, params), state, action, params)


def expected_response(params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """Exact one-step response to each cluster in each regime at each patient state, with
    full efficacy (no resistance) and given no termination: (expected dense reward,
    expected next severity), each [3, n_clusters, N]; the executed combination is uniform
    within the cluster. The checks of C.1's expert claims (tests, docs) read it."""
    tb = params.tables
    gain = (params.sofa_weight * tb.sofa + params.lactate_weight * tb.lactate)
    members = jax.nn.one_hot(tb.cluster, params.n_clusters) / tb.cluster_size  # [25, k]

    def at_state(eff, s):
        w = jax.vmap(lambda a, e: tilted_weights(s, a, params.tilt * e, tb))(jnp.arange(N_COMBOS), eff)
        p = w / w.sum(-1, keepdims=True)
        return gain[s] - p @ gain, p @ tb.severity

    def per_regime(eff):
        dense, sev = jax.lax.map(lambda s: at_state(eff, s), jnp.arange(tb.d0.shape[0]), batch_size=64)
        return (dense @ members).T, (sev @ members).T

    return jax.lax.map(per_regime, jnp.asarray(params.efficacy, jnp.float32))

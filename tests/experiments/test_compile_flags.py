"""``experiments.compile_flags``: quick runs compile with cheaper LLVM optimisation, and it computes the same numbers;
every run keeps its programs in a persistent compilation cache, and a loaded program computes the same bits."""
import os
import subprocess
import sys

import numpy as np

from experiments import compile_flags

FAST = "--xla_llvm_disable_expensive_passes=true --xla_backend_optimization_level=1"

# One training step of a tiny Vanilla-TF on the cross-entropy of a greedy causal rollout (the decode-cache scan,
# the parallel pass, its gradient): the loss, the rollout and the gradient, saved to the file named by argv[1].
_PROGRAM = """
import sys, jax, numpy as np
from uat_jax import cells
from uat_jax.model import DecisionTransformer, init_params, sequence_logits
from uat_jax.train import Task, batch_rollout, cross_entropy
cfg = cells.Size(d_model=8, n_heads=2, d_ff=16, n_layers=1, horizon=6, batch_size=2).train_config("vt")
model = DecisionTransformer(cfg.model)

def step(key):
    params = init_params(model, key)
    goals = jax.numpy.array([[1, 2], [7, 3]])
    traj = batch_rollout(cfg, model, params, jax.random.split(key, 2), Task.make("abrupt").channel, goals, greedy=True)
    loss_fn = lambda p: cross_entropy(jax.vmap(lambda o, a, r: sequence_logits(model, p, o, a, r))(
        traj.obs, traj.actions, traj.fed_rewards), traj.expert)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    return loss, traj.actions, grads

out = jax.jit(step)(jax.random.key(3))
np.savez(sys.argv[1], *jax.tree.leaves(out))
"""


def test_only_quick_runs_get_the_flag():
    assert compile_flags.wants_fast_compile(["run", "all", "--quick", "--jobs", "2"])
    assert compile_flags.wants_fast_compile(["run", "uat.darkroom", "--quick"])
    for argv in (["run", "uat.darkroom"], ["bench", "uat.darkroom"], ["show", "x", "--quick"], [], ["--quick"]):
        assert not compile_flags.wants_fast_compile(argv), argv


def test_flags_are_appended_unless_the_user_set_them():
    assert compile_flags.with_fast_compile("") == FAST
    assert compile_flags.with_fast_compile("--xla_force_host_platform_device_count=2") == \
        f"--xla_force_host_platform_device_count=2 {FAST}"
    for own in ("--xla_llvm_disable_expensive_passes=false --xla_backend_optimization_level=3", f"--a=1 {FAST}"):
        assert compile_flags.with_fast_compile(own) == own
    # one of the two set by the user: theirs kept, the other added
    assert compile_flags.with_fast_compile("--xla_backend_optimization_level=2") == \
        "--xla_backend_optimization_level=2 --xla_llvm_disable_expensive_passes=true"
    assert compile_flags.with_fast_compile("--xla_llvm_disable_expensive_passes=false") == \
        "--xla_llvm_disable_expensive_passes=false --xla_backend_optimization_level=1"
    env = {"XLA_FLAGS": "--a=1"}
    compile_flags.configure(["run", "all", "--quick"], env)
    assert env["XLA_FLAGS"] == f"--a=1 {FAST}"
    env = {}
    compile_flags.configure(["run", "all"], env)
    assert "XLA_FLAGS" not in env


def test_runs_cache_their_programs_under_the_out_folder_unless_the_user_chose():
    for argv, folder in ((["run", "all", "--quick"], "results"), (["run", "x", "--out", "o/p"], "o/p"),
                         (["run", "x", "--out=q", "--quick"], "q")):
        env = {}
        compile_flags.configure(argv, env)
        assert env == {**({"XLA_FLAGS": FAST} if "--quick" in argv else {}),
                       "JAX_COMPILATION_CACHE_DIR": os.path.join(folder, ".jax_cache"),
                       "JAX_COMPILATION_CACHE_MAX_SIZE": str(compile_flags.CACHE_MAX_BYTES)}, argv
    env = {"JAX_COMPILATION_CACHE_DIR": "", "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}  # the user's choice stays
    compile_flags.configure(["run", "x"], env)
    assert env == {"JAX_COMPILATION_CACHE_DIR": "", "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}
    for verb in (["bench", "uat.darkroom"], ["report"], ["show", "x"]):  # bench measures compile time
        env = {}
        compile_flags.configure(verb, env)
        assert env == {}


def _outputs(xla_flags: str, path) -> list[np.ndarray]:
    env = {**os.environ, "XLA_FLAGS": xla_flags, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # compile for real, every way
    done = subprocess.run([sys.executable, "-c", _PROGRAM, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def test_quick_compilation_computes_the_same_numbers(tmp_path):
    """XLA's default pipeline against the quick runs' flags, on a training step (rollout, parallel pass, gradient):
    without LLVM's expensive passes, the same bits; at LLVM's O1 the same loss, the same greedy actions, and every
    gradient within 4 units in the last place of the largest gradient entry. A sum rounded in another order errs on
    the scale of its terms, not of its result: on an AVX2-only CPU one bias's gradient, zero but for rounding
    (entries about 3e-9 against gradients up to 19), differs by 4e-10, a million units in its own last place and
    0.0002 units in the last place of the largest; an optimiser step that divides by the gradient's size (Adam) would blow that up,
    so the parameters after one are not compared."""
    default = _outputs("", tmp_path / "default.npz")
    cheap = _outputs(f"{compile_flags.FAST_COMPILE[0][0]}=true", tmp_path / "cheap.npz")
    quick = _outputs(FAST, tmp_path / "quick.npz")
    assert len(default) == len(cheap) == len(quick) > 20
    for d, c in zip(default, cheap):
        assert d.tobytes() == c.tobytes()
    (loss, actions, *grads), (q_loss, q_actions, *q_grads) = default, quick
    assert abs(q_loss - loss) <= 2 * np.spacing(abs(loss)) and np.array_equal(q_actions, actions)
    ulp = np.spacing(max(np.abs(g).max() for g in grads))
    for g, q in zip(grads, q_grads):
        assert np.all(np.abs(q - g) <= 4 * ulp), (np.abs(q - g).max(), ulp)


# A scanned recurrence and its gradient: small enough to start fast, a loop and a transpose to compile.
_CACHED_PROGRAM = """
import hashlib, jax, jax.numpy as jnp, numpy as np
def step(w):
    h = jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), c.sum()), jnp.ones((4, 8)), None, length=5)
    return jax.value_and_grad(lambda v: jax.lax.scan(lambda c, _: (jnp.tanh(c @ v), None), h[0], None,
                                                     length=5)[0].sum())(w)
out = jax.jit(step)(jax.random.normal(jax.random.key(0), (8, 8)))
print(hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(out))).hexdigest())
"""


def test_a_program_loaded_from_the_cache_computes_the_same_bits(tmp_path):
    """The cache environment of a run: the first process compiles (a miss) and stores the program,
    the second loads it (no new entry, its access time stamped) and computes the same digest."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    compile_flags.configure(["run", "x", "--out", str(tmp_path)], env)

    def digest():
        done = subprocess.run([sys.executable, "-c", _CACHED_PROGRAM], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    cache = tmp_path / ".jax_cache"
    first = digest()
    entries = sorted(p.name for p in cache.glob("*-cache"))
    (step,) = cache.glob("jit_step-*-atime")
    stored = step.read_bytes()
    assert digest() == first
    assert sorted(p.name for p in cache.glob("*-cache")) == entries
    assert step.read_bytes() != stored  # the second process read the entry (a hit stamps its access time)

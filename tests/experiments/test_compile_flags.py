"""``experiments.compile_flags``: quick runs compile with LLVM's cheap pipeline, and it computes the same bits;
every run keeps its programs in a persistent compilation cache, and a loaded program computes the same bits."""
import os
import subprocess
import sys

from experiments import compile_flags

FLAG = "--xla_llvm_disable_expensive_passes"

# One AdamW step of a tiny Vanilla-TF on the cross-entropy of a greedy causal rollout (the decode-cache scan,
# the parallel pass, its gradient): the digest of the new parameters, the loss and the rollout.
_PROGRAM = """
import hashlib, jax, numpy as np
from uat_jax import cells
from uat_jax.model import DecisionTransformer, init_params, sequence_logits
from uat_jax.train import Task, batch_rollout, cross_entropy, make_optimizer
cfg = cells.Size(d_model=8, n_heads=2, d_ff=16, n_layers=1, horizon=6, batch_size=2).train_config("vt")
model = DecisionTransformer(cfg.model)
optimizer = make_optimizer(cfg)

def step(key):
    params = init_params(model, key)
    goals = jax.numpy.array([[1, 2], [7, 3]])
    traj = batch_rollout(cfg, model, params, jax.random.split(key, 2), Task.make("abrupt").channel, goals, greedy=True)
    loss_fn = lambda p: cross_entropy(jax.vmap(lambda o, a, r: sequence_logits(model, p, o, a, r))(
        traj.obs, traj.actions, traj.fed_rewards), traj.expert)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    return loss, traj.actions, jax.tree.map(lambda p, u: p + u, params, updates)

out = jax.jit(step)(jax.random.key(3))
print(hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(out))).hexdigest())
"""


def test_only_quick_runs_get_the_flag():
    assert compile_flags.wants_fast_compile(["run", "all", "--quick", "--jobs", "2"])
    assert compile_flags.wants_fast_compile(["run", "uat.darkroom", "--quick"])
    for argv in (["run", "uat.darkroom"], ["bench", "uat.darkroom"], ["show", "x", "--quick"], [], ["--quick"]):
        assert not compile_flags.wants_fast_compile(argv), argv


def test_flag_is_appended_unless_the_user_set_it():
    assert compile_flags.with_fast_compile("") == f"{FLAG}=true"
    assert compile_flags.with_fast_compile("--xla_force_host_platform_device_count=2") == \
        f"--xla_force_host_platform_device_count=2 {FLAG}=true"
    for own in (f"{FLAG}=false", f"--a=1 {FLAG}=true"):
        assert compile_flags.with_fast_compile(own) == own
    env = {"XLA_FLAGS": "--a=1"}
    compile_flags.configure(["run", "all", "--quick"], env)
    assert env["XLA_FLAGS"] == f"--a=1 {FLAG}=true"
    env = {}
    compile_flags.configure(["run", "all"], env)
    assert "XLA_FLAGS" not in env


def test_runs_cache_their_programs_under_the_out_folder_unless_the_user_chose():
    for argv, folder in ((["run", "all", "--quick"], "results"), (["run", "x", "--out", "o/p"], "o/p"),
                         (["run", "x", "--out=q", "--quick"], "q")):
        env = {}
        compile_flags.configure(argv, env)
        assert env == {**({"XLA_FLAGS": f"{FLAG}=true"} if "--quick" in argv else {}),
                       "JAX_COMPILATION_CACHE_DIR": os.path.join(folder, ".jax_cache"),
                       "JAX_COMPILATION_CACHE_MAX_SIZE": str(compile_flags.CACHE_MAX_BYTES)}, argv
    env = {"JAX_COMPILATION_CACHE_DIR": "", "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}  # the user's choice stays
    compile_flags.configure(["run", "x"], env)
    assert env == {"JAX_COMPILATION_CACHE_DIR": "", "JAX_COMPILATION_CACHE_MAX_SIZE": "-1"}
    for verb in (["bench", "uat.darkroom"], ["report"], ["show", "x"]):  # bench measures compile time
        env = {}
        compile_flags.configure(verb, env)
        assert env == {}


def _digest(xla_flags: str) -> str:
    env = {**os.environ, "XLA_FLAGS": xla_flags, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # compile for real, both ways
    done = subprocess.run([sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_cheap_llvm_pipeline_computes_the_same_bits():
    """XLA's default pipeline against the quick runs' one, on a training step (rollout, parallel pass, gradient)."""
    assert _digest("") == _digest(f"{FLAG}=true")


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

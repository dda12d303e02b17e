"""The switched family as one traced program (``config.SWITCHED``, ``traced_variant``):
every member of the union, at its index, initialises, runs and trains exactly as the
static member does alone."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from tests.uat_jax.conftest import tiny
from tests.uat_jax.test_model import episode
from uat_jax.config import SWITCHED, SWITCHES, ModelConfig, member, switch_table
from uat_jax.model import DecisionTransformer, init_params, sequence_logits
from uat_jax.train import Task, TrainConfig, make_train

FAST = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
UNION = tiny("uat", traced_variant=True)


def test_switch_table_by_hand():
    expected = {  # use_action, use_reward, linear, modulate_q, modulate_kv, utility_bias, input_feedback
        "uat": [1, 1, 0, 1, 1, 1, 0], "no_action": [0, 1, 0, 1, 1, 1, 0], "no_reward": [1, 0, 0, 1, 1, 1, 0],
        "linear": [1, 1, 1, 1, 1, 1, 0], "no_q": [1, 1, 0, 0, 1, 1, 0], "no_kv": [1, 1, 0, 1, 0, 1, 0],
        "no_bias": [1, 1, 0, 1, 1, 0, 0], "vt": [1, 1, 0, 0, 0, 1, 0], "adt": [1, 1, 0, 0, 0, 1, 1]}
    assert SWITCHES == ("use_action", "use_reward", "linear", "modulate_q", "modulate_kv", "utility_bias",
                        "input_feedback")
    np.testing.assert_array_equal(switch_table(), [expected[m] for m in SWITCHED])
    assert member(UNION, "vt").kind == "vt" and member(UNION, "adt").kind == "adt"
    assert not member(UNION, "no_q").traced_variant


@pytest.mark.parametrize("changes", [dict(kind="vt"), dict(encoder="linear"), dict(modulate_kv=False)])
def test_traced_variant_needs_full_uat(changes):
    with pytest.raises(ValueError, match="traced_variant"):
        ModelConfig(traced_variant=True, **changes)


def test_variant_given_exactly_for_a_traced_model():
    obs, actions, rewards = episode(1)
    with pytest.raises(ValueError, match="variant"):
        sequence_logits(DecisionTransformer(UNION), {}, obs, actions, rewards)
    with pytest.raises(ValueError, match="variant"):
        make_train(TrainConfig(model=tiny("uat")))(jax.random.key(0), Task.make("gradual", variant="uat"))
    with pytest.raises(ValueError, match="variant"):
        Task.make("gradual", variant="dt")


def test_every_member_initialises_and_runs_as_the_static_member():
    """All members in one program, the member index traced: (1) the member's own
    parameters are bitwise its static initialisation from the same key (a member without
    A-DT's input: its observation embedding in the union's leading rows, zeros in the
    feedback rows); (2) on random parameters (every gate, the unused parameters and the
    feedback rows nonzero) the union's logits at the member's index equal the static
    member's on its subset of them (the leading rows of the observation embedding)."""
    key, ep = jax.random.key(4), episode(2)
    shapes = jax.eval_shape(lambda: init_params(DecisionTransformer(UNION, variant=jnp.int32(0)), key))
    rng = np.random.default_rng(3)
    rand = jax.tree.map(lambda s: jnp.asarray(0.3 * rng.normal(size=s.shape), s.dtype), shapes)

    def union(variant):
        model = DecisionTransformer(UNION, variant=variant)
        return init_params(model, key), sequence_logits(model, rand, *ep)

    def static(name):
        model = DecisionTransformer(member(UNION, name))
        params = init_params(model, key)
        return params, sequence_logits(model, _restricted(rand, params), *ep)

    variants = jnp.arange(len(SWITCHED))
    run = jax.jit(lambda v: (jax.vmap(union)(v), [static(name) for name in SWITCHED]))
    (union_init, union_logits), statics = run.lower(variants).compile(FAST)(variants)
    flat = traverse_util.flatten_dict(union_init)
    for i, (name, (own, logits)) in enumerate(zip(SWITCHED, statics)):
        for path, value in traverse_util.flatten_dict(own).items():
            np.testing.assert_array_equal(flat[path][i][:len(value)], value, err_msg=f"{name} {path}")
            assert not np.any(flat[path][i][len(value):]), f"{name} {path}"  # the feedback rows of a non-A-DT
        assert (flat["params", "obs_embed", "kernel"][i].shape[0] > len(own["params"]["obs_embed"]["kernel"])) \
            == (name != "adt")
        np.testing.assert_allclose(union_logits[i], logits, rtol=1e-5, atol=1e-6, err_msg=name)
    gaps = [np.abs(union_logits[i] - union_logits[j]).max() for i in variants for j in variants if i < j]
    assert min(gaps) > 1e-4  # every member computes something else


def _restricted(tree, like):
    """The leaves of ``tree`` at the paths of ``like``, each cut to ``like``'s shape (leading entries)."""
    flat = traverse_util.flatten_dict(tree)
    return traverse_util.unflatten_dict({p: flat[p][tuple(slice(0, n) for n in v.shape)]
                                         for p, v in traverse_util.flatten_dict(like).items()})


def test_union_program_trains_each_member_as_alone():
    """Members trained in one vmapped program of the union (the studies' layout) follow
    their static training runs up to float rounding: losses, evaluation, parameters.
    Not compared: the key bias, whose gradient is zero but for rounding (a key bias
    shifts every score of a query alike), which Adam's normalisation turns into lr-sized
    steps of noise; it has no effect on any output."""
    cfg = TrainConfig(model=UNION, epochs=3, batch_size=2, eval_episodes=2, grid_size=4)
    names = ("no_bias", "vt", "adt")
    tasks = jax.tree.map(lambda *x: jnp.stack(x), *[Task.make("abrupt", variant=m) for m in names])
    key = jax.random.key(5)
    union = jax.jit(jax.vmap(make_train(cfg), in_axes=(None, 0))).lower(key, tasks).compile(FAST)(key, tasks)
    flat = traverse_util.flatten_dict(union.params)
    for i, name in [(1, "vt"), (2, "adt")]:  # other kinds: no utility encoder, their own initialisation
        alone_cfg = TrainConfig(model=member(UNION, name), epochs=3, batch_size=2, eval_episodes=2, grid_size=4)
        alone = jax.jit(make_train(alone_cfg)).lower(key, Task.make("abrupt")).compile(FAST)(key, Task.make("abrupt"))
        np.testing.assert_allclose(union.loss[i], alone.loss, rtol=1e-5, err_msg=name)
        np.testing.assert_array_equal(union.eval["accuracy"][i], alone.eval["accuracy"], err_msg=name)
        for path, value in traverse_util.flatten_dict(alone.params).items():
            if path[-2:] != ("W_K", "bias"):
                np.testing.assert_allclose(flat[path][i][:len(value)], value, rtol=1e-4, atol=1e-6,
                                           err_msg=f"{name} {path}")
    assert not np.any(flat["params", "obs_embed", "kernel"][1][UNION.obs_dim:])  # VT's feedback rows stay zero
    assert not np.allclose(union.loss[0], union.loss[1]) and not np.allclose(union.loss[1], union.loss[2])

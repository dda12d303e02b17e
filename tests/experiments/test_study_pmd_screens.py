"""``pmd.stress`` and ``pmd.audit`` (their summaries: ``test_study_pmd_stress.py``, ``test_study_pmd_audit.py``):
the reuse of kept models (``training.reuse_or_train``), the run order that puts them after the studies that keep
those models, and config errors."""
import dataclasses

import jax
import numpy as np
import pytest

from experiments import registry
from experiments.registry import RunContext
from experiments.studies.pmd import audit as audit_study
from experiments.studies.pmd import stress
from experiments.studies.pmd import training
from pmd_jax.train import TrainConfig
from pmd_jax.transformer import ModelConfig

TINY = TrainConfig(model=ModelConfig(d_model=8, num_layers=1, num_heads=2), num_steps=4, warmup=0, batch_size=4,
                   n_train_mdps=8)


def _ctx(tmp_path, study="pmd.stress"):
    return RunContext(study=study, quick=True, out_dir=tmp_path / study, results_root=tmp_path)


def test_reuse_or_train_loads_the_label_free_runs_of_a_matching_kept_model(tmp_path, monkeypatch):
    actor = TINY.actor()
    rng = np.random.default_rng(0)  # random parameters of the right shapes (no compile): label-free runs 0, 1,
    shapes = jax.eval_shape(jax.vmap(actor.init), jax.random.split(jax.random.key(0), 4))  # supervised 2, 3
    params = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(s.dtype), shapes)
    info = {"supervised": [0.0, 0.0, 1.0, 1.0], "stream": 0, "seeds": 2, "train": dataclasses.asdict(TINY)}
    training.keep(tmp_path / "pmd.learned_actor", "actor", TINY, "actor", params, info)
    trained = []
    monkeypatch.setattr(training, "train_runs", lambda *a, **k: trained.append(a) or (params, {}))
    got, origin = training.reuse_or_train(_ctx(tmp_path), "pmd.learned_actor", "actor", TINY, "actor", 2, 0, 2)
    assert origin.startswith("loaded from") and not trained
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, np.asarray(b)[:2])
    # another config, stream or more runs than kept: trained here instead
    for tcfg, runs, stream in ((dataclasses.replace(TINY, lr=2e-3), 2, 0), (TINY, 2, 1), (TINY, 3, 0)):
        _, origin = training.reuse_or_train(_ctx(tmp_path), "pmd.learned_actor", "actor", tcfg, "actor", runs, stream, 2)
        assert origin.startswith("trained here")
    assert len(trained) == 3 and trained[-1][4].shape == (3, 2)  # the keys of 3 runs


def test_screens_run_after_the_studies_that_keep_their_models():
    studies = registry.load_all()
    order = [s.name for s in registry.run_order(list(studies.values()))]
    for name in ("pmd.stress", "pmd.audit"):
        assert order.index(name) > order.index("pmd.learned_actor")
        assert order.index(name) > order.index("pmd.learned_critic")
    assert sorted(order) == sorted(studies)
    plain = [s for s in studies.values() if not s.after]
    assert [s.name for s in registry.run_order(plain)] == sorted(s.name for s in plain)


def test_run_order_names_a_cycle():
    a = dataclasses.replace(registry.get("pmd.stress"), name="pmd.cycle_a", after=("pmd.stress",))
    b = dataclasses.replace(registry.get("pmd.stress"), name="pmd.stress", after=("pmd.cycle_a",))
    with pytest.raises(ValueError, match="cycle"):
        registry.run_order([a, b])


@pytest.mark.parametrize("module,kwargs,field", [
    (stress, {"conditions": ("low_entropy",)}, "iid"),
    (stress, {"conditions": ("iid", "windy")}, "conditions"), (stress, {"eta": 2.0}, "eta"),
    (audit_study, {"conditions": ("iid",)}, "low_entropy"),
    (audit_study, {"top_fraction": 0.0}, "top_fraction"), (audit_study, {"per_mdp": 0}, "per_mdp"),
])
def test_config_errors_name_the_field(module, kwargs, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(module.QUICK, **kwargs)


@pytest.mark.parametrize("kwargs,field", [({"actor_runs": 0}, "actor_runs"), ({"stream": 2}, "stream"),
                                          ({"critic_chunks": 7}, "critic_chunks")])
def test_kept_models_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(training.QUICK_MODELS, **kwargs)


def test_quick_and_full_model_presets_are_the_upstream_studies():
    """So that `run all` loads the kept models instead of training them again."""
    from experiments.studies.pmd import learned_actor, learned_critic

    for spec, preset in ((training.QUICK_MODELS, "QUICK"), (training.KeptModels(), "FULL")):
        actor, critic = getattr(learned_actor, preset), getattr(learned_critic, preset)
        assert spec.actor == actor.train and spec.critic == critic.train
        assert spec.actor_runs <= actor.seeds and spec.critic_runs <= critic.seeds
        assert spec.stream == actor.stream == critic.stream
    assert stress.QUICK.models == audit_study.QUICK.models == training.QUICK_MODELS

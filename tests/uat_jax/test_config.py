"""Configuration validation and the Table 4 ablation switches."""
import dataclasses

import pytest

from uat_jax.config import ABLATIONS, ModelConfig, ablation
from uat_jax.train import Task, TrainConfig


@pytest.mark.parametrize("field,value", [("kind", "rnn"), ("d_model", 30), ("dropout", 1.0),
                                         ("ema_decay", 1.0), ("encoder", "conv"), ("n_layers", 0),
                                         ("n_actions", 1), ("gtrxl_mem_len", 0)])
def test_model_config_names_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        ModelConfig(**{field: value})


@pytest.mark.parametrize("field,value", [("epochs", 0), ("batch_size", -1), ("lr", 0.0),
                                         ("weight_decay", -1e-5), ("grid_size", 1)])
def test_train_config_names_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_task_rejects_unknown_schedule():
    with pytest.raises(ValueError, match="schedule"):
        Task.make("sudden")


def test_ablations_flip_exactly_one_switch():
    base = ModelConfig()
    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    for name in ABLATIONS:
        variant = ablation(base, name)
        changed = [f for f in fields if getattr(variant, f) != getattr(base, f)]
        assert len(changed) == 1, (name, changed)
    with pytest.raises(ValueError, match="ablation"):
        ablation(base, "no_everything")
    with pytest.raises(ValueError, match="kind"):
        ablation(ModelConfig(kind="vt"), "no_q")

"""Every RATE study's quick preset scales the authors' model by one rule (``training.QUICK_SHAPE``)."""
import pytest

import rate_jax
from experiments.studies.rate import minigrid_memory, mrv, popgym, tmaze, training

QUICK_MODELS = {"rate.tmaze": tmaze.QUICK.base, "rate.mrv": mrv.QUICK.train.model,
                "rate.popgym": popgym.QUICK.base, "rate.minigrid_memory": minigrid_memory.QUICK.base}
FULL_MODELS = {"rate.tmaze": tmaze.FULL.base, "rate.mrv": mrv.FULL.train.model,
               "rate.popgym": popgym.FULL.base, "rate.minigrid_memory": minigrid_memory.FULL.base}


@pytest.mark.parametrize("study", sorted(QUICK_MODELS))
def test_every_quick_preset_keeps_the_rule(study):
    """Two layers of two heads splitting the width, three memory tokens, no cache: whatever the FULL
    preset (the authors' line) has."""
    quick, full = QUICK_MODELS[study], FULL_MODELS[study]
    assert (quick.n_layer, quick.n_head, quick.num_mem_tokens, quick.mem_len) == (2, 2, 3, 0)
    assert quick.d_head * quick.n_head == quick.d_model and quick.d_model in (32, 64)
    assert full.n_layer > quick.n_layer and full.num_mem_tokens > quick.num_mem_tokens


def test_quick_model_applies_the_rule_under_the_studys_choices():
    model = training.quick_model(32, d_inner=64, n_head_ca=2, dropout=0.0)
    assert model == rate_jax.ModelConfig(n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, num_mem_tokens=3,
                                         mem_len=0, n_head_ca=2, dropout=0.0)
    with pytest.raises(TypeError):  # a study cannot override the rule's own fields through it
        training.quick_model(32, n_layer=4)

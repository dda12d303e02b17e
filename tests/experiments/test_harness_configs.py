"""Config overrides and code-aware checkpoint fingerprints."""
import dataclasses

import numpy as np
import pytest

from experiments import codehash, configs
from experiments.checkpoint import CheckpointMismatch, CheckpointSpec
from experiments.sweep import run_chunks


@dataclasses.dataclass(frozen=True)
class Model:
    d_model: int = 16
    dropout: float = 0.0


@dataclasses.dataclass(frozen=True)
class Config:
    model: Model = Model()
    etas: tuple[float, ...] = (0.1, 0.2)
    name: str = "x"
    limit: int | None = None

    def __post_init__(self):
        if self.model.d_model % 2:
            raise ValueError(f"model.d_model must be even, got {self.model.d_model}")


def test_apply_coerces_by_annotation_and_validates_every_level():
    cfg = configs.apply(Config(), [("model.d_model", 128), ("etas", [1, 2.5]), ("name", "abc"), ("limit", 3)])
    assert cfg == Config(model=Model(d_model=128), etas=(1.0, 2.5), name="abc", limit=3)
    assert isinstance(cfg.etas, tuple) and all(isinstance(x, float) for x in cfg.etas)
    assert configs.apply(Config(), [("model", {"dropout": 0.5})]).model == Model(dropout=0.5)
    assert configs.apply(Config(), [("limit", None)]).limit is None
    with pytest.raises(configs.ConfigError, match=r"'model.d_model' = 7 is out of range: model.d_model must be even"):
        configs.apply(Config(), [("model.d_model", 7)])
    with pytest.raises(configs.ConfigError, match=r"unknown config field 'model.width'; fields of model: d_model, dropout"):
        configs.apply(Config(), [("model.width", 1)])
    with pytest.raises(configs.ConfigError, match=r"'etas' accepts tuple\[float, \.\.\.\]"):
        configs.apply(Config(), [("etas", ["a"])])
    with pytest.raises(configs.ConfigError, match="'model.d_model' accepts int"):
        configs.apply(Config(), [("model.d_model", "big")])


def test_to_json_nests_dataclasses_and_lists_tuples():
    assert configs.to_json(Config()) == {"model": {"d_model": 16, "dropout": 0.0}, "etas": [0.1, 0.2],
                                          "name": "x", "limit": None}


@pytest.mark.parametrize("text, parsed", [
    ("gamma=0.7,0.8,0.9", ("gamma", [0.7, 0.8, 0.9])),
    ("kappas=[4.0],[4.0,8.0]", ("kappas", [[4.0], [4.0, 8.0]])),
    ("kind=uat,vt", ("kind", ["uat", "vt"])),
    ('name="a,b",c', ("name", ["a,b", "c"])),
])
def test_parse_sweep_splits_at_top_level_commas(text, parsed):
    assert configs.parse_sweep(text) == parsed


def test_parse_assignment_reads_json_or_a_bare_word():
    assert configs.parse_assignment("a.b=[1, 2]") == ("a.b", [1, 2])
    assert configs.parse_assignment("kind=uat") == ("kind", "uat")
    assert configs.parse_assignment("x=true") == ("x", True)
    assert configs.parse_assignment("expr=a=b") == ("expr", "a=b")


def test_code_hashes_cover_the_study_its_libraries_and_the_engine():
    hashes = codehash.code_hashes("experiments.studies.pmd.reversal")
    assert "experiments/studies/pmd/reversal.py" in hashes
    assert "pmd_jax/decoder.py" in hashes and "experiments/sweep.py" in hashes
    assert not any(k.startswith(("regret_jax/", "uat_jax/", "rate_jax/")) for k in hashes)


def test_resume_after_a_code_change_names_the_file(tmp_path, monkeypatch):
    fn = lambda s, i: {"x": s["x"] + 1.0}
    state = {"x": np.zeros(4, np.float32)}
    spec = lambda code, allow=False, resume=False: CheckpointSpec(
        tmp_path / "ckpt", {"config": {"a": 1}, "code": code}, resume=resume, allow_code_change=allow)
    save = __import__("experiments.checkpoint", fromlist=["x"]).ChunkCheckpointer.save

    def save_then_crash(self, step, st):
        save(self, step, st)
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr("experiments.checkpoint.ChunkCheckpointer.save", save_then_crash)
        with pytest.raises(KeyboardInterrupt):
            run_chunks(fn, state, 3, checkpoint=spec({"lib/a.py": "1111", "lib/b.py": "2222"}))
    changed = {"lib/a.py": "1111", "lib/b.py": "3333"}
    with pytest.raises(CheckpointMismatch, match=r"other code; changed since: lib/b\.py\. Pass --allow-code-change"):
        run_chunks(fn, state, 3, checkpoint=spec(changed, resume=True))
    with pytest.raises(CheckpointMismatch, match=r"differing keys: fingerprint.code.lib/b.py, fingerprint.config.a"):
        run_chunks(fn, state, 3, checkpoint=CheckpointSpec(tmp_path / "ckpt", {"config": {"a": 2}, "code": changed},
                                                          resume=True, allow_code_change=True))
    done = run_chunks(fn, state, 3, checkpoint=spec(changed, allow=True, resume=True))
    assert done.resumed_chunks == 1 and np.all(done.state["x"] == 3.0)


@dataclasses.dataclass(frozen=True)
class Tied:
    a: Model = Model()
    b: Model = Model()

    def __post_init__(self):
        if self.a.d_model != self.b.d_model:
            raise ValueError(f"a.d_model must equal b.d_model, got {self.a.d_model} and {self.b.d_model}")


def test_overrides_are_validated_together():
    assert configs.apply(Tied(), [("a.d_model", 8), ("b.d_model", 8)]) == Tied(Model(8), Model(8))
    with pytest.raises(configs.ConfigError, match=r"'a.d_model' = 8 is out of range: a.d_model must equal"):
        configs.apply(Tied(), [("a.d_model", 8)])
    assert configs.apply(Tied(), [("a.d_model", 8), ("a.d_model", 16)]) == Tied()  # the later one wins

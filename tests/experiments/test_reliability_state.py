"""Issue 39 items 1 and 3: garbled checkpoint bytes never resume into garbage; code hashes follow
the import graph; provenance records the working tree and the resume flags."""
import subprocess

import numpy as np
import pytest

from experiments import codehash, provenance, sweep
from experiments.checkpoint import CheckpointCorrupt, CheckpointMismatch, CheckpointSpec, ChunkCheckpointer


def _step(state, i):
    return {"w": state["w"] * 1.5 + i, "n": state["n"] + 1}


def _init():
    return {"w": np.linspace(0.0, 1.0, 50_000, dtype=np.float32), "n": np.int32(0)}


def _killed_after(ckpt, steps, monkeypatch, fingerprint=None):
    """Run 6 chunks, checkpointing, and stop (as a kill would) after chunk ``steps``."""
    save = ChunkCheckpointer.save

    def save_then_stop(self, step, state):
        save(self, step, state)
        if step == steps:
            raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr(ChunkCheckpointer, "save", save_then_stop)
        with pytest.raises(KeyboardInterrupt):
            sweep.run_chunks(_step, _init(), 6, checkpoint=CheckpointSpec(ckpt, fingerprint or {"run": 1}))


def _garble(step_dir):
    """XOR 4 KiB inside the largest array file of a step, keeping its size (the issue's fault)."""
    data = max((p for p in (step_dir / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    mid = len(raw) // 2
    raw[mid:mid + 4096] = bytes(b ^ 0xFF for b in raw[mid:mid + 4096])
    data.write_bytes(bytes(raw))


def test_garbled_latest_step_falls_back_to_the_intact_one(tmp_path, monkeypatch, capsys):
    whole = sweep.run_chunks(_step, _init(), 6)
    ckpt = tmp_path / "ckpt"
    _killed_after(ckpt, 3, monkeypatch)
    _garble(ckpt / "3")
    resumed = sweep.run_chunks(_step, _init(), 6, checkpoint=CheckpointSpec(ckpt, {"run": 1}, resume=True))
    err = capsys.readouterr().err
    assert "step 3" in err and "['w'] does not match its saved checksum" in err and "resuming from step 2" in err
    assert resumed.resumed_chunks == 2  # recomputed chunks 3..6 from the intact step
    np.testing.assert_array_equal(resumed.state["w"], whole.state["w"])
    assert int(resumed.state["n"]) == 6


def test_garbled_every_step_refuses_to_resume(tmp_path, monkeypatch):
    ckpt = tmp_path / "ckpt"
    _killed_after(ckpt, 3, monkeypatch)
    for step in ("2", "3"):
        _garble(ckpt / step)
    with pytest.raises(CheckpointCorrupt, match=r"step 3 .*\['w'\].*step 2 .*\['w'\]"):
        sweep.run_chunks(_step, _init(), 6, checkpoint=CheckpointSpec(ckpt, {"run": 1}, resume=True))
    assert sorted(p.name for p in ckpt.iterdir()) == ["2", "3"]  # nothing deleted when nothing is intact


def test_code_hashes_follow_imports_through_the_harness():
    """pmd.stress trains through pmd_jax.train by way of the harness's training helpers."""
    hashes = codehash.code_hashes("experiments.studies.pmd.stress")
    assert {"pmd_jax/train.py", "pmd_jax/__init__.py", "experiments/sweep.py",
            "experiments/studies/pmd/__init__.py"} <= set(hashes)
    assert not any(k.startswith(("regret_jax/", "rate_jax/")) for k in hashes)


TREE = {
    "experiments/__init__.py": "",
    "experiments/studies/__init__.py": "",
    "experiments/studies/toy/__init__.py": "",
    "experiments/studies/toy/study.py": "def compute():\n    from experiments import helpers\n    return helpers\n",
    "experiments/helpers.py": "from pmd_jax.train import fit\n",
    "experiments/unused.py": "",
    "pmd_jax/__init__.py": "",
    "pmd_jax/train.py": "from .nets import layer\nfrom . import optim\n",
    "pmd_jax/nets.py": "layer = 1\n",
    "pmd_jax/optim.py": "import numpy\n",
    "pmd_jax/other.py": "",
}


def test_editing_a_library_module_refuses_resume_naming_it(tmp_path, monkeypatch):
    for name, text in TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    module = "experiments.studies.toy.study"
    found = [p.relative_to(tmp_path).as_posix() for p in codehash.module_files(module, tmp_path)]
    assert found == sorted(set(TREE) - {"experiments/unused.py", "pmd_jax/other.py"})
    _killed_after(tmp_path / "ckpt", 1, monkeypatch, {"code": codehash.code_hashes(module, tmp_path)})
    (tmp_path / "pmd_jax/nets.py").write_text("layer = 2\n")
    codehash.code_hashes.cache_clear()
    changed = CheckpointSpec(tmp_path / "ckpt", {"code": codehash.code_hashes(module, tmp_path)}, resume=True)
    with pytest.raises(CheckpointMismatch, match=r"changed since: pmd_jax/nets\.py\. Pass --allow-code-change"):
        sweep.run_chunks(_step, _init(), 6, checkpoint=changed)


def test_worktree_records_uncommitted_and_untracked_changes(tmp_path):
    assert provenance.worktree(tmp_path)["describe"] == "unknown"  # not a repository
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (tmp_path / "a.py").write_text("a = 1\n")
    subprocess.run(git + ["add", "a.py"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    clean = provenance.worktree(tmp_path)
    assert clean["dirty"] is False and clean["diff_sha256"] is None and clean["describe"] == provenance.git_sha(tmp_path)
    (tmp_path / "a.py").write_text("a = 2\n")
    edited = provenance.worktree(tmp_path)
    assert edited["dirty"] and edited["describe"].endswith("-dirty") and edited["diff_sha256"]
    (tmp_path / "b.py").write_text("b = 1\n")
    assert provenance.worktree(tmp_path)["diff_sha256"] != edited["diff_sha256"]  # an untracked file counts

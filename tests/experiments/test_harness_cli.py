"""experiments.cli driven in-process with toy studies: list, show, run (--set, --config,
--seeds, --sweep, curves, NaN guard, errors), report and bench."""
import dataclasses
import json
import math
import os
from typing import Literal

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import pytest
import scipy.stats

from experiments import checks, cli, io, registry, results, sweep
from experiments.registry import Study, Summary

RESULT_KEYS = {"study", "quick", "config", "overrides", "metrics", "checks", "paper", "provenance"}
PROVENANCE_KEYS = {"git", "worktree", "jax", "backend", "devices", "cpu", "environment", "resume", "allow_code_change",
                   "processes", "wall_s", "compile_s"}


@dataclasses.dataclass(frozen=True)
class Inner:
    width: int = 4
    kind: Literal["a", "b"] = "a"

    def __post_init__(self):
        if self.width < 1:
            raise ValueError(f"width must be >= 1, got {self.width}")


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """A training-like toy: ``num_seeds`` runs of ``steps`` steps with step size ``lr``."""

    lr: float = 0.1
    steps: int = 5
    num_seeds: int = 2
    sizes: tuple[int, ...] = (1, 2)
    inner: Inner = Inner()
    blow_up_at: int = -1  # a step whose loss is NaN (-1: none)

    def __post_init__(self):
        if not 0 < self.lr < 1:
            raise ValueError(f"lr must lie in (0, 1), got {self.lr}")
        if self.num_seeds < 1:
            raise ValueError(f"num_seeds must be >= 1, got {self.num_seeds}")


TOY_QUICK = ToyConfig(steps=4)
TOY_FULL = ToyConfig()


def _toy_train(cfg: ToyConfig, lr):
    """loss_t = (1 - lr)^t * (1 + seed), one row per seed; NaN at ``blow_up_at``."""
    def one(seed):
        t = jnp.arange(1, cfg.steps + 1)
        loss = (1.0 - lr) ** t * (1.0 + seed)
        return {"loss": jnp.where(t == cfg.blow_up_at, jnp.nan, loss), "grad_norm": loss * 2}
    return one


def _toy_compute(cfg: ToyConfig, ctx):
    seeds = np.arange(cfg.num_seeds, dtype=np.float32)
    guard = sweep.LossGuard("toy", lambda out, items, done: out["loss"])
    res = sweep.sweep_map(_toy_train(cfg, cfg.lr), seeds, chunk_size=1, checkpoint=ctx.checkpoint("train"), guard=guard)
    ctx.record_compile(res.compile_s)
    return {"final": res.outputs["loss"][:, -1], "curves": {"toy": dict(res.outputs)}}


def _toy_compute_sweep(cfg: ToyConfig, field, values, ctx):
    assert field == "lr"
    lrs = np.repeat(np.asarray(values, np.float32), cfg.num_seeds)
    seeds = np.tile(np.arange(cfg.num_seeds, dtype=np.float32), len(values))
    res = sweep.sweep_map(lambda x: _toy_train(cfg, x["lr"])(x["seed"]), {"lr": lrs, "seed": seeds}, chunk_size=1,
                          checkpoint=ctx.checkpoint("sweep_lr"))
    out = []
    for i in range(len(values)):
        part = {k: v[i * cfg.num_seeds:(i + 1) * cfg.num_seeds] for k, v in res.outputs.items()}
        out.append({"final": part["loss"][:, -1], "curves": {"toy": part}})
    return out


LOSS_FALLS = checks.Claim("final_loss_small", "the loss falls", "<", 2.0, paper=1.5, control="the initial loss",
                          fails_if="training does not lower the loss")
SEEDS_RUN = checks.Claim("seeds_run", "every seed ran", ">=", 1, exact=True, fails_if="a seed is lost")
GAP_SMALL = checks.Claim("gap_small", "the gap is small", "<", 0.1, exact=True, fails_if="the gap is 0.3")


def _toy_summarize(cfg: ToyConfig, arrays):
    final = float(np.mean(arrays["final"]))
    initial = arrays["curves"]["toy"]["loss"][:, 0]
    return Summary(
        metrics={"final_loss": final, "blowup": math.nan},
        checks=[LOSS_FALLS.judge(arrays["final"], control=initial), SEEDS_RUN.judge(len(arrays["final"]))],
        tables={"table": {"seed": np.arange(len(arrays["final"])), "final": arrays["final"]}},
    )


def _toy_write(cfg, arrays, summary, out_dir):
    fig, ax = plt.subplots()
    ax.plot(arrays["final"])
    io.save_figure(fig, out_dir / "curve.png")


def _constant_compute(cfg, ctx):
    return {}


@pytest.fixture
def toys(monkeypatch):
    """A private registry of toy studies."""
    monkeypatch.setattr(registry, "_STUDIES", {})
    monkeypatch.setattr(registry, "load_all", lambda: dict(sorted(registry._STUDIES.items())))
    toy = dict(config_type=ToyConfig, quick=TOY_QUICK, full=TOY_FULL, compute=_toy_compute,
               summarize=_toy_summarize, write=_toy_write, module=__name__, claims=(LOSS_FALLS, SEEDS_RUN))
    registry.register(Study(name="toy.train", summary="a training toy", paper={"final_loss": 1.5},
                            seeds_field="num_seeds", traced=("lr",), compute_sweep=_toy_compute_sweep, **toy))
    registry.register(Study(name="toy.fixed", summary="a toy with a fixed size", **toy))
    fail = lambda cfg, arrays: Summary({"gap": 0.3}, [GAP_SMALL.judge(0.3)])
    registry.register(Study(name="toy.fail", summary="a failing claim", config_type=ToyConfig, quick=TOY_QUICK,
                            full=TOY_FULL, compute=_constant_compute, summarize=fail, module=__name__))

    def crash(cfg, ctx):
        raise RuntimeError("toy crash")

    registry.register(Study(name="toy.raises", summary="a crash", config_type=ToyConfig, quick=TOY_QUICK,
                            full=TOY_FULL, compute=crash, summarize=fail, module=__name__))
    registry.bench("toy.train")(lambda out_dir: {"vmap_s": 0.25, "loop_s": 2.5, "by_size": {"8": 1.5}})


def _result(path):
    return json.loads((path / "result.json").read_text())


def test_list_and_show(toys, capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["toy.fail", "toy.fixed", "toy.raises", "toy.train"]
    assert "bench" in lines[3] and "seeds" in lines[3] and "seeds" not in lines[1]
    assert cli.main(["show", "toy.train", "--quick", "--set", "inner.width=8"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {"lr": 0.1, "steps": 4, "num_seeds": 2, "sizes": [1, 2], "inner": {"width": 8, "kind": "a"},
                     "blow_up_at": -1}
    assert cli.main(["show", "toy.train"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 5


def test_run_writes_the_result_contract(toys, tmp_path, capsys):
    argv = ["run", "toy.train", "--quick", "--seeds", "3", "--set", "lr=0.5", "--set", "sizes=[3]", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    res = _result(tmp_path / "toy.train")
    assert set(res) == RESULT_KEYS and set(res["provenance"]) == PROVENANCE_KEYS
    assert res["provenance"]["environment"]["XLA_FLAGS"] == os.environ["XLA_FLAGS"]  # tests/conftest.py sets it
    assert res["config"]["lr"] == 0.5 and res["config"]["num_seeds"] == 3 and res["config"]["sizes"] == [3]
    assert res["overrides"] == [{"field": "lr", "value": 0.5}, {"field": "sizes", "value": [3]},
                                {"field": "num_seeds", "value": 3}]
    assert res["metrics"]["blowup"] is None  # NaN is written as null
    expected = np.mean((1 - 0.5) ** 4 * (1 + np.arange(3)))
    final = (1 - 0.5) ** 4 * (1 + np.arange(3))
    half = scipy.stats.t.ppf(0.975, 2) * final.std(ddof=1) / np.sqrt(3)
    check = res["checks"][0]
    assert check == {"name": "final_loss_small", "value": pytest.approx(expected), "target": "< 2", "kind": "interval",
                     "verdict": "PASS", "passed": True, "paper": 1.5, "claim": "the loss falls", "n": 3, "unit": "seed",
                     "lo": pytest.approx(expected - half), "hi": pytest.approx(expected + half),
                     "se": pytest.approx(final.std(ddof=1) / np.sqrt(3)), "method": "t95%", "n_needed": None,
                     "control": {"arm": "the initial loss", "verdict": "INCONCLUSIVE", "value": pytest.approx(1.0),
                                 "lo": pytest.approx(1 - scipy.stats.t.ppf(0.975, 2) * 0.5 / np.sqrt(3)),
                                 "hi": pytest.approx(1 + scipy.stats.t.ppf(0.975, 2) * 0.5 / np.sqrt(3)), "n": 3}}
    assert res["checks"][1]["kind"] == "exact" and res["checks"][1]["verdict"] == "PASS"
    assert res["provenance"]["devices"] == 4 and res["provenance"]["processes"] == 1
    files = sorted(p.name for p in (tmp_path / "toy.train").iterdir())
    assert files == ["curve.png", "curves.csv", "result.json", "table.csv"]  # checkpoint folder removed
    rows = (tmp_path / "toy.train" / "curves.csv").read_text().splitlines()
    assert rows[0] == "model,seed,step,loss,grad_norm" and len(rows) == 1 + 3 * 4
    model, seed, step, loss, grad = rows[1 + 4 * 2 + 1].split(",")  # seed 2, step 2
    assert (model, seed, step) == ("toy", "2", "2") and float(loss) == pytest.approx(0.25 * 3)
    out = capsys.readouterr().out
    assert "PASS          final_loss_small: 0.125 [" in out and "control the initial loss: 1 INCONCLUSIVE" in out
    assert f"toy.train: 2 pass in {results.wall_text(res['provenance'])}" in out  # with its compile share


def test_config_file_then_set(toys, tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"lr": 0.2, "inner": {"kind": "b"}}))
    assert cli.main(["run", "toy.fixed", "--config", str(cfg), "--set", "lr=0.3", "--out", str(tmp_path)]) == 0
    res = _result(tmp_path / "toy.fixed")
    assert res["config"]["lr"] == 0.3 and res["config"]["inner"] == {"width": 4, "kind": "b"}


@pytest.mark.parametrize("argv, message", [
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--set", "inner.depth=1"], "inner.depth"),
    (["--set", "lr.x=1"], "lr.x"),
    (["--set", "lr=fast"], "'lr' accepts float"),
    (["--set", "steps=1.5"], "'steps' accepts int"),
    (["--set", "lr=1.5"], "lr must lie in (0, 1)"),
    (["--set", "inner.width=0"], "width must be >= 1"),
    (["--set", "inner.kind=c"], "inner.kind"),
    (["--set", "lr"], "FIELD=VALUE"),
    (["--seeds", "0"], "--seeds"),
    (["--sweep", "lr=0.2,2.0"], "lr must lie in (0, 1)"),
    (["--sweep", "lr=0.2,0.2"], "repeats"),
    (["--sweep", "nope=1,2"], "nope"),
])
def test_bad_overrides_exit_2_before_work(toys, tmp_path, capsys, argv, message):
    assert cli.main(["run", "toy.train", *argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "toy.train").exists()


def test_bad_config_files_name_file_and_key(toys, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cli.main(["run", "toy.train", "--config", str(bad), "--out", str(tmp_path)]) == 2
    assert "bad.json is not JSON" in capsys.readouterr().err
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"lr": 0.2, "momentum": 0.9}))
    assert cli.main(["run", "toy.train", "--config", str(unknown), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown.json" in err and "momentum" in err
    assert cli.main(["run", "toy.train", "--config", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_seeds_rejected_by_a_study_without_seeds(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.fixed", "--seeds", "3", "--out", str(tmp_path)]) == 2
    assert "toy.fixed' has no seeds" in capsys.readouterr().err
    assert cli.main(["run", "all", "--set", "lr=0.2", "--out", str(tmp_path)]) == 2


def test_other_usage_errors_exit_2(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown study 'toy.nope'" in err and "toy.train" in err
    assert cli.main(["show", "toy.nope"]) == 2
    assert cli.main(["bench", "toy.fail", "--out", str(tmp_path)]) == 2
    assert "has no bench" in capsys.readouterr().err
    assert cli.main(["report", "--out", str(tmp_path / "missing")]) == 2
    assert cli.main(["run", "toy.train", "--coordinator", "127.0.0.1:1234", "--out", str(tmp_path)]) == 2
    assert "must be given together" in capsys.readouterr().err
    argv = ["--coordinator", "nohost", "--num-processes", "2", "--process-id", "0"]
    assert cli.main(["run", "toy.train", *argv, "--out", str(tmp_path)]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    argv = ["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"]
    assert cli.main(["run", "toy.train", *argv, "--out", str(tmp_path)]) == 2
    assert "0..1" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_non_finite_loss_stops_the_run_naming_seed_and_step(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.train", "--set", "blow_up_at=3", "--seeds", "3", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "NonFiniteLoss" in err and "seed 0, step 2" in err  # step index 2 is step number 3
    assert "non-finite loss" in (tmp_path / "toy.train" / "error.txt").read_text()
    assert (tmp_path / "toy.train" / "train").is_dir()  # the finished chunk's checkpoint is kept
    assert not (tmp_path / "toy.train" / "result.json").exists()


def test_run_all_survives_a_crashing_study(toys, tmp_path, capsys):
    assert cli.main(["run", "all", "--quick", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: toy crash" in captured.err
    assert (tmp_path / "toy.train" / "result.json").exists() and (tmp_path / "toy.fail" / "result.json").exists()
    assert "toy crash" in (tmp_path / "toy.raises" / "error.txt").read_text()
    # two quick seeds give toy.train's loss an interval too wide to decide: INCONCLUSIVE (exit 1 is toy.fail's)
    for name, status in [("toy.train", "INCONCLUSIVE"), ("toy.fail", "FAIL"), ("toy.raises", "ERROR")]:
        assert any(line.split()[:2] == [name, status] for line in captured.out.splitlines())


def test_inconclusive_exits_0_unless_strict(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.train", "--quick", "--out", str(tmp_path)]) == 0
    check = _result(tmp_path / "toy.train")["checks"][0]
    assert check["verdict"] == "INCONCLUSIVE" and check["n"] == 2 and check["n_needed"] >= 3
    assert cli.main(["run", "toy.train", "--quick", "--strict", "--out", str(tmp_path)]) == 1


def test_traced_sweep_is_one_program_and_matches_single_runs(toys, tmp_path):
    assert cli.main(["run", "toy.train", "--quick", "--sweep", "lr=0.2,0.5", "--out", str(tmp_path)]) == 0
    root = tmp_path / "toy.train" / "sweep"
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["lr=0.2", "lr=0.5"]
    for lr in ("0.2", "0.5"):
        res = _result(root / f"lr={lr}")
        assert res["sweep"] == {"field": "lr", "value": float(lr), "vmapped": True} and res["config"]["lr"] == float(lr)
        single = tmp_path / f"single{lr}"
        assert cli.main(["run", "toy.train", "--quick", "--set", f"lr={lr}", "--out", str(single)]) == 0
        for name in ("curves.csv", "table.csv"):
            assert (root / f"lr={lr}" / name).read_bytes() == (single / "toy.train" / name).read_bytes()
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert "### Sweep: toy.train over `lr`" in text
    assert "| lr | final_loss_small | seeds_run | verdicts |" in text
    assert "![sweep lr](toy.train/sweep/lr.png)" in text and (root / "lr.png").exists()


def test_untraced_sweep_runs_per_value_and_resume_keeps_done_values(toys, tmp_path, capsys):
    argv = ["run", "toy.train", "--quick", "--sweep", "steps=2,3", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    root = tmp_path / "toy.train" / "sweep"
    first = (root / "steps=2" / "result.json").read_text()
    assert len((root / "steps=3" / "curves.csv").read_text().splitlines()) == 1 + 2 * 3
    capsys.readouterr()
    assert cli.main(argv + ["--resume"]) == 0
    assert capsys.readouterr().err.count("already done, kept") == 2
    assert (root / "steps=2" / "result.json").read_text() == first


def test_report_headline_sections_and_corrupt_result(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.train", "--seeds", "3", "--set", "lr=0.5", "--out", str(tmp_path)]) == 0
    assert cli.main(["run", "toy.fail", "--out", str(tmp_path)]) == 1
    assert cli.main(["run", "toy.raises", "--out", str(tmp_path)]) == 1
    (tmp_path / "toy.broken").mkdir()
    (tmp_path / "toy.broken" / "result.json").write_text("{")
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "REPORT.md").read_text().splitlines()
    first = lines[: lines.index("## Headline claims, by paper")]
    assert len(first) <= 40 and "| study | paper | pass | fail | inconclusive | no power | wall |" in first
    assert "| [toy.fail](#toyfail) | toy | 0 | 1 | 0 | 0 | 0 s |" in first
    assert "| [toy.broken](#toybroken) | toy | unreadable result.json |  |  |  |  |" in first
    assert "| [toy.raises](#toyraises) | toy | raised, no result |  |  |  |  |" in first
    head = lines[: lines.index("## toy.fail")]
    final = (1 - 0.5) ** 5 * (1 + np.arange(3))  # loss_t at the last step
    half = scipy.stats.t.ppf(0.975, 2) * final.std(ddof=1) / np.sqrt(3)
    ours = f"{final.mean():.4g} [{final.mean() - half:.4g}, {final.mean() + half:.4g}] n=3 seed"
    assert (f"| `toy.train` `final_loss_small` | the loss falls | 1.5 | {ours} | < 2 | the initial loss: 1, "
            "INCONCLUSIVE | PASS |") in head  # only its claim-marked checks
    assert "| `toy.fail` `gap_small` | the gap is small | — | 0.3 (exact) | < 0.1 | — | **FAIL** |" in head
    assert "<details><summary>All metrics, config and provenance</summary>" in lines
    assert "| blowup | non-finite |  |" in lines and f"| final_loss | {final.mean():.4g} | 1.5 |" in lines
    assert "![curve](toy.train/curve.png)" in lines
    assert "| seed | final |" in lines  # table.csv
    train = _result(tmp_path / "toy.train")
    assert f"full size · 2 pass · {results.wall_text(train['provenance'])} wall" in lines
    provenance = next(line for line in lines if line.startswith("Provenance: git "))
    assert provenance.endswith(f"`XLA_FLAGS={os.environ['XLA_FLAGS']}`")  # how the numbers were computed
    assert f" · cpu {train['provenance']['cpu']['model']} (" in provenance  # and on which instruction sets


@pytest.mark.parametrize("provenance, text", [
    ({"wall_s": 163.46, "compile_s": 96.1}, "163.5 s (96.1 s compiling, 59%)"),
    ({"wall_s": 2.3}, "2.3 s"),  # a result without compile_s (written before it existed)
    ({"wall_s": 0.0, "compile_s": 0.0}, "0.0 s"),
    ({}, "?"),
])
def test_wall_text(provenance, text):
    assert results.wall_text(provenance) == text


def test_bench_writes_bench_json_and_appends_its_timings(toys, tmp_path, capsys):
    log = tmp_path / "performance.md"
    assert cli.main(["bench", "toy.train", "--out", str(tmp_path), "--perf-log", str(log)]) == 0
    payload = json.loads((tmp_path / "toy.train" / "bench.json").read_text())
    assert payload["bench"] == {"vmap_s": 0.25, "loop_s": 2.5, "by_size": {"8": 1.5}}
    assert "by_size.8" in capsys.readouterr().out
    rows = log.read_text().splitlines()[2:]
    assert [r.split(" | ")[3:] for r in rows[1:]] == [["bench toy.train: vmap_s", "0.25 |"],
                                                      ["bench toy.train: loop_s", "2.5 |"]]
    assert rows[0].split(" | ")[3] == "bench toy.train: wall"


def test_tensorboard_event_files(toys, tmp_path):
    pytest.importorskip("tensorboardX")
    assert cli.main(["run", "toy.train", "--quick", "--tensorboard", "--out", str(tmp_path)]) == 0
    runs = sorted(p.name for p in (tmp_path / "toy.train" / "tensorboard" / "toy").iterdir())
    assert runs == ["seed_0", "seed_1"]
    events = list((tmp_path / "toy.train" / "tensorboard" / "toy" / "seed_1").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0


"""experiments.cli driven in-process with toy studies: list, run, report, bench."""
import json
import math

import matplotlib.pyplot as plt
import pytest

from experiments import cli, io, registry
from experiments.registry import Check, StudyOutput

RESULT_KEYS = {"study", "quick", "config", "metrics", "checks", "paper", "provenance"}
PROVENANCE_KEYS = {"git", "jax", "backend", "devices", "wall_s", "compile_s"}


@pytest.fixture
def toys(monkeypatch):
    """A private registry holding four toy studies; returns the contexts they saw."""
    monkeypatch.setattr(registry, "_STUDIES", {})
    monkeypatch.setattr(registry, "load_all", lambda: dict(sorted(registry._STUDIES.items())))
    seen = {}

    @registry.study("toy.pass", "a study whose claim holds")
    def _pass(ctx):
        seen["toy.pass"] = ctx
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        io.save_figure(fig, ctx.out_dir / "curve.png")
        return StudyOutput(
            config={"n": 3, "sizes": (1, 2)},
            metrics={"err": 0.0125, "blowup": math.nan},
            checks=[Check("err_small", 0.0125, "< 0.05", True)],
            paper={"err": 0.02, "paper_only": 3.0},
            compile_s=0.5,
        )

    @registry.bench("toy.pass")
    def _bench(ctx):
        seen["bench"] = ctx
        return {"vmap_s": 0.25, "loop_s": 2.5, "speedup": 10.0, "by_size": {"8": 1.5}}

    @registry.study("toy.fail", "a study whose claim fails")
    def _fail(ctx):
        return StudyOutput({}, {"gap": 0.3}, [Check("gap_small", 0.3, "< 0.1", False)], {})

    @registry.study("toy.raises", "a study that crashes")
    def _raises(ctx):
        raise RuntimeError("toy crash")

    @registry.study("toy.malformed", "a study with a bad metric")
    def _malformed(ctx):
        return StudyOutput({}, {"x": [1.0, 2.0]}, [], {})

    return seen


def _result(tmp_path, name):
    return json.loads((tmp_path / name / "result.json").read_text())


def test_list_shows_every_study(toys, capsys):
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["toy.fail", "toy.malformed", "toy.pass", "toy.raises"]
    assert "bench" in lines[2] and "a study whose claim holds" in lines[2]
    assert "bench" not in lines[0]


def test_run_writes_the_result_contract(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.pass", "--quick", "--seeds", "3", "--out", str(tmp_path)]) == 0
    ctx = toys["toy.pass"]
    assert (ctx.study, ctx.quick, ctx.seeds, ctx.resume) == ("toy.pass", True, 3, False)
    assert ctx.out_dir == tmp_path / "toy.pass"
    res = _result(tmp_path, "toy.pass")
    assert set(res) == RESULT_KEYS and set(res["provenance"]) == PROVENANCE_KEYS
    assert res["study"] == "toy.pass" and res["quick"] is True
    assert res["config"] == {"n": 3, "sizes": [1, 2]}
    assert res["metrics"] == {"err": 0.0125, "blowup": None}  # NaN is written as null
    assert res["checks"] == [{"name": "err_small", "value": 0.0125, "target": "< 0.05", "passed": True}]
    assert res["paper"] == {"err": 0.02, "paper_only": 3.0}
    prov = res["provenance"]
    assert prov["devices"] == 4 and prov["backend"] == "cpu" and prov["compile_s"] == 0.5
    assert prov["wall_s"] > 0 and isinstance(prov["git"], str) and prov["git"]
    out = capsys.readouterr().out
    assert "running toy.pass" in out and "PASS  err_small" in out
    assert sorted(p.name for p in (tmp_path / "toy.pass").iterdir()) == ["curve.png", "result.json"]


def test_failed_check_exits_1_after_writing(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.fail", "--out", str(tmp_path)]) == 1
    res = _result(tmp_path, "toy.fail")
    assert res["quick"] is False and res["checks"][0]["passed"] is False
    assert "FAIL  gap_small" in capsys.readouterr().out


def test_usage_errors_exit_2(toys, tmp_path, capsys):
    assert cli.main(["run", "toy.nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown study 'toy.nope'" in err and "toy.pass" in err and "toy.fail" in err
    assert cli.main(["run", "toy.pass", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert cli.main(["bench", "toy.fail", "--out", str(tmp_path)]) == 2
    assert "has no bench" in capsys.readouterr().err
    assert cli.main(["report", "--out", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert not (tmp_path / "toy.pass").exists()


def test_run_all_survives_a_crashing_study(toys, tmp_path, capsys):
    assert cli.main(["run", "all", "--quick", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: toy crash" in captured.err and "Traceback" in captured.err
    assert "study 'toy.malformed': metrics['x'] must be a real number" in captured.err
    assert (tmp_path / "toy.pass" / "result.json").exists()
    assert (tmp_path / "toy.fail" / "result.json").exists()
    assert not (tmp_path / "toy.raises" / "result.json").exists()
    assert "toy crash" in (tmp_path / "toy.raises" / "error.txt").read_text()
    table = captured.out[captured.out.index("status"):]
    for name, status in [("toy.fail", "FAIL"), ("toy.malformed", "ERROR"), ("toy.pass", "PASS"), ("toy.raises", "ERROR")]:
        assert any(line.split()[:2] == [name, status] for line in table.splitlines())


@pytest.mark.parametrize(
    "output, field",
    [
        (StudyOutput({}, {"m": "1.0"}, [], {}), "metrics['m']"),
        (StudyOutput({}, {1: 1.0}, [], {}), "metrics keys"),
        (StudyOutput({}, {}, [Check("c", 1.0, "< 2", "yes")], {}), "checks[0].passed"),
        (StudyOutput({}, {}, [Check("c", None, "< 2", True)], {}), "checks[0].value"),
        (StudyOutput({}, {}, [Check("c", 1.0, "t", True), Check("c", 1.0, "t", True)], {}), "checks[1].name"),
        (StudyOutput({"f": object()}, {}, [], {}), "config"),
        (StudyOutput({}, {}, [], {"p": [1]}), "paper['p']"),
        ({"metrics": {}}, "must return a StudyOutput"),
    ],
)
def test_malformed_output_names_study_and_field(output, field):
    with pytest.raises(cli.InvalidStudyOutput, match="study 'toy.x'") as err:
        cli.build_result("toy.x", True, output, 1.0)
    assert field in str(err.value)


def test_report_tables_and_corrupt_result(toys, tmp_path, capsys):
    cli.main(["run", "toy.pass", "--quick", "--out", str(tmp_path)])
    cli.main(["run", "toy.fail", "--out", str(tmp_path)])
    cli.main(["run", "toy.raises", "--out", str(tmp_path)])
    (tmp_path / "toy.broken").mkdir()
    (tmp_path / "toy.broken" / "result.json").write_text('{"study": "toy.broken", "metr')
    capsys.readouterr()
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    assert "warning" in capsys.readouterr().err
    report = (tmp_path / "REPORT.md").read_text()
    lines = report.splitlines()
    assert "| study | checks passed | wall time | mode |" in lines
    assert any(line.startswith("| toy.pass | 1/1 |") and line.endswith("| quick |") for line in lines)
    assert any(line.startswith("| toy.fail | 0/1 |") and line.endswith("| full |") for line in lines)
    assert "| toy.broken | unreadable result.json | | |" in lines
    assert "| toy.raises | raised, no result | | |" in lines
    assert "| metric | ours | paper |" in lines
    assert "| err | 0.0125 | 0.02 |" in lines
    assert "| blowup | non-finite |  |" in lines
    assert "| paper_only |  | 3 |" in lines
    assert "| err_small | 0.0125 | < 0.05 | PASS |" in lines
    assert "| gap_small | 0.3 | < 0.1 | FAIL |" in lines
    assert "![curve](toy.pass/curve.png)" in lines
    assert any(line.startswith("Provenance: git ") and "devices 4" in line for line in lines)
    assert "toy.raises/error.txt" in report


def test_report_renders_a_study_table(toys, tmp_path):
    cli.main(["run", "toy.pass", "--quick", "--out", str(tmp_path)])
    (tmp_path / "toy.pass" / "table.csv").write_text("arm,m,loss\nbalanced,6,0.0125\nexact,,nan\n")
    assert cli.main(["report", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "REPORT.md").read_text().splitlines()
    assert "| arm | m | loss |" in lines
    assert "| balanced | 6 | 0.0125 |" in lines and "| exact |  | nan |" in lines


def test_bench_prints_and_writes_json(toys, tmp_path, capsys):
    assert cli.main(["bench", "toy.pass", "--out", str(tmp_path)]) == 0
    ctx = toys["bench"]
    assert ctx.quick is False and ctx.out_dir == tmp_path / "toy.pass" and ctx.out_dir.is_dir()
    out = capsys.readouterr().out
    assert "speedup" in out and "10" in out and "by_size.8" in out
    payload = json.loads((tmp_path / "toy.pass" / "bench.json").read_text())
    assert payload["study"] == "toy.pass"
    assert payload["bench"] == {"vmap_s": 0.25, "loop_s": 2.5, "speedup": 10.0, "by_size": {"8": 1.5}}
    assert {"git", "jax", "backend", "devices", "wall_s"} <= set(payload["provenance"])

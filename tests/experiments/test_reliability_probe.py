"""Issue 39 "Done when": a probe of bad inputs as a careful user would try them, each of which must
exit 2 with one ``error:`` line on stderr, no traceback on the console and no result written
(0 silent results, 0 bare tracebacks). Toy studies of ``test_harness_cli`` plus one that reads
market or MovieLens files; the markets gap of item 6 is among the data cases."""
import dataclasses
from typing import Literal

import pytest
from test_harness_cli import toys  # noqa: F401 - the fixture of toy studies

from experiments import cli, io, registry
from experiments.registry import Study, Summary
from uat_jax import markets_data, recsys_data

YAHOO = "Date,Open,High,Low,Close,Adj Close,Volume"
GOOD = [f"2020-01-{d:02d},10,11,9,10.5,10.5,1000" for d in range(2, 30)]


@dataclasses.dataclass(frozen=True)
class DataConfig:
    data_dir: str = "."
    kind: Literal["markets", "movielens"] = "markets"


def _read(cfg, ctx):
    if cfg.kind == "markets":
        markets_data.load_market(cfg.data_dir)
    else:
        recsys_data.read_movielens(cfg.data_dir)
    return {}


@pytest.fixture
def studies(toys):  # noqa: F811
    registry.register(Study(name="toy.data", summary="reads data files", config_type=DataConfig, quick=DataConfig(),
                            full=DataConfig(), compute=_read, summarize=lambda cfg, arrays: Summary({}, []),
                            module=__name__))


def _market(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        (folder / name).write_text("\n".join(rows) + "\n")
    return folder


MARKETS = {  # one ticker's file as written, per bad case (AAA.csv beside it is good)
    "empty": [],
    "header only": [YAHOO],
    "unknown layout": ["When,Open,High,Low,Close,Volume", *GOOD],
    "missing column": [YAHOO.replace(",Volume", ""), *[r.rsplit(",", 1)[0] for r in GOOD]],
    "bad date": [YAHOO, "2020-13-45,10,11,9,10.5,10.5,1000", *GOOD[1:]],
    "duplicate date": [YAHOO, GOOD[0], *GOOD],
    "text price": [YAHOO, "2020-01-02,ten,11,9,10.5,10.5,1000", *GOOD[1:]],
    "missing price": [YAHOO, "2020-01-02,,11,9,10.5,10.5,1000", *GOOD[1:]],
    "zero price": [YAHOO, "2020-01-02,0,11,9,10.5,10.5,1000", *GOOD[1:]],
    "negative close": [YAHOO, "2020-01-02,10,11,9,-10.5,10.5,1000", *GOOD[1:]],
    "negative volume": [YAHOO, "2020-01-02,10,11,9,10.5,10.5,-1", *GOOD[1:]],
    "missing volume": [YAHOO, "2020-01-02,10,11,9,10.5,10.5,", *GOOD[1:]],
    "bad adj close": [YAHOO, "2020-01-02,10,11,9,10.5,x,1000", *GOOD[1:]],
    "no common date": [YAHOO, *[r.replace("2020-", "2031-") for r in GOOD]],
    "gap of 15 days": [YAHOO, *GOOD[:5], *GOOD[20:]],
    "late start": [YAHOO, *GOOD[12:]],
}
MOVIELENS = {  # (ratings.csv, movies.csv)
    "no ratings header": ("", "movieId,title,genres\n1,A,Drama\n"),
    "ratings column missing": ("userId,movieId,rating\n1,1,4\n", "movieId,title,genres\n1,A,Drama\n"),
    "rating not a number": ("userId,movieId,rating,timestamp\n1,1,x,5\n", "movieId,title,genres\n1,A,Drama\n"),
    "rating out of range": ("userId,movieId,rating,timestamp\n1,1,9,5\n", "movieId,title,genres\n1,A,Drama\n"),
    "fractional user": ("userId,movieId,rating,timestamp\n1.5,1,4,5\n", "movieId,title,genres\n1,A,Drama\n"),
    "duplicate movie": ("userId,movieId,rating,timestamp\n1,1,4,5\n", "movieId,title,genres\n1,A,Drama\n1,B,Drama\n"),
    "empty genres": ("userId,movieId,rating,timestamp\n1,1,4,5\n", "movieId,title,genres\n1,A,\n"),
    "unknown movie": ("userId,movieId,rating,timestamp\n1,2,4,5\n", "movieId,title,genres\n1,A,Drama\n"),
}
SET = [  # --set values of toy.train, each refused
    "lr=NaN", "lr=Infinity", "lr=-Infinity", "lr=true", "lr=false", "lr=abc", "lr=[0.1]", "lr={}", "lr=null",
    "lr=2", "lr=0", "steps=true", "steps=1e9", "steps=1.5", "steps=x", "steps=null", "steps=NaN",
    "num_seeds=0", "num_seeds=true", "num_seeds=1000000000000", "sizes=[1,true]", "sizes=[1,NaN]", "sizes=x",
    "sizes=[1000000000000]", "inner.width=0", "inner.width=true", "inner.kind=c", "inner.kind=1", "inner=5",
    "inner.nope=1", "nope=1", "lr", "=1", "blow_up_at=true", "blow_up_at=Infinity", "inner.width=1e12",
]
CONFIG_FILES = {  # --config file contents (None: the file is missing; "DIR": it is a folder)
    "missing": None, "folder": "DIR", "not json": "{lr: 0.2", "a list": "[1, 2]", "a string": '"lr"',
    "unknown key": '{"momentum": 0.9}', "NaN literal": '{"lr": NaN}', "bool for int": '{"steps": true}',
    "nested unknown": '{"inner": {"depth": 2}}', "empty object as value": '{"lr": {}}',
}
SWEEPS = ["lr=0.2,2.0", "lr=0.2,0.2", "nope=1,2", "lr=", "lr", "lr=0.2,,0.3", "lr=NaN,0.2", "steps=true,2",
          "steps=4,1e9"]


def _probe(argv, capsys, out):
    code = cli.main(argv)
    captured = capsys.readouterr()
    console = captured.out + captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert code == 2, (argv, code, console[-2000:])
    assert "Traceback" not in console, (argv, console[-2000:])
    assert len(errors) == 1, (argv, captured.err[-2000:])
    assert not list(out.rglob("result.json")), argv  # no silent result


@pytest.mark.parametrize("value", SET)
@pytest.mark.parametrize("verb", ["show", "run"])
def test_bad_set(studies, tmp_path, capsys, verb, value):
    out = tmp_path / "out"
    _probe([verb, "toy.train", "--set", value, *(["--out", str(out)] if verb == "run" else [])], capsys, out)


@pytest.mark.parametrize("case", list(CONFIG_FILES))
def test_bad_config_file(studies, tmp_path, capsys, case):
    path = tmp_path / "cfg.json"
    if CONFIG_FILES[case] == "DIR":
        path.mkdir()
    elif CONFIG_FILES[case] is not None:
        path.write_text(CONFIG_FILES[case])
    _probe(["run", "toy.train", "--config", str(path), "--out", str(tmp_path / "out")], capsys, tmp_path)


@pytest.mark.parametrize("sweep", SWEEPS)
def test_bad_sweep(studies, tmp_path, capsys, sweep):
    _probe(["run", "toy.train", "--sweep", sweep, "--out", str(tmp_path)], capsys, tmp_path)


def test_sweep_of_a_field_also_set(studies, tmp_path, capsys):
    _probe(["run", "toy.train", "--sweep", "lr=0.2,0.3", "--set", "lr=0.2", "--out", str(tmp_path)], capsys, tmp_path)
    assert not (tmp_path / "toy.train").exists()  # caught before any work: no error.txt


@pytest.mark.parametrize("argv", [
    ["run", "toy.train", "--seeds", "0"], ["run", "toy.train", "--seeds", "-1"], ["run", "toy.train", "--seeds", "x"],
    ["run", "toy.fixed", "--seeds", "2"], ["run", "toy.nope"], ["show", "toy.nope"], ["run", "all", "--set", "lr=0.2"],
    ["run", "toy.train", "--jobs", "2"], ["run", "toy.train", "--allow-code-change"],
    ["run", "toy.train", "--coordinator", "127.0.0.1:1"], ["run", "toy.train", "--jobs", "0"],
    ["run", "toy.train", "--bogus"], ["bench", "toy.fixed"], ["frobnicate"],
])
def test_bad_command_lines(studies, tmp_path, capsys, argv):
    out = ["--out", str(tmp_path)] if argv[0] in ("run", "bench") else []
    code = cli.main([*argv, *out])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.out + captured.err, (argv, captured.err)
    assert not list(tmp_path.rglob("result.json"))


@pytest.mark.parametrize("where", ["a file", "below a file", "below /proc"])
def test_bad_out(studies, tmp_path, capsys, where):
    (tmp_path / "f").write_text("x")
    out = {"a file": tmp_path / "f", "below a file": tmp_path / "f" / "sub", "below /proc": "/proc/nope/out"}[where]
    _probe(["run", "toy.train", "--out", str(out)], capsys, tmp_path)


@pytest.mark.parametrize("case", list(MARKETS))
def test_bad_market_files(studies, tmp_path, capsys, case):
    folder = _market(tmp_path / "m", {"AAA.csv": [YAHOO, *GOOD], "ZZZ.csv": MARKETS[case]})
    out = tmp_path / "out"
    _probe(["run", "toy.data", "--set", f"data_dir={folder}", "--out", str(out)], capsys, out)
    assert "DataError" in (out / "toy.data" / "error.txt").read_text()  # the traceback is kept


@pytest.mark.parametrize("case", list(MOVIELENS))
def test_bad_movielens_files(studies, tmp_path, capsys, case):
    ratings, movies = MOVIELENS[case]
    (tmp_path / "ml").mkdir()
    (tmp_path / "ml" / "ratings.csv").write_text(ratings)
    (tmp_path / "ml" / "movies.csv").write_text(movies)
    out = tmp_path / "out"
    _probe(["run", "toy.data", "--set", f"data_dir={tmp_path / 'ml'}", "--set", "kind=movielens", "--out", str(out)],
           capsys, out)


@pytest.mark.parametrize("case", ["empty folder", "no folder", "blank path"])
def test_bad_data_folders(studies, tmp_path, capsys, case):
    (tmp_path / "empty").mkdir()
    path = {"empty folder": tmp_path / "empty", "no folder": tmp_path / "nope", "blank path": ""}[case]
    out = tmp_path / "out"
    _probe(["run", "toy.data", "--set", f"data_dir={path}", "--out", str(out)], capsys, out)


@pytest.mark.parametrize("case", ["foreign files", "exists without --resume", "held by another run"])
def test_bad_study_folders(studies, tmp_path, capsys, case):
    ckpt = tmp_path / "toy.train" / "train"
    ckpt.mkdir(parents=True)
    (ckpt / "junk").write_text("x")
    argv = ["run", "toy.train", "--out", str(tmp_path)] + (["--resume"] if case == "foreign files" else [])
    if case == "held by another run":
        with io.lock_folder(tmp_path / "toy.train"):
            _probe(argv, capsys, tmp_path)
    else:
        _probe(argv, capsys, tmp_path)


def test_the_probe_has_at_least_80_bad_inputs():
    count = 2 * len(SET) + len(CONFIG_FILES) + len(SWEEPS) + 1 + 14 + 3 + len(MARKETS) + len(MOVIELENS) + 3 + 3
    assert count >= 80, count

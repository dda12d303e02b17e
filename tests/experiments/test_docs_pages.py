"""The generated study pages (``python -m experiments docs``): the checked-in ``docs/studies/``
equals what the command writes, and a page shows what the code declares."""
import dataclasses
import pathlib

from experiments import checks, docs
from experiments.registry import Study, Summary

PAGES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "studies"


def test_checked_in_pages_are_what_the_command_writes(tmp_path):
    docs.write(tmp_path)
    fresh = {p.name: p.read_text() for p in tmp_path.glob("*.md")}
    kept = {p.name: p.read_text() for p in PAGES.glob("*.md")}
    stale = sorted(name for name in fresh.keys() | kept.keys() if fresh.get(name) != kept.get(name))
    assert not stale, f"docs/studies/ is out of date for {stale}: run `python -m experiments docs`"


@dataclasses.dataclass(frozen=True)
class Inner:
    width: int = 4  # hidden units


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    lr: float = 0.1  # step size | of the toy
    inner: Inner = Inner()


CLAIM = checks.Claim("toy_above_half", "the toy's ``score`` is above one half", ">", 0.5, unit="seed",
                     control="a uniform player", fails_if="the toy learns nothing", paper=0.9)


def _toy(**kw) -> Study:
    def write(config, arrays, summary, out_dir):
        """``toy.csv`` (every seed)."""

    return Study(name="toy.page", summary="a toy", config_type=ToyConfig, quick=ToyConfig(inner=Inner(2)),
                 full=ToyConfig(), compute=lambda c, ctx: {}, summarize=lambda c, a: Summary({}, []), write=write,
                 module=__name__, seeds_field="seeds", **kw)


def test_page_shows_claims_config_outputs_and_command():
    text = docs.page(_toy(claims=(CLAIM,)))
    assert "python -m experiments run toy.page --quick" in text
    assert "### `toy_above_half`\n\nthe toy's `score` is above one half" in text
    for line in ("- margin: `> 0.5`, judged on the 95% t interval over seeds", "- paper: 0.9",
                 "- negative control: a uniform player", "- fails if: the toy learns nothing",
                 "- its own files: `toy.csv` (every seed).", "`--seeds N` sets `seeds`"):
        assert line in text
    assert "| `lr` | `0.1` | `0.1` | step size \\| of the toy |" in text
    assert "| `inner.width` | `2` | `4` | hidden units |" in text
    assert "The generated study pages" in text  # this module's docstring is the page's description


def test_a_study_without_declared_claims_says_so():
    study = _toy()
    assert "Checks not yet declared" in docs.page(study)
    assert "| not yet declared |" in docs.index({study.name: study})


def test_write_removes_pages_no_study_generates(tmp_path):
    (tmp_path / "gone.study.md").write_text("old")
    (tmp_path / "notes.txt").write_text("kept")
    docs.write(tmp_path)
    assert not (tmp_path / "gone.study.md").exists() and (tmp_path / "notes.txt").exists()
    assert (tmp_path / docs.INDEX).exists()

"""Issue 39 item 2: config validation in one place (non-finite floats, booleans for numbers and numbers for
booleans, size bounds, blank strings) and configs that always read back from their JSON form."""
import dataclasses
import json
from typing import Annotated

import annotated_types
import pydantic
import pytest

from experiments import configs


@dataclasses.dataclass(frozen=True)
class Sizes:
    steps: int = 600
    lr: float = 0.1
    grid: tuple[float, ...] = (0.5, 1.0)
    widths: tuple[int, ...] = (4, 8)
    limit: int | None = None
    cap: Annotated[int, annotated_types.Le(10)] = 5
    tolerance: Annotated[float, pydantic.AllowInfNan()] = 1.0
    name: str = "x"
    path: str | None = None
    flag: bool = False


@pytest.mark.parametrize("path, value, message", [
    ("lr", float("nan"), "finite number"),
    ("lr", float("inf"), "finite number"),
    ("lr", "-Infinity", "finite number"),
    ("grid", [0.5, float("nan")], "finite number"),
    ("steps", True, "a boolean is not a number"),
    ("lr", False, "a boolean is not a number"),
    ("widths", [4, True], "a boolean is not a number"),
    ("limit", True, "a boolean is not a number"),
    ("flag", 1, "accepts true or false"),
    ("flag", 0, "accepts true or false"),
    ("flag", "yes", "accepts true or false"),
    ("steps", 1e9, "beyond its bound of 1,000,000"),
    ("widths", [4, 10**7], "beyond its bound"),
    ("limit", -(10**7), "beyond its bound"),
    ("cap", 11, "less than or equal to 10"),
    ("name", "", "blank string"),
    ("path", "  ", "blank string"),
])
def test_bad_values_are_refused_naming_the_field(path, value, message):
    with pytest.raises(configs.ConfigError, match=message) as err:
        configs.apply(Sizes(), [(path, value)])
    assert repr(path) in str(err.value)


def test_good_values_pass_and_bounds_grow_with_the_preset():
    assert configs.apply(Sizes(), [("steps", 600_000)]).steps == 600_000  # 1000 x the preset
    assert configs.apply(Sizes(steps=5000), [("steps", 5_000_000)]).steps == 5_000_000
    assert configs.apply(Sizes(), [("flag", True), ("limit", None), ("cap", 10)]).flag is True
    assert configs.int_bound((3, 2_000)) == 2_000_000 and configs.int_bound(None) == configs.INT_FLOOR


def test_a_declared_non_finite_field_round_trips_through_json():
    cfg = configs.apply(Sizes(), [("tolerance", "Infinity")])
    assert cfg.tolerance == float("inf")
    written = json.loads(json.dumps(configs.to_json(cfg), allow_nan=False))
    assert written["tolerance"] == "Infinity"
    assert configs.apply(Sizes(), list(written.items())) == cfg


@dataclasses.dataclass(frozen=True)
class Lossy:
    """A field whose value JSON cannot carry: a set becomes a list, which the field refuses."""

    items: object = frozenset()

    def __post_init__(self):
        if not isinstance(self.items, frozenset):
            raise ValueError(f"items must be a frozenset, got {type(self.items).__name__}")


def test_a_config_that_would_not_read_back_is_refused():
    with pytest.raises(configs.ConfigError, match="would not read back from its JSON form"):
        configs.apply(Lossy(), [("items", frozenset({1}))])

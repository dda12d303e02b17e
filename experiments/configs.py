"""Study configs from the command line: ``--set FIELD=VALUE``, ``--config FILE.json``, ``--sweep``.

A study's config is a frozen dataclass (nested dataclasses allowed) whose
``__post_init__`` raises ``ValueError`` for out-of-range values. This module

* renders a config as JSON (:func:`to_json`: nested dataclasses as objects, tuples
  as lists),
* applies overrides by dotted path (:func:`apply`): the path is resolved against the
  dataclass fields here (so an unknown field names the fields that exist), the value
  is coerced to the field's annotated type by pydantic (``TypeAdapter``: JSON lists to
  tuples, ints to floats, a wrong type is an error that says what the field accepts),
  and the new config is rebuilt with ``dataclasses.replace`` from the innermost
  dataclass outwards, so every level's ``__post_init__`` validates the new values.

Rules every field obeys, whatever its study (the one place values are validated):

* a non-finite float (``NaN``, ``Infinity``) is refused unless the field declares that it
  takes one (``Annotated[float, pydantic.AllowInfNan()]``); such a value is written as the
  string ``"NaN"``/``"Infinity"``/``"-Infinity"``, which reads back;
* a boolean is refused where a number is expected (``true`` is not ``1``), and anything but a
  boolean where a boolean is expected (``1`` and ``"yes"`` are not ``true``);
* an integer may be at most :func:`int_bound` in size: ``max(INT_FLOOR, INT_FACTOR x the
  largest integer of the field's preset value)``, unless the annotation states its own
  bound (``Annotated[int, annotated_types.Le(n)]``, enforced by pydantic);
* a string may not be blank (``""`` names no file; use ``null`` where a field takes none);
* the resulting config survives its JSON form: :func:`to_json` read back by :func:`apply`
  gives the same config, so a written config can always be rerun.

Every failure is a :class:`ConfigError` naming the field; the CLI turns it into exit
code 2 before any computation.

Why pydantic: it is the maintained standard for coercing JSON values to Python type
annotations (``tuple[float, ...]``, ``int | None``, ``Literal``, nested dataclasses)
with precise error messages. tyro and draccus build whole command lines from a
dataclass, which would replace our ``--set FIELD=VALUE`` contract instead of serving it.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import types
import typing
from typing import Any

import pydantic

__all__ = ["ConfigError", "apply", "field_type", "from_file", "int_bound", "parse_assignment", "parse_sweep",
           "to_json"]

INT_FLOOR = 10**6
"""Every integer field may be set up to this size ..."""
INT_FACTOR = 1000
"""... or up to this many times the largest integer of its preset value, whichever is larger."""
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


class ConfigError(ValueError):
    """A config override or file is wrong; the message names the field or file."""


def to_json(config: Any) -> Any:
    """``config`` as plain JSON values: dataclasses as objects, tuples as lists, a non-finite
    float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (which :func:`apply` reads
    back into a field that takes one)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: to_json(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, (list, tuple)):
        return [to_json(v) for v in config]
    if isinstance(config, dict):
        return {str(k): to_json(v) for k, v in config.items()}
    if isinstance(config, float) and not math.isfinite(config):
        return _NON_FINITE.get(config, "NaN")
    from experiments.io import jsonable

    return jsonable(config)


def parse_value(text: str) -> Any:
    """A command-line value: JSON if it parses (``4``, ``[4.0]``, ``true``, ``"x"``), else the bare word."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignment(text: str) -> tuple[str, Any]:
    """``"a.b=VALUE"`` -> ``("a.b", parsed VALUE)``."""
    path, sep, value = text.partition("=")
    if not sep or not path.strip():
        raise ConfigError(f"--set expects FIELD=VALUE, got {text!r}")
    return path.strip(), parse_value(value)


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and quotes: ``[1,2],[3]`` -> ``["[1,2]", "[3]"]``."""
    parts, depth, quote, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[{":
            depth += 1
        elif not quote and ch in "]}":
            depth -= 1
        elif not quote and depth == 0 and ch == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"gamma=0.7,0.8,0.9"`` -> ``("gamma", [0.7, 0.8, 0.9])``; values as in ``--set``."""
    path, sep, values = text.partition("=")
    if not sep or not path.strip() or not values.strip():
        raise ConfigError(f"--sweep expects FIELD=V1,V2,..., got {text!r}")
    parsed = [parse_value(v.strip()) for v in _split_top_level(values)]
    if any(v == "" for v in parsed):
        raise ConfigError(f"--sweep {text!r} has an empty value")
    if len({json.dumps(v, sort_keys=True) for v in parsed}) != len(parsed):
        raise ConfigError(f"--sweep {text!r} repeats a value")
    return path.strip(), parsed


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def field_type(config: Any, path: str) -> Any:
    """The annotated type of the field at dotted ``path`` of ``config`` (ConfigError if unknown)."""
    node, parts = config, path.split(".")
    for depth, name in enumerate(parts):
        where = ".".join(parts[:depth]) or type(config).__name__
        if not (dataclasses.is_dataclass(node) and not isinstance(node, type)):
            raise ConfigError(f"unknown config field {path!r}: {where} is a value, not a group of fields")
        names = [f.name for f in dataclasses.fields(node)]
        if name not in names:
            raise ConfigError(f"unknown config field {path!r}; fields of {where}: {', '.join(names)}")
        if depth == len(parts) - 1:
            return _hints(type(node))[name]
        node = getattr(node, name)
    raise AssertionError("unreachable")


@functools.cache
def _adapter(kind: Any) -> pydantic.TypeAdapter:
    """A validator of ``kind`` that refuses non-finite floats (unless ``kind`` allows them)."""
    if dataclasses.is_dataclass(kind):  # a dataclass has its own pydantic config
        return pydantic.TypeAdapter(kind)
    return pydantic.TypeAdapter(kind, config=pydantic.ConfigDict(allow_inf_nan=False))


def _members(kind: Any) -> tuple[Any, ...]:
    """The types inside ``kind`` one level down (union members, tuple items, the Annotated type)."""
    if typing.get_origin(kind) is typing.Annotated:
        return (typing.get_args(kind)[0],)
    return tuple(a for a in typing.get_args(kind) if a is not Ellipsis)


def _bool_for_number(kind: Any, value: Any) -> bool:
    """Whether ``value`` holds a boolean where ``kind`` expects an int or a float."""
    if kind in (int, float):
        return isinstance(value, bool)
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        members = _members(kind)
        takes_bool = any(m in (bool, object, Any) or typing.get_origin(m) is typing.Literal for m in members)
        return not takes_bool and any(_bool_for_number(m, value) for m in members)
    if origin is typing.Annotated:
        return _bool_for_number(_members(kind)[0], value)
    if origin in (tuple, list) and isinstance(value, (list, tuple)):
        items = _members(kind)
        per_item = items * len(value) if len(items) == 1 else items
        return any(_bool_for_number(k, v) for k, v in zip(per_item, value))
    return False


def _non_bool_for_bool(kind: Any, value: Any) -> bool:
    """Whether ``value`` is not a boolean where ``kind`` is ``bool`` (pydantic would read 1, 0,
    "yes" or "off" as one)."""
    if typing.get_origin(kind) is typing.Annotated:
        return _non_bool_for_bool(_members(kind)[0], value)
    return kind is bool and not isinstance(value, bool)


def _states_bound(kind: Any) -> bool:
    """Whether ``kind`` carries its own upper bound (``Annotated[int, Le(n)]`` and the like)."""
    if typing.get_origin(kind) is typing.Annotated:
        if any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
               for m in typing.get_args(kind)[1:]):
            return True
    return any(_states_bound(m) for m in _members(kind))


def _leaves(value: Any) -> list[Any]:
    """The scalars of ``value`` (tuples and lists flattened)."""
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def int_bound(preset_value: Any) -> int:
    """The largest integer a field may be set to, given its preset value (module docstring)."""
    ints = [abs(v) for v in _leaves(preset_value) if isinstance(v, int) and not isinstance(v, bool)]
    return max([INT_FLOOR, *(INT_FACTOR * v for v in ints)])


def _coerce(config: Any, path: str, value: Any) -> Any:
    kind = field_type(config, path)
    if _bool_for_number(kind, value):
        raise ConfigError(f"config field {path!r} accepts {_type_name(kind)}, got {json.dumps(value)}: "
                          "a boolean is not a number")
    if _non_bool_for_bool(kind, value):
        raise ConfigError(f"config field {path!r} accepts true or false, got {json.dumps(value)}")
    try:
        coerced = _adapter(kind).validate_python(value)
    except pydantic.ValidationError as err:
        reasons = "; ".join(e["msg"] for e in err.errors())
        raise ConfigError(f"config field {path!r} accepts {_type_name(kind)}, got {value!r}: {reasons}") from None
    except pydantic.PydanticSchemaGenerationError:
        raise ConfigError(f"config field {path!r} (type {_type_name(kind)}) cannot be set from the command line") from None
    leaves = _leaves(coerced)
    if any(isinstance(v, str) and not v.strip() for v in leaves):
        raise ConfigError(f"config field {path!r} got a blank string {value!r}; give a value "
                          "(or null where the field takes none)")
    if not _states_bound(kind):
        bound = int_bound(getattr_path(config, path))
        big = [v for v in leaves if isinstance(v, int) and not isinstance(v, bool) and abs(v) > bound]
        if big:
            raise ConfigError(f"config field {path!r} = {big[0]} is beyond its bound of {bound:,} (the larger of "
                              f"{INT_FLOOR:,} and {INT_FACTOR} x its preset value); such a size does not fit")
    return coerced


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) if isinstance(kind, type) else str(kind).replace("typing.", "")


def _expand(config: Any, overrides: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Overrides with a JSON object for a nested dataclass field split into its dotted fields."""
    out = []
    for path, value in overrides:
        if isinstance(value, dict) and dataclasses.is_dataclass(getattr_path(config, path)):
            out += _expand(config, [(f"{path}.{k}", v) for k, v in value.items()])
        else:
            out.append((path, value))
    return out


def _rebuild(node: Any, changes: dict[str, Any], prefix: str, shown: dict[str, Any]) -> Any:
    """``node`` with ``changes`` (field -> value, or -> nested changes) applied, inner levels first."""
    fields = {}
    for name, change in changes.items():
        if isinstance(change, _Nested):
            fields[name] = _rebuild(getattr(node, name), change, f"{prefix}{name}.", shown)
        else:
            fields[name] = change
    try:
        return dataclasses.replace(node, **fields)
    except (ValueError, TypeError) as err:
        paths = [p for p in shown if p.startswith(prefix)]
        listing = ", ".join(f"{p!r} = {to_json(shown[p])!r}" for p in paths)
        verb = "is" if len(paths) == 1 else "are"
        raise ConfigError(f"config field{'s' if len(paths) > 1 else ''} {listing} {verb} out of range: {err}") from None


class _Nested(dict):
    """Changes to the fields of a nested dataclass (a marker type, so values that are dicts stay values)."""


def apply(config: Any, overrides: list[tuple[str, Any]]) -> Any:
    """``config`` with every ``(dotted path, value)`` applied (later ones win); ConfigError on any fault.

    All values are coerced first; then each dataclass level is rebuilt once with all its
    changes, innermost first, so a rule tying two fields (``a.T == b.T``) sees both new
    values. The new config must survive its JSON form (module docstring).
    """
    new = _apply(config, overrides)
    if new is not config:
        try:
            written = json.loads(json.dumps(to_json(new), allow_nan=False))
            back = _apply(new, list(written.items()))
        except (ConfigError, TypeError, ValueError) as err:
            raise ConfigError(f"the config would not read back from its JSON form: {err}") from None
        if to_json(back) != written:
            bad = [k for k in written if to_json(getattr(back, k)) != written[k]]
            raise ConfigError(f"config field(s) {', '.join(bad)} would not read back from the written config")
    return new


def _apply(config: Any, overrides: list[tuple[str, Any]]) -> Any:
    overrides = _expand(config, list(overrides))
    if not overrides:
        return config
    changes, shown = _Nested(), {}
    for path, value in overrides:
        coerced = _coerce(config, path, value)
        *parents, leaf = path.split(".")
        level = changes
        for name in parents:
            level = level.setdefault(name, _Nested())
        level[leaf] = coerced
        shown[path] = value
    return _rebuild(config, changes, "", shown)


def getattr_path(config: Any, path: str) -> Any:
    """The value at dotted ``path`` (ConfigError if unknown)."""
    field_type(config, path)
    for name in path.split("."):
        config = getattr(config, name)
    return config


def from_file(path: str | pathlib.Path) -> list[tuple[str, Any]]:
    """A partial config in a JSON file as a list of overrides (nested objects become dotted paths).

    Raises ConfigError naming the file when it is missing, not JSON or not an object.
    Unknown keys are named when the overrides are applied (with the file in the message).
    """
    path = pathlib.Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it: {err.strerror or err}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"--config {path} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must hold a JSON object of config fields, got {type(data).__name__}")
    return [(str(k), v) for k, v in data.items()]

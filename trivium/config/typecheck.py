"""Check plain config data (dicts and lists from YAML) against the schema dataclasses.

Two jobs, both reporting dotted key paths: find keys the schema does not know (with the
closest valid key), and check and normalize leaf values (types and allowed choices). It
works on plain data so it serves YAML files, command-line overrides and, via
``dataclasses.asdict``, configs built in code. ``build_dataclass`` then turns data that
passed both checks into the schema's dataclasses.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import types
import typing
from typing import Any

from trivium.config.errors import ConfigError, Problem

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    # ``Optional[X]`` and ``X | None`` alike.
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


@functools.lru_cache(maxsize=None)
def schema_fields(cls: type) -> dict[str, tuple[Any, dict]]:
    """name -> (annotation, metadata) of a schema dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], dict(f.metadata)) for f in dataclasses.fields(cls)}


@functools.lru_cache(maxsize=None)
def all_key_paths(cls: type, prefix: str = "") -> tuple[str, ...]:
    """Every dotted key path the schema defines (list items shown as ``[]``)."""
    paths = []
    for name, (annotation, _) in schema_fields(cls).items():
        path = join(prefix, name)
        paths.append(path)
        inner, _ = _strip_optional(annotation)
        if typing.get_origin(inner) in (list, dict):
            inner = typing.get_args(inner)[-1]
            path += "[]" if typing.get_origin(_strip_optional(annotation)[0]) is list else ".<name>"
        if dataclasses.is_dataclass(inner):
            paths.extend(all_key_paths(inner, path))
    return tuple(paths)


def _unknown_key_problem(key: str, parent: str, cls: type, root: type) -> Problem:
    known = list(schema_fields(cls))
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        hint = f" Did you mean '{join(parent, close[0])}'?"
    else:
        # The key may exist in another section (e.g. repeat_times written at the top level).
        elsewhere = [p for p in all_key_paths(root) if p.rsplit(".", 1)[-1] == key]
        hint = f" Did you mean '{elsewhere[0]}'?" if elsewhere else f" Valid keys here: {', '.join(known)}."
    return Problem(join(parent, key), f"unknown key '{key}'.{hint}")


def check_keys(data: Any, cls: type, path: str = "", root: type | None = None) -> list[Problem]:
    """Unknown keys anywhere in ``data`` (values are not looked at)."""
    root = root or cls
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return problems
    fields = schema_fields(cls)
    for key, value in data.items():
        key_path = join(path, str(key))
        if key not in fields:
            problems.append(_unknown_key_problem(str(key), path, cls, root))
            continue
        inner, _ = _strip_optional(fields[key][0])
        origin = typing.get_origin(inner)
        if dataclasses.is_dataclass(inner):
            problems += check_keys(value, inner, key_path, root)
        elif origin in (list, dict) and dataclasses.is_dataclass(typing.get_args(inner)[-1]):
            item_cls = typing.get_args(inner)[-1]
            items = enumerate(value) if origin is list and isinstance(value, list) else (
                value.items() if isinstance(value, dict) else []
            )
            for index, item in items:
                problems += check_keys(item, item_cls, join(key_path, index), root)
    return problems


def _type_name(annotation: Any) -> str:
    inner, optional = _strip_optional(annotation)
    origin = typing.get_origin(inner)
    if dataclasses.is_dataclass(inner):
        name = "a mapping (section)"
    elif origin is list:
        name = "a list"
    elif origin is dict:
        name = "a mapping"
    else:
        name = {int: "an integer", float: "a number", bool: "true/false", str: "a string"}.get(inner, str(inner))
    return f"{name} or null" if optional else name


def _coerce_scalar(value: Any, kind: type) -> tuple[bool, Any]:
    """(ok, normalized value) for a scalar of schema type ``kind``."""
    if kind is bool:
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return True, value.lower() in _TRUE
        return False, value
    if kind is int:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, int):
            return True, value
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        if isinstance(value, str):
            return _number_from_text(value, int)
        return False, value
    if kind is float:
        if isinstance(value, bool):
            return False, value
        if isinstance(value, (int, float)):
            return True, float(value)
        if isinstance(value, str):
            return _number_from_text(value, float)
        return False, value
    if kind is str:
        if isinstance(value, (dict, list)):
            return False, value
        if isinstance(value, bool):  # YAML read `false` as a bool; keep the user's spelling
            return True, "true" if value else "false"
        return True, value if isinstance(value, str) else str(value)
    return True, value


def _number_from_text(text: str, kind: type) -> tuple[bool, Any]:
    """(ok, value): ``text`` read as an ``int`` or ``float``, else not ok and ``text`` as given."""
    try:
        return True, kind(text.strip())
    except ValueError:
        return False, text


def _check_choice(value: Any, choices: list, path: str, problems: list[Problem], dotted_path: bool = False) -> Any:
    if value is None or value in choices:
        return value
    if dotted_path and isinstance(value, str) and ("." in value or ":" in value):
        return value  # a plugin class imported by path when the run starts
    # Choices match case-insensitively (log.level: debug); store the canonical spelling.
    by_lower = {str(choice).lower(): choice for choice in choices}
    if isinstance(value, str) and value.lower() in by_lower:
        return by_lower[value.lower()]
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    plugin = ", or a dotted path like 'my_package.module:Name'" if dotted_path else ""
    problems.append(Problem(
        path, f"invalid value {value!r}; choose one of: {', '.join(map(str, choices))}{plugin}.{hint}"
    ))
    return value


def check_values(
    data: Any, annotation: Any, path: str, problems: list[Problem], choices: list | None = None,
    dotted_path: bool = False,
) -> Any:
    """Check ``data`` against ``annotation``; returns the normalized value and appends problems.

    ``choices`` restricts a string leaf; with ``dotted_path`` a ``pkg.module:Name`` is accepted too.
    """
    inner, optional = _strip_optional(annotation)
    if data is None:
        if not optional and inner is not Any:
            problems.append(Problem(path, f"expected {_type_name(annotation)}, got null."))
        return data
    if inner is Any:
        return data
    origin = typing.get_origin(inner)
    if dataclasses.is_dataclass(inner):
        if not isinstance(data, dict):
            problems.append(Problem(path, f"expected {_type_name(annotation)}, got {data!r}."))
            return data
        fields = schema_fields(inner)
        return {
            key: check_values(value, fields[key][0], join(path, key), problems, fields[key][1].get("choices"),
                              fields[key][1].get("dotted_path", False))
            if key in fields else value
            for key, value in data.items()
        }
    if origin is list:
        if not isinstance(data, (list, tuple)):
            problems.append(Problem(path, f"expected {_type_name(annotation)}, got {data!r}."))
            return data
        (item_type,) = typing.get_args(inner)
        return [check_values(item, item_type, join(path, i), problems, choices, dotted_path)
                for i, item in enumerate(data)]
    if origin is dict:
        if not isinstance(data, dict):
            problems.append(Problem(path, f"expected {_type_name(annotation)}, got {data!r}."))
            return data
        value_type = typing.get_args(inner)[1]
        return {key: check_values(value, value_type, join(path, str(key)), problems) for key, value in data.items()}
    ok, normalized = _coerce_scalar(data, inner)
    if not ok:
        problems.append(Problem(path, f"expected {_type_name(annotation)}, got {data!r} ({type(data).__name__})."))
        return data
    if choices:
        normalized = _check_choice(normalized, choices, path, problems, dotted_path)
    return normalized


def build_dataclass(cls: type, data: dict, path: str = "") -> Any:
    """Checked, normalized ``data`` -> an instance of the schema dataclass ``cls``.

    Missing keys take their defaults, normalized like given values (a float field holds a
    float); sections, and lists and mappings of sections, become dataclasses; any other list
    or mapping is copied, so the result shares nothing with ``data``. Data that did not pass
    ``check_keys`` and ``check_values`` raises ConfigError.
    """
    if not isinstance(data, dict):
        raise ConfigError(Problem(path, f"expected {_type_name(cls)}, got {data!r}"))
    fields = schema_fields(cls)
    values = {}
    for key, value in {**_defaults(cls), **data}.items():
        if key not in fields:
            raise ConfigError(_unknown_key_problem(str(key), path, cls, cls))
        values[key] = _build_value(fields[key][0], value, join(path, key))
    return cls(**values)


@functools.lru_cache(maxsize=None)
def _defaults(cls: type) -> dict:
    return dataclasses.asdict(cls())  # read only: _build_value copies what it keeps


def _build_value(annotation: Any, value: Any, path: str) -> Any:
    inner, _ = _strip_optional(annotation)
    if value is None or inner is Any:
        return copy.deepcopy(value)
    if dataclasses.is_dataclass(inner):
        return build_dataclass(inner, value, path)
    origin = typing.get_origin(inner)
    if origin is list:
        (item_type,) = typing.get_args(inner)
        return [_build_value(item_type, item, join(path, index)) for index, item in enumerate(value)]
    if origin is dict:
        value_type = typing.get_args(inner)[1]
        return {key: _build_value(value_type, item, join(path, str(key))) for key, item in value.items()}
    ok, normalized = _coerce_scalar(value, inner)
    if not ok:
        raise ConfigError(Problem(path, f"expected {_type_name(annotation)}, got {value!r}"))
    return normalized

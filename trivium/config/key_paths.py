"""Which dotted keys the schema knows: ``check_key_path("buffer.explorer_input.tasksets[0].path")``
is None for a schema key (or a key inside an open mapping) and otherwise a message naming the
closest valid key. Read by the loader (command-line overrides) and by key-mapping files.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any

from trivium.config.schema import TriviumConfig
from trivium.config.typecheck import check_keys, join, schema_fields

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _split_key(key: str) -> list[str | int]:
    segments: list[str | int] = []
    for name, index in _SEGMENT.findall(key):
        segments.append(int(index) if index else name)
    return segments


def check_key_path(key: str) -> str | None:
    """None when ``key`` names a schema key (or a key inside an open mapping), else a message."""
    cls: Any = TriviumConfig
    path = ""
    for segment in _split_key(key):
        if cls is None:  # inside an open mapping: anything goes
            return None
        if isinstance(segment, int):
            path = join(path, segment)
            continue
        if isinstance(cls, _DictOf):  # a free name inside Dict[str, Dataclass]
            path, cls = join(path, segment), cls.value_type
            continue
        if isinstance(cls, type) and dataclasses.is_dataclass(cls):
            fields = schema_fields(cls)
            if segment not in fields:
                problems = check_keys({segment: None}, cls, path, TriviumConfig)
                return problems[0].message
            annotation = fields[segment][0]
            path = join(path, segment)
            cls = _element_class(annotation)
        else:
            return None
    return None


def _element_class(annotation: Any) -> Any:
    """The dataclass reached through a field (through Optional/List/Dict), or None if open."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        annotation = args[0]
    origin = typing.get_origin(annotation)
    if origin is list:
        annotation = typing.get_args(annotation)[0]
    elif origin is dict:
        value_type = typing.get_args(annotation)[1]
        return _DictOf(value_type) if dataclasses.is_dataclass(value_type) else None
    return annotation if dataclasses.is_dataclass(annotation) else None


class _DictOf:
    """Marker for Dict[str, Dataclass]: the next segment is a free name, then the dataclass."""

    def __init__(self, value_type: type):
        self.value_type = value_type

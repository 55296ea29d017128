"""A settings dataclass passed on as keyword arguments: its fields under their own names.

For the places where a component's settings are named exactly as the arguments of what it
builds (a model config, a client, a wrapper), so the names are not written out twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def keyword_fields(settings: Any, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of the dataclass instance ``settings`` by name (values as they are), but those
    named in ``leave_out``; a name there that is no field of ``settings`` is an error."""
    names = [field.name for field in dataclasses.fields(settings)]
    unknown = set(leave_out) - set(names)
    if unknown:
        raise ValueError(f"{type(settings).__name__} has no field {', '.join(sorted(unknown))}")
    return {name: getattr(settings, name) for name in names if name not in leave_out}

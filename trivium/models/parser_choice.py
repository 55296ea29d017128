"""Choosing a reply parser (``tool_call_parser``, ``reasoning_parser``) by its configured name."""

from __future__ import annotations

from typing import TypeVar

from trivium.errors import UserError

Parser = TypeVar("Parser")


def parser_named(parsers: dict[str, type[Parser]], name: str | None, *, key: str) -> Parser | None:
    """A new parser of ``parsers`` called ``name``; None for no parsing (the settings carry None
    for the config's ``none``). An unknown name is a ``UserError`` naming ``key`` and the choices."""
    if not name:
        return None
    if name not in parsers:
        raise UserError(f"unknown {key} '{name}'; choose one of: {', '.join(parsers)}")
    return parsers[name]()

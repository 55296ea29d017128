"""Read veRL's ``key=value`` overrides (Hydra syntax) into Python values.

Covers what launch scripts use: booleans in any case, ``null``/``None``, integers, floats
(``1e-6``), quoted strings, and lists such as ``["console","wandb"]`` or ``['a', 'b']``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trivium.errors import UserError

_INTEGER = re.compile(r"[+-]?\d+")
_NULL_SPELLINGS = ("null", "none", "~")  # Hydra's null, lower-cased
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


@dataclass
class Override:
    key: str
    value: Any
    written: str  # the text as it appeared, for the report


def parse_value(text: str) -> Any:
    """One Hydra override value as a Python value."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return [parse_value(item) for item in _split_top_level(text[1:-1])]
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    if lowered in _NULL_SPELLINGS:
        return None
    if _INTEGER.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are outside quotes and brackets; an empty list gives []."""
    items: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    if quote or depth:
        raise UserError(f"unbalanced quotes or brackets in the list value [{text}]")
    items.append("".join(current))
    if len(items) == 1 and not items[0].strip():
        return []
    return items


def parse_overrides(arguments: list[str]) -> tuple[list[Override], list[str]]:
    """The overrides in order, and notes about words that are not plain overrides.

    ``+key=value`` (add a key) is read like ``key=value``; ``~key`` (delete a key) has no
    meaning for a fresh config and is noted. A key given twice keeps its last value, as in
    Hydra.
    """
    overrides: dict[str, Override] = {}
    notes: list[str] = []
    for word in arguments:
        if word.startswith("~"):
            notes.append(f"'{word}' removes a key from veRL's base config; nothing to convert")
            continue
        key, equals, written = word.lstrip("+").partition("=")
        if not equals or not _KEY.fullmatch(key):
            raise UserError(
                f"'{word}' is not a veRL override; expected key=value, like data.train_batch_size=1024"
            )
        if key in overrides:
            notes.append(f"{key} is given more than once; the last value ({written}) is used")
            del overrides[key]
        overrides[key] = Override(key=key, value=parse_value(written), written=written)
    return list(overrides.values()), notes

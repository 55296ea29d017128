"""Checking dataset rows: where a row came from, and why a reader must skip it.

Owns ``BadRow`` (a row's place and the reason it is unusable), ``read_jsonl`` (a jsonl
file -> its object rows with their line numbers, plus the lines that are not UTF-8, not
JSON, not an object, or too long) and ``row_problem`` (a loaded row without its prompt, or
longer than the limit). Nothing here decides whether to skip a row or stop: readers do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BadRow:
    where: str  # e.g. "data/train.jsonl line 7" or "row 12"
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class JsonlRows:
    """The object rows of jsonl files, where each came from, and the lines left out."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    bad: list[BadRow] = field(default_factory=list)


def too_long(length: int, max_row_chars: int | None) -> str | None:
    if max_row_chars is not None and length > max_row_chars:
        return f"{length} characters, over the limit of {max_row_chars} (max_row_chars)"
    return None


def line_problem(raw: bytes, max_row_chars: int | None) -> tuple[dict[str, Any] | None, str | None]:
    """(row, None) for a good jsonl line, else (None, why it is unusable)."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as error:
        return None, f"not UTF-8 text (byte 0x{raw[error.start]:02x} at column {error.start + 1})"
    reason = too_long(len(text), max_row_chars)
    if reason:
        return None, reason
    try:
        row = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"not valid JSON ({error.msg} at column {error.colno})"
    if not isinstance(row, dict):
        return None, f"not a JSON object (a {type(row).__name__})"
    return row, None


def read_jsonl(paths: list[Path], *, max_row_chars: int | None) -> JsonlRows:
    """Every object row of ``paths`` in order; blank lines are ignored, line numbers start at 1."""
    result = JsonlRows()
    for path in paths:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                where = f"{path} line {number}"
                row, reason = line_problem(raw, max_row_chars)
                if reason:
                    result.bad.append(BadRow(where, reason))
                else:
                    result.rows.append(row)
                    result.places.append(where)
    return result


def row_length(row: dict[str, Any]) -> int:
    """Characters of a row's text values (strings, and strings inside lists and dicts)."""

    def size(value: Any) -> int:
        if isinstance(value, str):
            return len(value)
        if isinstance(value, dict):
            return sum(size(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(size(v) for v in value)
        return 0

    return size(row)


def row_problem(row: dict[str, Any], *, column: str | None, key_name: str,
                max_row_chars: int | None) -> str | None:
    """Why a loaded row is unusable: no prompt in ``column``, or too long; None when it is fine."""
    if column is not None:
        value = row.get(column)
        if value is None or value == "":
            return f"missing '{column}' (format.{key_name}); its keys are {sorted(row)}"
    return too_long(row_length(row), max_row_chars)

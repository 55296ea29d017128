"""Write a nested dict as block-style YAML with an end-of-line comment on chosen keys.

PyYAML cannot emit comments, so the layout is written here and each scalar is formatted by
PyYAML (quoting, floats, null), which keeps the text loadable by any YAML reader.
"""

from __future__ import annotations

from typing import Any

import yaml


def scalar_text(value: Any) -> str:
    """One value as YAML flow text (``1.0e-06``, ``'on'``, ``null``, ``[a, b]``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False)
    text = text.rstrip("\n")
    text = text.removesuffix("\n...")
    return text


def render_yaml(tree: dict, comments: dict[str, str] | None = None) -> str:
    """YAML text of ``tree``; ``comments`` maps dotted paths (list items by index) to comments.

    Top-level sections are separated by a blank line.
    """
    comments = comments or {}
    lines: list[str] = []
    for key, value in tree.items():
        if lines and isinstance(value, (dict, list)) and value:
            lines.append("")
        _render_entry(key, value, str(key), 0, None, lines, comments)
    return "\n".join(lines) + "\n"


def _with_comment(line: str, comment: str | None) -> str:
    return f"{line}  # {comment}" if comment else line


def _render_entry(
    key: Any, value: Any, path: str, indent: int, lead: str | None, lines: list[str], comments: dict[str, str]
) -> None:
    # ``lead`` replaces the indentation on the first key of a list item ("  - ").
    prefix = lead if lead is not None else " " * indent
    head = f"{prefix}{scalar_text(key)}:"
    if isinstance(value, dict) and value:
        lines.append(_with_comment(head, comments.get(path)))
        for child_key, child in value.items():
            _render_entry(child_key, child, f"{path}.{child_key}", indent + 2, None, lines, comments)
    elif isinstance(value, list) and value and any(isinstance(item, dict) and item for item in value):
        lines.append(_with_comment(head, comments.get(path)))
        _render_list(value, path, indent + 2, lines, comments)
    else:
        lines.append(_with_comment(f"{head} {scalar_text(value)}", comments.get(path)))


def _render_list(items: list, path: str, indent: int, lines: list[str], comments: dict[str, str]) -> None:
    for index, item in enumerate(items):
        item_path = f"{path}.{index}"
        if isinstance(item, dict) and item:
            for position, (key, value) in enumerate(item.items()):
                lead = " " * indent + "- " if position == 0 else None
                _render_entry(key, value, f"{item_path}.{key}", indent + 2, lead, lines, comments)
        else:
            lines.append(_with_comment(f"{' ' * indent}- {scalar_text(item)}", comments.get(item_path)))

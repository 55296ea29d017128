"""Dotted-path access to nested dicts and lists (``a.b.0.c``), shared by key-mapping files and the
veRL importer."""

from __future__ import annotations

from typing import Any

_MISSING = object()


def split_path(path: str) -> list[str]:
    parts = path.split(".")
    if not path or any(part == "" for part in parts):
        raise ValueError(f"'{path}' is not a dotted path (empty part)")
    return parts


def get_path(tree: Any, path: str, default: Any = _MISSING) -> Any:
    """The value at ``path``; list items are addressed by their index."""
    node = tree
    for part in split_path(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            if default is _MISSING:
                raise KeyError(path)
            return default
    return node


def set_path(tree: dict, path: str, value: Any) -> None:
    """Set ``path`` in ``tree``, creating dicts (or lists, before a numeric part) on the way."""
    parts = split_path(path)
    node: Any = tree
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        fresh: Any = value if last else ([] if parts[index + 1].isdigit() else {})
        if isinstance(node, list):
            if not part.isdigit():
                raise ValueError(f"cannot set '{path}': '{'.'.join(parts[:index])}' is a list; use an index")
            position = int(part)
            node.extend({} for _ in range(position + 1 - len(node)))
            if last or not isinstance(node[position], (dict, list)):
                node[position] = fresh
        elif isinstance(node, dict):
            if last or not isinstance(node.get(part), (dict, list)):
                node[part] = fresh
            position = part
        else:
            # A path clash is a bad value (the mapping's), so ValueError like the other cases.
            prefix = ".".join(parts[:index])
            message = f"cannot set '{path}': '{prefix}' already holds a {type(node).__name__}"
            raise ValueError(message)  # noqa: TRY004
        node = node[position]


def all_paths(tree: Any, prefix: str = "") -> list[str]:
    """Every dotted path in ``tree``, inner nodes included (used for 'did you mean')."""
    paths = []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        paths.append(path)
        paths.extend(all_paths(value, path))
    return paths

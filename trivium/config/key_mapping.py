"""Key-mapping files: how an upper-level tool's config keys become trivium keys.

A mapping is a JSON object. Each key reads the upper-level config: a dotted path
(``tuner.model.path``; list items as ``a.items[0].x``) or, in parentheses, an arithmetic
expression over such paths (``(tuner.batch_size * tuner.num_repeat)``). Each value names
the trivium key(s) to set: one dotted path or a list of them.

``apply_mapping`` returns only the mapped values. Layering (schema defaults < mapped values
< the upper config's ``trivium:`` section < command-line overrides) is done by
``trivium.config.load.load_config``: a value the user wrote for trivium explicitly must win
over one derived from the tool's own settings, and the command line wins over both.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from trivium.config.dotted_paths import all_paths, get_path, set_path
from trivium.config.key_paths import check_key_path
from trivium.config.mapping_expressions import evaluate, is_expression
from trivium.errors import UserError

_INDEX = re.compile(r"\[(\d+)\]")


def load_mapping(path: str | Path) -> dict[str, str | list[str]]:
    """Read and check a mapping file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"key-mapping file not found: {path}")
    try:
        mapping = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise UserError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}"
        ) from None
    check_mapping(mapping, str(path))
    return mapping


def check_mapping(mapping: Any, source: str = "the key mapping") -> None:
    """The mapping's shape: an object of source key -> target path or list of target paths."""
    if not isinstance(mapping, dict):
        raise UserError(f'{source} must be a JSON object of "source key": "trivium.key" pairs')
    for key, targets in mapping.items():
        if not isinstance(key, str) or not key.strip():
            raise UserError(f"{source}: a source key is empty")
        targets = [targets] if isinstance(targets, str) else targets
        if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t for t in targets):
            raise UserError(
                f"{source}: the value of '{key}' must be a trivium key or a list of them, got {targets!r}"
            )


def apply_mapping(upper: dict, mapping: dict) -> dict:
    """The nested dict of trivium keys that ``mapping`` derives from the upper-level config."""
    check_mapping(mapping)
    result: dict = {}
    for key, targets in mapping.items():
        value = _source_value(upper, key.strip())
        for target in [targets] if isinstance(targets, str) else targets:
            target_path = _dotted(target.strip())
            _check_target(target_path, key)
            try:
                set_path(result, target_path, value)
            except ValueError as error:
                raise UserError(f"mapping entry '{key}': {error}") from None
    return result


def _dotted(path: str) -> str:
    """``a.items[0].x`` -> ``a.items.0.x``."""
    return _INDEX.sub(r".\1", path)


def _source_value(upper: dict, key: str) -> Any:
    def lookup(path: str) -> Any:
        try:
            return get_path(upper, path)
        except KeyError:
            close = difflib.get_close_matches(path, all_paths(upper), n=1, cutoff=0.5)
            hint = f" The closest key there is '{close[0]}'." if close else ""
            raise UserError(
                f"mapping entry '{key}' reads '{path}', which the upper-level config does not have.{hint}"
            ) from None

    if is_expression(key):
        return evaluate(key, lookup)
    try:
        return lookup(_dotted(key))
    except ValueError as error:  # an empty part, e.g. "a..b"
        raise UserError(f"mapping entry '{key}': {error}") from None


def _check_target(path: str, key: str) -> None:
    """Reject a target the trivium schema does not know, naming the closest valid key."""
    schema_path = re.sub(r"\.(\d+)(?=\.|$)", r"[\1]", path)
    problem = check_key_path(schema_path)
    if problem:
        raise UserError(f"mapping entry '{key}' targets '{path}', which is not a trivium key: {problem}")

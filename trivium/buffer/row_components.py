"""A row's own workflow and reward function: ``format.workflow_key`` and ``format.reward_fn_key``.

A taskset that mixes kinds of tasks names, in a column, the workflow (or reward function)
of each row; an empty or missing cell leaves the taskset's default. The names are checked
when the taskset is read, row by row: a row that names an unknown one is a bad row (skipped
and counted with its row number, or an error under ``strict``), not a failure in the middle
of a run.
"""

from __future__ import annotations

from typing import Any

# Task field -> (format key naming its column, what the name must be)
ROW_COMPONENTS = {"workflow": ("workflow_key", "workflow"), "reward_fn": ("reward_fn_key", "reward function")}


class RowComponents:
    def __init__(self, fmt: dict[str, Any]):
        self.columns = {field: fmt.get(key) or None for field, (key, _) in ROW_COMPONENTS.items()}
        self._problems: dict[tuple[str, str], str | None] = {}  # (field, name) -> problem, looked up once

    def overrides(self, row: dict[str, Any]) -> dict[str, str]:
        """The Task fields this row sets: {"workflow": name, "reward_fn": name} for its non-empty cells."""
        named = {}
        for field, column in self.columns.items():
            value = row.get(column) if column else None
            if value not in (None, ""):
                named[field] = value
        return named

    def problem(self, row: dict[str, Any]) -> str | None:
        """Why the row's named workflow or reward function cannot be used; None when they can."""
        for field, name in self.overrides(row).items():
            key, kind = ROW_COMPONENTS[field]
            where = f"'{self.columns[field]}' (format.{key})"
            if not isinstance(name, str):
                return f"{where} holds {name!r}, not the name of a {kind}"
            if (field, name) not in self._problems:
                self._problems[field, name] = _lookup_problem(field, name)
            problem = self._problems[field, name]
            if problem is not None:
                return f"{where}: {problem}"
        return None


def _lookup_problem(field: str, name: str) -> str | None:
    from trivium.registry import RegistryError

    if field == "workflow":
        from trivium.workflows.registry import WORKFLOWS as registry
    else:
        from trivium.rewards.registry import REWARD_FNS as registry
    try:
        registry.get(name)
    except RegistryError as error:
        return str(error)
    return None

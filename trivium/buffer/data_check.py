"""Checking every dataset a config reads, before a run: ``trivium plan --check-data``.

Owns reading each taskset, eval taskset and file/SQL training dataset the way a run would
(same row checks, nothing trained or written) and reporting, per dataset, how many rows are
usable and which are not, by line or row number.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trivium.buffer.row_check import BadRow
from trivium.buffer.task_reader import TaskReader
from trivium.core.storage_kinds import storage_kind
from trivium.errors import UserError

SHOWN_BAD_ROWS = 20


@dataclass
class DatasetCheck:
    role: str  # "taskset", "eval taskset", "auxiliary buffer", "experience buffer"
    name: str
    path: str
    usable_rows: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    error: str | None = None  # the dataset cannot be read at all

    @property
    def ok(self) -> bool:
        return self.error is None and not self.bad_rows

    def render(self) -> str:
        head = f"{self.role} '{self.name}' ({self.path})"
        if self.error is not None:
            return f"{head}: UNREADABLE: {self.error}"
        lines = [f"{head}: {self.usable_rows} usable rows, {len(self.bad_rows)} bad"]
        lines += [f"  - {bad}" for bad in self.bad_rows[:SHOWN_BAD_ROWS]]
        if len(self.bad_rows) > SHOWN_BAD_ROWS:
            lines.append(f"  ... and {len(self.bad_rows) - SHOWN_BAD_ROWS} more")
        return "\n".join(lines)


def datasets_of(config: Any) -> Iterator[tuple[str, Any]]:
    """(role, storage config) of every dataset the run reads rows from."""
    explorer_input = config.buffer.explorer_input
    for storage in explorer_input.tasksets:
        yield "taskset", storage
    for storage in explorer_input.eval_tasksets:
        yield "eval taskset", storage
    trainer_input = config.buffer.trainer_input
    for storage in (trainer_input.auxiliary_buffers or {}).values():
        yield "auxiliary buffer", storage
    experience_buffer = trainer_input.experience_buffer
    if experience_buffer is None or not experience_buffer.path:
        return
    kind = storage_kind(experience_buffer.storage_type)
    if kind.holds_datasets and not kind.trainer_reads_experiences:  # a trainer reads it as a dataset
        yield "experience buffer", experience_buffer


def check_dataset(role: str, storage: Any) -> DatasetCheck:
    check = DatasetCheck(role=role, name=storage.name, path=str(storage.path))
    try:
        reader = TaskReader(storage, is_eval=True)
    except UserError as error:
        check.error = str(error)
        return check
    check.usable_rows = len(reader)
    check.bad_rows = list(reader.bad_rows)
    return check


def check_datasets(config: Any) -> list[DatasetCheck]:
    """Every dataset of a resolved config, read and checked row by row."""
    return [check_dataset(role, storage) for role, storage in datasets_of(config)]

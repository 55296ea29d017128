"""Reading tasks for the explorer: rows of a taskset, in selector order, over epochs.

Owns ``TaskReader`` (one taskset) and ``MultiTasksetReader`` (several, mixed in
proportion to their sizes). A reader validates rows once at start (a row that is not valid
JSON, has no prompt, or is longer than ``max_row_chars`` is skipped, counted and logged with
its line or row number, or rejected with ``strict=True``), applies an
optional task pipeline, and hands out ``Task`` objects ``batch_size`` at a time until
``total_epochs`` (or ``total_steps`` batches) are done, then raises ``BufferExhausted``.
Its position is a small JSON-able state, so a resumed run continues where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from trivium.buffer.base import BufferExhausted, check_batch_size
from trivium.buffer.row_check import BadRow, row_problem
from trivium.buffer.row_components import RowComponents
from trivium.buffer.selectors import TaskSelector, build_selector
from trivium.buffer.task_source import LoadedRows, format_dict, load_rows
from trivium.core.task import Task
from trivium.errors import UserError

logger = logging.getLogger(__name__)


def prompt_column(fmt: dict[str, Any]) -> tuple[str, str | None]:
    """(format key name, dataset column) that holds the prompt for this ``prompt_type``."""
    key_name = "messages_key" if fmt.get("prompt_type") == "messages" else "prompt_key"
    return key_name, fmt.get(key_name)


class TaskReader:
    def __init__(
        self,
        config: Any,
        *,
        is_eval: bool = False,
        total_epochs: int | None = 1,
        total_steps: int | None = None,
        strict: bool = False,
        default_seed: int | None = None,
        task_pipeline: Any = None,
    ):
        self.config = config
        self.name = config.name
        self.is_eval = is_eval or config.is_eval
        self.total_epochs = total_epochs
        self.total_steps = None if self.is_eval else total_steps
        self.format = format_dict(config)
        # format.workflow_key / reward_fn_key: a row may name its own workflow and reward function
        self.row_components = RowComponents(self.format)
        loaded = load_rows(config)
        self.rows = loaded.rows
        self.place = loaded.place  # row number -> "data/train.jsonl line 3" (or "row 3")
        # Rows left out, with their line (jsonl) or row number and the reason.
        self.bad_rows: list[BadRow] = []
        self.row_numbers = self._usable_rows(loaded, strict, task_pipeline)
        if not self.row_numbers:
            first = f"; the first: {self.bad_rows[0]}" if self.bad_rows else ""
            raise UserError(f"Taskset '{self.name}' has no usable rows (skipped {self.skipped_rows}){first}.")
        self._position_of_row = {row: i for i, row in enumerate(self.row_numbers)}
        # Evaluation walks the taskset once, in file order.
        selector_config = None if self.is_eval else config.task_selector
        self.selector: TaskSelector = build_selector(
            selector_config, len(self.row_numbers), default_seed, row_of=lambda i: self.rows[self.row_numbers[i]]
        )
        self.position = 0  # draws handed out so far, over all epochs
        self.steps = 0
        self._task_defaults = self._defaults()

    # ---- set-up ------------------------------------------------------------------------
    @property
    def skipped_rows(self) -> int:
        return len(self.bad_rows)

    def _usable_rows(self, loaded: LoadedRows, strict: bool, task_pipeline: Any) -> list[int]:
        key_name, column = prompt_column(self.format)
        columns = loaded.column_names()
        if column is not None and columns is not None and column not in columns:
            if strict:
                raise UserError(
                    f"Taskset '{self.name}': column '{column}' (format.{key_name}) is not in the "
                    f"dataset; its columns are {columns}. Set format.{key_name} to one of them."
                )
            # The workflow may build prompts from other columns; nothing to validate.
            logger.warning("taskset '%s': no column '%s' (format.%s); rows are not checked",
                           self.name, column, key_name)
            column = None
        self._skip(loaded.bad, strict)
        max_row_chars = self.config.max_row_chars
        usable = []
        for number, row in enumerate(self.rows):  # iterating a datasets.Dataset reads it in batches
            reason = row_problem(row, column=column, key_name=key_name, max_row_chars=max_row_chars)
            reason = reason or self.row_components.problem(row)
            if reason is None:
                usable.append(number)
            else:
                self._skip([BadRow(loaded.place(number), reason)], strict)
        if self.bad_rows:
            shown = "; ".join(str(bad) for bad in self.bad_rows[:5])
            more = f" (and {len(self.bad_rows) - 5} more)" if len(self.bad_rows) > 5 else ""
            logger.warning("taskset '%s': skipped %d of %d rows: %s%s", self.name, len(self.bad_rows),
                           len(self.rows) + len(loaded.bad), shown, more)
        if task_pipeline is not None:
            usable, metrics = task_pipeline.filter_rows(self.rows, usable)
            self.rows = task_pipeline.rows_after(self.rows)  # rows its mappers rewrote
            logger.info("taskset '%s': task pipeline %s", self.name, metrics)
        return usable

    def _skip(self, bad_rows: list[BadRow], strict: bool) -> None:
        if bad_rows and strict:
            raise UserError(
                f"Taskset '{self.name}' {bad_rows[0]}. Fix the row, or drop `strict` to skip such rows."
            )
        self.bad_rows.extend(bad_rows)

    def _defaults(self) -> dict[str, Any]:
        workflow_args = dict(self.config.workflow_args)
        reward_fn_args = self.config.reward_fn_args
        if reward_fn_args and "reward_fn_args" not in workflow_args:
            workflow_args["reward_fn_args"] = dict(reward_fn_args)
        defaults = {
            "reward_fn": self.config.default_reward_fn_type,
            # repeat_times is filled by resolve(); a reader of an unresolved config rolls out each task once
            "repeat_times": 1 if self.config.repeat_times is None else int(self.config.repeat_times),
            "rollout_args": dict(self.config.rollout_args),
            "workflow_args": workflow_args,
            "format": self.format,
        }
        workflow = self.config.default_workflow_type
        if workflow is not None:
            defaults["workflow"] = workflow
        return defaults

    # ---- reading -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.row_numbers)

    @property
    def epoch(self) -> int:
        return self.position // len(self.row_numbers)

    def _draws_left(self) -> int | None:
        if self.total_steps is not None or self.total_epochs is None:
            return None
        return self.total_epochs * len(self.row_numbers) - self.position

    def read(self, batch_size: int) -> list[Task]:
        """The next ``batch_size`` tasks; the last batch of the last epoch may be shorter."""
        check_batch_size(batch_size)
        if self.total_steps is not None and self.steps >= self.total_steps:
            raise BufferExhausted(f"taskset '{self.name}': reached total_steps={self.total_steps}")
        left = self._draws_left()
        count = batch_size if left is None else min(batch_size, left)
        if count <= 0:
            raise BufferExhausted(f"taskset '{self.name}': finished {self.total_epochs} epoch(s)")
        indices = self.selector.select(self.position, count)
        tasks = [self._task(index, self.position + offset) for offset, index in enumerate(indices)]
        self.position += count
        self.steps += 1
        return tasks

    def _task(self, selector_index: int, position: int) -> Task:
        row_number = self.row_numbers[selector_index]
        epoch, slot = divmod(position, len(self.row_numbers))
        raw = dict(self.rows[row_number])
        return Task(
            raw=raw,
            **{**self._task_defaults, **self.row_components.overrides(raw)},
            taskset_name=self.name,
            # Unique per draw and stable across resumes: taskset, row, epoch, slot in the epoch.
            task_id=f"{self.name}:{row_number}:{epoch}:{slot}",
            index=row_number,
            is_eval=self.is_eval,
        )

    @property
    def learns_from_pass_rate(self) -> bool:
        return self.selector.learns_from_pass_rate

    def update_pass_rate(self, task_id_or_index: str | int, pass_rate: float) -> None:
        """Feedback for the adaptive selectors (others ignore it)."""
        if isinstance(task_id_or_index, str):
            taskset, _, rest = task_id_or_index.partition(":")
            if taskset != self.name:
                return
            row_number = int(rest.split(":")[0])
        else:
            row_number = int(task_id_or_index)
        if row_number in self._position_of_row:
            self.selector.update(self._position_of_row[row_number], pass_rate)

    # ---- resuming ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "taskset": self.name,
            "num_rows": len(self.row_numbers),
            "position": self.position,
            "steps": self.steps,
            "selector": self.selector.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("num_rows") not in (None, len(self.row_numbers)):
            raise UserError(
                f"Taskset '{self.name}' has {len(self.row_numbers)} usable rows but the saved position "
                f"was recorded with {state['num_rows']}; the data changed. Remove the saved position "
                "to start the taskset over."
            )
        self.position = int(state.get("position", 0))
        self.steps = int(state.get("steps", 0))
        self.selector.load_state_dict(state.get("selector", {}))

    def save_position(self, path: str | Path) -> None:
        """Write ``state_dict()`` as JSON, atomically (a crash leaves the old file intact)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(path.suffix + ".tmp")
        temporary.write_text(json.dumps(self.state_dict()), encoding="utf-8")
        os.replace(temporary, path)

    def load_position(self, path: str | Path) -> bool:
        """Restore a saved position; False (and no change) when the file does not exist."""
        path = Path(path)
        if not path.exists():
            return False
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise UserError(f"Saved taskset position {path} is not valid JSON: {error}") from error
        self.load_state_dict(state)
        return True


class MultiTasksetReader:
    """Several tasksets read as one: each batch is split in proportion to their sizes."""

    def __init__(self, readers: list[TaskReader]):
        if not readers:
            raise ValueError("MultiTasksetReader needs at least one TaskReader")
        self.readers = readers
        self._exhausted: set[int] = set()

    def _shares(self, batch_size: int, active: list[int]) -> dict[int, int]:
        sizes = {i: len(self.readers[i]) for i in active}
        total = sum(sizes.values())
        exact = {i: batch_size * sizes[i] / total for i in active}
        shares = {i: int(exact[i]) for i in active}
        # Largest remainders get the leftover tasks, so shares add up to batch_size.
        for i in sorted(active, key=lambda i: exact[i] - shares[i], reverse=True)[: batch_size - sum(shares.values())]:
            shares[i] += 1
        return shares

    def read(self, batch_size: int) -> list[Task]:
        check_batch_size(batch_size)
        tasks: list[Task] = []
        while len(tasks) < batch_size:
            active = [i for i in range(len(self.readers)) if i not in self._exhausted]
            if not active:
                break
            newly_exhausted = False
            for i, share in self._shares(batch_size - len(tasks), active).items():
                if share == 0:
                    continue
                try:
                    tasks.extend(self.readers[i].read(share))
                except BufferExhausted:
                    self._exhausted.add(i)
                    newly_exhausted = True
            if not newly_exhausted:
                break  # short only because a taskset's last batch was short: keep it short
        if not tasks:
            raise BufferExhausted("every taskset is finished")
        return tasks

    @property
    def learns_from_pass_rate(self) -> bool:
        return any(reader.learns_from_pass_rate for reader in self.readers)

    def update_pass_rate(self, task_id: str, pass_rate: float) -> None:
        for reader in self.readers:
            reader.update_pass_rate(task_id, pass_rate)

    def state_dict(self) -> dict[str, Any]:
        return {"readers": [r.state_dict() for r in self.readers], "exhausted": sorted(self._exhausted)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for reader, reader_state in zip(self.readers, state.get("readers", [])):
            reader.load_state_dict(reader_state)
        self._exhausted = set(state.get("exhausted", []))

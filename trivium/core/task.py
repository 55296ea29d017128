"""Task: one row of a taskset, with what the explorer needs to run it.

A task is plain data: the raw dataset row, the names of its workflow and reward function,
and how many times to sample it. Workflows read the row through ``format`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Task:
    raw: dict[str, Any]
    workflow: str = "simple"
    reward_fn: str | None = None
    repeat_times: int = 1
    rollout_args: dict[str, Any] = field(default_factory=dict)
    workflow_args: dict[str, Any] = field(default_factory=dict)
    # prompt_key, response_key, system_prompt, system_prompt_key, messages_key, ...
    format: dict[str, Any] = field(default_factory=dict)
    taskset_name: str = ""
    task_id: str = ""
    index: int = 0
    is_eval: bool = False

    def field_value(self, key_name: str, default: Any = None) -> Any:
        """The row's value for the column named by ``format[key_name]``."""
        column = self.format.get(key_name)
        if column is None:
            return default
        return self.raw.get(column, default)

    @property
    def prompt(self) -> Any:
        return self.field_value("prompt_key")

    @property
    def ground_truth(self) -> Any:
        return self.field_value("response_key")

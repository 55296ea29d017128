"""The ``bots_ref_eval_collect_math_boxed`` workflow: roll a reference model out on a math
taskset and log each task's rewards, to build the pass-rate columns ``difficulty_based`` reads.

Run it with ``mode: explore`` over the training taskset, once per reference model. Each task
is answered ``repeat_times`` times and scored by ``math_boxed_reward`` (the taskset's reward
function when it names one); then one JSON line ``{"model_version", "rewards", "question",
"truth"}`` is appended to the log file: ``workflow_args.log_file``, else the environment
variable ``BOTS_REF_EVAL_LOG_FILE``, else ``./bots_ref_eval_log.jsonl``. Writers hold an
exclusive lock on the file while they append, so concurrent runners do not interleave lines.
The mean of a line's rewards is that model's pass rate on the task.

As Trinity-RFT's BOTS data stores them, the prompt column may hold a ready list of chat
messages (used as is; otherwise it is the question of a plaintext prompt), and
``prompt_key`` / ``response_key`` may name nested fields with dots
(``reward_model.ground_truth``).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.workflows.math_boxed_workflow import MathBoxedWorkflow
from trivium.workflows.prompting import (
    DEFAULT_ANSWER_COLUMN,
    DEFAULT_PROMPT_COLUMN,
    system_prompt_for,
    with_system_prompt,
)
from trivium.workflows.registry import register_builtin

LOG_FILE_VARIABLE = "BOTS_REF_EVAL_LOG_FILE"
DEFAULT_LOG_FILE = "./bots_ref_eval_log.jsonl"


def nested_value(row: dict, dotted_key: str) -> Any:
    """``row['a']['b']`` for ``'a.b'`` (a key with the dots in it wins); None when absent."""
    if dotted_key in row:
        return row[dotted_key]
    value: Any = row
    for part in dotted_key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def is_message_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def append_line(path: Path, entry: dict) -> None:
    """Append one JSON line to ``path`` under an exclusive lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            file.write(json.dumps(entry, default=str) + "\n")
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@register_builtin("bots_ref_eval_collect_math_boxed")
class BotsRefEvalCollectWorkflow(MathBoxedWorkflow):
    workflow_arg_names = ("system_prompt", "reward_fn_args", "log_file")

    def question(self) -> Any:
        key = self.task.format.get("prompt_key") or DEFAULT_PROMPT_COLUMN
        value = nested_value(self.task.raw, key)
        if value is None:
            raise UserError(
                f"task {self.task.index} of taskset '{self.task.taskset_name}': format.prompt_key='{key}' "
                f"names no field of the row; its columns: {', '.join(map(str, self.task.raw)) or '(none)'}."
            )
        return value

    def build_messages(self) -> list[dict]:
        question = self.question()
        if is_message_list(question):
            return [dict(message) for message in question]
        system_prompt = system_prompt_for(self.task, self.workflow_args, self.default_system_prompt)
        return with_system_prompt(system_prompt, str(question))

    def ground_truth(self) -> Any:
        return nested_value(self.task.raw, self.task.format.get("response_key") or DEFAULT_ANSWER_COLUMN)

    def log_file(self) -> Path:
        return Path(
            self.workflow_args.get("log_file") or os.environ.get(LOG_FILE_VARIABLE) or DEFAULT_LOG_FILE
        )

    def score_all(self, experiences: list[Experience], messages: list[dict]) -> list[Experience]:
        experiences = super().score_all(experiences, messages)
        append_line(
            self.log_file(),
            {
                "model_version": getattr(self.model, "model_version", None),
                "rewards": [experience.reward for experience in experiences],
                "question": self.question(),
                "truth": self.ground_truth(),
            },
        )
        return experiences

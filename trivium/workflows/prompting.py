"""Build chat messages from a task row, following the task's ``format`` keys.

``prompt_type: plaintext`` (default) reads the question from the ``prompt_key`` column and
adds a system prompt, chosen by this precedence (first one set wins):
``format.system_prompt_key`` column, ``format.system_prompt``, ``workflow_args.system_prompt``,
the workflow's default. ``prompt_type: messages`` reads a ready message list from the
``messages_key`` column and uses it unchanged. The tools a chat offers come from the
row's ``tools`` column (``workflow_args.tools_key`` renames it).
"""

from __future__ import annotations

import json
from typing import Any

from trivium.core.task import Task
from trivium.errors import UserError

# Used when a task's format does not name the column; the generated datasets use these.
DEFAULT_PROMPT_COLUMN = "question"
DEFAULT_ANSWER_COLUMN = "answer"
DEFAULT_MESSAGES_COLUMN = "messages"


def column_value(task: Task, key_name: str, default_column: str | None, required: bool) -> Any:
    """The row's value for ``format[key_name]``, or for ``default_column`` when the key is unset."""
    column = task.format.get(key_name) or default_column
    if column is not None and column in task.raw:
        return task.raw[column]
    if required:
        named = (
            f"format.{key_name}='{column}'" if task.format.get(key_name) else f"format.{key_name} is not set"
        )
        raise UserError(
            f"task {task.index} of taskset '{task.taskset_name}': {named} but the row has no such column; "
            f"set format.{key_name} to one of its columns: {', '.join(map(str, task.raw)) or '(none)'}."
        )
    return None


def system_prompt_for(task: Task, workflow_args: dict[str, Any], default: str | None) -> str | None:
    """The system prompt by the precedence in this module's docstring; None for no system message."""
    if task.format.get("system_prompt_key"):
        return str(column_value(task, "system_prompt_key", None, required=True))
    for candidate in (task.format.get("system_prompt"), workflow_args.get("system_prompt")):
        if candidate is not None:
            return str(candidate)
    return default


def build_messages(
    task: Task, workflow_args: dict[str, Any], default_system_prompt: str | None = None
) -> list[dict]:
    prompt_type = task.format.get("prompt_type", "plaintext")
    if prompt_type == "messages":
        messages = column_value(task, "messages_key", DEFAULT_MESSAGES_COLUMN, required=True)
        if not isinstance(messages, list) or not all(
            isinstance(message, dict) and "role" in message for message in messages
        ):
            raise UserError(
                f"task {task.index} of taskset '{task.taskset_name}': the messages column must hold a list of "
                f"{{'role': ..., 'content': ...}} dicts, got {str(messages)[:80]!r}."
            )
        return [dict(message) for message in messages]
    if prompt_type != "plaintext":
        raise UserError(f"format.prompt_type must be 'plaintext' or 'messages', got '{prompt_type}'.")
    question = column_value(task, "prompt_key", DEFAULT_PROMPT_COLUMN, required=True)
    return with_system_prompt(system_prompt_for(task, workflow_args, default_system_prompt), str(question))


def with_system_prompt(system_prompt: str | None, user_text: str) -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": user_text})
    return messages


def ground_truth_of(task: Task) -> Any:
    """The ``response_key`` column (default ``answer``); None when the row has none."""
    return column_value(task, "response_key", DEFAULT_ANSWER_COLUMN, required=False)


def tools_of(task: Task, workflow_args: dict[str, Any], workflow: str) -> list[dict]:
    """The row's tools (OpenAI format), from the ``tools_key`` column (default ``tools``), parsed
    when stored as JSON text; ``workflow`` names the workflow in the error when there are none."""
    key = workflow_args.get("tools_key", "tools")
    tools = task.raw.get(key)
    if isinstance(tools, str):
        tools = json.loads(tools)
    if not isinstance(tools, list) or not tools:
        raise UserError(
            f"{workflow} task {task.index} of taskset '{task.taskset_name}' needs a '{key}' column "
            "with a list of tools (OpenAI format); set workflow_args.tools_key to rename it."
        )
    return tools

"""Running ONE task of a config's taskset through its workflow, outside any explorer.

Owns picking the task (the N-th usable row of the first taskset, in file order), building the
workflow exactly as the explorer's runners do, and running it without retries or timeouts,
so a failure surfaces as the workflow's own traceback. Does not know where the model runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import replace
from typing import Any

from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.errors import UserError


def debug_taskset(config: Any) -> Any:
    """The taskset a debug run reads: the first training taskset, else the first eval taskset."""
    explorer_input = config.buffer.explorer_input
    tasksets = list(explorer_input.tasksets) or list(explorer_input.eval_tasksets)
    if not tasksets:
        raise UserError(
            "the config has no taskset to debug with: set buffer.explorer_input.taskset "
            "(or tasksets / eval_tasksets)"
        )
    return tasksets[0]


def pick_task(config: Any, task_index: int) -> Task:
    """The task of row ``task_index`` (counting usable rows in file order) of the debug taskset."""
    from trivium.buffer.task_reader import TaskReader

    taskset = debug_taskset(config)
    # An evaluation reader walks the rows once in file order, whatever the task selector says.
    reader = TaskReader(taskset, is_eval=True, total_epochs=1, default_seed=config.seed)
    if not 0 <= task_index < len(reader):
        raise UserError(
            f"--task-index {task_index} is out of range: taskset '{reader.name}' has {len(reader)} usable "
            f"row(s), so use 0..{len(reader) - 1}"
        )
    task = reader.read(task_index + 1)[-1]
    return replace(task, is_eval=bool(getattr(taskset, "is_eval", False)))


def workflow_logger(level: str = "INFO") -> logging.Logger:
    """A console logger for the workflow's ``self.logger``, so its messages show while debugging."""
    logger = logging.getLogger("trivium.debug.workflow")
    logger.setLevel(str(level).upper())
    # A fresh handler per debug run: it binds to the current stderr, which may have been replaced.
    for old in list(logger.handlers):
        logger.removeHandler(old)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[workflow %(levelname)s] %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
    return logger


def run_one_task(
    config: Any, task: Task, model: Any, auxiliary_models: list[Any], logger: logging.Logger
) -> list[Experience]:
    """Run ``task``'s workflow once (all its repeats) and return its experiences, grouped as the explorer does."""
    from trivium.workflows.registry import WORKFLOWS

    for key, value in (config.explorer.env_vars or {}).items():
        os.environ[str(key)] = str(value)
    workflow_class = WORKFLOWS.get(task.workflow)

    def make(one_task: Task) -> Any:
        return workflow_class(task=one_task, model=model, auxiliary_models=auxiliary_models, logger=logger)

    first = make(task)
    # A workflow that cannot sample several replies itself is run once per repeat, as runners do.
    if getattr(first, "can_repeat", True) or task.repeat_times == 1:
        workflows = [first]
    else:
        single = replace(task, repeat_times=1)
        workflows = [first] + [make(single) for _ in range(task.repeat_times - 1)]
    asynchronous = config.explorer.concurrent_mode == "asynchronous"
    experiences: list[Experience] = []
    for workflow in workflows:
        output = asyncio.run(workflow.run_async()) if asynchronous else workflow.run()
        experiences.extend(_checked_output(output, type(workflow).__name__))
    for run_id, experience in enumerate(experiences):
        experience.group_id = experience.group_id or task.task_id
        experience.task_id = task.task_id
        experience.run_id = run_id
    return experiences


def _checked_output(output: Any, workflow_name: str) -> list[Experience]:
    if not isinstance(output, (list, tuple)):
        raise TypeError(f"{workflow_name}.run() must return a list of Experience, got {type(output).__name__}")
    wrong = [type(item).__name__ for item in output if not isinstance(item, Experience)]
    if wrong:
        raise TypeError(f"{workflow_name}.run() returned non-Experience item(s): {', '.join(sorted(set(wrong)))}")
    return list(output)

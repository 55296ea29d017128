"""The workflow interface: turn one task into scored experiences using a model.

A workflow gets a task, the rollout model (a ``ModelWrapper``: ``chat``, ``generate``,
``tokenizer``) and optional auxiliary models (judges, reward models). ``run`` returns the
experiences with ``reward``, ``metrics``, ``info``, ``group_id`` and ``run_id`` filled.
Runners call ``run`` (sequential and multi-threading runners) or ``run_async``
(asynchronous runner); a workflow overrides whichever it implements natively.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from trivium.core.experience import Experience
from trivium.core.task import Task
from trivium.errors import UserError

if TYPE_CHECKING:  # the wrapper pulls in inference engines; workflows only call its methods
    from trivium.models.wrapper import ModelWrapper


class Workflow:
    # True when one ``run`` samples ``task.repeat_times`` responses itself (via ``n=``);
    # False makes the runner call ``run`` once per repeat.
    can_repeat: bool = False
    # The ``task.workflow_args`` keys this workflow understands; anything else is a typo.
    workflow_arg_names: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        task: Task,
        model: ModelWrapper,
        auxiliary_models: Iterable[Any] = (),
        logger: logging.Logger | None = None,
    ) -> None:
        self.task = task
        self.model = model
        self.auxiliary_models = list(auxiliary_models)
        self.logger = logger or logging.getLogger(f"trivium.workflows.{type(self).__name__}")
        self.workflow_args = checked_workflow_args(
            type(self).__name__, task.workflow_args, self.workflow_arg_names
        )

    def run(self) -> list[Experience]:
        raise NotImplementedError(f"{type(self).__name__} must implement run() or run_async()")

    async def run_async(self) -> list[Experience]:
        return await asyncio.to_thread(self.run)


def checked_workflow_args(
    workflow: str, workflow_args: dict[str, Any], allowed: tuple[str, ...]
) -> dict[str, Any]:
    """A copy of ``workflow_args``; raises UserError naming any key the workflow does not know."""
    workflow_args = dict(workflow_args or {})
    unknown = sorted(set(workflow_args) - set(allowed))
    if unknown:
        raise UserError(
            f"workflow_args key(s) {', '.join(unknown)} are not understood by {workflow}; "
            f"it accepts: {', '.join(allowed) or '(none)'}."
        )
    return workflow_args

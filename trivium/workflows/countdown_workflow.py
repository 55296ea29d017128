"""The ``countdown`` workflow: reach a target from given numbers; scored by ``countdown_reward``.

The prompt is built from the row's numbers and target, not read from a prompt column.
They come from the ``numbers`` and ``target`` columns (renamed with ``workflow_args``
``numbers_key`` / ``target_key``), or else from the ground truth column (``response_key``,
default ``answer``) holding ``{"target": ..., "numbers": [...]}``.
"""

from __future__ import annotations

from typing import Any

from trivium.data.prompts import COUNTDOWN_SYSTEM_PROMPT, countdown_question
from trivium.errors import UserError
from trivium.rewards.countdown import CountdownProblem, parse_countdown_ground_truth
from trivium.workflows.prompting import ground_truth_of, system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin
from trivium.workflows.simple_workflow import SimpleWorkflow


@register_builtin("countdown")
class CountdownWorkflow(SimpleWorkflow):
    workflow_arg_names = SimpleWorkflow.workflow_arg_names + ("numbers_key", "target_key")
    default_system_prompt = COUNTDOWN_SYSTEM_PROMPT
    default_reward_fn = "countdown_reward"

    def problem(self) -> CountdownProblem:
        numbers_key = self.workflow_args.get("numbers_key", "numbers")
        target_key = self.workflow_args.get("target_key", "target")
        if numbers_key in self.task.raw and target_key in self.task.raw:
            return parse_countdown_ground_truth(
                {"numbers": self.task.raw[numbers_key], "target": self.task.raw[target_key]}
            )
        ground_truth = ground_truth_of(self.task)
        if ground_truth is None:
            raise UserError(
                f"countdown task {self.task.index} of taskset '{self.task.taskset_name}' has no "
                f"'{numbers_key}'/'{target_key}' columns and no ground truth column; row columns: "
                f"{', '.join(map(str, self.task.raw))}."
            )
        return parse_countdown_ground_truth(ground_truth)

    def build_messages(self) -> list[dict]:
        problem = self.problem()
        system_prompt = system_prompt_for(self.task, self.workflow_args, self.default_system_prompt)
        return with_system_prompt(system_prompt, countdown_question(problem.numbers, problem.target))

    def ground_truth(self) -> Any:
        problem = self.problem()
        return {"target": problem.target, "numbers": list(problem.numbers)}

"""The ``guessing`` workflow: find a secret number, told "Higher." or "Lower." after each guess.

Reads ``secret``, ``low`` and ``high`` from the task row. Reward 1 for finding the number
within ``max_env_steps`` (default 5), else 0. Metrics: ``accuracy`` (found), ``invalid_guesses``.
"""

from __future__ import annotations

from typing import Any

from trivium.envs.guessing import GuessingGame
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow
from trivium.workflows.prompting import system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin


@register_builtin("guessing")
class GuessingWorkflow(MultiTurnEnvWorkflow):
    default_max_env_steps = 5

    def reset(self) -> list[dict]:
        missing = [key for key in ("secret", "low", "high") if key not in self.task.raw]
        if missing:
            raise UserError(
                f"guessing task {self.task.index} of taskset '{self.task.taskset_name}' has no "
                f"{', '.join(missing)} column(s); row columns: {', '.join(map(str, self.task.raw))}."
            )
        raw = self.task.raw
        self.game = GuessingGame(secret=int(raw["secret"]), low=int(raw["low"]), high=int(raw["high"]))
        self.found = False
        return with_system_prompt(
            system_prompt_for(self.task, self.workflow_args, None), self.game.question()
        )

    def step(self, reply: str) -> EnvStep:
        result = self.game.guess(reply)
        self.found = result.success
        return EnvStep(
            observation=None if result.done else result.feedback,
            reward=1.0 if result.success else 0.0,
            done=result.done,
            metrics={"invalid_guesses": 0.0 if result.valid else 1.0},
        )

    def episode_metrics(self) -> dict[str, Any]:
        return {"accuracy": 1.0 if self.found else 0.0}

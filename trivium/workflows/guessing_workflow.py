"""The ``guessing`` workflow: find a secret number, told "Higher." or "Lower." after each guess.

Reads ``secret``, ``low`` and ``high`` from the task row. Reward 1 for finding the number
within ``max_env_steps`` (default 5), else 0. Metrics: ``accuracy`` (found), ``invalid_guesses``.
"""

from __future__ import annotations

from trivium.envs.guessing import GuessingGame
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow, WonOrLostGame
from trivium.workflows.prompting import system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin


@register_builtin("guessing")
class GuessingWorkflow(WonOrLostGame, MultiTurnEnvWorkflow):
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
        self.won = False
        return with_system_prompt(
            system_prompt_for(self.task, self.workflow_args, None), self.game.question()
        )

    def step(self, reply: str) -> EnvStep:
        result = self.game.guess(reply)
        return self.game_step(result, result.feedback, invalid_metric="invalid_guesses")

"""The ``frozen_lake`` workflow: walk a text grid world to the goal, one move per turn.

The task row's ``map`` column (override with ``workflow_args.map_key``) holds the lake (see
``trivium.envs.frozen_lake``). Each turn the model sees the map with ``P`` where it
stands and answers ``U``, ``D``, ``L`` or ``R``. Reward 1 for reaching the goal, 0 for a
hole, an unreadable reply or running out of ``max_env_steps`` (default 6). Metrics:
``accuracy`` (success), ``invalid_moves``.
"""

from __future__ import annotations

import hashlib

from trivium.envs.frozen_lake import FrozenLake
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow, StepWiseRewardWorkflow, WonOrLostGame
from trivium.workflows.prompting import system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin


class FrozenLakeGame(WonOrLostGame):
    """The environment half shared by the episode-level and step-wise workflows."""

    default_max_env_steps = 6
    episode_arg_names = ("map_key",)

    def reset(self) -> list[dict]:
        key = self.workflow_args.get("map_key", "map")
        if key not in self.task.raw:
            raise UserError(
                f"frozen_lake task {self.task.index} of taskset '{self.task.taskset_name}' "
                f"has no '{key}' column; "
                f"row columns: {', '.join(map(str, self.task.raw))} (set workflow_args.map_key)."
            )
        self.lake = FrozenLake(self.task.raw[key])
        self.won = False
        system_prompt = system_prompt_for(self.task, self.workflow_args, None)
        return with_system_prompt(system_prompt, self.lake.observation())

    def step(self, reply: str) -> EnvStep:
        result = self.lake.move(reply)
        return self.game_step(result, result.observation, invalid_metric="invalid_moves")

    def state_key(self) -> str:
        """The map with the player's position: equal for two steps from the same cell of the same lake."""
        return hashlib.sha1(self.lake.observation().encode()).hexdigest()[:16]


@register_builtin("frozen_lake")
class FrozenLakeWorkflow(FrozenLakeGame, MultiTurnEnvWorkflow):
    """One experience per episode."""


@register_builtin("frozen_lake_step_wise")
class FrozenLakeStepWiseWorkflow(FrozenLakeGame, StepWiseRewardWorkflow):
    """One experience per model turn."""

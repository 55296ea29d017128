"""The ``textworld`` workflow: play a compiled TextWorld game, one command per turn.

The task row's ``game_file`` column holds the path of a game compiled by the ``textworld``
package (``trivium init data --task textworld`` writes them; see
``trivium.data.textworld_games``). The game starts with ``textworld.start`` asking for the
objective and the admissible commands. The first user message is the objective, the room's
description and the admissible commands as a numbered list; every later one is the game's
answer to the last command and the new list. Each ends with "Reply with the number of one
command." ``workflow_args.rendering: compact`` (default ``full``) leaves out the room's
description, the "Commands:" line and that last line (``trivium.envs.textworld_game``):
about half the prompt tokens.

A reply is read as a command when it is a listed number or, ignoring case and extra spaces,
the text of a listed command. Any other reply is an invalid move: it is counted, never sent
to the game, and it ends the episode (multi_step_grpo gives an episode's advantage to all
its turns, so a won episode must not carry unreadable replies). At most ``max_env_steps``
(default 4) turns. Reward: 1 when the game is won, 0 otherwise (lost, out of turns, out of
context), and ``workflow_args.invalid_reply_reward`` (default 0; e.g. -1 makes an unreadable
reply worse than a wrong command) for an invalid move; no other shaping. Metrics:
``accuracy`` (won), ``invalid_moves``, ``env_steps`` (turns answered), ``truncated`` (ended
by ``max_env_steps`` or a full context: the game neither won nor lost, and no invalid move).
"""

from __future__ import annotations

from trivium.envs.textworld_game import (
    RENDERINGS,
    clean_feedback,
    first_observation,
    game_call,
    read_command,
    start_game,
    with_commands,
)
from trivium.errors import UserError
from trivium.workflows.multi_turn import EnvStep, MultiTurnEnvWorkflow, StepWiseRewardWorkflow
from trivium.workflows.prompting import system_prompt_for, with_system_prompt
from trivium.workflows.registry import register_builtin

GAME_COLUMN = "game_file"


class TextWorldGame:
    """The environment half shared by the episode-level and step-wise workflows."""

    default_max_env_steps = 4
    episode_arg_names = ("rendering", "invalid_reply_reward")
    # Read by the configuration rules: a run is refused before it starts when this is missing.
    environment = "TextWorld"
    required_package = "textworld"
    install_hint = "pip install textworld (or trivium's `envs` extra)"

    def reset(self) -> list[dict]:
        where = f"textworld task {self.task.index} of taskset '{self.task.taskset_name}'"
        self.rendering = self.workflow_args.get("rendering", "full")
        if self.rendering not in RENDERINGS:
            raise UserError(
                f"workflow_args.rendering must be one of {', '.join(RENDERINGS)}, got {self.rendering!r}"
            )
        self.invalid_reply_reward = invalid_reply_reward(self.workflow_args)
        game_file = self.task.raw.get(GAME_COLUMN)
        if not game_file:
            raise UserError(
                f"{where} has no '{GAME_COLUMN}' column; row columns: {', '.join(map(str, self.task.raw))}. "
                "Make games and rows with `trivium init data --task textworld`."
            )
        try:
            self.env, self.state = start_game(str(game_file))
        except (FileNotFoundError, OSError) as error:
            raise UserError(
                f"{where}: cannot start game {game_file} ({error}); regenerate it with `trivium init data --task textworld`."
            ) from error
        self.won = self.lost = self.invalid_move = False
        system_prompt = system_prompt_for(self.task, self.workflow_args, None)
        return with_system_prompt(system_prompt, first_observation(self.state, self.rendering))

    def step(self, reply: str) -> EnvStep:
        commands = list(self.state.admissible_commands)
        command = read_command(reply, commands)
        if command is None:
            self.invalid_move = True
            self.close()
            return EnvStep(None, float(self.invalid_reply_reward), True, {"invalid_moves": 1.0})
        with game_call():
            self.state, _score, done = self.env.step(command)
        self.won, self.lost = bool(self.state.won), bool(self.state.lost)
        if done:
            self.close()
            return EnvStep(None, 1.0 if self.won else 0.0, True, {"invalid_moves": 0.0})
        observation = with_commands(
            clean_feedback(self.state.feedback), self.state.admissible_commands, self.rendering
        )
        return EnvStep(observation, 0.0, False, {"invalid_moves": 0.0})

    def episode_metrics(self) -> dict[str, float]:
        self.close()
        return {
            "accuracy": float(self.won),
            "truncated": float(not (self.won or self.lost or self.invalid_move)),
        }

    def close(self) -> None:
        env, self.env = getattr(self, "env", None), None
        if env is not None:
            with game_call():
                env.close()


@register_builtin("textworld")
class TextWorldWorkflow(TextWorldGame, MultiTurnEnvWorkflow):
    """One experience per episode."""


@register_builtin("textworld_step_wise")
class TextWorldStepWiseWorkflow(TextWorldGame, StepWiseRewardWorkflow):
    """One experience per model turn."""


def invalid_reply_reward(workflow_args: dict) -> float:
    value = workflow_args.get("invalid_reply_reward", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"workflow_args.invalid_reply_reward must be a number (e.g. -1), got {value!r}")
    return float(value)

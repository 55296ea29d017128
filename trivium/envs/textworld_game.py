"""A compiled TextWorld game as text: start it, show what the player sees, read a command.

Two renderings. ``full``: the first observation is the objective, the room's description
and the admissible commands as a numbered list; every later one is the game's answer to the
last command and the new list; each ends with "Commands:" before the list and "Reply with
the number of one command." after it. ``compact``: the same without the room's description
(the commands name everything that can be acted on), the "Commands:" line and the last
line, about half the tokens. A reply names a command by its number or, ignoring case and
extra spaces, by its text. Games are compiled by the ``textworld`` package
(``trivium.data.textworld_games``) and played by the ``textworld`` workflows
(``trivium.workflows.textworld_workflow``).
"""

from __future__ import annotations

import re
import threading
import warnings
from contextlib import contextmanager
from typing import Any

ANSWER_HINT = "Reply with the number of one command."
RENDERINGS = ("full", "compact")
SPACES = re.compile(r"\s+")
BLANK_LINES = re.compile(r"\n{3,}")
# textworld's loader and logic engine share parser state between games, and the runners play
# in threads: every call into a game holds this lock (each call takes milliseconds).
GAME_LOCK = threading.Lock()


@contextmanager
def game_call():
    """Hold the game lock and silence the z-machine interpreter's "unsupported game" warning:
    its own action finder does not know TextWorld's games, whose admissible commands come from
    the game's logic instead."""
    with GAME_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find valid actions")
        yield


def start_game(game_file: str, with_walkthrough: bool = False) -> tuple[Any, Any]:
    """``(env, first game state)`` of a compiled game, asking for what the workflow shows."""
    import textworld  # here: validating a config imports this module and must not load textworld

    infos = textworld.EnvInfos(
        admissible_commands=True,
        objective=True,
        description=True,
        won=True,
        lost=True,
        policy_commands=with_walkthrough,
    )
    with game_call():
        env = textworld.start(game_file, request_infos=infos)
        return env, env.reset()


def clean_feedback(text: str) -> str:
    """The game's answer without the prompt line and status bar that follow it, and without runs
    of blank lines."""
    return BLANK_LINES.sub("\n\n", text.split("\n>", 1)[0].strip())


def with_commands(text: str, commands: list[str], rendering: str = "full") -> str:
    """``text``, then the numbered commands (and, ``full``, how to answer): the end of every observation."""
    listed = "\n".join(f"{number}. {command}" for number, command in enumerate(commands, 1))
    if rendering == "compact":
        return f"{text}\n{listed}"
    return f"{text}\nCommands:\n{listed}\n{ANSWER_HINT}"


def first_observation(state: Any, rendering: str = "full") -> str:
    """What the model sees first: objective, room (``full`` only), numbered commands, how to answer
    (``full`` only)."""
    text = state.objective.strip()
    if rendering == "full":
        text = f"{text}\n{clean_feedback(state.description)}"
    return with_commands(text, state.admissible_commands, rendering)


def read_command(reply: str, commands: list[str]) -> str | None:
    """The listed command a reply names (by its number or its text), or None."""
    said = SPACES.sub(" ", reply).strip().rstrip(".").lower()
    if said.isdigit():
        number = int(said)
        return commands[number - 1] if 1 <= number <= len(commands) else None
    by_text = {SPACES.sub(" ", command).strip().lower(): command for command in commands}
    return by_text.get(said)

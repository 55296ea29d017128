"""Gymnasium's toy-text environments as text: how a state is shown and how a reply is read.

Owns one small adapter class per environment family. An adapter declares the env ids it
serves, its action names (index = gymnasium's action), the instructions a model is given,
and renders the environment's current state from gymnasium's own objects. The workflow
asks the adapter; it never looks at env ids itself. Also owns making the environment
(``make_env``, the one place gymnasium is imported, on first use) and reading a row's
keyword arguments (``read_env_kwargs``).

To add a family: subclass ``TextAdapter``, fill ``env_ids``, ``action_names``,
``instructions`` and ``render``; override ``succeeded`` when a positive return is not what
success means; append the class to ``ADAPTERS``.
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from trivium.errors import UserError

WORD = re.compile(r"[A-Za-z]+")


class TextAdapter:
    env_ids: ClassVar[tuple[str, ...]] = ()
    # The answer that selects each action: action_names[i] is gymnasium's action i.
    action_names: ClassVar[tuple[str, ...]] = ()
    # Longer words also read as an action (upper case).
    aliases: ClassVar[dict[str, int]] = {}
    instructions: ClassVar[str] = ""

    def render(self, env: Any, observation: Any) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement render(env, observation)")

    def parse(self, reply: str) -> int | None:
        """The action the reply's first word names (any case), or None when it names none.

        The word is an action name or an alias; failing that, a word that starts with a
        one-letter action name counts as that letter (``DRR``: D, the first of several moves).
        """
        match = WORD.search(reply)
        if match is None:
            return None
        word = match.group(0).upper()
        if word in self.action_names:
            return self.action_names.index(word)
        if word in self.aliases:
            return self.aliases[word]
        return self.action_names.index(word[0]) if word[0] in self.action_names else None

    def succeeded(self, episode_return: float, terminated: bool) -> bool:
        """Whether an episode counts as solved (the ``accuracy`` metric)."""
        return terminated and episode_return > 0

    def with_random_start(self, env: Any, env_kwargs: dict, rng: random.Random) -> dict:
        """``env_kwargs`` changed so the episode starts somewhere drawn by ``rng``."""
        raise UserError(f"a random start is not available for {', '.join(self.env_ids)}")


class FrozenLakeText(TextAdapter):
    """The lake's letters (S start, F frozen, H hole, G goal) with P where the player stands."""

    env_ids = ("FrozenLake-v1", "FrozenLake8x8-v1")
    action_names = ("L", "D", "R", "U")
    aliases: ClassVar[dict[str, int]] = {"LEFT": 0, "DOWN": 1, "RIGHT": 2, "UP": 3}
    instructions = "Walk to G without stepping on H. Answer with one move: L, D, R or U."

    def render(self, env: Any, observation: Any) -> str:
        rows = lake_rows(env)
        row, column = divmod(int(observation), len(rows[0]))
        rows[row] = rows[row][:column] + "P" + rows[row][column + 1 :]
        return "\n".join(rows)

    def with_random_start(self, env: Any, env_kwargs: dict, rng: random.Random) -> dict:
        """The same lake as ``desc``, its S moved to a frozen cell drawn from those that reach G."""
        rows = [row.replace("S", "F") for row in lake_rows(env)]
        starts = sorted(cells_reaching_goal(rows))
        row, column = rng.choice(starts)
        rows[row] = rows[row][:column] + "S" + rows[row][column + 1 :]
        kwargs = {key: value for key, value in env_kwargs.items() if key != "map_name"}
        return {**kwargs, "desc": rows}


def lake_rows(env: Any) -> list[str]:
    return ["".join(cell.decode() for cell in row) for row in env.unwrapped.desc]


def cells_reaching_goal(rows: list[str]) -> set[tuple[int, int]]:
    """Frozen cells with a path of moves over non-hole cells to G (moves are reversible)."""
    goal = next((r, row.index("G")) for r, row in enumerate(rows) if "G" in row)
    seen, queue = {goal}, deque([goal])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if (
                0 <= nr < len(rows)
                and 0 <= nc < len(rows[0])
                and rows[nr][nc] == "F"
                and (nr, nc) not in seen
            ):
                seen.add((nr, nc))
                queue.append((nr, nc))
    return seen - {goal}


class TaxiText(TextAdapter):
    """Gymnasium's taxi map (walls ``|``) with T for the taxi, and where passenger and goal are."""

    env_ids = ("Taxi-v3", "Taxi-v4")
    action_names = ("S", "N", "E", "W", "P", "D")
    aliases: ClassVar[dict[str, int]] = {
        "SOUTH": 0,
        "NORTH": 1,
        "EAST": 2,
        "WEST": 3,
        "PICKUP": 4,
        "DROPOFF": 5,
    }
    instructions = (
        "Drive the taxi T to the passenger, pick them up, and drop them off at the destination. "
        "Answer with one action: S, N, E, W (move), P (pick up) or D (drop off)."
    )
    stop_letters = "RGYB"  # the letters of env.unwrapped.locs, in order

    def render(self, env: Any, observation: Any) -> str:
        taxi = env.unwrapped
        taxi_row, taxi_column, passenger, destination = taxi.decode(int(observation))
        rows = ["".join(cell.decode() for cell in row) for row in taxi.desc]
        map_row, map_column = taxi_row + 1, 2 * taxi_column + 1  # the border row, then "|x:x:..."
        rows[map_row] = rows[map_row][:map_column] + "T" + rows[map_row][map_column + 1 :]
        where = "in the taxi" if passenger == len(taxi.locs) else f"at {self.stop_letters[passenger]}"
        rows.append(f"Passenger {where}. Destination {self.stop_letters[destination]}.")
        return "\n".join(rows)

    def succeeded(self, episode_return: float, terminated: bool) -> bool:
        return terminated  # the only way a taxi episode terminates is a delivery


class BlackjackText(TextAdapter):
    """The player's cards and total, and the dealer's face-up card (A for an ace)."""

    env_ids = ("Blackjack-v1",)
    action_names = ("S", "H")
    aliases: ClassVar[dict[str, int]] = {"STICK": 0, "STAND": 0, "HIT": 1}
    instructions = "Beat the dealer at blackjack without going over 21. Answer H (hit) or S (stick)."

    def render(self, env: Any, observation: Any) -> str:
        total, dealer_card, usable_ace = observation
        cards = " ".join(card_name(card) for card in env.unwrapped.player)
        ace = ", an ace counted as 11" if usable_ace else ""
        return f"Your cards: {cards} (total {int(total)}{ace}). Dealer shows: {card_name(dealer_card)}."


def card_name(card: int) -> str:
    return "A" if int(card) == 1 else str(int(card))


ADAPTERS: tuple[type[TextAdapter], ...] = (FrozenLakeText, TaxiText, BlackjackText)


def supported_env_ids() -> list[str]:
    return [env_id for adapter in ADAPTERS for env_id in adapter.env_ids]


def adapter_for(env_id: str) -> TextAdapter:
    """The text adapter serving ``env_id``; raises UserError listing the supported ids."""
    for adapter in ADAPTERS:
        if env_id in adapter.env_ids:
            return adapter()
    raise UserError(
        f"gymnasium environment {env_id!r} has no text adapter in trivium; supported: "
        f"{', '.join(supported_env_ids())} (add one in trivium/envs/gymnasium_text.py)."
    )


def read_env_kwargs(value: Any, where: str) -> dict:
    """``gymnasium.make`` keyword arguments from a mapping or a JSON object text (None: none)."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise UserError(f"{where}: env_kwargs is not valid JSON ({error}): {value!r}") from error
    if not isinstance(value, Mapping):
        raise UserError(f"{where}: env_kwargs must be a mapping of gymnasium.make keywords, got {value!r}")
    return dict(value)


def make_env(env_id: str, env_kwargs: dict, where: str) -> Any:
    """``gymnasium.make(env_id, **env_kwargs)``; gymnasium's own error, prefixed with ``where``."""
    import gymnasium

    try:
        return gymnasium.make(env_id, **env_kwargs)
    except Exception as error:  # whatever gymnasium raises is for the user to read
        raise UserError(
            f"{where}: gymnasium.make({env_id!r}, **{env_kwargs!r}) failed: {type(error).__name__}: {error}"
        ) from error

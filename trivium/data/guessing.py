"""Guessing game rows: a secret number per row (see ``trivium.envs.guessing``).

Each row holds ``secret``, ``low``, ``high``, the opening ``question`` and, for a format
warm-up, a ``response`` that is a number drawn uniformly from the range. With one range,
the rows differ only in their secret, so train and test are drawn from the same range with
secrets repeating once ``count`` exceeds the range.
"""

from __future__ import annotations

import random

from trivium.envs.guessing import GuessingGame
from trivium.errors import UserError


def generate_guessing(count: int, rng: random.Random, max_number: int = 16) -> list[dict]:
    if max_number < 2:
        raise UserError(f"guessing needs --max-number >= 2, got {max_number}")
    rows = []
    for _ in range(count):
        game = GuessingGame(secret=rng.randint(1, max_number), low=1, high=max_number)
        rows.append(
            {
                "secret": game.secret,
                "low": game.low,
                "high": game.high,
                "question": game.question(),
                "response": str(rng.randint(1, max_number)),
            }
        )
    return rows

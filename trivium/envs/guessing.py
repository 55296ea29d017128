"""A number guessing game: find a secret number in [low, high], told "higher" or "lower".

The player answers a number each turn; the game says whether the secret is higher, lower, or
found. A reply without a number ends the game unsuccessfully.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trivium.errors import UserError

NUMBER = re.compile(r"-?\d+")


@dataclass(frozen=True)
class GuessResult:
    feedback: str
    done: bool
    success: bool
    valid: bool


class GuessingGame:
    def __init__(self, *, secret: int, low: int, high: int):
        if not low <= secret <= high:
            raise UserError(f"guessing game: secret {secret} is outside [{low}, {high}]")
        self.secret, self.low, self.high = int(secret), int(low), int(high)

    def question(self) -> str:
        return f"Guess my number from {self.low} to {self.high}."

    def guess(self, reply: str) -> GuessResult:
        match = NUMBER.search(reply)
        if match is None:
            return GuessResult("Answer with a number.", done=True, success=False, valid=False)
        guess = int(match.group(0))
        if guess == self.secret:
            return GuessResult("Correct!", done=True, success=True, valid=True)
        return GuessResult(
            "Higher." if guess < self.secret else "Lower.", done=False, success=False, valid=True
        )

"""Two-digit arithmetic problems (addition, optionally subtraction) as dataset rows.

Owns the problem space and its rows; writing files is ``trivium.data.builder``'s job.
Every problem in the space is numbered, and a seeded sample of those numbers is drawn
without replacement, so train and test can never share a problem.
"""

from __future__ import annotations

import random

from trivium.data.prompts import answer_response
from trivium.errors import UserError

OPERANDS = range(10, 100)  # two-digit numbers
_ADDITIONS = [(a, "+", b) for a in OPERANDS for b in OPERANDS]
# a >= b keeps every result non-negative.
_SUBTRACTIONS = [(a, "-", b) for a in OPERANDS for b in OPERANDS if a >= b]


def problem_space(subtraction: bool = False) -> list[tuple[int, str, int]]:
    return _ADDITIONS + _SUBTRACTIONS if subtraction else list(_ADDITIONS)


def arithmetic_row(a: int, op: str, b: int) -> dict:
    result = a + b if op == "+" else a - b
    return {
        "question": f"What is {a} {op} {b}?",
        "answer": str(result),
        "response": answer_response(str(result)),
    }


def generate_arithmetic(count: int, rng: random.Random, subtraction: bool = False) -> list[dict]:
    """``count`` distinct problems, in a seeded random order."""
    space = problem_space(subtraction)
    if count > len(space):
        raise UserError(
            f"asked for {count} arithmetic problems but only {len(space)} distinct ones exist"
            f"{'' if subtraction else ' (add --subtraction for more)'}; lower --num-train/--num-test"
        )
    return [arithmetic_row(*space[index]) for index in rng.sample(range(len(space)), count)]

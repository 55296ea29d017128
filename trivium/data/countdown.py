"""Countdown problems: reach a target from a few numbers with + - * /, each number at most once.

Owns problem generation. Each problem is made by combining its numbers into a random
expression, so it always has a solution, and that solution is the row's SFT target.
Intermediate values stay positive integers so every solution is easy to read.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from trivium.data.prompts import answer_response, countdown_question
from trivium.errors import UserError

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 3
# Attempts per wanted problem before we decide the space is exhausted.
_ATTEMPTS_PER_PROBLEM = 200


@dataclass(frozen=True)
class Expression:
    text: str
    value: int
    precedence: int


def combine(left: Expression, op: str, right: Expression) -> Expression:
    """``left op right`` with only the parentheses the precedence rules need."""
    precedence = _PRECEDENCE[op]
    left_text = f"({left.text})" if left.precedence < precedence else left.text
    # a - (b + c) and a / (b * c) need them on the right even at equal precedence.
    right_needs = right.precedence < precedence or (right.precedence == precedence and op in "-/")
    right_text = f"({right.text})" if right_needs else right.text
    if op == "+":
        value = left.value + right.value
    elif op == "-":
        value = left.value - right.value
    elif op == "*":
        value = left.value * right.value
    else:
        value = left.value // right.value
    return Expression(f"{left_text} {op} {right_text}", value, precedence)


def allowed_operators(left: Expression, right: Expression) -> list[str]:
    """Operators whose result is a positive integer."""
    ops = ["+", "*"]
    if left.value > right.value:
        ops.append("-")
    if right.value > 1 and left.value % right.value == 0:
        ops.append("/")
    return ops


def random_solution(numbers: list[int], rng: random.Random) -> Expression:
    """Merge random pairs with random valid operators until one expression uses all numbers."""
    pool = [Expression(str(number), number, _ATOM) for number in numbers]
    while len(pool) > 1:
        left = pool.pop(rng.randrange(len(pool)))
        right = pool.pop(rng.randrange(len(pool)))
        pool.append(combine(left, rng.choice(allowed_operators(left, right)), right))
    return pool[0]


def countdown_row(numbers: list[int], target: int, solution: str) -> dict:
    return {
        "question": countdown_question(numbers, target),
        # Ground truth as JSON text, so the column is a string like every other answer.
        "answer": json.dumps({"target": target, "numbers": numbers}),
        "response": answer_response(solution),
        "numbers": numbers,
        "target": target,
    }


def generate_countdown(
    count: int,
    rng: random.Random,
    num_numbers: int = 3,
    max_number: int = 20,
    max_target: int = 100,
) -> list[dict]:
    """``count`` problems, no two with the same numbers (as a multiset) and target."""
    if num_numbers < 2:
        raise UserError(f"--num-numbers must be at least 2, got {num_numbers}")
    if max_number < 1 or max_target < 1:
        raise UserError("--max-number and --max-target must be positive")
    rows: list[dict] = []
    seen: set[tuple] = set()
    for _ in range(count * _ATTEMPTS_PER_PROBLEM):
        if len(rows) == count:
            return rows
        numbers = [rng.randint(1, max_number) for _ in range(num_numbers)]
        solution = random_solution(numbers, rng)
        key = (tuple(sorted(numbers)), solution.value)
        if not 1 <= solution.value <= max_target or key in seen:
            continue
        seen.add(key)
        rows.append(countdown_row(numbers, solution.value, solution.text))
    if len(rows) == count:
        return rows
    raise UserError(
        f"could only make {len(rows)} distinct countdown problems of the {count} asked for; "
        "raise --max-number or --max-target, or lower --num-train/--num-test"
    )

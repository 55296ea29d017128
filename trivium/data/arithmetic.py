"""Two-digit arithmetic problems (addition, optionally subtraction) as dataset rows.

Owns the problem space and its rows; writing the train and test files is
``trivium.data.builder``'s job. Every problem in the space is numbered, and a seeded sample
of those numbers is drawn without replacement, so train and test can never share a problem.
On request it also writes a warm-up file for an SFT stage: problems in neither split whose
ones digits do not carry (or borrow), which teach the answer format but not carrying.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trivium.data.prompts import answer_response
from trivium.errors import UserError

OPERANDS = range(10, 100)  # two-digit numbers
_ADDITIONS = [(a, "+", b) for a in OPERANDS for b in OPERANDS]
# a >= b keeps every result non-negative.
_SUBTRACTIONS = [(a, "-", b) for a in OPERANDS for b in OPERANDS if a >= b]
WARMUP_FILE = "warmup.jsonl"


def problem_space(subtraction: bool = False) -> list[tuple[int, str, int]]:
    return _ADDITIONS + _SUBTRACTIONS if subtraction else list(_ADDITIONS)


def arithmetic_row(a: int, op: str, b: int) -> dict:
    result = a + b if op == "+" else a - b
    return {
        "question": f"What is {a} {op} {b}?",
        "answer": str(result),
        "response": answer_response(str(result)),
    }


def ones_digits_carry(a: int, op: str, b: int) -> bool:
    """Whether the ones column carries into the tens (a + b) or borrows from them (a - b)."""
    return a % 10 + b % 10 >= 10 if op == "+" else a % 10 < b % 10


def generate_arithmetic(
    count: int,
    rng: random.Random,
    subtraction: bool = False,
    warmup_split: bool = False,
    out_dir: str | Path | None = None,
) -> list[dict]:
    """``count`` distinct problems, in a seeded random order.

    With ``warmup_split``, also writes ``out_dir/warmup.jsonl``: every problem of the space
    that was not drawn and whose ones digits do not carry, in a seeded order. The draw is
    the same with or without it.
    """
    space = problem_space(subtraction)
    if count > len(space):
        raise UserError(
            f"asked for {count} arithmetic problems but only {len(space)} distinct ones exist"
            f"{'' if subtraction else ' (add --subtraction for more)'}; lower --num-train/--num-test"
        )
    drawn = rng.sample(range(len(space)), count)
    if warmup_split:
        if out_dir is None:
            raise UserError("warmup_split writes warmup.jsonl next to the splits; give the output directory")
        write_warmup_split(space, set(drawn), Path(out_dir) / WARMUP_FILE, rng)
    return [arithmetic_row(*space[index]) for index in drawn]


def write_warmup_split(
    space: list[tuple[int, str, int]], drawn: set[int], path: Path, rng: random.Random
) -> None:
    """The carry-free problems outside ``drawn`` as SFT rows, shuffled, one JSON object a line."""
    problems = [
        problem
        for index, problem in enumerate(space)
        if index not in drawn and not ones_digits_carry(*problem)
    ]
    rng.shuffle(problems)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for problem in problems:
            file.write(json.dumps(arithmetic_row(*problem)) + "\n")

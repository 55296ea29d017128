"""The countdown reward: is the proposed equation built from the given numbers and does it hit the target?

Owns ``countdown_reward``, the ground-truth parsing for countdown tasks, and a safe
evaluator for arithmetic expressions. Equations are parsed with ``ast`` and evaluated by
walking the tree with exact fractions; nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import json
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trivium.core.arithmetic import BINARY_OPERATORS
from trivium.errors import UserError
from trivium.rewards.answers import extract_answer_tag, extract_boxed
from trivium.rewards.registry import REWARD_FNS

CORRECT_REWARD = 1.0
WELL_FORMED_REWARD = 0.1
# Long enough for any sensible equation; short enough that fractions stay small.
MAX_EQUATION_CHARS = 200

_OPERATORS = {node: BINARY_OPERATORS[node] for node in (ast.Add, ast.Sub, ast.Mult, ast.Div)}


class EquationError(ValueError):
    """The text is not an arithmetic expression over integers with + - * / and parentheses."""


@dataclass(frozen=True)
class CountdownProblem:
    target: int
    numbers: tuple[int, ...]


def parse_countdown_ground_truth(ground_truth: Any) -> CountdownProblem:
    """Read ``{"target": T, "numbers": [...]}`` (a dict or its JSON text; ``nums`` also accepted)."""
    data = ground_truth
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as error:
            raise UserError(
                f"countdown ground truth is not JSON: {ground_truth!r} ({error}); "
                'expected {"target": 24, "numbers": [4, 6, 1]}'
            ) from None
    if not isinstance(data, dict) or "target" not in data or not ({"numbers", "nums"} & data.keys()):
        raise UserError(
            f"countdown ground truth must have 'target' and 'numbers' keys, got {ground_truth!r}; "
            'expected {"target": 24, "numbers": [4, 6, 1]}'
        )
    numbers = data.get("numbers", data.get("nums"))
    try:
        return CountdownProblem(target=int(data["target"]), numbers=tuple(int(n) for n in numbers))
    except (TypeError, ValueError):
        raise UserError(f"countdown target and numbers must be integers, got {ground_truth!r}") from None


def extract_equation(response: str) -> str | None:
    """The equation the response proposes: ``<answer>`` content, else ``\\boxed{}`` content.

    A trailing ``= value`` is dropped: the left-hand side is what gets evaluated.
    """
    if not isinstance(response, str):
        return None
    found = extract_answer_tag(response)
    if found is None:
        found = extract_boxed(response)
    if not found:
        return None
    equation = found.split("=", 1)[0].strip()
    # Models often write x and ÷ for multiplication and division.
    return equation.replace("×", "*").replace("÷", "/").replace("\\times", "*").replace("\\div", "/")


def evaluate_equation(equation: str) -> tuple[Fraction, list[int]]:
    """The exact value of ``equation`` and the integer literals it uses, in order.

    Raises EquationError for anything other than integer literals, binary + - * /,
    and parentheses (no unary minus, no names, no calls, no powers).
    Raises ZeroDivisionError when it divides by zero.
    """
    if len(equation) > MAX_EQUATION_CHARS:
        raise EquationError(f"equation longer than {MAX_EQUATION_CHARS} characters")
    try:
        tree = ast.parse(equation, mode="eval")
    except (SyntaxError, ValueError) as error:
        raise EquationError(f"not an expression: {error}") from None
    numbers_used: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            numbers_used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            return _OPERATORS[type(node.op)](left, right)
        raise EquationError(f"not allowed in an equation: {ast.dump(node)[:60]}")

    value = walk(tree.body)
    return value, numbers_used


def uses_allowed_numbers(numbers_used: list[int], numbers_given: tuple[int, ...]) -> bool:
    """Each used number is one of the given ones, no given number used more often than it appears."""
    available = Counter(numbers_given)
    return all(available[number] >= count for number, count in Counter(numbers_used).items())


@REWARD_FNS.register("countdown_reward")
def countdown_reward(*, prompt: str, response: str, ground_truth: Any, **kwargs: Any) -> dict[str, float]:
    """1.0 for a correct equation, 0.1 for a well-formed but wrong one, 0.0 otherwise.

    Correct: the equation uses only the given numbers, each at most as often as it is
    given, and evaluates exactly to the target. Well-formed: an equation was found in the
    answer tag (or ``\\boxed{}``) and parses as arithmetic, but breaks a rule or misses the
    target (dividing by zero counts as missing). Components: ``accuracy`` (1/0) and
    ``format`` (1/0); ``reward`` is the total.
    """
    problem = parse_countdown_ground_truth(ground_truth)
    equation = extract_equation(response)
    if equation is None:
        return {"reward": 0.0, "accuracy": 0.0, "format": 0.0}
    try:
        value, numbers_used = evaluate_equation(equation)
    except EquationError:
        return {"reward": 0.0, "accuracy": 0.0, "format": 0.0}
    except ZeroDivisionError:
        return {"reward": WELL_FORMED_REWARD, "accuracy": 0.0, "format": 1.0}
    correct = value == problem.target and uses_allowed_numbers(numbers_used, problem.numbers)
    if correct:
        return {"reward": CORRECT_REWARD, "accuracy": 1.0, "format": 1.0}
    return {"reward": WELL_FORMED_REWARD, "accuracy": 0.0, "format": 1.0}

"""The ``calculator`` tool: its OpenAI signature and a safe evaluator of arithmetic expressions.

Owns what the tool does with a call's arguments. An expression is parsed with ``ast`` and
only integer and decimal numbers, ``+ - * / // % **`` (with small exponents), unary signs
and parentheses are evaluated; anything else (names, calls, attributes, strings) is refused
with ``CalculatorError``. Python's ``eval`` is never used. Knows nothing about models.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from trivium.core.arithmetic import BINARY_OPERATORS, UNARY_OPERATORS

TOOL_NAME = "calculator"
CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message is what the tool answers."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic ``expression``; ``CalculatorError`` for anything else."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression must be a non-empty string")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise CalculatorError(f"cannot parse {expression!r}: {error.msg}") from error
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY_OPERATORS:
        return UNARY_OPERATORS[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY_OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponents above {MAX_EXPONENT} are refused")
        try:
            return BINARY_OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError as error:
            raise CalculatorError("division by zero") from error
    raise CalculatorError(f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}")


def format_value(value: float) -> str:
    """A result as the tool writes it: whole numbers without a decimal point."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def call_calculator(name: str, arguments: str | dict[str, Any]) -> tuple[str, bool]:
    """(the tool message's text, whether the call worked) for one call in the OpenAI shape."""
    if name != TOOL_NAME:
        return f"error: unknown function {name!r}; the only function is {TOOL_NAME!r}", False
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return "error: the arguments are not a JSON object", False
    if not isinstance(arguments, dict) or "expression" not in arguments:
        return 'error: the arguments must be {"expression": "..."}', False
    try:
        return format_value(evaluate(arguments["expression"])), True
    except CalculatorError as error:
        return f"error: {error}", False

"""Safe arithmetic over config values, for key-mapping files.

An expression such as ``(tuner.batch_size * tuner.num_repeat)`` is parsed with ``ast`` and
evaluated by walking a whitelist of node types; nothing is ever passed to ``eval``. Names
and attribute chains are dotted config paths (``a.b.c``; list items as ``a.items[0].x``).
Allowed: numbers, ``+ - * / // %``, unary ``+``/``-``, and the functions in ``FUNCTIONS``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Any

from trivium.core.arithmetic import BINARY_OPERATORS, UNARY_OPERATORS
from trivium.errors import UserError

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "round": round,
    "int": int,
    "float": float,
}
_BINARY = {
    node: BINARY_OPERATORS[node] for node in (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
}
_UNARY = UNARY_OPERATORS
_ALLOWED_OPERATORS = "+ - * / // % and unary -"


class ExpressionError(UserError):
    """A mapping expression that cannot be parsed or evaluated; the message shows it."""


def is_expression(key: str) -> bool:
    """Mapping keys in parentheses are expressions; anything else is a plain dotted path."""
    key = key.strip()
    return key.startswith("(") and key.endswith(")")


def evaluate(expression: str, lookup: Callable[[str], Any]) -> int | float:
    """The value of ``expression``; ``lookup(path)`` returns a config value or raises UserError."""
    tree = _parse(expression)
    try:
        value = _Evaluator(expression, lookup).visit(tree.body)
    except ZeroDivisionError:
        raise ExpressionError(f"division by zero in the mapping expression {expression}") from None
    except OverflowError:
        raise ExpressionError(f"the mapping expression {expression} overflows") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"the mapping expression {expression} gives {value}")
    return value


def _parse(expression: str) -> ast.Expression:
    try:
        return ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ExpressionError(f"cannot parse the mapping expression {expression}: {error.msg}") from None


def _path_of(node: ast.AST, expression: str) -> str | None:
    """``a.b[0].c`` -> ``a.b.0.c``; None for anything that is not a plain path."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _path_of(node.value, expression)
        return f"{base}.{node.attr}" if base is not None else None
    if isinstance(node, ast.Subscript):
        base = _path_of(node.value, expression)
        index = node.slice
        if base is None or not (
            isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0
        ):
            return None
        return f"{base}.{index.value}"
    return None


class _Evaluator:
    def __init__(self, expression: str, lookup: Callable[[str], Any]):
        self.expression = expression
        self.lookup = lookup

    def fail(self, message: str) -> ExpressionError:
        return ExpressionError(f"{message} in the mapping expression {self.expression}")

    def visit(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                raise self.fail(f"only numbers are allowed as constants, not {node.value!r}")
            return node.value
        if isinstance(node, ast.BinOp):
            operator = _BINARY.get(type(node.op))
            if operator is None:
                raise self.fail(
                    f"operator {_operator_text(node.op)} is not allowed (allowed: {_ALLOWED_OPERATORS})"
                )
            return operator(self.visit(node.left), self.visit(node.right))
        if isinstance(node, ast.UnaryOp):
            operator = _UNARY.get(type(node.op))
            if operator is None:
                raise self.fail(
                    f"operator {_operator_text(node.op)} is not allowed (allowed: {_ALLOWED_OPERATORS})"
                )
            return operator(self.visit(node.operand))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
            return self.path_value(node)
        raise self.fail(f"'{ast.unparse(node)}' ({type(node).__name__}) is not allowed")

    def call(self, node: ast.Call) -> Any:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in FUNCTIONS:
            shown = name or ast.unparse(node.func)
            raise self.fail(f"unknown function '{shown}' (allowed: {', '.join(FUNCTIONS)})")
        if node.keywords or any(isinstance(arg, ast.Starred) for arg in node.args):
            raise self.fail(f"{name}() takes plain positional arguments only")
        arguments = [self.visit(arg) for arg in node.args]
        try:
            return FUNCTIONS[name](*arguments)
        except (TypeError, ValueError) as error:
            raise self.fail(f"{name}() failed: {error}") from None

    def path_value(self, node: ast.AST) -> Any:
        path = _path_of(node, self.expression)
        if path is None:
            raise self.fail(f"'{ast.unparse(node)}' is not a config path (write a.b.c or a.items[0].c)")
        if any(part.startswith("_") for part in path.split(".")):
            raise self.fail(f"'{path}': names starting with '_' are not allowed")
        value = self.lookup(path)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(f"'{path}' is {value!r}, not a number")
        return value


def _operator_text(operator: ast.AST) -> str:
    symbols = {
        ast.Pow: "**",
        ast.BitAnd: "&",
        ast.BitOr: "|",
        ast.BitXor: "^",
        ast.LShift: "<<",
        ast.RShift: ">>",
        ast.MatMult: "@",
        ast.Invert: "~",
        ast.Not: "not",
    }
    return symbols.get(type(operator), type(operator).__name__)

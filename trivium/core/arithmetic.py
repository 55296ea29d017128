"""The function each arithmetic operator of a parsed expression (an ``ast`` node type) stands for.

Shared by the evaluators that read arithmetic without ``eval`` (the calculator tool, the
countdown reward, config mapping expressions); each allows its own subset of them.
"""

from __future__ import annotations

import ast
import operator

BINARY_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY_OPERATORS = {ast.UAdd: operator.pos, ast.USub: operator.neg}

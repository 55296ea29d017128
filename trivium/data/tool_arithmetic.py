"""Arithmetic questions answered with the ``calculator`` tool, as dataset rows.

Owns the problem space (two-digit ``a + b`` and ``a * b``) and its rows; writing files is
``trivium.data.builder``'s job, the tool itself ``trivium.envs.calculator``'s. A
seeded sample of the numbered space is drawn without replacement, so train and test never
share a problem. Each row holds:

* ``question`` ("What is 47 * 86?"), ``answer`` ("4042"), ``expression`` ("47 * 86");
* ``tools``: the calculator's OpenAI signature, as the chat template renders it;
* ``messages``: an episode transcript for SFT: the question, an assistant turn calling
  ``calculator`` with the expression, the tool's result, the final answer alone. In a share
  ``careless_share`` of the rows (default 0.5) the first call names its argument wrongly
  (``{"expr": ...}``), the calculator answers with an error, and a second call gets the
  result: a warm-up on these teaches the call format and copying numbers, and leaves the
  careless first call to be unlearned from rewards (with ``max_env_steps: 2`` the careless
  episode has no turn left for its answer, and earns nothing).
"""

from __future__ import annotations

import json
import random

from trivium.envs.calculator import (
    CALCULATOR_TOOL,
    TOOL_NAME,
    call_calculator,
    evaluate,
    format_value,
)
from trivium.errors import UserError

OPERANDS = range(10, 100)
OPERATIONS = ("+", "*")
_SPACE = [(a, op, b) for op in OPERATIONS for a in OPERANDS for b in OPERANDS]


def calculator_call(call_id: str, arguments: dict) -> dict:
    """A ``calculator`` call in the OpenAI ``tool_calls`` shape."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": json.dumps(arguments)},
    }


def tool_arithmetic_row(a: int, op: str, b: int, careless: bool = False) -> dict:
    """The row of ``a op b``; ``careless``: its transcript first calls with a wrongly named argument."""
    expression = f"{a} {op} {b}"
    answer = format_value(evaluate(expression))
    question = f"What is {a} {op} {b}?"
    messages = [{"role": "user", "content": question}]
    if careless:
        wrong = calculator_call("call_0", {"expr": expression})
        error, _ = call_calculator(TOOL_NAME, wrong["function"]["arguments"])
        messages += [
            {"role": "assistant", "content": "", "tool_calls": [wrong]},
            {"role": "tool", "tool_call_id": "call_0", "content": error},
        ]
    messages += [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [calculator_call("call_1", {"expression": expression})],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": answer},
        {"role": "assistant", "content": answer},
    ]
    return {
        "question": question,
        "answer": answer,
        "expression": expression,
        "tools": [CALCULATOR_TOOL],
        "messages": messages,
    }


def generate_tool_arithmetic(count: int, rng: random.Random, careless_share: float = 0.5) -> list[dict]:
    """``count`` distinct problems, in a seeded random order; ``careless_share`` of their
    transcripts first call the calculator with a wrongly named argument."""
    if not 0 <= careless_share <= 1:
        raise UserError(f"--careless-share must be between 0 and 1, got {careless_share}")
    if count > len(_SPACE):
        raise UserError(
            f"asked for {count} tool_arithmetic problems but only {len(_SPACE)} distinct ones exist; "
            "lower --num-train/--num-test"
        )
    return [
        tool_arithmetic_row(*_SPACE[index], careless=rng.random() < careless_share)
        for index in rng.sample(range(len(_SPACE)), count)
    ]

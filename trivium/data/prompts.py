"""The texts shared by the generated datasets and the built-in workflows.

One place for the answer format, so the SFT targets a dataset stores, the system prompt a
workflow sends and the reward's answer extraction always agree: the final answer goes
between ``<answer>`` and ``</answer>``.
"""

from __future__ import annotations

from collections.abc import Sequence

MATH_SYSTEM_PROMPT = (
    "You are a helpful assistant. Solve the problem. Put the final answer, and nothing else, "
    "between <answer> and </answer>, for example <answer>42</answer>."
)

COUNTDOWN_SYSTEM_PROMPT = (
    "You are a helpful assistant. Find an equation that reaches the target number. Put the "
    "equation, and nothing else, between <answer> and </answer>, for example "
    "<answer>(1 + 2) * 3</answer>."
)


def answer_response(answer: str) -> str:
    """The target completion for SFT: just the tagged answer."""
    return f"<answer>{answer}</answer>"


def countdown_question(numbers: Sequence[int], target: int) -> str:
    """The user prompt for a countdown problem."""
    listed = ", ".join(str(number) for number in numbers)
    return (
        f"Using the numbers [{listed}], create an equation that equals {target}. "
        "You may use + - * / and parentheses, and each number at most once."
    )

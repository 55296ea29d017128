"""Reasoning parsers: a reply's thinking apart from its answer, as OpenAI-style servers return it.

A parser splits the reply text into ``(reasoning, content)``; the assistant message then
carries the thinking as ``reasoning_content`` and the answer as ``content``. Only the message
changes: the experience keeps every token the model sampled, thinking included, so the
trainer learns from exactly what was generated.

Parsers are chosen by name (``reasoning_parser``):

* ``deepseek_r1``: the thinking ends at ``</think>``; the opening ``<think>`` may be missing
  (the chat template can put it in the prompt). A reply without ``</think>`` is all thinking
  when it opened with ``<think>``, else all answer.
* ``qwen3``: thinking only inside a complete ``<think>...</think>`` block; anything else is
  answer (with thinking switched off the model writes no block).
"""

from __future__ import annotations

from typing import Protocol

from trivium.models.parser_choice import parser_named

OPEN, CLOSE = "<think>", "</think>"


class ReasoningParser(Protocol):
    def split(self, text: str) -> tuple[str | None, str]:
        """(the reasoning, or None when there is none; the answer)."""


class DeepSeekR1ReasoningParser:
    def split(self, text: str) -> tuple[str | None, str]:
        body = text.lstrip()
        opened = body.startswith(OPEN)
        if opened:
            body = body[len(OPEN):]
        if CLOSE not in body:
            return (body.strip(), "") if opened else (None, text)
        reasoning, answer = body.split(CLOSE, 1)
        return reasoning.strip(), answer.strip()


class Qwen3ReasoningParser:
    def split(self, text: str) -> tuple[str | None, str]:
        start = text.find(OPEN)
        end = text.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
        if start < 0 or end < 0:
            return None, text
        reasoning = text[start + len(OPEN): end]
        answer = text[:start] + text[end + len(CLOSE):]
        return reasoning.strip(), answer.strip()


REASONING_PARSERS: dict[str, type] = {"deepseek_r1": DeepSeekR1ReasoningParser, "qwen3": Qwen3ReasoningParser}


def reasoning_parser_named(name: str | None) -> ReasoningParser | None:
    """The parser called ``name``; None for no parsing (the reply stays whole in ``content``)."""
    return parser_named(REASONING_PARSERS, name, key="reasoning_parser")

"""Tool-call parsers: the model's reply text in, OpenAI ``tool_calls`` out.

A parser splits a reply into its plain content and a list of calls in the OpenAI shape::

    {"id": "call_...", "type": "function", "function": {"name": ..., "arguments": "<json text>"}}

Parsers are chosen by name (``tool_call_parser``). Built-in: ``hermes``, calls written as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. A block that is not valid JSON
or has no name is left in the content, so nothing the model wrote is lost.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Protocol

from trivium.models.parser_choice import parser_named


class ToolCallParser(Protocol):
    def parse(self, text: str) -> tuple[str, list[dict]]:
        """(content without the calls, calls in the OpenAI shape)."""


class HermesToolCallParser:
    """``<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>`` blocks, any number."""

    BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

    def parse(self, text: str) -> tuple[str, list[dict]]:
        calls: list[dict] = []

        def take(match: re.Match) -> str:
            call = _openai_call(match.group(1))
            if call is None:
                return match.group(0)  # not a well-formed call: keep it as text
            calls.append(call)
            return ""

        content = self.BLOCK.sub(take, text)
        return (content.strip() if calls else content), calls


def _openai_call(body: str) -> dict | None:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": data["name"],
            "arguments": arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, ensure_ascii=False),
        },
    }


TOOL_CALL_PARSERS: dict[str, type] = {"hermes": HermesToolCallParser}


def tool_call_parser_named(name: str | None) -> ToolCallParser | None:
    """The parser called ``name``; None for no parsing (the reply stays plain content)."""
    return parser_named(TOOL_CALL_PARSERS, name, key="tool_call_parser")

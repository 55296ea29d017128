"""``tool_choice`` of a chat request: one rule for the in-process client and the HTTP server.

Owns what a request's ``tool_choice`` means, so ``OpenAIClient`` (``openai_client.py``) and
the server's ``/v1/chat/completions`` (``server.py``) answer it the same way:

* ``"auto"`` (or unset): the tools are rendered and the model decides whether to call one;
* ``"none"``: the tools are not rendered, so the model answers in text;
* ``"required"`` or ``{"type": "function", "function": {"name": ...}}`` (a forced call): refused
  with ``FORCED_TOOL_CHOICE_REFUSAL``. Forcing a call means constraining the first sampled
  tokens to a call block (to the named function). The engines sample freely and their only
  forcing is a replay of a whole known response; tokens forced into the prompt instead
  would be no part of the model's turn, its logprobs or its training. So a forced choice is
  refused, never silently turned into ``auto``;
* anything else is an error naming the accepted values.
"""

from __future__ import annotations

from typing import Any

FORCED_TOOL_CHOICE_REFUSAL = (
    "tool_choice {choice} forces a tool call, which trivium's engines cannot constrain sampling to; "
    "send tool_choice 'auto' (the model decides, with the rollout model's tool_call_parser reading its calls) "
    "or 'none'"
)


class ToolChoiceError(ValueError):
    """A ``tool_choice`` refused or malformed; the message is the same on every path."""


def tools_to_render(tool_choice: Any, tools: list[dict] | None) -> list[dict] | None:
    """The tools the chat template renders for a request with ``tool_choice`` and ``tools``."""
    if tool_choice is None or tool_choice == "auto":
        return tools or None
    if tool_choice == "none":
        return None
    if tool_choice == "required" or (isinstance(tool_choice, dict) and tool_choice.get("type") == "function"):
        raise ToolChoiceError(FORCED_TOOL_CHOICE_REFUSAL.format(choice=_shown(tool_choice)))
    raise ToolChoiceError(
        f"tool_choice {_shown(tool_choice)} is not valid; use 'auto', 'none', 'required' or "
        '{"type": "function", "function": {"name": ...}}'
    )


def _shown(tool_choice: Any) -> str:
    if isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        return f"{{'type': 'function', 'function': {{'name': {tool_choice['function'].get('name')!r}}}}}"
    return repr(tool_choice)

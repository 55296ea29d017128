"""``tool_call_reward``: how well a reply calls the expected function.

The reply's calls are read with a tool-call parser (``hermes`` by default: blocks of
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``). The first call is scored
against ``ground_truth`` (``{"name": ..., "arguments": {...}}``, or its JSON text):

    reward = 0.5 * right_name + 0.25 * arguments_match_schema + 0.25 * arguments_exact

``arguments_match_schema`` validates the arguments against the named tool's ``parameters``
JSON schema (from the ``tools`` keyword argument) with the ``jsonschema`` package; it is only
earned together with the right name. No parsable call scores 0.
"""

from __future__ import annotations

import json
from typing import Any

from trivium.errors import UserError
from trivium.models.tool_calls import tool_call_parser_named
from trivium.rewards.registry import REWARD_FNS


def expected_call(ground_truth: Any) -> dict[str, Any]:
    call = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise UserError(
            "tool_call_reward needs a ground truth like {'name': ..., 'arguments': {...}}; "
            f"got {ground_truth!r}"
        )
    arguments = call.get("arguments", {})
    return {
        "name": call["name"],
        "arguments": json.loads(arguments) if isinstance(arguments, str) else arguments,
    }


def schema_of(tools: list[dict] | None, name: str) -> dict | None:
    for tool in tools or []:
        function = tool.get("function", tool)
        if function.get("name") == name:
            return function.get("parameters") or {"type": "object"}
    return None


def matches_schema(arguments: Any, schema: dict | None) -> bool:
    if schema is None:
        return False
    try:
        import jsonschema
    except ImportError as error:
        raise UserError(
            "tool_call_reward validates arguments with jsonschema: pip install 'trivium[agents]'"
        ) from error
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError:
        return False
    return True


@REWARD_FNS.register("tool_call_reward")
def tool_call_reward(
    *,
    prompt: str,
    response: str,
    ground_truth: Any,
    tools: list[dict] | None = None,
    tool_call_parser: str = "hermes",
    **_unused: Any,
) -> dict[str, float]:
    expected = expected_call(ground_truth)
    _, calls = tool_call_parser_named(tool_call_parser).parse(response)
    if not calls:
        return {
            "reward": 0.0,
            "call_parsed": 0.0,
            "call_name": 0.0,
            "call_schema": 0.0,
            "call_arguments": 0.0,
        }
    function = calls[0]["function"]
    arguments = json.loads(function["arguments"])
    right_name = float(function["name"] == expected["name"])
    valid = right_name * float(matches_schema(arguments, schema_of(tools, expected["name"])))
    exact = right_name * float(arguments == expected["arguments"])
    # reward = 0.5 * right_name + 0.25 * schema + 0.25 * exact
    reward = 0.5 * right_name + 0.25 * valid + 0.25 * exact
    return {
        "reward": reward,
        "call_parsed": 1.0,
        "call_name": right_name,
        "call_schema": valid,
        "call_arguments": exact,
    }

"""Reasoning parsers: the thinking apart from the answer, and nothing the model wrote is lost."""

import pytest

from trivium.errors import UserError
from trivium.models.reasoning import reasoning_parser_named


@pytest.mark.parametrize("name, text, expected", [
    ("deepseek_r1", "<think>add 2 and 3</think>The sum is 5.", ("add 2 and 3", "The sum is 5.")),
    # The chat template opened the block in the prompt: the reply starts inside it.
    ("deepseek_r1", "add 2 and 3</think>\n5", ("add 2 and 3", "5")),
    ("deepseek_r1", "<think>still thinking", ("still thinking", "")),  # cut by the token limit
    ("deepseek_r1", "5", (None, "5")),
    ("qwen3", "<think>\nadd\n</think>\n\n5", ("add", "5")),
    ("qwen3", "5 <think>x</think> done", ("x", "5  done")),
    ("qwen3", "add</think>5", (None, "add</think>5")),  # no opening tag: all answer
    ("qwen3", "<think>unfinished", (None, "<think>unfinished")),
])
def test_the_reply_is_split_into_reasoning_and_answer(name, text, expected):
    assert reasoning_parser_named(name).split(text) == expected


def test_no_parser_and_an_unknown_one():
    assert reasoning_parser_named(None) is None and reasoning_parser_named("") is None
    with pytest.raises(UserError, match="deepseek_r1, qwen3"):
        reasoning_parser_named("r1")


def test_the_assistant_message_carries_reasoning_and_tool_calls_apart(tiny_model_dir):
    from trivium.models.engine import create_engine
    from trivium.models.wrapper import ModelWrapper

    wrapper = ModelWrapper(create_engine("hf", model_path=tiny_model_dir), max_response_tokens=4,
                           tool_call_parser="hermes", reasoning_parser="deepseek_r1")
    message = wrapper._assistant_message(
        '<think>go north</think>Moving. <tool_call>{"name": "move", "arguments": {"to": "N"}}</tool_call>'
    )
    assert message["reasoning_content"] == "go north"
    assert message["content"] == "Moving."
    assert message["tool_calls"][0]["function"] == {"name": "move", "arguments": '{"to": "N"}'}

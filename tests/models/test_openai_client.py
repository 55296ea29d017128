"""The in-process OpenAI-style client: official response types, token-exact sessions, tool calls."""

import asyncio

import pytest
import torch
from openai.types.chat import ChatCompletion

from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.tokenizer_builder import CHAT_TEMPLATE
from trivium.models.wrapper import ModelWrapper

TOOLS = [{"type": "function", "function": {"name": "move", "parameters": {"type": "object"}}}]
# The tiny template does not render tools (a chat with tools is refused); this one names them first.
TINY_TEMPLATE_WITH_TOOLS = (
    "{%- if tools %}{{- '<|im_start|>system\\ntools:' }}{%- for tool in tools %}{{- ' ' + tool.function.name }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}" + CHAT_TEMPLATE
)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return create_engine("hf", model_path=tiny_model_dir, seed=0)


def test_create_returns_an_openai_chat_completion_and_sessions_are_recorded_whole(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=256, enable_history=True)
    client = wrapper.openai_client()
    messages = [{"role": "user", "content": "Where to?"}]
    first = client.chat.completions.create(messages=messages, n=2, temperature=1.0, seed=1, logprobs=True)
    assert isinstance(first, ChatCompletion) and len(first.choices) == 2
    assert first.system_fingerprint == "trivium-v0"
    choice = first.choices[0]
    assert first.usage.completion_tokens == sum(len(c.logprobs.content) for c in first.choices)
    # Continue the first branch with the typed message the client returned.
    follow_up = messages + [choice.message, {"role": "user", "content": "And then?"}]
    second = client.chat.completions.create(messages=follow_up, max_tokens=3)
    assert second.usage.completion_tokens <= 3
    recorded = wrapper.extract_experience_from_history()
    assert len(recorded) == 2  # the continued branch and the other first-turn sample
    episode = max(recorded, key=lambda e: e.tokens.numel())
    assert episode.info["model_turns"] == 2
    # The episode starts with the first choice's exact tokens and engine logprobs.
    logprobs = [t.logprob for t in choice.logprobs.content]
    assert episode.action_mask[: len(logprobs)].all() and not episode.action_mask[len(logprobs)]
    assert torch.allclose(episode.logprobs[: len(logprobs)], torch.tensor(logprobs))


def test_tool_calls_are_parsed_and_a_tool_reply_continues_the_episode(engine):
    wrapper = ModelWrapper(
        engine, max_response_tokens=4, max_model_len=256, tool_call_parser="hermes", enable_history=True,
        chat_template=TINY_TEMPLATE_WITH_TOOLS,
    )
    message = wrapper._assistant_message(
        'Going. <tool_call>{"name": "move", "arguments": {"to": "D"}}</tool_call>'
    )
    assert message["content"] == "Going."
    assert message["tool_calls"][0]["function"] == {"name": "move", "arguments": '{"to": "D"}'}
    client = wrapper.openai_client()
    first = client.chat.completions.create(messages=[{"role": "user", "content": "Go"}], tools=TOOLS)
    # An agent echoes the assistant message (with any tool calls) and adds the tool's answer.
    echoed = first.choices[0].message.model_dump(exclude_none=True)
    echoed["tool_calls"] = message["tool_calls"]
    follow_up = [
        {"role": "user", "content": "Go"},
        echoed,
        {"role": "tool", "tool_call_id": "call_1", "content": "moved"},
    ]
    second = client.chat.completions.create(messages=follow_up, tools=TOOLS)
    client.chat.completions.create(
        messages=follow_up + [second.choices[0].message, {"role": "user", "content": "ok"}], tools=TOOLS
    )
    (exp,) = wrapper.extract_experience_from_history()
    assert exp.info["model_turns"] == 3
    text = engine.tokenizer.decode(exp.tokens)
    assert text.startswith("<|im_start|>system\ntools: move<|im_end|>")
    assert text.count("<|im_start|>tool\nmoved<|im_end|>") == 1


def test_async_client_and_clear_errors(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=2, max_model_len=128)
    client = wrapper.openai_async_client()
    completion = asyncio.run(client.chat.completions.create(messages=[{"role": "user", "content": "Hi"}]))
    assert completion.choices[0].finish_reason in ("stop", "length")
    sync_client = wrapper.openai_client()
    with pytest.raises(UserError, match="stop"):
        sync_client.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], stop=["\n"])
    with pytest.raises(UserError, match="stream"):
        sync_client.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], stream=True)
    with pytest.raises(UserError, match="tool_choice"):
        sync_client.chat.completions.create(
            messages=[{"role": "user", "content": "Hi"}], tool_choice="required"
        )

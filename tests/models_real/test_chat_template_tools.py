"""trivium's chat template (tools, tool calls, tool results, thinking), and tools never dropped silently."""

import json

import httpx
import pytest

from trivium.buffer.formatters import SFTFormatter
from trivium.errors import UserError
from trivium.models.chat_template import CHATML_TOOLS_TEMPLATE, EMPTY_THINK_BLOCK
from trivium.models.engine import create_engine
from trivium.models.server import serve_in_thread
from trivium.models.tool_calls import tool_call_parser_named
from trivium.models.wrapper import ModelWrapper

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = [{"role": "user", "content": "Weather in Oslo?"}]


def render(tokenizer, messages, **options):
    return tokenizer.apply_chat_template(messages, tokenize=False, **options)


@pytest.fixture(scope="module")
def engine(qwen3_dir):
    engine = create_engine("hf", model_path=qwen3_dir, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def tiny_engine(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    yield engine
    engine.close()


def test_a_whole_tool_episode_renders_in_the_qwen_format(qwen3_tokenizer):
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        *QUESTION,
        {"role": "assistant", "content": "", "reasoning_content": "I need the weather.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "12 degrees"},
        {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
    ]
    text = render(qwen3_tokenizer, messages, tools=[WEATHER], add_generation_prompt=True)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in system
    assert '<tool_call>\n{"name": <function name>, "arguments": <the arguments as a JSON object>}\n</tool_call>' in system
    assert rest == (
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nI need the weather.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
        # Consecutive tool results share one user turn.
        "<|im_start|>user\n<tool_response>\n12 degrees\n</tool_response>\n"
        "<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_rendered_tool_call_is_what_the_hermes_parser_reads(qwen3_tokenizer):
    arguments = {"city": "Oslo", "days": 2}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    messages = QUESTION + [{"role": "assistant", "content": "Checking.", "tool_calls": [call, call]}]
    turn = render(qwen3_tokenizer, messages, tools=[WEATHER]).split("<|im_start|>assistant\n")[1]
    content, calls = tool_call_parser_named("hermes").parse(turn.removesuffix("<|im_end|>\n"))
    assert content == "Checking."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", arguments), ("get_weather", arguments)
    ]


def test_thinking_off_ends_the_generation_prompt_and_every_assistant_turn_with_an_empty_think_block(qwen3_tokenizer):
    dialogue = QUESTION + [{"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Thanks"}]
    on = render(qwen3_tokenizer, dialogue, add_generation_prompt=True, enable_thinking=True)
    off = render(qwen3_tokenizer, dialogue, add_generation_prompt=True, enable_thinking=False)
    assert on == render(qwen3_tokenizer, dialogue, add_generation_prompt=True)  # on is the default
    assert on.endswith("<|im_start|>assistant\n") and "<think>" not in on
    assert off.endswith("<|im_start|>assistant\n" + EMPTY_THINK_BLOCK)
    assert f"<|im_start|>assistant\n{EMPTY_THINK_BLOCK}Sunny.<|im_end|>" in off


def test_the_assistant_mask_covers_what_the_model_writes(qwen3_tokenizer):
    messages = QUESTION + [{"role": "assistant", "content": "Sunny.", "reasoning_content": "Look it up."}]
    for thinking in (True, False):
        encoded = qwen3_tokenizer.apply_chat_template(
            messages, return_dict=True, return_assistant_tokens_mask=True, enable_thinking=thinking
        )
        trained = [i for i, flag in zip(encoded["input_ids"], encoded["assistant_masks"]) if flag]
        assert qwen3_tokenizer.decode(trained) == "<think>\nLook it up.\n</think>\n\nSunny.<|im_end|>"
    encoded = qwen3_tokenizer.apply_chat_template(
        QUESTION + [{"role": "assistant", "content": "Sunny."}], return_dict=True,
        return_assistant_tokens_mask=True, enable_thinking=False,
    )
    trained = [i for i, flag in zip(encoded["input_ids"], encoded["assistant_masks"]) if flag]
    assert qwen3_tokenizer.decode(trained) == "Sunny.<|im_end|>"  # the prompt's empty think block is not trained


def test_tools_reach_the_prompt_ids_and_a_tool_episode_continues_token_exactly(engine, qwen3_tokenizer):
    wrapper = ModelWrapper(engine, max_response_tokens=3, max_model_len=512, tool_call_parser="hermes")
    (first,) = wrapper.chat(QUESTION, tools=[WEATHER], seed=1)
    prompt_ids = first.tokens[: first.prompt_length].tolist()
    without = wrapper.chat(QUESTION, seed=1)[0].tokens[: first.prompt_length].tolist()
    assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in qwen3_tokenizer.decode(prompt_ids)
    assert prompt_ids == qwen3_tokenizer.encode(render(qwen3_tokenizer, QUESTION, tools=[WEATHER],
                                                       add_generation_prompt=True), add_special_tokens=False)
    assert prompt_ids != without
    episode = QUESTION + [{"role": "assistant", "content": first.response_text},
                          {"role": "tool", "tool_call_id": "c1", "content": "12 degrees"}]
    (second,) = wrapper.chat(episode, tools=[WEATHER], seed=2)
    assert second.tokens[: first.tokens.numel()].tolist() == first.tokens.tolist()
    assert "<tool_response>\n12 degrees\n</tool_response>" in qwen3_tokenizer.decode(second.tokens)
    assert second.info["model_turns"] == 2 and wrapper.template_drift_events == 0


def test_enable_thinking_switches_the_prompt_the_engine_receives(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=1, max_model_len=256, enable_thinking=False)
    tokenizer = engine.tokenizer
    off = wrapper.chat(QUESTION)[0]
    on = wrapper.chat(QUESTION, enable_thinking=True)[0]
    empty_block = tokenizer.encode(EMPTY_THINK_BLOCK, add_special_tokens=False)
    assert off.tokens[: off.prompt_length].tolist()[-len(empty_block):] == empty_block
    assert tokenizer.convert_tokens_to_ids("<think>") not in on.tokens[: on.prompt_length].tolist()
    assert on.prompt_length == off.prompt_length - len(empty_block)


def test_the_hermes_parser_reads_calls_from_a_decoded_reply(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=1, max_model_len=256, tool_call_parser="hermes",
                           reasoning_parser="qwen3")
    written = '<think>\nweather\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>'
    ids = engine.tokenizer.encode(written, add_special_tokens=False)
    message = wrapper._assistant_message(engine.tokenizer.decode(ids, skip_special_tokens=True))  # as the engine decodes
    assert message["reasoning_content"] == "weather" and message["content"] == ""
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}


# ---- a template that does not render tools: a clear error, never a prompt without them


def test_a_template_without_tools_refuses_a_chat_with_tools(tiny_engine):
    probe = {"type": "function", "function": {"name": "probe_tool_7d1e", "parameters": {"type": "object"}}}
    tiny_template = tiny_engine.tokenizer.chat_template
    assert "probe_tool_7d1e" not in render(tiny_engine.tokenizer, QUESTION, tools=[probe])
    assert "probe_tool_7d1e" in render(tiny_engine.tokenizer, QUESTION, tools=[probe], chat_template=CHATML_TOOLS_TEMPLATE)
    wrapper = ModelWrapper(tiny_engine, max_response_tokens=2, max_model_len=128)
    with pytest.raises(UserError, match="the chat template ignores `tools`.*chat_template_path"):
        wrapper.chat(QUESTION, tools=[probe])
    with pytest.raises(UserError, match="ignores `tools`"):
        wrapper.openai_client().chat.completions.create(messages=QUESTION, tools=[probe])
    assert wrapper.chat(QUESTION, tools=[])[0].response_length >= 1, "no tools: nothing to refuse"
    with pytest.raises(UserError, match="ignores `tools`"):
        SFTFormatter(tiny_engine.tokenizer, {"prompt_key": "q", "response_key": "a", "tools_key": "tools"}).format(
            {"q": "hi", "a": "hello", "tools": [probe]}
        )
    assert tiny_engine.tokenizer.chat_template == tiny_template


def test_over_http_a_chat_with_tools_the_template_cannot_render_is_a_400(tiny_engine):
    with serve_in_thread(tiny_engine, model_name="tiny") as url:
        body = {"model": "tiny", "messages": QUESTION, "max_tokens": 2}
        refused = httpx.post(f"{url}/chat/completions", json={**body, "tools": [WEATHER]}, timeout=60)
        answered = httpx.post(f"{url}/chat/completions", json=body, timeout=60)
    assert refused.status_code == 400
    assert "the chat template ignores `tools`" in refused.json()["error"]["message"]
    assert answered.status_code == 200

"""tool_choice means the same in process (OpenAIClient) and over HTTP (the model server).

Both run the tiny-tools model (its template renders tools) on the hf engine: ``auto`` renders
the tools, ``none`` leaves them out, a forced call (``required`` or a named function) is
refused with one message, a malformed choice is an error naming the accepted values.
"""

import json

import openai
import pytest

from trivium.envs.calculator import CALCULATOR_TOOL
from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.server import serve_in_thread
from trivium.models.tool_choice import FORCED_TOOL_CHOICE_REFUSAL, tools_to_render
from trivium.models.wrapper import ModelWrapper

MESSAGES = [{"role": "user", "content": "What is 12 * 34?"}]
TOOLS = [CALCULATOR_TOOL]
FORCED = ["required", {"type": "function", "function": {"name": "calculator"}}]


@pytest.fixture(scope="module")
def engine(tiny_tools_model_dir):
    engine = create_engine("hf", model_path=tiny_tools_model_dir, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def in_process(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=4, max_model_len=400, tool_call_parser="hermes")
    return wrapper.openai_client()


@pytest.fixture(scope="module")
def over_http(engine):
    with serve_in_thread(engine, model_name="policy") as url:
        yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0)


def test_the_rule_renders_tools_for_auto_only():
    assert tools_to_render(None, TOOLS) == TOOLS and tools_to_render("auto", TOOLS) == TOOLS
    assert tools_to_render("none", TOOLS) is None and tools_to_render("auto", []) is None


@pytest.mark.parametrize("choice", FORCED)
def test_a_forced_call_is_refused_with_the_same_message_on_both_paths(in_process, over_http, choice):
    with pytest.raises(UserError) as local:
        in_process.chat.completions.create(messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as remote:
        over_http.chat.completions.create(
            model="policy", messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=4
        )
    assert remote.value.status_code == 400
    assert str(local.value).startswith("tool_choice ") and "cannot constrain sampling" in str(local.value)
    assert str(local.value) in str(remote.value)
    assert FORCED_TOOL_CHOICE_REFUSAL.split("{choice}")[1] in str(local.value)


def test_a_malformed_choice_is_refused_on_both_paths(in_process, over_http):
    with pytest.raises(UserError, match="tool_choice 'always' is not valid; use 'auto', 'none', 'required'"):
        in_process.chat.completions.create(messages=MESSAGES, tools=TOOLS, tool_choice="always")
    with pytest.raises(openai.BadRequestError, match="tool_choice 'always' is not valid"):
        over_http.chat.completions.create(
            model="policy", messages=MESSAGES, tools=TOOLS, tool_choice="always"
        )


@pytest.mark.parametrize(("choice", "rendered"), [("auto", True), ("none", False)])
def test_auto_renders_the_tools_and_none_leaves_them_out_on_both_paths(
    in_process, over_http, choice, rendered
):
    signature = json.dumps(CALCULATOR_TOOL)
    local = in_process.chat.completions.create(
        messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=2
    )
    remote = over_http.chat.completions.create(
        model="policy",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice=choice,
        max_tokens=2,
        extra_body={"return_token_ids": True},
    )
    prompt_ids = remote.model_extra["prompt_token_ids"]
    assert (signature in in_process.model.tokenizer.decode(prompt_ids)) is rendered
    # The two paths render the same prompt: the same number of prompt tokens.
    assert local.usage.prompt_tokens == remote.usage.prompt_tokens == len(prompt_ids)

"""The tiny-tools preset: the tiny shape with a tokenizer and chat template that render tools."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from trivium.envs.calculator import CALCULATOR_TOOL
from trivium.errors import UserError
from trivium.models.chat_template import CHATML_TOOLS_TEMPLATE
from trivium.models.engine import create_engine
from trivium.models.tiny_tools import build_tiny_tools_model
from trivium.models.tool_calls import tool_call_parser_named
from trivium.models.wrapper import ModelWrapper

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "47 * 86"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tiny_tools_model_dir):
    return AutoTokenizer.from_pretrained(tiny_tools_model_dir)


def test_tiny_shape_with_the_tools_template(tiny_tools_model_dir, tokenizer):
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_model_dir)
    config = model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 4, 4)
    assert config.vocab_size == len(tokenizer) <= 1024
    assert tokenizer.chat_template == CHATML_TOOLS_TEMPLATE


def test_tags_numbers_and_json_punctuation_are_cheap_and_kept_in_decoding(tokenizer):
    for tag in ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"):
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    ids = tokenizer(CALL, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([token]) for token in ids]
    # The call's fixed JSON is one token before the expression and one after it.
    assert pieces == [
        "<tool_call>",
        '\n{"name": "calculator", "arguments": {"expression": "',
        "47",
        " * ",
        "86",
        '"}}\n',
        "</tool_call>",
    ]
    assert tokenizer.decode(ids, skip_special_tokens=True) == CALL  # the tags survive for the parser
    # An operand is the same single token in the question, so the call copies the question's tokens.
    assert ids[2] in tokenizer("What is 47 * 86?", add_special_tokens=False)["input_ids"]
    call = tool_call_parser_named("hermes").parse(tokenizer.decode(ids))[1][0]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "47 * 86"}'}


def test_a_request_with_tools_has_their_signatures_in_its_prompt_tokens(tiny_tools_model_dir, tokenizer):
    engine = create_engine("hf", model_path=tiny_tools_model_dir, seed=0)
    wrapper = ModelWrapper(engine, max_response_tokens=2, max_model_len=400)
    messages = [{"role": "user", "content": "What is 47 * 86?"}]
    (with_tools,) = wrapper.chat(messages, tools=[CALCULATOR_TOOL])
    (without,) = wrapper.chat(messages)
    prompt = tokenizer.decode(with_tools.tokens[: with_tools.prompt_length])
    assert f"<tools>\n{json.dumps(CALCULATOR_TOOL)}\n</tools>" in prompt
    assert "<tools>" not in tokenizer.decode(without.tokens[: without.prompt_length])
    assert with_tools.prompt_length < 40  # the template's fixed text and the signature are a few long tokens
    engine.close()


def test_the_same_seed_builds_the_same_model_and_a_used_directory_is_refused(tmp_path, tiny_tools_model_dir):
    with pytest.raises(UserError, match="not empty"):
        build_tiny_tools_model(tiny_tools_model_dir)
    again = AutoTokenizer.from_pretrained(build_tiny_tools_model(tmp_path / "again", seed=0))
    assert again.get_vocab() == AutoTokenizer.from_pretrained(tiny_tools_model_dir).get_vocab()

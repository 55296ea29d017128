"""A reply holding a special token that the template would not write (its text is kept without
it) is continued with the template's end of that turn: the next message never follows a reply
that the model left open."""

import pytest
from transformers import AutoTokenizer

from trivium.models.conversation import Conversation, Renderer
from trivium.models.engine.base import GenerationOutput

NEXT = "<|im_start|>user\nobservation<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def continued(tokenizer, reply_ids: list[int], finish_reason: str) -> tuple[str, Conversation]:
    """The template's text appended after one model turn of ``reply_ids``, and the conversation."""
    renderer = Renderer(tokenizer)
    messages = [{"role": "user", "content": "Find the goal."}]
    text = renderer.text(messages, None)
    conversation = Conversation.start(
        messages=messages, tools=None, ids=renderer.ids(text), text=text, prompt_truncated=False, renderer=renderer
    )
    reply_text = tokenizer.decode(reply_ids, skip_special_tokens=True)
    output = GenerationOutput(
        prompt_ids=list(conversation.tokens),
        token_ids=reply_ids,
        logprobs=[-0.5] * len(reply_ids),
        text=reply_text,
        finish_reason=finish_reason,
    )
    reply = {"role": "assistant", "content": reply_text}
    after_reply = conversation.with_model_turn(output, rendered_message=reply, visible_message=reply, tokenizer=tokenizer)
    grown = after_reply.with_environment([{"role": "user", "content": "observation"}], renderer)
    added = grown.tokens[len(after_reply.tokens) :]
    return tokenizer.decode(added, skip_special_tokens=False), grown


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_a_reply_cut_by_max_tokens_after_a_special_token_is_closed_by_the_template(tokenizer):
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    text, grown = continued(tokenizer, ids(tokenizer, "go") + [start] + ids(tokenizer, "up"), "length")
    assert text == "<|im_end|>\n" + NEXT
    assert grown.drifts and grown.drifts[0].kind == "text"  # the held text is not the template's


def test_a_finished_reply_holding_a_special_token_gets_only_the_rest_of_its_closing(tokenizer):
    start, end = (tokenizer.convert_tokens_to_ids(token) for token in ("<|im_start|>", "<|im_end|>"))
    text, _ = continued(tokenizer, ids(tokenizer, "go") + [start] + ids(tokenizer, "up") + [end], "stop")
    assert text == "\n" + NEXT


def test_a_plain_cut_reply_is_closed_as_before(tokenizer):
    text, grown = continued(tokenizer, ids(tokenizer, "go up"), "length")
    assert text == "<|im_end|>\n" + NEXT and grown.drifts == []

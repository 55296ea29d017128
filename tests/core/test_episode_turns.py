"""The turns of a multi-turn episode: each message's role, text and token span, from the action mask."""

from __future__ import annotations

from types import SimpleNamespace

from trivium.core.episode_turns import episode_turns, latest_reply, message_text


def test_each_message_gets_the_span_of_the_tokens_that_hold_it():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "obs"},
        {"role": "assistant", "content": "B"},
        {"role": "tool", "content": "t1"},
        {"role": "tool", "content": "t2"},
        {"role": "assistant", "content": "C"},
    ]
    # 5 prompt tokens, then: A (2 model tokens), obs (3), B (1), both tools (4), C (3)
    mask = [True, True, False, False, False, True, False, False, False, False, True, True, True]
    turns = episode_turns(messages=messages, prompt_messages=2, prompt_length=5, action_mask=mask)
    spans = [(t["role"], t["text"], t["start"], t["end"], t["trained"]) for t in turns]
    assert spans == [
        ("system", "Be brief.", 0, 5, False),
        ("user", "Go.", 0, 5, False),
        ("assistant", "A", 5, 7, True),
        ("user", "obs", 7, 10, False),
        ("assistant", "B", 10, 11, True),
        ("tool", "t1", 11, 15, False),  # messages added together share their span
        ("tool", "t2", 11, 15, False),
        ("assistant", "C", 15, 18, True),
    ]


def test_a_reply_prefix_is_not_part_of_the_models_text():
    messages = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "Sure: A"}]
    (_, reply) = episode_turns(
        messages=messages, prompt_messages=1, prompt_length=4, action_mask=[True, True], reply_prefix="Sure: "
    )
    assert (reply["text"], reply["start"], reply["end"]) == ("A", 4, 6)


def test_the_latest_reply_is_the_last_model_turn_or_the_response_of_a_single_turn():
    turns = [
        {"role": "user", "text": "Go.", "trained": False},
        {"role": "assistant", "text": "R", "trained": True},
    ]
    assert latest_reply(SimpleNamespace(info={"turns": turns}, response_text="everything")) == "R"
    assert latest_reply(SimpleNamespace(info={"turns": turns[:1]}, response_text="")) == ""
    assert latest_reply(SimpleNamespace(info={}, response_text="only reply")) == "only reply"


def test_content_given_as_parts_is_read_as_its_text():
    assert message_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    assert message_text(None) == ""

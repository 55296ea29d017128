import pytest

from trivium.buffer.formatters import DPOFormatter, SFTFormatter
from trivium.errors import UserError

S, E = "<|im_start|>", "<|im_end|>"


def fmt(**keys):
    base = {"prompt_type": "plaintext", "prompt_key": "prompt", "response_key": "response",
            "messages_key": "messages", "chosen_key": "chosen", "rejected_key": "rejected"}
    return {**base, **keys}


def labelled(tokenizer, experience):
    """[(token, trained?)] for the whole sequence; prompt tokens are never trained."""
    pieces = tokenizer.convert_ids_to_tokens(experience.tokens.tolist())
    flags = [False] * experience.prompt_length + experience.action_mask.tolist()
    assert len(flags) == len(pieces)
    return list(zip(pieces, flags))


def test_plaintext_masks_the_prompt(tokenizer):
    row = {"prompt": "what is two plus three ?", "response": "five"}
    exp = SFTFormatter(tokenizer, fmt(system_prompt="you are helpful")).format(row)
    assert labelled(tokenizer, exp) == [
        (S, False), ("system", False), ("you", False), ("are", False), ("helpful", False), (E, False),
        (S, False), ("user", False), ("what", False), ("is", False), ("two", False), ("plus", False),
        ("three", False), ("?", False), (E, False),
        (S, False), ("assistant", False),
        ("five", True), (E, True),
    ]
    assert exp.prompt_length == 17


def test_system_prompt_key_wins_and_tools_reach_the_template(tokenizer):
    row = {"prompt": "hi", "response": "hello", "sys": "ok", "tools": [{"name": "calc"}]}
    exp = SFTFormatter(tokenizer, fmt(system_prompt="ignored", system_prompt_key="sys", tools_key="tools")).format(row)
    pieces = [p for p, _ in labelled(tokenizer, exp)]
    assert pieces[:6] == [S, "system", "tools", ":", "calc", E]
    assert pieces[6:10] == [S, "system", "ok", E]
    assert [p for p, trained in labelled(tokenizer, exp) if trained] == ["hello", E]


DIALOGUE = [
    {"role": "user", "content": "two plus two ?"},
    {"role": "assistant", "content": "four"},
    {"role": "user", "content": "thanks"},
    {"role": "assistant", "content": "welcome"},
    {"role": "user", "content": "bye"},
]


def test_messages_trains_only_the_last_assistant_turn(tokenizer):
    exp = SFTFormatter(tokenizer, fmt(prompt_type="messages")).format({"messages": DIALOGUE})
    trained = [p for p, flag in labelled(tokenizer, exp) if flag]
    assert trained == ["welcome", E]
    # The trailing user turn is dropped: the sequence ends with the trained turn.
    assert tokenizer.convert_ids_to_tokens(exp.tokens[-2:].tolist()) == ["welcome", E]


def test_concatenated_multi_turn_trains_every_assistant_turn(tokenizer):
    formatter = SFTFormatter(tokenizer, fmt(prompt_type="messages", enable_concatenated_multi_turn=True))
    exp = formatter.format({"messages": DIALOGUE})
    assert labelled(tokenizer, exp)[exp.prompt_length - 2 :] == [
        (S, False), ("assistant", False),
        ("four", True), (E, True),
        (S, False), ("user", False), ("thanks", False), (E, False),
        (S, False), ("assistant", False),
        ("welcome", True), (E, True),
    ]


def test_a_dialogue_is_rendered_at_its_trained_turns_and_the_tools_checked_once(tokenizer, monkeypatch):
    rendered_tools = []
    render = tokenizer.apply_chat_template

    def counting(*args, **kwargs):
        rendered_tools.append(kwargs.get("tools"))
        return render(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "apply_chat_template", counting)
    formatter = SFTFormatter(
        tokenizer, fmt(prompt_type="messages", tools_key="tools", enable_concatenated_multi_turn=True)
    )
    row = {"messages": DIALOGUE, "tools": [{"name": "calc"}]}
    first = formatter.format(row)
    # Up to each of the two trained turns and to its end; once more without the tools, to see
    # that the template reads them.
    assert len(rendered_tools) == 5 and rendered_tools.count(None) == 1
    rendered_tools.clear()
    second = formatter.format(row)
    assert len(rendered_tools) == 4 and None not in rendered_tools
    assert first.tokens.tolist() == second.tokens.tolist()
    assert [p for p, trained in labelled(tokenizer, first) if trained] == ["four", E, "welcome", E]


def test_dpo_pair_is_chosen_then_rejected_with_one_group(tokenizer):
    row = {"prompt": "two plus three ?", "chosen": "five", "rejected": "six"}
    chosen, rejected = DPOFormatter(tokenizer, fmt()).format_pair(row, group_id="pair-1")
    assert chosen.group_id == rejected.group_id == "pair-1"
    assert (chosen.info["dpo"], rejected.info["dpo"]) == ("chosen", "rejected")
    assert chosen.prompt_length == rejected.prompt_length
    assert [p for p, f in labelled(tokenizer, chosen) if f] == ["five", E]
    assert [p for p, f in labelled(tokenizer, rejected) if f] == ["six", E]


def test_dpo_with_messages(tokenizer):
    row = {"messages": [{"role": "user", "content": "hi"}],
           "chosen": [{"role": "assistant", "content": "hello"}],
           "rejected": [{"role": "assistant", "content": "wrong answer"}]}
    chosen, rejected = DPOFormatter(tokenizer, fmt(prompt_type="messages")).format_pair(row, "g")
    assert [p for p, f in labelled(tokenizer, rejected) if f] == ["wrong", "answer", E]
    assert chosen.tokens[: chosen.prompt_length].tolist() == rejected.tokens[: rejected.prompt_length].tolist()


def test_chat_template_override(tokenizer):
    template = (
        "{% for m in messages %}{% if m.role == 'assistant' %}: {% endif %}{{ m.content }} {% endfor %}"
        "{% if add_generation_prompt %}: {% endif %}"
    )
    exp = SFTFormatter(tokenizer, fmt(chat_template=template)).format({"prompt": "hi", "response": "ok"})
    assert labelled(tokenizer, exp) == [("hi", False), (":", False), ("ok", True)]


def test_bad_rows_are_clear(tokenizer):
    with pytest.raises(UserError, match="format.response_key"):
        SFTFormatter(tokenizer, fmt()).format({"prompt": "hi"})
    with pytest.raises(UserError, match="no assistant turn"):
        SFTFormatter(tokenizer, fmt(prompt_type="messages")).format({"messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(UserError, match="prefix"):
        reversing = "{% for m in messages|reverse %}{{ m.content }} {% endfor %}"
        SFTFormatter(tokenizer, fmt(chat_template=reversing)).format({"prompt": "hi", "response": "ok"})

"""A three-turn episode sampled by the tiny model records its turns, and its ``response_text``
holds every turn after the prompt; a caller's ``max_tokens`` and ``model.max_response_tokens``
combine by the smaller."""

from __future__ import annotations

import pytest

from trivium.core.episode_turns import latest_reply
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper

TASK = [{"role": "system", "content": "Walk."}, {"role": "user", "content": "Find the goal."}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return create_engine("hf", model_path=tiny_model_dir, seed=0)


def play_three_turns(wrapper: ModelWrapper):
    messages, replies = list(TASK), []
    for turn in range(3):
        (experience,) = wrapper.chat(messages, seed=turn)
        replies.append(latest_reply(experience))
        messages += [
            {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": f"Step {turn + 1}."},
        ]
    return experience, replies


def test_a_three_turn_episode_records_each_message_and_its_trained_span(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=3, max_model_len=256)
    episode, replies = play_three_turns(wrapper)
    turns = episode.info["turns"]
    assert [(t["role"], t["trained"]) for t in turns] == [
        ("system", False),
        ("user", False),
        ("assistant", True),
        ("user", False),
        ("assistant", True),
        ("user", False),
        ("assistant", True),
    ]
    assert [t["text"] for t in turns if t["role"] == "user"] == ["Find the goal.", "Step 1.", "Step 2."]
    assert [t["text"] for t in turns if t["trained"]] == replies
    # The trained spans are exactly the action mask's model runs, and hold the replies' tokens.
    mask = [False] * episode.prompt_length + episode.action_mask.tolist()
    trained = [i for i, value in enumerate(mask) if value]
    assert [i for t in turns if t["trained"] for i in range(t["start"], t["end"])] == trained
    tokens = episode.tokens.tolist()
    for turn in turns:
        if turn["trained"]:
            text = engine.tokenizer.decode(tokens[turn["start"] : turn["end"]], skip_special_tokens=True)
            assert text == turn["text"]
    assert turns[0]["end"] == episode.prompt_length and turns[-1]["end"] == len(tokens)
    # response_text: every turn after the prompt, in order, not the last reply only.
    text = episode.response_text
    positions = [text.index(piece) for piece in (replies[0], "Step 1.", replies[1], "Step 2.")]
    assert positions == sorted(positions)
    assert text.endswith(replies[2]) and len(text) > len(replies[2]) + len("Step 1.Step 2.")


def test_a_single_turn_keeps_its_reply_as_response_text_and_records_no_turns(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=3, max_model_len=256)
    (experience,) = wrapper.chat(TASK, seed=0)
    assert "turns" not in experience.info
    assert latest_reply(experience) == experience.response_text


@pytest.mark.parametrize(
    ("max_response_tokens", "max_tokens", "expected"),
    [(4, 10, 4), (4, 2, 2), (None, 3, 3), (4, None, 4)],
)
def test_the_smaller_of_max_tokens_and_max_response_tokens_wins(
    engine, max_response_tokens, max_tokens, expected
):
    wrapper = ModelWrapper(engine, max_response_tokens=max_response_tokens, max_model_len=256)
    args = {"min_tokens": 10} if max_tokens is None else {"min_tokens": 10, "max_tokens": max_tokens}
    (experience,) = wrapper.chat(TASK, seed=0, **args)
    assert experience.response_length == expected


def test_max_model_len_caps_both(engine):
    prompt = ModelWrapper(engine, max_response_tokens=1, max_model_len=256).chat(TASK)[0].prompt_length
    wrapper = ModelWrapper(engine, max_response_tokens=50, max_model_len=prompt + 5)
    (experience,) = wrapper.chat(TASK, seed=0, max_tokens=40, min_tokens=40)
    assert experience.response_length == 5

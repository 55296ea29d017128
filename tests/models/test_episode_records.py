"""With ``enable_history``, every multi-turn episode is recorded once, whole, even when episodes
running at the same time say exactly the same things.

Greedy sampling makes every episode of the task sample the same replies, so their
conversations are equal message for message; each episode's later turn must still replace
its own earlier record, never another episode's.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from trivium.core.episode_turns import latest_reply
from trivium.errors import UserError
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper

TASK = [{"role": "user", "content": "Find the goal."}]
TURNS = 3
EPISODES = 4


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return create_engine("hf", model_path=tiny_model_dir, seed=0)


def make_wrapper(engine) -> ModelWrapper:
    return ModelWrapper(
        engine, max_response_tokens=3, max_model_len=256, enable_history=True,
        default_rollout_args={"temperature": 0.0},
    )


def play(client, started: threading.Barrier) -> list[str]:
    """One episode through an OpenAI-style client: every episode waits for all first replies,
    so each continues while the others' equal conversations are remembered too."""
    messages = list(TASK)
    replies = []
    for turn in range(TURNS):
        reply = client.chat.completions.create(messages=messages).choices[0].message
        replies.append(reply.content)
        if turn == 0:
            started.wait(timeout=60)
        messages += [reply.model_dump(exclude_none=True), {"role": "user", "content": "Go on."}]
    return replies


def run_concurrently(episode, count: int) -> list:
    results, errors = [None] * count, []

    def run(index: int) -> None:
        try:
            results[index] = episode(index)
        except Exception as error:  # noqa: BLE001 - surfaced by the assert below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def assert_whole_episode(record, replies: list[str]) -> None:
    assert record.info["model_turns"] == TURNS
    assert latest_reply(record) == replies[-1]
    # One run of trained tokens per model turn: the environment's turns in between are not trained.
    mask = record.action_mask.tolist()
    assert sum(1 for i, trained in enumerate(mask) if trained and (i == 0 or not mask[i - 1])) == TURNS


def test_concurrent_workflow_views_with_equal_replies_each_record_their_whole_episode(engine):
    wrapper = make_wrapper(engine)
    views = [wrapper.for_workflow() for _ in range(EPISODES)]
    started = threading.Barrier(EPISODES)
    replies = run_concurrently(lambda index: play(views[index].openai_client(), started), EPISODES)
    assert all(r == replies[0] for r in replies)  # the episodes really are equal, turn for turn

    for view in views:
        (record,) = view.extract_experience_from_history()  # one record: no stale first turn
        assert_whole_episode(record, replies[0])
    assert wrapper.extract_experience_from_history() == []


def test_concurrent_episodes_of_one_wrapper_with_equal_replies_are_recorded_once_each(engine):
    wrapper = make_wrapper(engine)
    started = threading.Barrier(EPISODES)
    replies = run_concurrently(lambda index: play(wrapper.openai_client(), started), EPISODES)
    assert all(r == replies[0] for r in replies)

    records = wrapper.extract_experience_from_history()
    assert len(records) == EPISODES
    for record in records:
        assert_whole_episode(record, replies[0])


def test_equal_samples_of_one_call_continued_apart_are_two_records_not_three(engine):
    wrapper = make_wrapper(engine)
    first, second = wrapper.chat(TASK, n=2)
    assert first.response_text == second.response_text and torch.equal(first.tokens, second.tokens)
    reply = {"role": "assistant", "content": first.response_text}

    async def continue_both():
        return await asyncio.gather(
            wrapper.chat_async(TASK + [reply, {"role": "user", "content": "Left."}]),
            wrapper.chat_async(TASK + [reply, {"role": "user", "content": "Right."}]),
        )

    (left,), (right,) = asyncio.run(continue_both())
    records = wrapper.extract_experience_from_history()
    assert len(records) == 2  # each sample continued once; no first turn left behind
    assert sorted(r.info["conversation_id"] for r in records) == sorted(
        [left.info["conversation_id"], right.info["conversation_id"]]
    )
    assert all(r.info["model_turns"] == 2 for r in records)


def test_a_conversation_continued_twice_is_two_branches(engine):
    wrapper = make_wrapper(engine)
    (first,) = wrapper.chat(TASK)
    history = TASK + [{"role": "assistant", "content": first.response_text}]
    wrapper.chat(history + [{"role": "user", "content": "Left."}])
    wrapper.chat(history + [{"role": "user", "content": "Right."}])
    records = wrapper.extract_experience_from_history()
    # The first turn was replaced by its first continuation; the second one is a branch of its own.
    assert sorted(r.info["model_turns"] for r in records) == [2, 2]


def test_a_turn_that_fails_leaves_its_conversation_to_the_retry(engine):
    wrapper = make_wrapper(engine)
    first, second = wrapper.chat(TASK, n=2)
    assert torch.equal(first.tokens, second.tokens)
    reply = {"role": "assistant", "content": first.response_text}
    left = TASK + [reply, {"role": "user", "content": "Left."}]
    with pytest.raises(UserError, match="Unknown rollout argument"):
        wrapper.chat(left, temprature=0.5)
    wrapper.chat(left)  # the retry continues the sample the failed turn had taken
    wrapper.chat(TASK + [reply, {"role": "user", "content": "Right."}])
    records = wrapper.extract_experience_from_history()
    assert sorted(r.info["model_turns"] for r in records) == [2, 2]

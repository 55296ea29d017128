"""The models' OpenAI-compatible HTTP endpoints for workflows: a session per workflow, recorded token-exactly.

A real server (uvicorn) and the official ``openai`` client, as an agent framework would use them.
"""

from __future__ import annotations

import gc
import threading

import httpx
import openai
import pytest
import torch

from trivium.core.episode_turns import latest_reply
from trivium.errors import UserError
from trivium.explorer.workflow_api import WorkflowApi
from trivium.models.engine import create_engine
from trivium.models.wrapper import ModelWrapper


@pytest.fixture(scope="module")
def wrapper(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    return ModelWrapper(engine, max_response_tokens=4, max_model_len=256, enable_history=True)


@pytest.fixture(scope="module")
def api(wrapper):
    served = WorkflowApi([wrapper], host="127.0.0.1")
    yield served
    served.close()


def test_a_workflow_session_over_http_is_recorded_in_that_workflow_only(wrapper, api):
    view = api.bind(wrapper, wrapper.for_workflow())
    other = api.bind(wrapper, wrapper.for_workflow())
    assert view.openai_base_url.startswith("http://127.0.0.1:") and "/sessions/" in view.openai_base_url
    assert view.openai_base_url != other.openai_base_url

    client = view.get_openai_client()
    messages = [{"role": "user", "content": "Where to?"}]
    first = client.chat.completions.create(model="policy", messages=messages, n=2, logprobs=True, max_tokens=3)
    assert len(first.choices) == 2 and first.choices[0].logprobs.content
    follow_up = messages + [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Then?"}]
    client.chat.completions.create(model="policy", messages=follow_up, max_tokens=3)
    other.get_openai_client().chat.completions.create(model="policy", messages=messages, max_tokens=2)

    recorded = view.extract_experience_from_history()
    assert len(recorded) == 2  # the continued branch, and the other first-turn sample
    episode = max(recorded, key=lambda e: e.tokens.numel())
    assert episode.info["model_turns"] == 2
    # The HTTP reply's logprobs are the experience's, token for token.
    logprobs = torch.tensor([t.logprob for t in first.choices[0].logprobs.content])
    assert torch.allclose(episode.logprobs[: len(logprobs)], logprobs)
    assert len(other.extract_experience_from_history()) == 1
    assert wrapper.extract_experience_from_history() == []  # the shared wrapper records nothing


def test_concurrent_workflows_keep_their_histories_apart(wrapper, api):
    views = [api.bind(wrapper, wrapper.for_workflow()) for _ in range(6)]
    counts: dict[int, int] = {}

    def episode(index: int) -> None:
        client = views[index].get_openai_client()
        for turn in range(index % 3 + 1):
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": f"{index}-{turn}"}],
                                           max_tokens=2)
        counts[index] = len(views[index].extract_experience_from_history())

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(len(views))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert counts == {i: i % 3 + 1 for i in range(len(views))}


def test_concurrent_sessions_with_equal_replies_each_record_their_whole_episode(wrapper, api):
    """Greedy episodes of one task say the same thing; each session still replaces its own turns."""
    episodes, turns = 4, 3
    views = [api.bind(wrapper, wrapper.for_workflow()) for _ in range(episodes)]
    first_turns_done = threading.Barrier(episodes)
    replies: dict[int, list[str]] = {}

    def episode(index: int) -> None:
        client = views[index].get_openai_client()
        messages = [{"role": "user", "content": "Where to?"}]
        said = []
        for turn in range(turns):
            reply = client.chat.completions.create(
                model="policy", messages=messages, temperature=0.0, max_tokens=3).choices[0].message
            said.append(reply.content)
            if turn == 0:
                first_turns_done.wait(timeout=60)
            messages += [reply.model_dump(exclude_none=True), {"role": "user", "content": "Then?"}]
        replies[index] = said

    threads = [threading.Thread(target=episode, args=(i,)) for i in range(episodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(replies) == episodes and all(said == replies[0] for said in replies.values())
    for view in views:
        (record,) = view.extract_experience_from_history()  # no first turn left behind
        assert record.info["model_turns"] == turns and latest_reply(record) == replies[0][-1]


def test_a_recorded_turn_with_return_token_ids_gives_its_prompt_ids_too(wrapper, api):
    view = api.bind(wrapper, wrapper.for_workflow())
    client = view.get_openai_client()
    messages = [{"role": "user", "content": "Where to?"}]
    with_ids = {"return_token_ids": True}
    first = client.chat.completions.create(model="policy", messages=messages, max_tokens=3, extra_body=with_ids)
    follow_up = messages + [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Then?"}]
    second = client.chat.completions.create(model="policy", messages=follow_up, max_tokens=3, extra_body=with_ids)

    (episode,) = view.extract_experience_from_history()
    tokens = episode.tokens.tolist()
    first_prompt, first_reply = first.model_extra["prompt_token_ids"], first.choices[0].model_extra["token_ids"]
    assert first_prompt == tokens[: episode.prompt_length]
    # A later turn's prompt is the episode so far: the first prompt, the reply, the new message.
    second_prompt = second.model_extra["prompt_token_ids"]
    assert second_prompt[: len(first_prompt) + len(first_reply)] == first_prompt + first_reply
    assert second_prompt + second.choices[0].model_extra["token_ids"] == tokens
    assert len(second_prompt) == second.usage.prompt_tokens
    plain = client.chat.completions.create(model="policy", messages=messages, max_tokens=2)
    assert "prompt_token_ids" not in (plain.model_extra or {})


def test_the_plain_endpoint_records_nothing_and_an_ended_session_is_404(wrapper, api):
    plain = openai.OpenAI(base_url=api.urls[0], api_key="none", max_retries=0)
    plain.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert wrapper.extract_experience_from_history() == []

    view = api.bind(wrapper, wrapper.for_workflow())
    url = view.openai_base_url
    del view
    gc.collect()
    gone = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="no running workflow"):
        gone.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    # Rewards come from the workflow: the workflow endpoints take no /feedback.
    root = api.urls[0].removesuffix("/v1")
    assert httpx.post(f"{root}/feedback", json={"session_id": "x", "reward": 1.0}).status_code == 404


def test_a_model_without_the_endpoint_says_which_key_turns_it_on(wrapper):
    with pytest.raises(UserError, match="enable_openai_api"):
        wrapper.for_workflow().get_openai_client()


def test_with_an_api_key_only_clients_that_send_it_are_served(wrapper, monkeypatch):
    from trivium.runtime.explorer_settings import api_key_from_env

    monkeypatch.setenv("TRIVIUM_TEST_API_KEY", "s3cret")
    key = api_key_from_env("TRIVIUM_TEST_API_KEY")
    served = WorkflowApi([wrapper], host="127.0.0.1", api_key=key)
    try:
        view = served.bind(wrapper, wrapper.for_workflow())
        assert view.openai_api_key == "s3cret"
        reply = view.get_openai_client().chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        assert reply.choices
        stranger = openai.OpenAI(base_url=view.openai_base_url, api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            stranger.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    finally:
        served.close()
    monkeypatch.delenv("TRIVIUM_TEST_API_KEY")
    with pytest.raises(UserError, match="explorer.api_key_env names the environment variable 'TRIVIUM_TEST_API_KEY'"):
        api_key_from_env("TRIVIUM_TEST_API_KEY")

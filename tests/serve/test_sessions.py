"""Serve mode's sessions over HTTP: recorded token-exactly, rewarded once, committed as experiences.

A real uvicorn server on 127.0.0.1 (a free port) in front of the tiny hf engine, with a
session recorder writing to a list; driven by the official ``openai`` package, httpx and
``trivium.serve.Client``.
"""

from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import torch

from trivium.explorer.explorer import Explorer
from trivium.models.engine import create_engine
from trivium.models.served_sessions import Session, SessionRecorder
from trivium.models.server import SESSION_HEADER, VERSION_HEADER, serve_in_thread
from trivium.models.wrapper import ModelWrapper
from trivium.serve import Client, ServeError

QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def wrapper(engine):
    wrapper = ModelWrapper(engine, max_response_tokens=6, max_model_len=160)
    yield wrapper
    wrapper.close()


@pytest.fixture(scope="module")
def written():
    return []


@pytest.fixture(scope="module")
def commits():
    return []


@pytest.fixture(scope="module")
def server(engine, wrapper, written, commits):
    # rloo's advantages are simple to check by hand: each reward minus the mean of the others.
    explorer = Explorer(taskset_reader=None, writer=None, runner_pool=None, batch_size=1, advantage_fn="rloo")
    recorder = SessionRecorder(wrappers=[wrapper], write=written.extend, prepare=explorer.prepare_for_training,
                               on_commit=commits.append)
    with serve_in_thread(engine, model_name="policy", sessions=recorder) as url:
        yield url


@pytest.fixture()
def fresh(written):
    written.clear()
    return written


@pytest.fixture(scope="module")
def openai_client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def client(server):
    with Client(server) as client:
        yield client


def chat(openai_client, session_id, messages, **kwargs):
    return openai_client.chat.completions.create(
        model="policy", messages=messages, max_tokens=4, extra_headers={SESSION_HEADER: session_id},
        extra_body={"return_token_ids": True}, **kwargs,
    )


def test_a_multi_turn_session_is_one_token_sequence_with_the_engines_ids(openai_client, client, fresh):
    first = chat(openai_client, "two-turns", QUESTION)
    reply = first.choices[0].message.content
    second = chat(openai_client, "two-turns", [*QUESTION, {"role": "assistant", "content": reply},
                                               {"role": "user", "content": "And 3 + 4?"}])
    assert client.feedback("two-turns", 0.5) == {"session_id": "two-turns", "reward": 0.5, "experiences": 1,
                                                 "model_version": 0}
    assert client.commit() == {"sessions": 1, "experiences": 1, "model_version": 0}

    [experience] = fresh
    turn_1, turn_2 = first.choices[0].model_extra["token_ids"], second.choices[0].model_extra["token_ids"]
    response = experience.tokens[experience.prompt_length:].tolist()
    mask = experience.action_mask.tolist()
    # Turn 1's sampled ids open the response, the template's ids for the new user message follow
    # (not trained), and turn 2's sampled ids end it: nothing was decoded and encoded again.
    assert response[: len(turn_1)] == turn_1 and response[-len(turn_2):] == turn_2
    assert mask[: len(turn_1)] == [True] * len(turn_1) and mask[-len(turn_2):] == [True] * len(turn_2)
    assert sum(mask) == len(turn_1) + len(turn_2) and not all(mask)
    assert experience.prompt_length == first.usage.prompt_tokens
    assert experience.reward == 0.5 and experience.task_id == "two-turns"
    assert experience.info["session_id"] == "two-turns" and experience.info["model_turns"] == 2
    # return_token_ids also gives the prompt's ids: for turn 2, the whole episode before its reply.
    assert first.model_extra["prompt_token_ids"] == experience.tokens[: experience.prompt_length].tolist()
    assert second.model_extra["prompt_token_ids"] + turn_2 == experience.tokens.tolist()
    turns = experience.info["turns"]
    assert [(t["role"], t["trained"]) for t in turns[-3:]] == [("assistant", True), ("user", False), ("assistant", True)]
    assert turns[-2]["text"] == "And 3 + 4?"


def test_sessions_that_sample_the_same_first_reply_each_stay_one_whole_record(openai_client, client, fresh):
    # Greedy: both sessions sample the same first reply, then each continues its own conversation.
    firsts = {sid: chat(openai_client, sid, QUESTION, temperature=0.0) for sid in ("same-a", "same-b")}
    assert len({tuple(c.choices[0].model_extra["token_ids"]) for c in firsts.values()}) == 1
    for sid, first in firsts.items():
        follow_up = [*QUESTION, {"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": f"Now for {sid}?"}]
        chat(openai_client, sid, follow_up, temperature=0.0)
        assert client.feedback(sid, 1.0)["experiences"] == 1
    assert client.commit()["experiences"] == 2
    assert sorted(e.task_id for e in fresh) == ["same-a", "same-b"]
    assert all(e.info["model_turns"] == 2 for e in fresh)


def test_every_sampled_branch_becomes_an_experience(openai_client, client, fresh):
    completion = chat(openai_client, "branches", QUESTION, n=2)
    assert len(completion.choices) == 2
    client.feedback("branches", 1.0, info={"judge": "ok"})
    assert client.commit()["experiences"] == 2
    assert [e.tokens[e.prompt_length:].tolist() for e in fresh] == [
        c.model_extra["token_ids"] for c in completion.choices
    ]
    assert all(e.info["feedback"] == {"judge": "ok"} for e in fresh)
    assert fresh[0].run_id == 0 and fresh[1].run_id == 1


def test_sessions_of_a_group_get_group_advantages(openai_client, client, fresh, commits):
    for session_id, reward in (("g1", 1.0), ("g2", 0.0), ("g3", 0.5)):
        chat(openai_client, session_id, QUESTION)
        client.feedback(session_id, reward, group_id="question-1")
    chat(openai_client, "alone", QUESTION)
    client.feedback("alone", 0.25)
    assert client.commit() == {"sessions": 4, "experiences": 4, "model_version": 0}
    advantages = {e.task_id: e.advantages.unique().tolist() for e in fresh}
    # rloo: a_i = r_i - mean of the others' rewards in the group
    assert advantages["g1"] == [pytest.approx(1.0 - 0.25)]
    assert advantages["g2"] == [pytest.approx(0.0 - 0.75)]
    assert advantages["g3"] == [pytest.approx(0.0)]
    assert advantages["alone"] == [pytest.approx(0.25)]  # a group of one: baseline 0
    assert {e.group_id for e in fresh if e.task_id != "alone"} == {"question-1"}
    assert next(e.group_id for e in fresh if e.task_id == "alone").startswith("commit-")
    assert commits[-1].metrics["rollout/reward_mean"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.25) / 4)
    assert commits[-1].metrics["serve/sessions"] == 4.0


def test_feedback_on_an_unknown_session_is_a_404_that_says_so(client):
    with pytest.raises(ServeError) as refused:
        client.feedback("never-seen", 1.0)
    assert refused.value.status == 404
    assert "unknown session id 'never-seen'" in str(refused.value) and "X-Session-Id" in str(refused.value)


def test_feedback_twice_is_a_409_and_a_rewarded_session_takes_no_more_turns(openai_client, client, fresh):
    chat(openai_client, "twice", QUESTION)
    client.feedback("twice", 1.0)
    with pytest.raises(ServeError) as refused:
        client.feedback("twice", 0.0)
    assert refused.value.status == 409 and "already has reward 1.0" in str(refused.value)
    with pytest.raises(openai.ConflictError, match="got its reward already"):
        chat(openai_client, "twice", QUESTION)
    client.commit()
    with pytest.raises(ServeError) as after_commit:
        client.feedback("twice", 0.0)
    assert after_commit.value.status == 409 and "committed already" in str(after_commit.value)


def test_commit_with_nothing_rewarded_is_a_200_with_zero_counts(openai_client, server, fresh):
    chat(openai_client, "not-yet-rewarded", QUESTION)
    openai_client.chat.completions.create(model="policy", messages=QUESTION, max_tokens=2)  # no session: not recorded
    response = httpx.post(f"{server.removesuffix('/v1')}/commit")  # no body at all
    assert response.status_code == 200
    assert response.json() == {"sessions": 0, "experiences": 0, "model_version": 0}
    assert fresh == []


def test_malformed_feedback_is_a_400_naming_the_field(server):
    root = server.removesuffix("/v1")
    cases = [
        ({"session_id": "x", "reward": "high"}, "`reward` must be a finite number"),
        # Past ±1e6 a reward overflows its group's advantages: refused like any other reward beyond the rule.
        ({"session_id": "x", "reward": 1e308}, "within ±1e+06 (the rule every reward passes); got 1e+308"),
        ({"reward": 1.0}, "a session id must be a non-empty string"),
        ({"session_id": "x", "reward": 1.0, "score": 2}, "unknown field(s) ['score']"),
        ({"session_id": "x", "reward": 1.0, "info": [1]}, "`info` must be an object"),
    ]
    for body, message in cases:
        response = httpx.post(f"{root}/feedback", json=body)
        assert response.status_code == 400 and message in response.json()["error"]["message"], body


def test_malformed_session_requests_are_a_400_and_record_nothing(server, fresh):
    root = server.removesuffix("/v1")
    cases = [
        ({"max_tokens": 0}, "`max_tokens` must be a positive integer"),
        ({"temperature": -1}, "temperature must be >= 0"),
        ({"stop": ["\n"]}, "`stop` is not supported in recorded sessions"),
        ({"n": 100}, "n=100 is over this server's limit"),
        ({"temperature": "hot"}, "`temperature` must be a number"),
    ]
    for extra, message in cases:
        response = httpx.post(f"{root}/v1/chat/completions", headers={SESSION_HEADER: "malformed"},
                              json={"model": "policy", "messages": QUESTION, **extra})
        assert response.status_code == 400 and message in response.json()["error"]["message"], extra
    assert httpx.post(f"{root}/feedback", json={"session_id": "malformed", "reward": 1}).status_code == 404


def test_every_response_carries_the_served_model_version(engine, openai_client, server):
    root = server.removesuffix("/v1")
    state = {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}
    engine.update_weights(state, 7)
    try:
        raw = openai_client.chat.completions.with_raw_response.create(
            model="policy", messages=QUESTION, max_tokens=2, extra_headers={SESSION_HEADER: "versioned"})
        completion = raw.parse()
        assert raw.headers[VERSION_HEADER] == "7"
        assert completion.model_extra["model_version"] == 7 and completion.system_fingerprint == "trivium-v7"
        assert httpx.get(f"{root}/health").headers[VERSION_HEADER] == "7"
        refused = httpx.post(f"{root}/feedback", json={"session_id": "nobody", "reward": 1})
        assert refused.status_code == 404 and refused.headers[VERSION_HEADER] == "7"
    finally:
        engine.update_weights(state, 0)


def test_fifty_concurrent_sessions_complete(server, fresh):
    def episode(index: int) -> int:
        with Client(server) as client:
            session_id = client.new_session()
            reply = client.chat(QUESTION, session_id=session_id, max_tokens=3)
            assert reply["choices"][0]["message"]["role"] == "assistant" and reply["session_id"] == session_id
            client.feedback(session_id, float(index % 2), group_id=str(index % 5))
            return reply["model_version"]

    with ThreadPoolExecutor(max_workers=50) as pool:
        versions = list(pool.map(episode, range(50)))
    assert versions == [0] * 50
    with Client(server) as client:
        assert client.commit()["sessions"] == 50
    assert len(fresh) == 50 and len({e.task_id for e in fresh}) == 50


def test_a_continuing_turn_replaces_the_branch_it_extends():
    session = Session("s", wrapper=None)

    def experience(tokens):
        from trivium.core.experience import Experience

        return Experience(tokens=torch.tensor(tokens), prompt_length=2)

    session.record(experience([1, 2, 3]))
    session.record(experience([1, 2, 4]))  # a sibling: both kept
    session.record(experience([1, 2, 3, 9, 5]))  # continues the first
    assert [b.tokens.tolist() for b in session.branches] == [[1, 2, 4], [1, 2, 3, 9, 5]]


def test_chat_template_kwargs_other_than_enable_thinking_are_refused(openai_client, fresh):
    def ask(template_kwargs):
        return openai_client.chat.completions.create(
            model="policy", messages=QUESTION, max_tokens=4, extra_headers={SESSION_HEADER: "template-kwargs"},
            extra_body={"chat_template_kwargs": template_kwargs},
        )

    with pytest.raises(openai.BadRequestError, match=r"\['add_vision_id'\] are not supported; only enable_thinking is"):
        ask({"add_vision_id": True})
    with pytest.raises(openai.BadRequestError, match="enable_thinking` must be true or false"):
        ask({"enable_thinking": "no"})
    assert ask({"enable_thinking": False}).choices[0].message.content is not None

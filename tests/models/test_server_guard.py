"""The model server refuses bad requests with 4xx and a message, and holds up under 50 concurrent clients.

A real uvicorn server on 127.0.0.1 (a free port) in front of the tiny hf engine; real clients
(the official ``openai`` package and httpx).
"""

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from trivium.models.engine import create_engine
from trivium.models.server import serve_in_thread
from trivium.models.server_guard import ServerLimits, exposure_warning

LIMITS = ServerLimits(max_request_bytes=20_000, max_n=4, max_prompts=8)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = create_engine("hf", model_path=tiny_model_dir, seed=0)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    with serve_in_thread(engine, model_name="tiny", limits=LIMITS) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server, api_key="unused", max_retries=0)


def test_binds_loopback_by_default(server):
    assert server.startswith("http://127.0.0.1:")


def test_listening_beyond_loopback_warns():
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("::1", None) is None
    assert exposure_warning("localhost", None) is None
    assert exposure_warning("0.0.0.0", None) == (
        "the model server listens on every network interface, not only on this machine: "
        "anyone who can reach this machine can use the model; set --api-key"
    )
    assert "requests need the API key" in exposure_warning("0.0.0.0", "secret")


def test_n_over_the_limit_is_a_400_before_any_work(client):
    start = time.perf_counter()
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="tiny", prompt="hello", n=100000, max_tokens=4)
    assert time.perf_counter() - start < 5
    assert refused.value.status_code == 400
    assert "n=100000 is over this server's limit of 4 samples per prompt (--max-n)" in str(refused.value)
    with pytest.raises(openai.BadRequestError, match="9 prompts in one request is over this server's limit of 8"):
        client.completions.create(model="tiny", prompt=["a"] * 9, max_tokens=1)


def test_invalid_message_role_is_a_400_naming_the_message(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"},
                                                               {"role": "wizard", "content": "x"}])
    assert "messages[1].role is 'wizard'; it must be one of system, developer, user, assistant, tool" in str(refused.value)


def test_wrong_model_name_is_a_404_like_openai(client):
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], max_tokens=1)
    assert refused.value.status_code == 404
    assert refused.value.body["code"] == "model_not_found"
    assert "the model `gpt-4o` does not exist; this server serves `tiny`" in refused.value.body["message"]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"this is not json", "the request body must be a JSON object: JSON decode error"),
        (b"[1, 2, 3]", "the request body must be a JSON object: Input should be a valid dictionary"),
        (b'{"messages": "hi"}', "`messages` must be a non-empty list of {role, content} objects"),
        (b'{"messages": [{"role": "user", "content": 5}]}', "messages[0].content must be a string or a list of parts, got int"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "n": "many"}', "invalid sampling parameters"),
    ],
)
def test_malformed_bodies_are_400_with_a_message_never_a_bare_500(server, content, message):
    response = httpx.post(f"{server}/chat/completions", content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith(message)


def test_request_over_the_size_limit_is_a_413(server):
    response = httpx.post(f"{server}/completions", json={"model": "tiny", "prompt": "word " * 5000, "max_tokens": 1})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == (
        f"the request body is {len(response.request.content)} bytes, over this server's limit of 20000 (--max-request-bytes)"
    )


def test_api_key_is_required_when_set(engine):
    with serve_in_thread(engine, model_name="tiny", api_key="s3cret") as url:
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200  # health stays open
        with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        assert httpx.get(f"{url}/models").status_code == 401
        models = openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0).models.list()
        assert [m.id for m in models.data] == ["tiny"]


@pytest.mark.slow
def test_fifty_concurrent_clients_are_all_served(server):
    """A bounded load test: 50 clients at once, 2 requests each, on loopback."""

    def one_client(index: int) -> list[int]:
        statuses = []
        with httpx.Client(base_url=server, timeout=60) as http:
            for turn in range(2):
                response = http.post("/completions", json={
                    "model": "tiny", "prompt": f"client {index} turn {turn}", "max_tokens": 2, "temperature": 0})
                statuses.append(response.status_code)
                assert len(response.json()["choices"]) == 1
        return statuses

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=50) as pool:
        statuses = [status for result in pool.map(one_client, range(50)) for status in result]
    elapsed = time.perf_counter() - start
    assert statuses == [200] * 100
    assert elapsed < 60, f"100 requests from 50 clients took {elapsed:.1f}s"

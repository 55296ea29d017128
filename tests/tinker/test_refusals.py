"""What the server refuses, and how: a missing key, an oversized body, what it does not serve."""

import httpx
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types

from trivium.tinker_server.server import build_state, serve_in_thread

SERVER_KEY = "tml-secret-key"
MAX_BYTES = 4096


@pytest.fixture(scope="module")
def guarded_url(tiny_model_dir, tmp_path_factory):
    state = build_state([f"tiny={tiny_model_dir}"], str(tmp_path_factory.mktemp("guarded")))
    with serve_in_thread(state, api_key=SERVER_KEY, max_request_bytes=MAX_BYTES) as url:
        yield url


def test_a_request_without_the_key_is_refused(guarded_url):
    assert httpx.post(f"{guarded_url}/api/v1/create_session", json={}).status_code == 401
    wrong = httpx.post(f"{guarded_url}/api/v1/create_session", json={}, headers={"X-API-Key": "tml-wrong"})
    assert wrong.status_code == 401
    bearer = httpx.post(
        f"{guarded_url}/api/v1/create_session", json={}, headers={"Authorization": f"Bearer {SERVER_KEY}"}
    )
    assert bearer.status_code == 200 and bearer.json()["session_id"]
    with pytest.raises(tinker.AuthenticationError):
        tinker.ServiceClient(base_url=guarded_url, api_key="tml-wrong").create_lora_training_client(
            base_model="tiny", rank=4
        ).result()


def test_a_body_over_the_bound_is_refused(guarded_url):
    headers = {"X-API-Key": SERVER_KEY}
    big = httpx.post(
        f"{guarded_url}/api/v1/create_session",
        content=b"{" + b" " * MAX_BYTES + b"}",
        headers={**headers, "Content-Type": "application/json"},
    )
    assert big.status_code == 413 and "limit" in big.json()["detail"]

    def chunks():
        for _ in range(4):
            yield b" " * (MAX_BYTES // 2)

    streamed = httpx.post(f"{guarded_url}/api/v1/session_heartbeat", content=chunks(), headers=headers)
    assert streamed.status_code == 413


def test_an_unserved_loss_function_names_the_served_ones(training_client):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7]),
        loss_fn_inputs={"target_tokens": [6, 7, 8], "logprobs": [0.0] * 3, "advantages": [1.0] * 3},
    )
    with pytest.raises(tinker.BadRequestError, match="cross_entropy, importance_sampling"):
        training_client.forward_backward([datum], "ppo").result()


def test_missing_loss_inputs_are_named(service_client):
    client = service_client.create_lora_training_client(base_model="tiny", rank=4).result()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7]), loss_fn_inputs={"target_tokens": [6, 7, 8]}
    )
    with pytest.raises(tinker.BadRequestError, match="missing \\['logprobs', 'advantages'\\]"):
        client.forward_backward([datum], "importance_sampling").result()


def test_an_unserved_endpoint_is_a_404_naming_the_served_ones(tinker_url):
    answer = httpx.post(f"{tinker_url}/api/v1/save_weights_external", json={})
    assert answer.status_code == 404
    assert "POST /api/v1/forward_backward" in answer.json()["detail"]


def test_an_unknown_base_model_is_refused(service_client):
    with pytest.raises(tinker.BadRequestError, match="served: \\['tiny'\\]"):
        service_client.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=4).result()

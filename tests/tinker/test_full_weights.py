"""A create_model request without a LoRA config trains every weight (driven over HTTP, as the SDK sends it)."""

import httpx
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output

HEADERS = {"X-API-Key": "tml-local"}


def result(url: str, future: dict, protobuf: bool = False):
    accept = {"Accept": "application/x-protobuf"} if protobuf else {}
    while True:
        answer = httpx.post(
            f"{url}/api/v1/retrieve_future",
            json={"request_id": future["request_id"]},
            headers={**HEADERS, **accept},
            timeout=60,
        )
        if answer.status_code != 408:
            return answer.content if protobuf else answer.json()


def test_a_model_without_lora_trains_all_weights(tinker_url):
    session = httpx.post(f"{tinker_url}/api/v1/create_session", json={}, headers=HEADERS).json()["session_id"]
    created = httpx.post(
        f"{tinker_url}/api/v1/create_model",
        headers=HEADERS,
        json={"session_id": session, "model_seq_id": 0, "base_model": "tiny"},
    ).json()
    model_id = result(tinker_url, created)["model_id"]
    info = httpx.post(f"{tinker_url}/api/v1/get_info", json={"model_id": model_id}, headers=HEADERS).json()
    assert info["is_lora"] is False and info["lora_rank"] is None

    datum = types.Datum(
        model_input=types.ModelInput.from_ints([20, 21, 14, 22]),
        loss_fn_inputs={"target_tokens": [21, 14, 22, 23], "weights": [1.0] * 4},
    )

    def forward_backward() -> float:
        request = types.ForwardBackwardRequest(
            forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy"),
            model_id=model_id,
            seq_id=1,
        )
        body = forward_backward_request_to_proto(request).SerializeToString()
        future = httpx.post(
            f"{tinker_url}/api/v1/forward_backward",
            content=body,
            headers={**HEADERS, "Content-Type": "application/x-protobuf"},
        ).json()
        return deserialize_forward_backward_output(result(tinker_url, future, protobuf=True)).metrics[
            "loss:sum"
        ]

    def optim_step() -> dict:
        future = httpx.post(
            f"{tinker_url}/api/v1/optim_step",
            headers=HEADERS,
            json={"model_id": model_id, "adam_params": {"learning_rate": 1e-3}},
        ).json()
        return result(tinker_url, future)

    first = forward_backward()
    assert optim_step()["metrics"]["grad_norm:mean"] > 0
    assert forward_backward() < first - 0.5

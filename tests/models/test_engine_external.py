"""The external engine against a local OpenAI-compatible completions server.

The server (started here on 127.0.0.1) answers /v1/completions from a real hf engine, in the
token-id dialect vLLM servers speak, so the external engine's results can be compared with
the hf engine's own.
"""

import socket
import threading
import time

import pytest
import torch
import uvicorn
from fastapi import FastAPI

from trivium.errors import UserError
from trivium.models.engine import SamplingParams, create_engine


def completions_app(engine) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [{"id": "tiny", "object": "model", "created": 0, "owned_by": "test"}],
        }

    @app.post("/v1/completions")
    def completions(body: dict):
        prompt = body["prompt"]
        if body.get("echo"):
            scored = engine.compute_logprobs([prompt], [1])[0].tolist()
            logprobs = {"tokens": [f"token_id:{t}" for t in prompt], "token_logprobs": [None] + scored}
            choices = [{"index": 0, "text": "", "logprobs": logprobs, "finish_reason": "length"}]
        else:
            params = SamplingParams(
                temperature=body["temperature"],
                top_p=body["top_p"],
                top_k=body["top_k"],
                repetition_penalty=body["repetition_penalty"],
                max_tokens=body["max_tokens"],
                min_tokens=body["min_tokens"],
                n=body["n"],
                seed=body.get("seed"),
                stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            )
            outputs = engine.generate([prompt], params)[0]
            choices = [
                {
                    "index": i,
                    "text": o.text,
                    "finish_reason": o.finish_reason,
                    "logprobs": {
                        "tokens": [f"token_id:{t}" for t in o.token_ids],
                        "token_logprobs": o.logprobs,
                    },
                }
                for i, o in enumerate(outputs)
            ]
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": "tiny",
            "choices": choices,
        }

    return app


@pytest.fixture(scope="module")
def server(qwen2_path):
    engine = create_engine("hf", model_path=qwen2_path, seed=0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(completions_app(engine), host="127.0.0.1", port=port, log_level="warning")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not uvicorn_server.started and time.time() < deadline:
        time.sleep(0.05)
    yield engine, f"http://127.0.0.1:{port}/v1"
    uvicorn_server.should_exit = True
    thread.join(timeout=10)


def test_external_engine_reads_the_url_from_the_named_env_var(server, qwen2_path, monkeypatch):
    hf_engine, url = server
    monkeypatch.setenv("MY_TEST_BASE_URL", url)
    engine = create_engine(
        "external", model_path=qwen2_path, base_url_env="MY_TEST_BASE_URL", api_key_env="NOPE"
    )
    assert engine.model_name == "tiny"
    prompts = [[11, 25, 37], [40, 41]]
    params = SamplingParams(temperature=0, max_tokens=6, min_tokens=6, n=2)
    remote = engine.generate(prompts, params)
    local = hf_engine.generate(prompts, params)
    assert [[o.token_ids for o in group] for group in remote] == [
        [o.token_ids for o in group] for group in local
    ]
    assert remote[0][0].prompt_ids == prompts[0] and remote[0][0].finish_reason == "length"
    assert torch.allclose(torch.tensor(remote[1][1].logprobs), torch.tensor(local[1][1].logprobs))
    sequence = prompts[0] + remote[0][0].token_ids
    scored = engine.compute_logprobs([sequence], [3])[0]
    assert torch.allclose(scored, torch.tensor(remote[0][0].logprobs), atol=1e-4)
    with pytest.raises(NotImplementedError, match="cannot be synchronized"):
        engine.update_weights({}, version=1)
    engine.close()


def test_missing_base_url_names_the_env_var(qwen2_path, monkeypatch):
    monkeypatch.delenv("UNSET_URL_VAR", raising=False)
    with pytest.raises(UserError, match="UNSET_URL_VAR"):
        create_engine("external", model_path=qwen2_path, base_url_env="UNSET_URL_VAR")


def test_vllm_engine_without_vllm_is_a_clear_error(qwen2_path):
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="needs the vllm package"):
            create_engine("vllm", model_path=qwen2_path)
    else:
        pytest.skip("vllm is installed; this checks the message shown when it is not")

"""The OpenAI-compatible model server, checked with real clients against the engine it serves.

The server runs in a thread of this process around a real hf engine (the tiny Llama), so
every answer can be compared with the engine's own result for the same request.
"""

import httpx
import pytest
import torch
from openai import BadRequestError, OpenAI

from trivium.debug.remote_engine import RemoteEngine, ServerUnreachable, check_server
from trivium.errors import UserError
from trivium.models.engine import SamplingParams, create_engine
from trivium.models.server import free_port, serve_in_thread


@pytest.fixture(scope="module")
def served(debug_assets):
    engine = create_engine("hf", model_path=debug_assets["model"], seed=0)
    with serve_in_thread(engine, model_name="tiny") as url:
        yield engine, url, OpenAI(base_url=url, api_key="unused")


def test_health_and_models_name_the_served_model(served):
    _, url, client = served
    assert check_server(url) == {"status": "ok", "model": "tiny", "model_path": None, "model_version": 0}
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_remote_engine_is_token_exact_with_the_engine_it_calls(served, debug_assets):
    engine, url, _ = served
    remote = RemoteEngine(url, tokenizer_path=debug_assets["model"])
    prompts = [[5, 6, 7], [40, 41, 42, 43]]
    params = [SamplingParams(temperature=1.0, max_tokens=6, min_tokens=6, n=2, seed=11),
              SamplingParams(temperature=0.0, max_tokens=4, min_tokens=4)]
    over_http = remote.generate(prompts, params)
    in_process = engine.generate(prompts, params)
    for remote_group, local_group in zip(over_http, in_process):
        assert [o.token_ids for o in remote_group] == [o.token_ids for o in local_group]
        for remote_output, local_output in zip(remote_group, local_group):
            assert remote_output.logprobs == pytest.approx(local_output.logprobs, abs=1e-6)
            assert remote_output.prompt_ids == local_output.prompt_ids
            assert remote_output.finish_reason == "length" and remote_output.model_version == 0
    # Scoring the sampled sequence gives back the sampling logprobs.
    sample = over_http[0][1]
    scored = remote.compute_logprobs([sample.prompt_ids + sample.token_ids], [3])[0]
    assert torch.allclose(scored, torch.tensor(sample.logprobs), atol=1e-4)
    with pytest.raises(NotImplementedError, match="server"):
        remote.update_weights({}, version=1)
    remote.close()


def test_external_engine_speaks_to_it_in_token_ids(served, debug_assets):
    engine, url, _ = served
    external = create_engine("external", model_path=debug_assets["model"], base_url=url, api_key="unused")
    assert external.model_name == "tiny"
    params = SamplingParams(temperature=0.0, max_tokens=5, min_tokens=5, n=2)
    remote = external.generate([[9, 10, 11]], params)[0]
    local = engine.generate([[9, 10, 11]], params)[0]
    assert [o.token_ids for o in remote] == [o.token_ids for o in local]
    assert remote[0].logprobs == pytest.approx(local[0].logprobs, abs=1e-6)
    # compute_logprobs goes through /v1/completions with echo=True.
    sequence = [9, 10, 11] + remote[0].token_ids
    assert torch.allclose(external.compute_logprobs([sequence], [3])[0], torch.tensor(local[0].logprobs), atol=1e-4)
    external.close()


def test_chat_completion_returns_the_tokens_and_logprobs_behind_its_text(served):
    engine, _, client = served
    response = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "What is 2 + 3?"}], max_tokens=6, temperature=0,
        logprobs=True, extra_body={"return_token_ids": True, "min_tokens": 6},
    )
    choice = response.choices[0]
    token_ids, prompt_ids = choice.model_extra["token_ids"], response.model_extra["prompt_token_ids"]
    assert len(token_ids) == 6 and response.usage.completion_tokens == 6
    assert response.usage.prompt_tokens == len(prompt_ids)
    assert choice.message.content == engine.tokenizer.decode(token_ids, skip_special_tokens=True)
    greedy = engine.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=6, min_tokens=6))[0][0]
    assert token_ids == greedy.token_ids
    assert [t.logprob for t in choice.logprobs.content] == pytest.approx(greedy.logprobs, abs=1e-6)


def test_text_completion_with_echo_scores_the_prompt(served):
    engine, _, client = served
    response = client.completions.create(model="tiny", prompt="1 + 1 =", max_tokens=3, temperature=0,
                                         logprobs=0, echo=True, extra_body={"min_tokens": 3})
    values = response.choices[0].logprobs.token_logprobs
    prompt_ids = engine.tokenizer("1 + 1 =")["input_ids"]
    assert len(values) == len(prompt_ids) + 3 and values[0] is None
    expected_prompt = engine.compute_logprobs([prompt_ids], [1])[0]
    assert torch.allclose(torch.tensor(values[1 : len(prompt_ids)]), expected_prompt, atol=1e-4)
    assert response.choices[0].text.startswith(engine.tokenizer.decode(prompt_ids))


def test_bad_requests_get_a_400_that_says_what_to_change(served, debug_assets):
    _, url, client = served
    with pytest.raises(BadRequestError, match="streaming is not supported"):
        client.completions.create(model="tiny", prompt="hi", stream=True)
    with pytest.raises(BadRequestError, match="temperature must be >= 0"):
        client.completions.create(model="tiny", prompt="hi", temperature=-1)
    answer = httpx.post(f"{url}/trivium/generate", json={"prompts": [[1, 2]], "params": {"temprature": 1}})
    assert answer.status_code == 400 and "temprature" in answer.json()["error"]["message"]
    remote = RemoteEngine(url, tokenizer_path=debug_assets["model"])
    with pytest.raises(UserError, match="token ids outside"):
        remote.generate([[10**6]], SamplingParams(max_tokens=2))
    remote.close()


def test_nothing_listening_is_a_clear_error():
    with pytest.raises(ServerUnreachable, match=r"no trivium model server answers at http://127.0.0.1:\d+/health"):
        check_server(f"http://127.0.0.1:{free_port()}/v1", timeout=2)

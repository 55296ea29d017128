"""``mode: serve`` with two engines end to end: sessions and evaluations spread over both, weights
roll into both while the run trains, and a run whose engines fail their health checks ends
naming the key."""

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from trivium.models.engine import create_engine
from trivium.models.server import free_port, serve_in_thread

from .conftest import read_metrics
from .test_serve_mode_learns import (
    serve_config,
    short_answer,
    start_run,
    wait_for_newer_weights,
    wait_until_up,
)

SESSIONS = 8  # one trainer batch per round
HELD_OUT = {
    "name": "held_out", "storage_type": "file", "split": "test",
    "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
}


def play_short_round(client: openai.OpenAI, root: str, round_number: int) -> list[int]:
    """SESSIONS one-turn episodes, rewarded in groups of 4 and committed; the version of each answer."""

    def episode(index: int) -> int:
        session_id = uuid.uuid4().hex
        question = f"What is {round_number} + {index // 4}?"
        completion = client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": question}],
            extra_headers={"X-Session-Id": session_id},
        )
        reward = short_answer(completion.choices[0].message.content)
        httpx.post(
            f"{root}/feedback", json={"session_id": session_id, "reward": reward, "group_id": question}
        )
        return completion.model_extra["model_version"]

    with ThreadPoolExecutor(SESSIONS) as pool:
        versions = list(pool.map(episode, range(SESSIONS)))
    assert httpx.post(f"{root}/commit").json()["sessions"] == SESSIONS
    return versions


@pytest.mark.slow
def test_a_serve_run_with_two_engines_trains_and_rolls_the_weights_into_both(assets, tmp_path):
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    config = serve_config(assets, tmp_path / "runs", port)
    config["buffer"]["train_batch_size"] = SESSIONS
    config["trainer"]["total_steps"] = 2
    config["explorer"].update(
        rollout_model={"engine_num": 2}, min_running_model_num=1, service_status_check_interval=5,
        eval_on_startup=True, eval_interval=2,
    )
    config["buffer"]["explorer_input"] = {
        "default_workflow_type": "math", "eval_tasksets": [HELD_OUT | {"path": assets["data"]}]
    }
    run, exit_codes = start_run(config, tmp_path)
    wait_until_up(root, run)
    # The evaluation at start samples through the pool, as every call does: the pool counts its calls.
    wait_for_answered_calls(root, run)
    client = openai.OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    assert play_short_round(client, root, 0) == [0] * SESSIONS
    wait_for_newer_weights(root, 0, run)
    engines = httpx.get(f"{root}/engines").json()
    assert [(e["status"], e["model_version"]) for e in engines["engines"]] == [("serving", 1), ("serving", 1)]
    assert all(e["calls_answered"] > 0 for e in engines["engines"]), engines  # the sessions used both
    assert play_short_round(client, root, 1) == [1] * SESSIONS
    run.join(timeout=120)
    assert not run.is_alive() and exit_codes == [0]
    records = read_metrics(tmp_path / "runs" / "e2e" / "serve")
    assert len([r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]) == 2
    assert [r["explorer/model_version"] for r in records if "serve/sessions" in r] == [0.0, 1.0]
    assert [r["step"] for r in records if "eval/held_out/accuracy" in r] == [0, 2]  # at start, after 2 commits


def wait_for_answered_calls(root: str, run, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.is_alive():
        engines = httpx.get(f"{root}/engines").json()["engines"]
        if sum(engine["calls_answered"] for engine in engines) > 0:
            return
        time.sleep(0.2)
    raise AssertionError("no call reached the pool: the evaluation at start sampled around it")


@pytest.mark.slow
def test_a_serve_run_ends_when_fewer_engines_pass_their_checks_than_min_running(assets, tmp_path, caplog):
    """Both rollout engines are ``external`` ones calling a model server that then goes away."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    backend = create_engine("hf", model_path=assets["model"], seed=0)
    config = serve_config(assets, tmp_path / "runs", port)
    config["explorer"].update(min_running_model_num=2, service_status_check_interval=2)
    with serve_in_thread(backend, model_name="policy") as url:
        config["explorer"]["rollout_model"] = {"engine_type": "external", "engine_num": 2}
        config["model"]["external_model"] = {"base_url_env": "SERVE_POOL_TEST_URL", "model_name": "policy"}
        with pytest.MonkeyPatch.context() as env:
            env.setenv("SERVE_POOL_TEST_URL", url)
            run, exit_codes = start_run(config, tmp_path)
            wait_until_up(root, run)
            engines = httpx.get(f"{root}/engines").json()["engines"]
            assert [e["status"] for e in engines] == ["serving", "serving"]
    backend.close()
    run.join(timeout=60)  # the model server is gone: the next health check fails
    assert not run.is_alive() and exit_codes and exit_codes[0] != 0
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "explorer.min_running_model_num=2" in logged and "engine 0: its health check" in logged, logged

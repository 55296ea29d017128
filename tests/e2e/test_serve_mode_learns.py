"""``mode: serve`` end to end: an application drives episodes with the official ``openai`` client,
posts rewards, commits, and the run trains on them, updating the weights it serves.

The toy objective is the one the algorithm tests use, short answers: the untrained tiny model
rambles to its token limit, and the served policy should learn to stop sooner.
"""

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from trivium.cli.main import main
from trivium.models.server import free_port
from trivium.runtime import stopping
from trivium.trainer import checkpoint as ckpt

from .conftest import read_metrics, write_config

STEPS = 12
GROUPS, GROUP_SIZE = 8, 4  # one trainer batch: 8 questions, 4 sessions each


def short_answer(text: str) -> float:
    return max(0.0, 1.0 - len(text) / 24)


def serve_config(assets: dict, run_root, port: int) -> dict:
    return {
        "project": "e2e", "name": "serve", "mode": "serve", "checkpoint_root_dir": str(run_root),
        "continue_from_checkpoint": False, "seed": 0,
        "model": {"model_path": assets["model"], "max_prompt_tokens": 32, "max_response_tokens": 8,
                  "max_model_len": 40},
        "cluster": {"gpu_per_node": 0, "placement": "process"},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": GROUP_SIZE, "optimizer": {"lr": 5e-3}},
        "buffer": {
            "batch_size": GROUPS, "train_batch_size": GROUPS * GROUP_SIZE,
            "trainer_input": {"experience_buffer": {"name": "served", "storage_type": "queue",
                                                    "max_read_timeout": 120}},
        },
        "explorer": {"proxy_port": port},
        "trainer": {"total_steps": STEPS, "use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 16,
                    "save_hf_checkpoint": "never"},
        "synchronizer": {"sync_interval": 1, "sync_timeout": 120},
    }


def wait_until_up(root: str, run: threading.Thread, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and run.is_alive():
        try:
            if httpx.get(f"{root}/health").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the serve-mode API did not come up")


def play_round(client: openai.OpenAI, root: str, rng: random.Random) -> tuple[float, list[int]]:
    """One trainer batch of episodes: each question answered in GROUP_SIZE sessions, rewarded, committed."""
    questions = [f"What is {rng.randint(10, 49)} + {rng.randint(10, 49)}?" for _ in range(GROUPS)]

    def episode(index: int) -> tuple[float, int]:
        session_id = uuid.uuid4().hex
        question = questions[index // GROUP_SIZE]
        completion = client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": question}],
            extra_headers={"X-Session-Id": session_id},
        )
        reward = short_answer(completion.choices[0].message.content)
        feedback = httpx.post(f"{root}/feedback",
                              json={"session_id": session_id, "reward": reward, "group_id": question})
        assert feedback.status_code == 200, feedback.text
        return reward, completion.model_extra["model_version"]

    with ThreadPoolExecutor(max_workers=GROUPS * GROUP_SIZE) as pool:
        results = list(pool.map(episode, range(GROUPS * GROUP_SIZE)))
    committed = httpx.post(f"{root}/commit", json={}).json()
    assert committed["sessions"] == GROUPS * GROUP_SIZE, committed
    return sum(r for r, _ in results) / len(results), [v for _, v in results]


def wait_for_newer_weights(root: str, version: int, run: threading.Thread, timeout: float = 120) -> None:
    """On-policy pacing: the next round waits for the weights trained on this one."""
    deadline = time.monotonic() + timeout
    while run.is_alive() and time.monotonic() < deadline:
        try:
            if httpx.get(f"{root}/health").json()["model_version"] > version:
                return
        except httpx.TransportError:  # the run reached its last step and stopped serving
            return
        time.sleep(0.1)


def start_run(config: dict, tmp_path) -> tuple[threading.Thread, list[int]]:
    """``trivium run`` in a thread of this process; its exit code lands in the list."""
    exit_codes: list[int] = []
    path = write_config(tmp_path, config)
    run = threading.Thread(target=lambda: exit_codes.append(main(["run", "--config", path])), daemon=True)
    run.start()
    return run, exit_codes


@pytest.mark.slow
def test_serve_mode_trains_on_rewarded_sessions_and_serves_the_new_weights(assets, tmp_path):
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    run, exit_codes = start_run(serve_config(assets, tmp_path / "runs", port), tmp_path)
    wait_until_up(root, run)
    client = openai.OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
    rng = random.Random(0)
    rewards, versions = [], []
    for _ in range(STEPS):
        reward, round_versions = play_round(client, root, rng)
        rewards.append(reward)
        versions.append(max(round_versions))
        wait_for_newer_weights(root, max(round_versions), run)
    run.join(timeout=120)
    assert not run.is_alive() and exit_codes == [0]

    records = read_metrics(tmp_path / "runs" / "e2e" / "serve")
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    assert len(trainer_steps) == STEPS
    # Round k was served by the weights of k trainer steps: every sync reached the engine.
    assert versions == list(range(STEPS)), versions
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward {first:.3f} -> {last:.3f}: {rewards}"
    committed = [r for r in records if r["role"] == "explorer" and "serve/sessions" in r]
    assert [r["explorer/step"] for r in committed] == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_a_stop_request_ends_a_serve_run_that_waits_for_sessions(assets, tmp_path):
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    config = serve_config(assets, tmp_path / "runs", port)
    config["buffer"]["train_batch_size"] = 4
    config["trainer"]["total_steps"] = 100
    run, exit_codes = start_run(config, tmp_path)
    try:
        wait_until_up(root, run)
        client = openai.OpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0)
        for index in range(4):
            session = {"X-Session-Id": f"episode-{index}"}
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}],
                                           extra_headers=session)
            httpx.post(f"{root}/feedback", json={"session_id": f"episode-{index}", "reward": index / 4})
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "Hi"}],
                                       extra_headers={"X-Session-Id": "left-open"})
        assert httpx.post(f"{root}/commit").json()["sessions"] == 4
        wait_for_newer_weights(root, 0, run)
        # The trainer now waits for a second batch that never comes; a stop request ends the run.
        stopping.request_stop("the test is done")
        run.join(timeout=60)
        assert not run.is_alive() and exit_codes == [0]
        assert ckpt.latest_checkpoint(tmp_path / "runs" / "e2e" / "serve") == 1
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{root}/health")
    finally:
        stopping.reset()

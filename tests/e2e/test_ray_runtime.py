"""Runs placed on Ray: explorer, two engines and the trainer as actors, weights broadcast over gloo.

Each run is a `trivium run` subprocess, as a user starts it, so that Ray's processes belong
to the run and not to the test session; the tests check what the user sees (exit code,
message, metrics, checkpoints) and that no Ray process outlives the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from trivium.data.builder import build_task_data

from .conftest import base_config, read_metrics

pytest.importorskip("ray", reason="Ray is part of the dev extra; these tests need it")

pytestmark = pytest.mark.slow

RAY_PROCESS_NAMES = ("raylet", "gcs_server", "ray::")


def ray_processes() -> set[int]:
    pids = set()
    for process in psutil.process_iter(["pid", "cmdline", "name"]):
        text = " ".join(process.info["cmdline"] or []) + " " + (process.info["name"] or "")
        if any(name in text for name in RAY_PROCESS_NAMES):
            pids.add(process.info["pid"])
    return pids


def trivium(*args: str) -> list[str]:
    return [sys.executable, "-m", "trivium.cli.main", *args]


def ray_config(assets: dict, run_root: Path, **overrides) -> dict:
    config = base_config(
        assets,
        run_root,
        mode="both",
        **{
            "cluster.placement": "ray",
            "explorer.rollout_model.engine_num": 2,
            "synchronizer.sync_method": "nccl",
            "synchronizer.sync_timeout": 120,
            **overrides,
        },
    )
    return config


def write(tmp_path: Path, config: dict, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def run_to_end(config_path: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(trivium("run", "--config", config_path), capture_output=True, text=True, timeout=timeout, env=env)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory, tiny_model_dir) -> dict:
    """The tiny model after a short SFT warm-up on addition: it knows the answer format."""
    root = tmp_path_factory.mktemp("ray_warmup")
    data = build_task_data("arithmetic", root / "data", seed=0, num_train=2000, num_test=64)
    config = base_config({"model": tiny_model_dir, "data": str(data)}, root / "runs", mode="train")
    config["algorithm"] = {"algorithm_type": "sft", "optimizer": {"lr": 3e-3, "lr_warmup_steps": 10}}
    config["buffer"] = {
        "batch_size": 1,
        "train_batch_size": 128,
        "total_steps": 200,
        "trainer_input": {
            "experience_buffer": {
                "name": "sft",
                "storage_type": "file",
                "path": str(data),
                "split": "train",
                "format": {"prompt_key": "question", "response_key": "response"},
                "task_selector": {"selector_type": "shuffle"},
            }
        },
    }
    config["trainer"] = {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 128, "save_hf_checkpoint": "last"}
    result = run_to_end(write(root, config))
    assert result.returncode == 0, result.stderr[-3000:]
    model = root / "runs" / "e2e" / "run" / "global_step_200" / "actor" / "huggingface"
    assert (model / "config.json").exists()
    return {"model": str(model), "data": str(data)}


def test_ray_both_learns_and_leaves_no_ray_process(tmp_path, warm_model):
    before = ray_processes()
    config = ray_config(
        warm_model,
        tmp_path / "runs",
        **{
            "algorithm.repeat_times": 8,
            "buffer.batch_size": 16,
            "buffer.total_steps": 30,
            "synchronizer.sync_offset": 1,
            "explorer.eval_interval": 30,
            "explorer.eval_on_startup": True,
            "explorer.runner_per_model": 4,
            "trainer.ppo_micro_batch_size_per_gpu": 128,
        },
    )
    config["buffer"]["explorer_input"]["eval_tasksets"] = [{
        "name": "test",
        "storage_type": "file",
        "path": warm_model["data"],
        "split": "test",
        "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
        "rollout_args": {"temperature": 0.0},
    }]
    result = run_to_end(write(tmp_path, config))
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "e2e" / "run"
    actors = json.loads((run_dir / "ray_actors.json").read_text())
    assert {"explorer", "trainer", "rollout_engine_0", "rollout_engine_1"} <= set(actors)
    assert len(set(actors.values())) == len(actors), "every actor has a process of its own"
    records = read_metrics(run_dir)
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    syncs = [r for r in records if "sync/bytes" in r]
    assert len(rewards) == 30
    assert syncs and all(r["sync/bytes"] > 0 for r in syncs), "weights travel by broadcast"
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert checks and max(checks) < 1e-3, f"engines serve what the trainer sent: {checks}"
    first, last = sum(rewards[:6]) / 6, sum(rewards[-6:]) / 6
    assert last > first + 0.05 or min(first, last) >= 0.95, f"reward did not rise on Ray: {first:.3f} -> {last:.3f}"
    assert (run_dir / "log" / "rollout_engine_1.log").read_text().count("loaded weight version") >= 5
    assert ray_processes() - before == set(), "the run left Ray processes behind"


def start_run(config_path: str, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        trivium("run", "--config", config_path), stdout=log_path.open("w"), stderr=subprocess.STDOUT, env=env
    )


def explorer_steps(run_dir: Path) -> int:
    if not (run_dir / "metrics.jsonl").exists():
        return 0
    return sum("rollout/reward_mean" in r for r in read_metrics(run_dir))


def test_killing_an_engine_actor_stops_the_run_with_a_message_naming_it(tmp_path, assets):
    before = ray_processes()
    config = ray_config(assets, tmp_path / "runs", **{"buffer.total_steps": 200})
    log = tmp_path / "run.log"
    process = start_run(write(tmp_path, config), log)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    try:
        wait_for(lambda: explorer_steps(run_dir) >= 2, 300, "two explorer steps")
        pid = json.loads((run_dir / "ray_actors.json").read_text())["rollout_engine_1"]
        os.kill(pid, signal.SIGKILL)
        assert process.wait(timeout=300) == 1
    finally:
        if process.poll() is None:
            process.kill()
    output = log.read_text()
    assert "error: the rollout engine 1 actor died" in output, output[-3000:]
    wait_for(lambda: ray_processes() - before == set(), 60, "Ray processes to end")


def test_killing_the_trainer_stops_the_run_and_a_resume_trains_the_remaining_steps(tmp_path, assets):
    config = ray_config(assets, tmp_path / "runs", **{"buffer.total_steps": 8, "trainer.save_interval": 2})
    path = write(tmp_path, config)
    log = tmp_path / "run.log"
    process = start_run(path, log)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    try:
        wait_for(lambda: (run_dir / "global_step_2").exists(), 300, "the first checkpoint")
        pid = json.loads((run_dir / "ray_actors.json").read_text())["trainer"]
        os.kill(pid, signal.SIGKILL)
        assert process.wait(timeout=300) == 1
    finally:
        if process.poll() is None:
            process.kill()
    assert "error: the trainer actor died" in log.read_text()

    config["continue_from_checkpoint"] = True
    result = run_to_end(write(tmp_path, config, "resume.yaml"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "global_step_8").exists()
    steps = [r["step"] for r in read_metrics(run_dir) if "actor/pg_loss" in r]
    assert steps[-1] == 8


def test_a_run_joins_a_cluster_started_with_ray_start(tmp_path, assets):
    ray_cli = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ}
    env.pop("RAY_ADDRESS", None)
    started = subprocess.run(
        [ray_cli, "start", "--head", "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
        capture_output=True, text=True, env=env, timeout=180,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        config = ray_config(assets, tmp_path / "runs", **{"cluster.ray_address": "auto", "buffer.total_steps": 2})
        result = run_to_end(write(tmp_path, config))
        assert result.returncode == 0, result.stderr[-3000:]
        assert (tmp_path / "runs" / "e2e" / "run" / "global_step_2").exists()
        status = subprocess.run([ray_cli, "status"], capture_output=True, text=True, env=env, timeout=120)
        assert status.returncode == 0, "the cluster keeps running after the run"
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True, env=env, timeout=120)

"""Runs placed on Ray: the explorer (hosting two engines, or beside two engine actors, and the
shared experience queue) and the trainer as actors, weights broadcast over gloo.

Each run is a `trivium run` subprocess, as a user starts it, so that Ray's processes belong
to the run and not to the test session; the tests check what the user sees (exit code,
message, metrics, checkpoints) and that no Ray process outlives the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from .conftest import read_metrics
from .ray_helpers import (
    ray_config,
    ray_processes,
    run_to_end,
    short_answer_plugin,
    trivium,
    wait_for,
    write,
)

pytest.importorskip("ray", reason="Ray is part of the dev extra; these tests need it")

pytestmark = [pytest.mark.slow, pytest.mark.ray]

def test_ray_both_learns_and_leaves_no_ray_process(tmp_path, assets):
    before = ray_processes()
    plugins = short_answer_plugin(tmp_path)
    config = ray_config(
        assets,
        tmp_path / "runs",
        **{
            "algorithm.optimizer.lr": 5e-3,
            "buffer.batch_size": 8,
            "buffer.total_steps": 12,
            "buffer.explorer_input.default_reward_fn_type": "short_answer",
            "synchronizer.sync_offset": 1,
            "monitor.enable_ray_timeline": True,
        },
    )
    result = run_to_end(write(tmp_path, config), "--plugin-dir", str(plugins))
    assert result.returncode == 0, result.stderr[-3000:]
    # Ray's own log lines stay off the console at the default log level (local_ray.py).
    ray_lines = re.findall(r".*\t(?:INFO|WARNING) \w+\.py:\d+ -- .*", result.stdout + result.stderr)
    assert ray_lines == [], ray_lines
    run_dir = tmp_path / "runs" / "e2e" / "run"
    actors = json.loads((run_dir / "ray_actors.json").read_text())
    # On a CPU the explorer's actor hosts the engines (cluster.engines_in_explorer: null decides).
    assert set(actors) == {"explorer", "trainer"}, actors
    assert len(set(actors.values())) == len(actors), "every actor has a process of its own"
    records = read_metrics(run_dir)
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    syncs = [r for r in records if "sync/bytes" in r]
    assert len(rewards) == 12
    assert syncs and all(r["sync/bytes"] > 0 for r in syncs), "weights travel by broadcast"
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert checks and max(checks) < 1e-3, f"engines serve what the trainer sent: {checks}"
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    # Six runs started at 0.429-0.451 and rose by 0.10-0.21: a rise of 0.05 is far outside
    # the start's spread and leaves the slowest learner room.
    assert last > first + 0.05, f"reward did not rise on Ray: {first:.3f} -> {last:.3f}"
    assert (run_dir / "log" / "explorer.log").read_text().count("rollout engines loaded weight version") >= 5
    assert json.loads((run_dir / "monitor" / "timeline.json").read_text()), "Ray's timeline of the run"
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
    # An actor per engine, as on GPUs: the engines' weights arrive by broadcast in their own processes.
    config = ray_config(assets, tmp_path / "runs", **{"buffer.total_steps": 200, "cluster.engines_in_explorer": False})
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
    assert "error: the rollout_engine_1 actor died" in output, output[-3000:]
    assert (run_dir / "log" / "rollout_engine_0.log").read_text().count("loaded weight version") >= 1
    wait_for(lambda: ray_processes() - before == set(), 60, "Ray processes to end")


def test_killing_the_trainer_stops_the_run_and_a_resume_trains_the_remaining_steps(tmp_path, assets):
    # Two ranks: the trainer actor and the rank process it started, which must go down with it.
    config = ray_config(assets, tmp_path / "runs", **{
        "buffer.total_steps": 8, "trainer.save_interval": 2, "explorer.rollout_model.engine_num": 1,
        "trainer.trainer_strategy": "fsdp2", "trainer.data_parallel_size": 2,
    })
    path = write(tmp_path, config)
    log = tmp_path / "run.log"
    process = start_run(path, log)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    try:
        wait_for(lambda: (run_dir / "global_step_2").exists(), 300, "the first checkpoint")
        actors = json.loads((run_dir / "ray_actors.json").read_text())
        os.kill(actors["trainer"], signal.SIGKILL)
        assert process.wait(timeout=300) == 1
    finally:
        if process.poll() is None:
            process.kill()
    assert "error: the trainer actor died" in log.read_text()
    wait_for(lambda: not psutil.pid_exists(actors["trainer_rank_1"]), 60, "trainer rank 1 to end")

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
        gcs = [p for p in psutil.process_iter(["cmdline"]) if "gcs_server" in " ".join(p.info["cmdline"] or [])]
        assert gcs, "the cluster the run joined keeps running after it"
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True, env=env, timeout=120)

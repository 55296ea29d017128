"""A run killed with SIGKILL and started again continues from its last checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import base_config, read_metrics, write_config


@pytest.mark.slow
def test_kill_minus_nine_then_resume_continues_from_the_last_checkpoint(assets, tmp_path):
    config = base_config(assets, tmp_path / "runs", continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = 8
    config["trainer"]["save_interval"] = 1
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    command = [sys.executable, "-m", "trivium.cli.main", "run", "--config", config_path]

    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while not (run_dir / "global_step_3" / "actor" / "trainer_state.json").exists():
        assert first.poll() is None, "the first run ended before it could be killed"
        assert time.time() < deadline, "no checkpoint appeared in time"
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = max(int(p.name.split("_")[-1]) for p in run_dir.glob("global_step_*") if not p.name.endswith(".tmp"))
    assert 3 <= killed_at < 8

    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    log = (run_dir / "log" / "trainer.log").read_text()
    assert f"resumed the trainer from global_step_{killed_at}" in log
    trainer_steps = [r["step"] for r in read_metrics(run_dir) if r["role"] == "trainer" and "actor/pg_loss" in r]
    # The second run trains exactly the steps after the checkpoint.
    assert trainer_steps[-(8 - killed_at) :] == list(range(killed_at + 1, 9))
    assert (run_dir / "global_step_8").exists()
    explorer_state = json.loads((run_dir / "global_step_8" / "explorer_state.json").read_text())
    assert explorer_state["step"] == 8


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["colocate", "both"])
def test_a_run_killed_before_its_first_checkpoint_trains_every_step_when_resumed(assets, tmp_path, mode):
    config = base_config(assets, tmp_path / "runs", mode=mode, continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = 6
    config["trainer"]["save_interval"] = 0  # no checkpoint before the end
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    command = [sys.executable, "-m", "trivium.cli.main", "run", "--config", config_path]

    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    position = run_dir / "explorer_state.json"
    while not (position.exists() and json.loads(position.read_text())["step"] >= 2):
        assert first.poll() is None, "the first run ended before it could be killed"
        assert time.time() < deadline, "the explorer made no progress in time"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert not list(run_dir.glob("global_step_*")), "killed before any checkpoint"

    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "no checkpoint to resume from" in second.stderr + second.stdout
    records = read_metrics(run_dir)
    start = max(i for i, r in enumerate(records) if r.get("role") == "explorer" and r.get("explorer/step") == 1.0)
    resumed = records[start:]
    assert [r["step"] for r in resumed if r["role"] == "trainer" and "actor/pg_loss" in r] == list(range(1, 7))
    assert json.loads((run_dir / "global_step_6" / "explorer_state.json").read_text())["step"] == 6

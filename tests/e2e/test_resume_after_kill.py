"""A run killed with SIGKILL and started again continues from its last checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trivium.runtime.trained_samples import duplicated_samples, trained_lineage

from .conftest import base_config, read_metrics, write_config


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


def _kill_when(command, condition, what: str, timeout: float = 240) -> None:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, f"the first run ended before {what}"
        assert time.time() < deadline, f"{what}: not reached in time"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.slow
@pytest.mark.parametrize("storage, sync_style", [("queue", "fixed"), ("sql", "fixed"), ("queue", "fully_async")])
def test_both_mode_with_sync_offset_resumes_without_losing_or_repeating_a_sample(assets, tmp_path, storage, sync_style):
    """Killed after training past its checkpoint, with the explorer a step ahead: the resumed run
    trains every explored sample exactly once and every step of the run."""
    steps, batch, repeat = 9, 4, 4
    config = base_config(assets, tmp_path / "runs", mode="both", continue_from_checkpoint=True)
    config["buffer"]["total_steps"] = steps
    config["trainer"]["save_interval"] = 3
    config["synchronizer"]["sync_offset"] = 1
    config["synchronizer"]["sync_style"] = sync_style
    if storage == "sql":
        config["buffer"]["trainer_input"]["experience_buffer"].update(
            storage_type="sql", path=str(tmp_path / "buffer.db"), max_read_timeout=30
        )
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    command = [sys.executable, "-m", "trivium.cli.main", "run", "--config", config_path]

    def trained_past_the_checkpoint() -> bool:
        return (run_dir / "global_step_3").exists() and 4 in trained_lineage(run_dir)

    _kill_when(command, trained_past_the_checkpoint, "a step trained after checkpoint 3")
    killed_lineage = trained_lineage(run_dir)
    assert max(killed_lineage) < steps

    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    lineage = trained_lineage(run_dir)
    assert list(lineage) == list(range(1, steps + 1))
    assert all(len(samples) == batch * repeat for samples in lineage.values())
    assert duplicated_samples(lineage) == []
    explored_steps = sorted({explore_step for samples in lineage.values() for _, _, explore_step, _ in samples})
    assert explored_steps == list(range(1, steps + 1))
    # No step trained a sample of a policy newer than its own weights.
    for step, samples in lineage.items():
        assert all(version <= step - 1 for *_, version in samples), f"step {step} trained a sample from a later policy"
        # Within the staleness bound (sync_offset 1) through the kill and the resume.
        assert all(version >= step - 2 for *_, version in samples), f"step {step} trained a sample staler than 1"


@pytest.mark.slow
def test_a_resumed_sft_run_reads_on_in_the_dataset_instead_of_starting_it_again(assets, tmp_path):
    from trivium.cli.main import main

    def sft(name: str, total_steps: int, resume: bool) -> dict:
        config = base_config(assets, tmp_path / "runs", mode="train", name=name, continue_from_checkpoint=resume)
        config["algorithm"] = {"algorithm_type": "sft", "optimizer": {"lr": 1e-4}}
        config["trainer"]["save_interval"] = 2
        config["buffer"] = {
            "train_batch_size": 8,
            "total_steps": total_steps,
            "trainer_input": {"experience_buffer": {
                "name": "sft", "storage_type": "file", "path": assets["data"],
                "format": {"prompt_key": "question", "response_key": "response"},
            }},
        }
        return config

    assert main(["run", "--config", write_config(tmp_path, sft("straight", 4, False))]) == 0
    assert main(["run", "--config", write_config(tmp_path, sft("resumed", 2, True))]) == 0
    assert main(["run", "--config", write_config(tmp_path, sft("resumed", 4, True))]) == 0
    straight = trained_lineage(tmp_path / "runs" / "e2e" / "straight")
    resumed = trained_lineage(tmp_path / "runs" / "e2e" / "resumed")
    assert list(resumed) == [1, 2, 3, 4]
    assert [[s[0] for s in resumed[step]] for step in resumed] == [[s[0] for s in straight[step]] for step in straight]
    assert duplicated_samples(resumed) == []


@pytest.mark.slow
def test_resume_at_an_epoch_boundary_trains_the_next_epoch_and_after_the_end_trains_nothing(assets, tmp_path):
    small = tmp_path / "data"
    small.mkdir()
    rows = (Path(assets["data"]) / "train.jsonl").read_text().splitlines()[:16]
    (small / "train.jsonl").write_text("\n".join(rows) + "\n")
    config = base_config(dict(assets, data=str(small)), tmp_path / "runs", continue_from_checkpoint=True)
    config["buffer"].update(total_steps=None, total_epochs=2)  # 16 rows, 4 a step: 4 steps an epoch
    config["algorithm"]["repeat_times"] = 2
    config["trainer"]["save_interval"] = 4
    config_path = write_config(tmp_path, config)
    run_dir = tmp_path / "runs" / "e2e" / "run"
    command = [sys.executable, "-m", "trivium.cli.main", "run", "--config", config_path]
    _kill_when(command, lambda: (run_dir / "global_step_4" / "actor" / "trainer_state.json").exists(), "the epoch's checkpoint")

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lineage = trained_lineage(run_dir)
    assert list(lineage) == list(range(1, 9)) and duplicated_samples(lineage) == []
    epochs = {task_id.split(":")[2] for samples in list(lineage.values())[4:] for task_id, *_ in samples}
    assert epochs == {"1"}, "the steps after the boundary read the second epoch"

    trail = run_dir / "log" / "trained_samples.jsonl"
    lines = len(trail.read_text().splitlines())
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len(trail.read_text().splitlines()) == lines, "a finished run started again trains nothing"

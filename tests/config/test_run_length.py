"""A run whose tasksets (or dataset) cannot fill one step is refused by `plan` and `run` alike, with the numbers."""

from __future__ import annotations

import json

import pytest

from trivium.cli.main import main


def taskset_dir(tmp_path, rows: int):
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    (folder / "train.jsonl").write_text("".join(json.dumps({"question": f"{i}+1", "answer": i + 1}) + "\n"
                                                for i in range(rows)))
    return folder


@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_one_row_taskset_under_a_32_task_batch_is_refused_by_plan_and_run(write_config, tmp_path, capsys, command):
    path = write_config({"mode": "both", "buffer": {
        "batch_size": 32, "explorer_input": {"taskset": {"name": "tasks", "path": str(taskset_dir(tmp_path, 1))}}}})
    assert main([command, "--config", str(path)]) == 2
    error = capsys.readouterr().err
    assert "config.yaml" in error and "buffer.batch_size: one explorer step takes 32 tasks" in error
    assert "has 1 row(s) × buffer.total_epochs 1 = 1 task(s), not one whole step" in error
    assert "Lower buffer.batch_size to at most 1, raise buffer.total_epochs to 32, or set buffer.total_steps" in error
    assert not (tmp_path / "checkpoints").exists()  # refused before anything ran


def test_epochs_count_towards_the_first_step(write_config, tmp_path, capsys):
    data = str(taskset_dir(tmp_path, 1))
    three = write_config({"mode": "colocate", "buffer": {
        "batch_size": 32, "total_epochs": 3, "explorer_input": {"taskset": {"name": "tasks", "path": data}}}})
    assert main(["plan", "--config", str(three)]) == 2
    assert "1 row(s) × buffer.total_epochs 3 = 3 task(s)" in capsys.readouterr().err
    enough = write_config({"mode": "colocate", "buffer": {
        "batch_size": 4, "total_epochs": 4, "explorer_input": {"taskset": {"name": "tasks", "path": data}}}})
    assert main(["plan", "--config", str(enough)]) == 0
    # With buffer.total_steps the taskset is read over again: one row fills any batch.
    cycled = write_config({"mode": "both", "buffer": {
        "batch_size": 32, "total_steps": 2, "explorer_input": {"taskset": {"name": "tasks", "path": data}}}})
    assert main(["plan", "--config", str(cycled)]) == 0


def test_exploration_that_cannot_fill_one_training_batch_is_refused(write_config, tmp_path, capsys):
    path = write_config({"mode": "both", "buffer": {
        "batch_size": 2, "train_batch_size": 64,
        "explorer_input": {"taskset": {"name": "tasks", "path": str(taskset_dir(tmp_path, 2))}}}})
    assert main(["plan", "--config", str(path)]) == 2
    error = capsys.readouterr().err
    assert "buffer.train_batch_size: one training batch takes 64 experiences" in error
    assert "1 step(s) × buffer.batch_size 2 × algorithm.repeat_times 4 = 8, so the trainer would train 0 steps" in error


def test_a_dataset_smaller_than_one_batch_is_refused_in_train_mode(write_config, tmp_path, capsys):
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "train.jsonl").write_text('{"prompt": "a", "response": "b"}\n' * 3)
    path = write_config({"mode": "train", "algorithm": {"algorithm_type": "sft", "repeat_times": 1}, "buffer": {
        "train_batch_size": 8, "trainer_input": {"experience_buffer": {
            "name": "sft", "storage_type": "file", "path": str(sft), "format": {"prompt_type": "plaintext"}}}}})
    assert main(["plan", "--config", str(path)]) == 2
    assert "'sft' (" in (error := capsys.readouterr().err) and "has 3 row(s) × buffer.total_epochs 1 = 3" in error


def test_zero_trainer_steps_are_refused(write_config, capsys):
    path = write_config({"trainer": {"total_steps": 0}})
    assert main(["plan", "--config", str(path)]) == 2
    assert "trainer.total_steps: must be at least 1, got 0" in capsys.readouterr().err

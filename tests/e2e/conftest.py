"""Shared set-up for end-to-end runs: a tiny model, arithmetic data, and a config writer."""

from pathlib import Path

import pytest
import yaml

from trivium.data.builder import build_task_data


@pytest.fixture(scope="session")
def assets(tmp_path_factory, tiny_model_dir) -> dict:
    data = build_task_data("arithmetic", tmp_path_factory.mktemp("assets") / "data", seed=0, num_train=400, num_test=16)
    return {"model": tiny_model_dir, "data": str(data)}


def base_config(assets: dict, run_root: Path, **overrides) -> dict:
    config = {
        "project": "e2e",
        "name": "run",
        "mode": "colocate",
        "checkpoint_root_dir": str(run_root),
        "continue_from_checkpoint": False,
        "seed": 0,
        "model": {"model_path": assets["model"], "max_prompt_tokens": 32, "max_response_tokens": 8, "max_model_len": 40},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-4}},
        "buffer": {
            "batch_size": 4,
            "total_steps": 2,
            "explorer_input": {
                "default_workflow_type": "math",
                "taskset": {
                    "name": "train",
                    "storage_type": "file",
                    "path": assets["data"],
                    "split": "train",
                    "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
                },
            },
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "queue", "max_read_timeout": 60}},
        },
        "explorer": {"runner_per_model": 2, "eval_on_startup": False, "max_timeout": 60},
        "trainer": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 16, "save_hf_checkpoint": "never"},
        "synchronizer": {"sync_interval": 1, "sync_timeout": 120},
    }
    for key, value in overrides.items():
        _set(config, key, value)
    return config


def _set(config: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    for key in keys[:-1]:
        config = config.setdefault(key, {})
    config[keys[-1]] = value


def write_config(tmp_path: Path, config: dict) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def closes_gap(first: float, last: float, *, share: float = 0.25, ceiling: float = 0.95) -> bool:
    """``last`` has closed at least ``share`` of the gap between ``first`` and a perfect 1.0 (or
    both sit at ``ceiling``).

    Where an SFT warm-up leaves the model moves with the machine's floating-point order and the
    library versions (it learns the task abruptly): a fixed rise asks too much of a run that
    starts near the top and too little of one that starts low.
    """
    return last - first >= share * (1.0 - first) or min(first, last) >= ceiling


def read_metrics(run_dir: Path) -> list[dict]:
    import json

    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]

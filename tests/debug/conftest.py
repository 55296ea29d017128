"""A tiny model, arithmetic data and a config for the debug tests; nothing is downloaded."""

from pathlib import Path

import pytest
import yaml

from trivium.data.builder import build_task_data


@pytest.fixture(scope="session")
def debug_assets(tmp_path_factory, tiny_model_dir) -> dict:
    data = build_task_data("arithmetic", tmp_path_factory.mktemp("debug_assets") / "data", seed=0, num_train=8, num_test=2)
    return {"model": tiny_model_dir, "data": str(data)}


def debug_config(assets: dict, root: Path, **taskset_overrides) -> str:
    """Write a small explore config (math workflow, 3 repeats) and return its path."""
    taskset = {
        "name": "arith",
        "storage_type": "file",
        "path": assets["data"],
        "split": "train",
        "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
        **taskset_overrides,
    }
    config = {
        "project": "debug",
        "name": "run",
        "mode": "explore",
        "checkpoint_root_dir": str(root / "runs"),
        "seed": 0,
        "model": {"model_path": assets["model"], "max_prompt_tokens": 32, "max_response_tokens": 8,
                  "max_model_len": 40},
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 3},
        "buffer": {
            "batch_size": 2,
            "total_steps": 1,
            "explorer_input": {"default_workflow_type": "math", "taskset": taskset},
            "trainer_input": {"experience_buffer": {"name": "exp", "storage_type": "sql",
                                                    "path": str(root / "buffer.db")}},
        },
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)

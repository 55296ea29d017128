"""Shared helpers: a small valid CPU config and a way to write variants of it to YAML."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).parent / "fixtures"
DELETE = object()  # in a patch: remove this key

BASE = {
    "project": "demo",
    "name": "unit",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
    "model": {"model_path": "/models/tiny", "max_prompt_tokens": 64, "max_response_tokens": 64},
    "cluster": {"gpu_per_node": 0},
    "buffer": {"batch_size": 2, "explorer_input": {"taskset": {"name": "tasks", "path": "/data/tasks"}}},
}


def patched(patch: dict, base: dict | None = None) -> dict:
    """``base`` with ``patch`` merged in (dicts merge, anything else replaces; DELETE removes)."""
    result = copy.deepcopy(BASE if base is None else base)
    for key, value in patch.items():
        if value is DELETE:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = patched(value, result[key])
        else:
            result[key] = copy.deepcopy(value)
    return result


@pytest.fixture
def write_config(tmp_path, monkeypatch):
    """Write a patched BASE (or raw text) as a YAML file in a scratch working directory."""
    monkeypatch.chdir(tmp_path)

    def write(patch: dict | str | None = None, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        if isinstance(patch, str):
            path.write_text(patch)
        else:
            path.write_text(yaml.safe_dump(patched(patch or {}), sort_keys=False))
        return path

    return write


@pytest.fixture
def seed_env(tmp_path, monkeypatch):
    """Environment variables the seed-derived fixtures read."""
    monkeypatch.chdir(tmp_path)
    values = {
        "HOME": str(tmp_path),
        "MODEL_PATH": str(tmp_path / "models" / "policy"),
        "TRIVIUM_TASKSET_PATH": str(tmp_path / "data" / "tasks"),
        "TRIVIUM_SFT_DATASET_PATH": str(tmp_path / "data" / "sft"),
        "TRIVIUM_DATASET_PATH": str(tmp_path / "data" / "sft"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TRIVIUM_CHECKPOINT_ROOT_DIR", raising=False)
    return values

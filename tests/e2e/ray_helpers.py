"""What the Ray tests share: the run as a `trivium run` subprocess, Ray's processes, the toy reward."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import yaml

from .conftest import base_config

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


def run_to_end(config_path: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    command = trivium("run", "--config", config_path, *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


# The toy objective of the algorithm tests: short answers, which the untrained model learns
# within a few steps. It is a plugin, so the actors must import --plugin-dir too.
SHORT_ANSWER_REWARD = """
from trivium.rewards import REWARD_FNS

@REWARD_FNS.register("short_answer")
def short_answer(*, prompt, response, ground_truth, **kwargs):
    return max(0.0, 1.0 - len(response) / 24)
"""


def short_answer_plugin(tmp_path: Path) -> Path:
    """A plugin directory registering the short-answer reward."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    return plugins

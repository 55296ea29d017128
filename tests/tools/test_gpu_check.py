"""`make gpu-check` cannot run without a GPU; here its checks are listed and every config plans."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trivium.cli.main import main as trivium_main

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_check"]


def test_it_lists_every_check_the_gpu_paths_need(gpu_check, capsys):
    assert gpu_check.main(["--list"]) == 0
    listed = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [
        "vllm_rollouts", "quickstart_grpo", "fsdp2_one_rank", "lora_vllm", "bf16", "nccl_sync", "qwen_shape",
    ]


def test_an_unknown_check_is_refused_with_the_choices(gpu_check, capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--list", "--only", "fp8"])
    assert "unknown check(s) fp8; choose from vllm_rollouts" in capsys.readouterr().err


def test_every_check_config_plans_on_gpus(gpu_check, tmp_path, tiny_model_dir, capsys):
    # The qwen check's shape is a model directory, not config: the tiny model stands in here.
    paths = {"tiny": Path(tiny_model_dir), "qwen": Path(tiny_model_dir), "data": tmp_path / "data"}
    assert trivium_main(["init", "data", "--task", "arithmetic", "--out", str(paths["data"]),
                         "--num-train", "40", "--num-test", "8"]) == 0
    gpu_check.write_configs(tmp_path, list(gpu_check.CHECKS), paths)
    for check in gpu_check.CHECKS:
        capsys.readouterr()
        assert trivium_main(["plan", "--config", str(tmp_path / "configs" / f"{check.name}.yaml")]) == 0, check.name
        plan = capsys.readouterr().out
        assert f"GPU(s) = 1 node(s) × {check.gpus}" in plan, (check.name, plan)


def test_a_failed_self_check_fails_the_check(gpu_check):
    check = gpu_check.CHECKS[0]
    records = [{"rollout/reward_mean": 0.1, "actor/pg_loss": 0.2, "sync/max_logprob_diff": 0.5}]
    assert "engine disagrees with the trainer" in gpu_check.judge(check, 0, "", records)
    records[0]["sync/max_logprob_diff"] = 1e-4
    assert gpu_check.judge(check, 0, "", records) == ""
    assert gpu_check.judge(check, 1, "error: CUDA out of memory\n", records) == "exit code 1: error: CUDA out of memory"

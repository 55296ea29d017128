"""Shared set-up for end-to-end runs: a tiny model, arithmetic data, a config writer, the
examples pointed at a test's model and data, one torch thread for learning tests, and the
quickstart's SFT warm-up, run once per session for the tests that continue from it."""

import shutil
from pathlib import Path

import pytest
import torch
import yaml

from trivium.cli.main import main
from trivium.data.builder import build_task_data
from trivium.models.tiny import build_tiny_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The quickstart recipes' SFT stages: examples/quickstart.yaml stops at 300 steps, as the model
# begins to carry, and gives GRPO 200 steps; the FSDP and LoRA recipes stop at 350, where it
# carries more often, and give GRPO 100. The GRPO tests start where their recipe's stage ends.
SFT_STEPS = (300, 350)


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


def example_config(example: str, tmp_path: Path, *, model: str, data: str) -> dict:
    """``examples/<example>`` on this test's model and data: runs under ``tmp_path/runs``, every
    taskset and the warm-up stage's (the first stage's) SFT data read from ``data``, no Hugging
    Face exports. The test shortens it, then writes it with ``write_config``."""
    config = yaml.safe_load((EXAMPLES / example).read_text())
    config["checkpoint_root_dir"] = str(tmp_path / "runs")
    config["model"]["model_path"] = model
    config["trainer"]["save_hf_checkpoint"] = "never"
    explorer_input = config["buffer"]["explorer_input"]
    for taskset in [explorer_input["taskset"], *explorer_input["eval_tasksets"]]:
        taskset["path"] = data
    config["stages"][0]["buffer"]["trainer_input"]["experience_buffer"]["path"] = data
    return config


@pytest.fixture
def one_torch_thread():
    """On a CPU shared with other work, two OpenMP threads spin against each other (steps of a
    tiny model take seconds instead of tenths); one thread keeps a learning test short."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


@pytest.fixture(scope="session")
def quickstart_inputs(tmp_path_factory) -> dict[str, str]:
    """The quickstart's model and data as `make demo` builds them, as the recipes' environment variables."""
    root = tmp_path_factory.mktemp("quickstart")
    return {
        "TRIVIUM_MODEL_PATH": str(build_tiny_model(root / "model", preset="tiny", seed=0)),
        "TRIVIUM_DATA_PATH": str(build_task_data("arithmetic", root / "data", num_train=2000, num_test=200)),
    }


@pytest.fixture(scope="session")
def quickstart_sft_runs(tmp_path_factory, quickstart_inputs) -> dict[int, Path]:
    """The quickstart's SFT stage, run once per session and copied at each length of
    ``SFT_STEPS``: the run directories by length. Each length continues the shorter one's run.

    The quickstart recipes (plain, FSDP, LoRA) share this stage; ``continue_quickstart`` puts
    it in front of a recipe's GRPO stage.
    """
    recipe = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    recipe["stages"] = recipe["stages"][:1]
    root = tmp_path_factory.mktemp("quickstart_sft")
    run_dir = root / "runs" / recipe["project"] / recipe["name"] / "sft_warmup"
    config = root / "sft.yaml"
    runs = {}
    for steps in SFT_STEPS:
        recipe["stages"][0]["buffer"]["total_steps"] = steps
        config.write_text(yaml.safe_dump(recipe, sort_keys=False))
        with pytest.MonkeyPatch.context() as patch:
            for name, value in quickstart_inputs.items():
                patch.setenv(name, value)
            patch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(root / "runs"))
            assert main(["run", "--config", str(config), "continue_from_checkpoint=true"]) == 0
        assert (run_dir / f"global_step_{steps}" / "actor" / "huggingface").is_dir()
        runs[steps] = shutil.copytree(run_dir, root / f"sft_{steps}", ignore=shutil.ignore_patterns("*.lock"))
    return runs


def continue_quickstart(sft_runs: dict[int, Path], tmp_path: Path, recipe: str, run_name: str) -> str:
    """``examples/<recipe>`` with its SFT stage found finished: the run of ``sft_runs`` as long
    as the recipe's stage is placed where the recipe keeps that stage (under ``tmp_path/runs``),
    so ``trivium run`` with ``continue_from_checkpoint=true`` starts the GRPO stage from its
    weights, as it does for a run stopped between the two stages. Returns the recipe's path."""
    config = yaml.safe_load((EXAMPLES / recipe).read_text())
    steps = config["stages"][0]["buffer"]["total_steps"]
    assert steps in sft_runs, f"{recipe}'s SFT stage is {steps} steps long; SFT_STEPS has {sorted(sft_runs)}"
    destination = tmp_path / "runs" / config["project"] / run_name / "sft_warmup"
    shutil.copytree(sft_runs[steps], destination, ignore=shutil.ignore_patterns("*.lock"))
    path = tmp_path / recipe
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)

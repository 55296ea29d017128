"""A short GRPO run on a one-layer Qwen3-0.6B-shaped model, thinking on, a tool in every prompt."""

import json
from pathlib import Path

import pytest
import yaml

from trivium.cli.main import main

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def write_toolcall_tasks(directory: Path) -> Path:
    directory.mkdir(parents=True)
    rows = [
        {"question": f"Weather in {city}?", "tools": [WEATHER], "answer": {"name": "get_weather", "arguments": {"city": city}}}
        for city in ("Oslo", "Lima", "Pune", "Kyiv")
    ]
    (directory / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return directory


def grpo_config(model_dir: str, data_dir: Path, run_root: Path) -> dict:
    return {
        "project": "real_shape",
        "name": "run",
        "mode": "colocate",
        "checkpoint_root_dir": str(run_root),
        "continue_from_checkpoint": False,
        "seed": 0,
        "model": {
            "model_path": model_dir,
            "max_prompt_tokens": 320,
            "max_response_tokens": 4,
            "max_model_len": 330,
            "enable_thinking": True,
        },
        "cluster": {"gpu_per_node": 0},
        # A random model earns no reward: the entropy bonus is what moves its weights between syncs.
        "algorithm": {
            "algorithm_type": "grpo",
            "repeat_times": 2,
            "optimizer": {"lr": 1e-4},
            "entropy_loss_fn": "default",
            "entropy_loss_fn_args": {"entropy_coef": 1.0},
            "kl_loss_fn": "none",  # no reference model: one full-vocabulary model fewer in memory
        },
        "buffer": {
            "batch_size": 1,
            "total_steps": 2,
            "explorer_input": {
                "default_workflow_type": "toolcall",
                "taskset": {
                    "name": "train",
                    "storage_type": "file",
                    "path": str(data_dir),
                    "split": "train",
                    "format": {"prompt_key": "question", "response_key": "answer", "system_prompt": ""},
                },
            },
            "trainer_input": {
                "experience_buffer": {
                    "name": "exp",
                    "storage_type": "queue",
                    "max_read_timeout": 120,
                    "path": str(run_root / "experiences.jsonl"),  # a mirror, read back below
                },
            },
        },
        "explorer": {
            "runner_per_model": 1,
            "eval_on_startup": False,
            "max_timeout": 120,
            "rollout_model": {"tool_call_parser": "hermes", "enable_auto_tool_choice": True},
        },
        "trainer": {"use_dynamic_bsz": False, "ppo_micro_batch_size_per_gpu": 2, "save_hf_checkpoint": "never"},
        "synchronizer": {"sync_interval": 1, "sync_timeout": 120, "self_check_interval": 1},
    }


@pytest.mark.slow
def test_two_grpo_steps_with_a_tool_and_thinking_complete_and_the_syncs_agree(qwen3_dir, tmp_path):
    data_dir = write_toolcall_tasks(tmp_path / "tasks")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(grpo_config(qwen3_dir, data_dir, tmp_path / "runs"), sort_keys=False))
    assert main(["run", "--config", str(config_path)]) == 0
    run_dir = tmp_path / "runs" / "real_shape" / "run"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = [r for r in records if "actor/pg_loss" in r]
    assert len(trained) == 2 and all(r["actor/grad_norm"] > 0 for r in trained)
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert len(checks) == 2 and max(checks) < 1e-3, "the engine serves the weights the trainer moved"
    mirror = [json.loads(line) for line in (tmp_path / "runs" / "experiences.jsonl").read_text().splitlines()]
    written = [entry["written"] for entry in mirror if "written" in entry]
    assert len(written) == 4 and {e["model_version"] for e in written} == {0, 1}
    for experience in written:
        prompt = experience["prompt_text"]
        assert f"<tools>\n{json.dumps(WEATHER)}\n</tools>" in prompt
        assert prompt.endswith("<|im_start|>assistant\n"), "thinking on: no empty think block"
        assert len(experience["tokens"]) == experience["prompt_length"] + 4

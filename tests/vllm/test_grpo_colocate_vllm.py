"""GRPO in ``colocate`` with ``engine_type: vllm``: ten steps on the tiny model learn a toy objective.

The objective is the end-to-end suite's: short answers. The untrained model rambles to the
token limit; within ten steps the rollouts of vLLM, synchronized with the trainer after
every step, get shorter. The first sync's self-check compares vLLM's logprobs with the
trainer's on the same sequences.
"""

import json
import textwrap

import pytest
import yaml

from trivium.cli.main import main
from trivium.data.builder import build_task_data

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)

SHORT_ANSWER_REWARD = textwrap.dedent(
    """
    from trivium.rewards import REWARD_FNS

    @REWARD_FNS.register("short_answer")
    def short_answer(*, prompt, response, ground_truth, **kwargs):
        return max(0.0, 1.0 - len(response) / 24)
    """
)
STEPS = 10


def grpo_config(model: str, data: str, run_root: str) -> dict:
    taskset_format = {"prompt_key": "question", "response_key": "answer", "system_prompt": ""}
    return {
        "project": "vllm",
        "name": "grpo",
        "mode": "colocate",
        "checkpoint_root_dir": run_root,
        "seed": 0,
        "model": {
            "model_path": model,
            "max_prompt_tokens": 32,
            "max_response_tokens": 8,
            "max_model_len": 40,
        },
        "cluster": {"gpu_per_node": 0},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 5e-3}},
        "buffer": {
            "batch_size": 8,
            "total_steps": STEPS,
            "explorer_input": {
                "default_workflow_type": "math",
                "default_reward_fn_type": "short_answer",
                "taskset": {
                    "name": "train",
                    "storage_type": "file",
                    "path": data,
                    "split": "train",
                    "format": taskset_format,
                },
            },
            "trainer_input": {
                "experience_buffer": {"name": "exp", "storage_type": "queue", "max_read_timeout": 120}
            },
        },
        "explorer": {
            "runner_per_model": 2,
            "eval_on_startup": False,
            "max_timeout": 300,
            "rollout_model": {"engine_type": "vllm", "enforce_eager": True},
        },
        "trainer": {
            "use_dynamic_bsz": False,
            "ppo_micro_batch_size_per_gpu": 16,
            "save_hf_checkpoint": "never",
        },
        "synchronizer": {"sync_interval": 1, "sync_timeout": 300, "self_check_interval": 5},
    }


@pytest.mark.slow
def test_grpo_with_the_vllm_engine_learns_short_answers(tiny_model_dir, tmp_path):
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=400, num_test=16)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(grpo_config(tiny_model_dir, str(data), str(tmp_path / "runs"))))
    assert main(["run", "--config", str(config), "--plugin-dir", str(plugins)]) == 0

    run_dir = tmp_path / "runs" / "vllm" / "grpo"
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    rewards = [
        r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r
    ]
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    checks = [r["sync/max_logprob_diff"] for r in records if "sync/max_logprob_diff" in r]
    assert len(rewards) == STEPS and len(trainer_steps) == STEPS
    # Syncs 1 and 6 are checked: vLLM serves exactly the trainer's weights.
    assert len(checks) == 2 and max(checks) <= 1e-3, checks
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward {first:.3f} -> {last:.3f}"

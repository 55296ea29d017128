"""The vllm engine tests run only where vLLM is installed (``make test-vllm`` builds ``.venv-vllm``).

vLLM on a CPU starts slowly (three processes import it), so each test module starts at most
one engine, with a small KV cache. Each module skips itself (with the reason) where vLLM
cannot be imported, e.g. in the main environment.
"""

import os
import textwrap

# GiB of RAM for the KV cache of vLLM's CPU build; the tiny model needs a few MB.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


# The toy objective of the end-to-end suite: short answers, which the untrained model learns
# within a few steps. A plugin, so that Ray's actors import it too (--plugin-dir).
SHORT_ANSWER_REWARD = textwrap.dedent(
    """
    from trivium.rewards import REWARD_FNS

    @REWARD_FNS.register("short_answer")
    def short_answer(*, prompt, response, ground_truth, **kwargs):
        return max(0.0, 1.0 - len(response) / 24)
    """
)


def grpo_config(model: str, data: str, run_root: str, *, steps: int) -> dict:
    """GRPO on the toy objective with the vllm engine, in colocate."""
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
            "total_steps": steps,
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

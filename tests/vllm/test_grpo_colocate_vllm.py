"""GRPO in ``colocate`` with ``engine_type: vllm``: ten steps on the tiny model learn a toy objective.

The objective is the end-to-end suite's: short answers. The untrained model rambles to the
token limit; within ten steps the rollouts of vLLM, synchronized with the trainer after
every step, get shorter. The self-check after syncs 1 and 6 replays two rollouts through
vLLM's sampling path and compares the logprobs it reports with the trainer's.
"""

import json

import pytest
import yaml

from trivium.cli.main import main
from trivium.data.builder import build_task_data

from .conftest import SHORT_ANSWER_REWARD, grpo_config

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed in this interpreter; `make test-vllm` runs these tests in .venv-vllm",
)

STEPS = 10


@pytest.mark.slow
def test_grpo_with_the_vllm_engine_learns_short_answers(tiny_model_dir, tmp_path):
    data = build_task_data("arithmetic", tmp_path / "data", seed=0, num_train=400, num_test=16)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "short_answer.py").write_text(SHORT_ANSWER_REWARD)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(grpo_config(tiny_model_dir, str(data), str(tmp_path / "runs"), steps=STEPS)))
    assert main(["run", "--config", str(config), "--plugin-dir", str(plugins)]) == 0

    run_dir = tmp_path / "runs" / "vllm" / "grpo"
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    rewards = [
        r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r
    ]
    trainer_steps = [r for r in records if r["role"] == "trainer" and "actor/pg_loss" in r]
    checks = [r for r in records if "sync/max_logprob_diff" in r]
    assert len(rewards) == STEPS and len(trainer_steps) == STEPS
    # Syncs 1 and 6 are checked, through vLLM's sampling path: it serves exactly the trainer's weights.
    assert [c["sync/version"] for c in checks] == [1.0, 6.0]
    assert all(c["sync/check_through_sampling"] == 1.0 for c in checks)
    assert max(c["sync/max_logprob_diff"] for c in checks) <= 1e-3, checks
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.08, f"reward {first:.3f} -> {last:.3f}"

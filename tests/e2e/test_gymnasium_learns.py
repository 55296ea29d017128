"""The gymnasium FrozenLake example, shortened: a format warm-up, then multi_step_grpo raises the
held-out success rate on gymnasium's own 4x4 lake (not slippery)."""

from pathlib import Path

import pytest

from trivium.cli.main import main
from trivium.data.builder import build_task_data

from .conftest import example_config, read_metrics, write_config

HELD_OUT_ROWS, EPISODES_PER_ROW = 24, 4


def shortened_config(tmp_path: Path, model: str, data: str) -> str:
    config = example_config("gymnasium_frozen_lake.yaml", tmp_path, model=model, data=data)
    buffer = config["buffer"]
    buffer["explorer_input"]["eval_tasksets"][0]["repeat_times"] = EPISODES_PER_ROW
    # Sixteen RL steps (ten left held-out success flat in one CI run in four) of eight rows (eight episodes each), evaluated before and after; the
    # example's own warm-up and learning rates.
    buffer["batch_size"], buffer["total_steps"] = 8, 16
    config["explorer"]["eval_interval"] = 16
    return write_config(tmp_path, config)


@pytest.mark.slow
def test_gymnasium_frozen_lake_success_rises_with_multi_step_grpo(tmp_path, tiny_model_dir, one_torch_thread):
    data = build_task_data(
        "gymnasium",
        tmp_path / "data",
        num_train=120,
        num_test=HELD_OUT_ROWS,
        env="FrozenLake-v1",
        env_kwargs={"is_slippery": False},
        random_start=True,
    )
    assert main(["run", "--config", shortened_config(tmp_path, tiny_model_dir, str(data))]) == 0

    records = read_metrics(tmp_path / "runs" / "gymnasium_frozen_lake" / "tiny" / "multi_step_grpo")
    evals = [r["eval/lake_test/accuracy"] for r in records if "eval/lake_test/accuracy" in r]
    rollouts = [r for r in records if "rollout/accuracy" in r]
    assert len(evals) == 2 and len(rollouts) == 16
    # The format held (episodes averaged at least one env.step) and none ran out of context.
    # (One step's format may dip, as one did to 0.16 actions per episode in a run that learned.)
    assert sum(r["rollout/actions_taken"] for r in rollouts) / len(rollouts) >= 1
    assert all(r["rollout/episode_truncated"] == 0 for r in rollouts)
    # `return` is gymnasium's own (1 at the goal, else 0; the invalid-reply reward is not in it).
    assert all(r["rollout/return"] == pytest.approx(r["rollout/accuracy"]) for r in rollouts)
    # Evaluation noise: 24 held-out rows x 4 episodes = 96 Bernoulli episodes per evaluation. At
    # the start a walker that moves at random from a random cell reaches G within six moves in
    # ~7% of episodes (measured 1-5% after the warm-up): one evaluation's standard error is at most
    # sqrt(0.07 * 0.93 / 96) = 2.6 points; at 25% it is sqrt(0.25 * 0.75 / 96) = 4.4 points, so the
    # difference of the two evaluations has a standard error of about sqrt(2.6^2 + 4.4^2) = 5.1
    # points. A rise of 12 points is 2.4 of them (chance alone: under 1%); ten steps of learning to
    # walk down and right gave rises of 16 to 26 points (that policy alone reaches ~35%).
    assert evals[1] >= evals[0] + 0.12, f"held-out success did not rise beyond the noise: {evals}"

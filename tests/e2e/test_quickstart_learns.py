"""The quickstart, shortened: SFT warm-up, then GRPO raises reward and held-out accuracy."""

from pathlib import Path

import pytest

from trivium.cli.main import main
from trivium.data.builder import build_task_data
from trivium.models.tiny import build_tiny_model

from .conftest import closes_gap, read_metrics

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


@pytest.mark.slow
def test_quickstart_grpo_stage_raises_reward_and_accuracy(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIVIUM_MODEL_PATH", str(build_tiny_model(tmp_path / "model", preset="tiny", seed=0)))
    monkeypatch.setenv(
        "TRIVIUM_DATA_PATH", str(build_task_data("arithmetic", tmp_path / "data", num_train=2000, num_test=200))
    )
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    # The GRPO stage shortened to 40 steps; the SFT stage as in the quickstart.
    assert main(["run", "--config", str(QUICKSTART), "buffer.total_steps=40", "explorer.eval_interval=40"]) == 0

    records = read_metrics(tmp_path / "runs" / "quickstart" / "arithmetic" / "grpo")
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    evals = [r["eval/arithmetic_test/accuracy"] for r in records if "eval/arithmetic_test/accuracy" in r]
    assert len(rewards) == 40 and len(evals) == 2
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    assert last > first or min(first, last) >= 0.95, f"reward did not rise: {first:.3f} -> {last:.3f}"
    # Greedy answers to 200 held-out questions: a steadier signal than sampled training rewards.
    assert closes_gap(evals[0], evals[-1]), f"held-out accuracy did not rise: {evals}"

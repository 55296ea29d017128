"""The quickstart, shortened: SFT warm-up, then GRPO raises reward and held-out accuracy."""


import pytest

from trivium.cli.main import main

from .conftest import closes_gap, continue_quickstart, read_metrics


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart_sft")  # one worker runs the shared SFT stage once
@pytest.mark.timeout(1500)  # the shared SFT warm-up runs first when this test is the first to need it
def test_quickstart_grpo_stage_raises_reward_and_accuracy(tmp_path, monkeypatch, quickstart_inputs, quickstart_sft_runs):
    for name, value in quickstart_inputs.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    # The SFT stage (300 steps, as the recipe's) found finished; the GRPO stage shortened to 40 steps.
    recipe = continue_quickstart(quickstart_sft_runs, tmp_path, "quickstart.yaml", "arithmetic")
    overrides = ["buffer.total_steps=40", "explorer.eval_interval=40", "continue_from_checkpoint=true"]
    assert main(["run", "--config", recipe, *overrides]) == 0

    records = read_metrics(tmp_path / "runs" / "quickstart" / "arithmetic" / "grpo")
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    evals = [r["eval/arithmetic_test/accuracy"] for r in records if "eval/arithmetic_test/accuracy" in r]
    assert len(rewards) == 40 and len(evals) == 2
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    assert last > first or min(first, last) >= 0.95, f"reward did not rise: {first:.3f} -> {last:.3f}"
    # Greedy answers to 200 held-out questions: a steadier signal than sampled training rewards.
    # RL does most of the learning here. On one thread the warm-up ends at 19.5% (seed 0), and
    # 40 GRPO steps closed 46-62% of the gap to 1.0 in six runs (seeds 0-4, 0 twice: 56.5-69.5%),
    # 40% in the slowest run seen. Closing 30% is +24 points from 19.5%; one evaluation's
    # standard error is at most 3.5 points.
    assert closes_gap(evals[0], evals[-1], share=0.3), f"held-out accuracy did not rise enough: {evals}"

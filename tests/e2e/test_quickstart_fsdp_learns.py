"""The FSDP quickstart, shortened: the GRPO stage trains on 2 ranks (gloo) and raises the
reward; the run then resumes from its sharded checkpoint on one rank."""


import pytest

from trivium.cli.main import main

from .conftest import closes_gap, continue_quickstart, read_metrics

# The GRPO stage shortened as in test_quickstart_learns.py, after the shared 350-step SFT stage
# (after one stopped at 300 steps, before the model learns to carry, 20 GRPO steps did not raise
# the reward).
GRPO_STEPS = 40


@pytest.mark.slow
@pytest.mark.xdist_group("quickstart_sft")  # one worker runs the shared SFT stage once
@pytest.mark.timeout(1500)  # the shared SFT warm-up runs first when this test is the first to need it
def test_fsdp_grpo_stage_raises_reward_and_resumes_on_one_rank(
    tmp_path, monkeypatch, quickstart_inputs, quickstart_sft_runs
):
    for name, value in quickstart_inputs.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TRIVIUM_CHECKPOINT_ROOT_DIR", str(tmp_path / "runs"))
    # The SFT stage (350 steps, as the recipe's) found finished; the GRPO stage shortened.
    recipe = continue_quickstart(quickstart_sft_runs, tmp_path, "quickstart_fsdp.yaml", "arithmetic_fsdp")
    shortened = [f"explorer.eval_interval={GRPO_STEPS}", "continue_from_checkpoint=true"]
    assert main(["run", "--config", recipe, f"buffer.total_steps={GRPO_STEPS}", *shortened]) == 0

    run_dir = tmp_path / "runs" / "quickstart" / "arithmetic_fsdp" / "grpo"
    records = read_metrics(run_dir)
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    evals = [r["eval/arithmetic_test/accuracy"] for r in records if "eval/arithmetic_test/accuracy" in r]
    assert len(rewards) == GRPO_STEPS and len(evals) == 2
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    assert last > first or min(first, last) >= 0.95, f"reward did not rise: {first:.3f} -> {last:.3f}"
    # Greedy answers to 200 held-out questions: a steadier signal than sampled training rewards.
    assert closes_gap(evals[0], evals[-1]), f"held-out accuracy did not rise: {evals}"
    final = run_dir / f"global_step_{GRPO_STEPS}" / "actor"
    assert (final / "sharded" / ".metadata").is_file(), "two ranks write a sharded checkpoint"

    # The same run, two steps longer, on one rank: it resumes from the sharded checkpoint.
    one_rank = ["continue_from_checkpoint=true", "stages[1].trainer.data_parallel_size=1"]
    assert main(["run", "--config", recipe, f"buffer.total_steps={GRPO_STEPS + 2}", *shortened, *one_rank]) == 0
    log = (run_dir / "log" / "trainer.log").read_text()
    assert f"resumed the trainer from global_step_{GRPO_STEPS}" in log
    trainer_steps = [r["step"] for r in read_metrics(run_dir) if r.get("role") == "trainer" and "actor/pg_loss" in r]
    assert trainer_steps[-2:] == [GRPO_STEPS + 1, GRPO_STEPS + 2]
    resumed = run_dir / f"global_step_{GRPO_STEPS + 2}" / "actor"
    assert (resumed / "trainer_state.json").is_file() and not (resumed / "sharded").exists()

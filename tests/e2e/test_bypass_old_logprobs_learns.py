"""algorithm.bypass_old_logprobs: true in a run: the policy loss compares with the rollout
engine's logprobs, and GRPO still learns the toy objective."""

import textwrap

import pytest
import yaml

from trivium.cli.main import main

from .conftest import base_config, read_metrics, write_config

# A module and reward name of this test's own: plugin modules are imported once per process.
BRIEF_REPLY_REWARD = textwrap.dedent(
    """
    from trivium.rewards import REWARD_FNS

    @REWARD_FNS.register("brief_reply")
    def brief_reply(*, prompt, response, ground_truth, **kwargs):
        return max(0.0, 1.0 - len(response) / 24)
    """
)


@pytest.mark.slow
def test_grpo_with_engine_old_logprobs_learns_the_toy_objective(assets, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "brief_reply_reward.py").write_text(BRIEF_REPLY_REWARD)
    config = base_config(assets, tmp_path / "runs", **{"algorithm.bypass_old_logprobs": True})
    config["algorithm"]["optimizer"]["lr"] = 5e-3
    config["buffer"]["explorer_input"]["default_reward_fn_type"] = "brief_reply"
    config["buffer"].update(batch_size=8, total_steps=20)
    # Weights reach the engine every second step: every other batch was sampled by older weights.
    config["synchronizer"]["sync_interval"] = 2
    assert main(["run", "--config", write_config(tmp_path, config), "--plugin-dir", str(plugins)]) == 0

    run_dir = tmp_path / "runs" / "e2e" / "run"
    resolved = yaml.safe_load((run_dir / "config.resolved.yaml").read_text())
    assert resolved["trainer"]["old_logprobs_source"] == "engine"
    records = read_metrics(run_dir)
    trainer = [r for r in records if r["role"] == "trainer" and "actor/ppo_kl" in r]
    rewards = [
        r["rollout/reward_mean"] for r in records if r["role"] == "explorer" and "rollout/reward_mean" in r
    ]
    assert len(trainer) == 20 and len(rewards) == 20
    # The trainer's own old logprobs would make every ratio 1 (ppo_kl 0); the engine's, sampled
    # before the last update on the stale batches, do not.
    assert max(abs(r["actor/ppo_kl"]) for r in trainer) > 1e-3
    # Measured over 20 steps: 0.43 -> 0.79 in three runs. Over 10 steps the rise was 0.13, and
    # 0.076 in one run, too close to noise.
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.15, f"reward {first:.3f} -> {last:.3f}"

"""multi_step_grpo: episodes, not steps, are the samples of a group; checked by hand."""

import math

import pytest
import torch

from trivium.algorithm import ADVANTAGE_FNS, PRESETS, requires_episodes, requires_groups


def run(rewards, groups, episodes=None, mask=None, **args):
    rewards = torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)
    mask = torch.ones_like(rewards) if mask is None else torch.tensor(mask, dtype=torch.float32)
    token_rewards = torch.zeros_like(mask)
    token_rewards[:, -1:] = rewards
    return ADVANTAGE_FNS.get("multi_step_grpo")(
        token_level_rewards=token_rewards,
        response_mask=mask,
        group_ids=torch.tensor(groups),
        episode_ids=None if episodes is None else torch.tensor(episodes),
        **args,
    )


def test_a_long_episode_counts_once_in_its_group():
    # Group 0: episode 0 has three steps (final reward 1 propagated to each), episode 1 one step (0).
    # Episode scores [1, 0]: mean 0.5, sample std sqrt(0.25 + 0.25) = 0.7071 -> +-0.7071.
    # (Plain grpo over the four rows would give [0.5, 0.5, 0.5, -1.5].)
    advantages, returns = run([1, 1, 1, 0], groups=[0, 0, 0, 0], episodes=[0, 0, 0, 1], epsilon=0.0)
    expected = 0.5 / math.sqrt(0.5)
    assert advantages[:, 0].tolist() == pytest.approx([expected] * 3 + [-expected], abs=1e-6)
    assert torch.equal(advantages, returns)


def test_advantage_is_broadcast_to_every_model_token_and_not_to_environment_tokens():
    mask = [[1, 1, 0, 0, 1], [1, 0, 1, 1, 1]]
    advantages, _ = run([1, 0], groups=[5, 5], mask=mask, epsilon=0.0)
    a = 0.5 / math.sqrt(0.5)
    expected = torch.tensor([[a, a, 0, 0, a], [-a, 0, -a, -a, -a]])
    assert torch.allclose(advantages, expected, atol=1e-6)


def test_equal_scores_get_zero_and_a_lone_episode_its_score_over_one_plus_epsilon():
    # group 1: episodes 0 and 1 both score 2 -> 0; group 2: one episode of score 3 -> 3 / (1 + 1e-6),
    # the reference's convention (mean 0, std 1), as grpo gives a lone sample
    advantages, _ = run([2, 2, 2, 3], groups=[1, 1, 1, 2], episodes=[0, 0, 1, 2])
    assert advantages[:, 0].tolist() == pytest.approx([0.0, 0.0, 0.0, 3 / (1 + 1e-6)])


def test_without_episode_ids_each_row_is_an_episode_like_grpo():
    rewards, groups = [1.0, 0.0, 0.5, 2.0, 1.0], [0, 0, 0, 1, 1]
    ours, _ = run(rewards, groups)
    grpo, _ = ADVANTAGE_FNS.get("grpo")(
        token_level_rewards=torch.tensor(rewards).unsqueeze(1),
        response_mask=torch.ones(5, 1),
        group_ids=torch.tensor(groups),
    )
    assert torch.allclose(ours, grpo)


def test_preset_is_group_based_and_asks_for_episodes():
    preset = PRESETS["multi_step_grpo"]
    fn = ADVANTAGE_FNS.get(preset.advantage_fn)
    assert preset.group_based and requires_groups(fn) and requires_episodes(fn)


def test_batch_level_std_divides_by_the_spread_of_every_episode():
    # Episode scores [1, 0 | 1, 1]: batch mean 0.75, sample std sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5.
    # Group 0: (1 - 0.5) / 0.5 = 1 and -1; group 1: (1 - 1) / 0.5 = 0.
    advantages, _ = run([1, 0, 1, 1], groups=[0, 0, 1, 1], epsilon=0.0, std_cal_level="batch")
    assert advantages[:, 0].tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="std_cal_level"):
        run([1, 0], groups=[0, 0], std_cal_level="task")


def test_std_threshold_drops_a_group_with_too_little_spread_and_lone_episodes():
    from trivium.algorithm.advantages import row_selection

    # Group 0: std sqrt(0.005) = 0.0707 <= 0.1 -> dropped; group 1: mean 0.5, std 0.7071 -> +-0.5 / 0.7071;
    # group 2: a single episode -> dropped (the reference skips it whenever std_threshold is set).
    advantages, _ = run([1, 0.9, 0, 1, 5], groups=[0, 0, 1, 1, 2], epsilon=0.0, std_threshold=0.1)
    a = 0.5 / math.sqrt(0.5)
    assert advantages[2:4, 0].tolist() == pytest.approx([-a, a], abs=1e-6)
    rewards = torch.tensor([[1.0], [0.9], [0.0], [1.0], [5.0]])
    kept = row_selection(ADVANTAGE_FNS.get("multi_step_grpo"))(
        token_level_rewards=rewards, response_mask=torch.ones(5, 1), group_ids=torch.tensor([0, 0, 1, 1, 2]),
        std_threshold=0.1,
    )
    assert kept.tolist() == [2, 3]


def test_step_norm_shares_an_episodes_advantage_among_its_steps():
    # Episode scores [1, 0] -> +-0.7071; episode 0 has three rows (0.7071 / 3 each), episode 1 one.
    advantages, _ = run([1, 1, 1, 0], groups=[0] * 4, episodes=[0, 0, 0, 1], epsilon=0.0, enable_step_norm=True)
    a = 0.5 / math.sqrt(0.5)
    assert advantages[:, 0].tolist() == pytest.approx([a / 3] * 3 + [-a], abs=1e-6)

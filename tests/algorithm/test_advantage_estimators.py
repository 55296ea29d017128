"""Advantage estimators against hand-computed numbers."""

import math

import pytest
import torch

from trivium.algorithm.advantages import ADVANTAGE_FNS, requires_critic, requires_groups


def outcome_rewards(scores, lengths, response_length):
    """Rewards (B, R) with each score on the row's last response token, and the mask."""
    rewards = torch.zeros(len(scores), response_length)
    mask = torch.zeros(len(scores), response_length)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        rewards[row, length - 1] = score
        mask[row, :length] = 1.0
    return rewards, mask


def run(name, **kwargs):
    return ADVANTAGE_FNS.get(name)(**kwargs)


# ---- grpo -----------------------------------------------------------------------------


def test_grpo_normalises_by_group_mean_and_sample_std():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 1.0], [3, 2, 3, 1], 3)
    advantages, returns = run(
        "grpo", token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(4).long()
    )
    # mean 0.5; sample std = sqrt(4 * 0.25 / 3) = sqrt(1/3); a = +-0.5 / (sqrt(1/3) + 1e-6)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([expected, -expected, -expected, expected]))
    # broadcast over the row's tokens, zero outside the mask
    torch.testing.assert_close(advantages, advantages[:, :1] * mask)
    torch.testing.assert_close(returns, advantages)


def test_grpo_single_sample_group_takes_mean_0_and_std_1_as_verl_does():
    rewards, mask = outcome_rewards([5.0, 1.0, 3.0], [2, 2, 2], 2)
    advantages, _ = run(
        "grpo", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([9, 4, 4])
    )
    # alone in its group: (5 - 0) / (1 + 1e-6)
    assert advantages[0].tolist() == pytest.approx([5 / (1 + 1e-6)] * 2)
    # the two-sample group: mean 2, std sqrt(2); a = -+1 / sqrt(2)
    assert advantages[1, 0].item() == pytest.approx(-1 / (math.sqrt(2) + 1e-6))


def test_grpo_all_equal_rewards_in_a_group_give_zero_advantage_not_nan():
    rewards, mask = outcome_rewards([2.0, 2.0, 2.0], [3, 1, 2], 3)
    advantages, _ = run(
        "grpo", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([1, 1, 1])
    )
    assert torch.equal(advantages, torch.zeros_like(advantages))


def test_grpo_without_std_normalisation_only_subtracts_the_mean():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 1.0], [1, 1, 1, 1], 1)
    advantages, _ = run(
        "grpo",
        token_level_rewards=rewards,
        response_mask=mask,
        group_ids=torch.zeros(4).long(),
        std_normalize=False,
    )
    assert advantages[:, 0].tolist() == [0.5, -0.5, -0.5, 0.5]


def test_grpo_groups_are_independent_and_ids_need_not_be_contiguous():
    rewards, mask = outcome_rewards([1.0, 3.0, 10.0, 20.0], [1, 1, 1, 1], 1)
    advantages, _ = run(
        "grpo",
        token_level_rewards=rewards,
        response_mask=mask,
        group_ids=torch.tensor([7, 7, 3, 3]),
        std_normalize=False,
    )
    # group 7: mean 2; group 3: mean 15
    assert advantages[:, 0].tolist() == [-1.0, 1.0, -5.0, 5.0]


def test_grpo_without_group_ids_says_what_is_missing():
    rewards, mask = outcome_rewards([1.0], [1], 1)
    with pytest.raises(ValueError, match="group_ids"):
        run("grpo", token_level_rewards=rewards, response_mask=mask)


# ---- rloo / opmd ----------------------------------------------------------------------


def test_rloo_baseline_is_the_mean_of_the_other_samples():
    rewards, mask = outcome_rewards([1.0, 2.0, 6.0, 4.0], [2, 1, 2, 2], 2)
    advantages, _ = run(
        "rloo", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1])
    )
    # 1 - (2 + 6)/2 = -3;  2 - (1 + 6)/2 = -1.5;  6 - (1 + 2)/2 = 4.5;  single sample: baseline 0 -> 4
    torch.testing.assert_close(advantages, torch.tensor([[-3.0, -3.0], [-1.5, 0.0], [4.5, 4.5], [4.0, 4.0]]))


def test_opmd_mean_baseline_subtracts_group_mean_without_scaling():
    rewards, mask = outcome_rewards([1.0, 2.0, 6.0], [1, 1, 1], 1)
    advantages, _ = run(
        "opmd", token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(3).long()
    )
    # mean 3
    assert advantages[:, 0].tolist() == [-2.0, -1.0, 3.0]


def test_opmd_logavgexp_baseline_is_a_soft_maximum_of_the_group():
    rewards, mask = outcome_rewards([1.0, 2.0, 6.0], [1, 1, 1], 1)
    advantages, _ = run(
        "opmd",
        token_level_rewards=rewards,
        response_mask=mask,
        group_ids=torch.zeros(3).long(),
        baseline="logavgexp",
        tau=0.5,
    )
    # b = 0.5 * log((e^2 + e^4 + e^12) / 3)
    baseline = 0.5 * math.log((math.exp(2) + math.exp(4) + math.exp(12)) / 3)
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1.0, 2.0, 6.0]) - baseline)


def test_opmd_logavgexp_does_not_overflow_on_large_scores():
    rewards, mask = outcome_rewards([1000.0, 1000.0], [1, 1], 1)
    advantages, _ = run(
        "opmd",
        token_level_rewards=rewards,
        response_mask=mask,
        group_ids=torch.zeros(2).long(),
        baseline="logavgexp",
    )
    torch.testing.assert_close(advantages, torch.zeros(2, 1), atol=1e-4, rtol=0)


def test_opmd_rejects_an_unknown_baseline():
    rewards, mask = outcome_rewards([1.0, 2.0], [1, 1], 1)
    with pytest.raises(ValueError, match="logavgexp"):
        run(
            "opmd",
            token_level_rewards=rewards,
            response_mask=mask,
            group_ids=torch.zeros(2).long(),
            baseline="max",
        )


# ---- ppo (GAE) --------------------------------------------------------------------------


def test_gae_with_gamma_and_lambda_one_gives_reward_to_go_returns():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    advantages, returns = run(
        "ppo", token_level_rewards=rewards, response_mask=mask, values=values, whiten=False
    )
    # deltas: 0.6-0.5=0.1, 0.7-0.6=0.1, 1-0.7=0.3; A = suffix sums = [0.5, 0.4, 0.3]; G = A + V = 1
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.4, 0.3]]))
    torch.testing.assert_close(returns, torch.ones(1, 3))


def test_gae_discounts_with_gamma_and_lambda():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    advantages, returns = run(
        "ppo",
        token_level_rewards=rewards,
        response_mask=torch.ones(1, 3),
        values=values,
        gamma=0.9,
        lam=0.8,
        whiten=False,
    )
    # A2 = 1 - 0.7 = 0.3
    # A1 = (0.9*0.7 - 0.6) + 0.72*0.3 = 0.03 + 0.216 = 0.246
    # A0 = (0.9*0.6 - 0.5) + 0.72*0.246 = 0.04 + 0.17712 = 0.21712
    torch.testing.assert_close(advantages, torch.tensor([[0.21712, 0.246, 0.3]]))
    torch.testing.assert_close(returns, torch.tensor([[0.71712, 0.846, 1.0]]))


def test_gae_runs_over_masked_tokens_with_value_zero_as_in_the_reference():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 9.9, 0.7]])  # 9.9 is an environment token's value: taken as 0
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    advantages, returns = run(
        "ppo", token_level_rewards=rewards, response_mask=mask, values=values, gamma=0.9, lam=0.8, whiten=False,
    )
    # A2 = 1 - 0.7 = 0.3; A1 = (0 + 0.9 * 0.7 - 0) + 0.72 * 0.3 = 0.846;
    # A0 = (0 + 0.9 * 0 - 0.5) + 0.72 * 0.846 = -0.5 + 0.60912 = 0.10912; G0 = A0 + 0.5
    torch.testing.assert_close(advantages, torch.tensor([[0.10912, 0.0, 0.3]]))
    torch.testing.assert_close(returns, torch.tensor([[0.60912, 0.0, 1.0]]))


def test_gae_can_skip_masked_tokens_inside_a_response():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 9.9, 0.7]])  # 9.9 is an environment token's value: must be ignored
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    advantages, returns = run(
        "ppo",
        token_level_rewards=rewards,
        response_mask=mask,
        values=values,
        gamma=0.9,
        lam=0.8,
        whiten=False,
        skip_masked_tokens=True,
    )
    # A2 = 0.3; A0 = (0.9*0.7 - 0.5) + 0.72*0.3 = 0.13 + 0.216 = 0.346
    torch.testing.assert_close(advantages, torch.tensor([[0.346, 0.0, 0.3]]))
    torch.testing.assert_close(returns, torch.tensor([[0.846, 0.0, 1.0]]))


def test_gae_whitens_over_the_masked_batch():
    rewards, mask = outcome_rewards([1.0, -1.0], [3, 2], 3)
    values = torch.tensor([[0.1, 0.2, 0.3], [0.0, 0.5, 7.0]])
    advantages, _ = run("ppo", token_level_rewards=rewards, response_mask=mask, values=values)
    kept = advantages[mask.bool()]
    assert kept.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert kept.var().item() == pytest.approx(1.0, abs=1e-5)
    assert advantages[1, 2].item() == 0.0


def test_gae_without_values_says_it_needs_a_critic():
    rewards, mask = outcome_rewards([1.0], [1], 1)
    with pytest.raises(ValueError, match="values"):
        run("ppo", token_level_rewards=rewards, response_mask=mask)


# ---- reinforce++ / remax / none -------------------------------------------------------------


def test_reinforce_plus_plus_discounts_returns_then_whitens():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = run("reinforceplusplus", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    # row 0: G = [0.25, 0.5, 1]; row 1: G = [1, 2, (masked)]
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    # kept returns [0.25, 0.5, 1, 1, 2]: mean 0.95; sample var = (.49+.2025+.0025+.0025+1.1025)/4 = 0.45
    expected = (torch.tensor([0.25, 0.5, 1.0, 1.0, 2.0]) - 0.95) / math.sqrt(0.45)
    torch.testing.assert_close(advantages[mask.bool()], expected, atol=1e-5, rtol=1e-5)
    assert advantages[1, 2].item() == 0.0


def test_reinforce_plus_plus_discounts_across_masked_tokens_unless_told_to_skip_them():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    # every position discounted: G = [0.25, 0.5, 1]; skipping the masked one: G0 = 0.5 * 1
    _, returns = run("reinforceplusplus", token_level_rewards=rewards, response_mask=mask, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([[0.25, 0.0, 1.0]]))
    _, skipped = run("reinforceplusplus", token_level_rewards=rewards, response_mask=mask, gamma=0.5,
                     skip_masked_tokens=True)
    torch.testing.assert_close(skipped, torch.tensor([[0.5, 0.0, 1.0]]))


def test_remax_subtracts_the_greedy_reward_from_the_reward_to_go():
    # row 0 has a small per-token penalty before the outcome reward
    rewards = torch.tensor([[-0.1, 0.0, 1.0], [0.0, 0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = run(
        "remax", token_level_rewards=rewards, response_mask=mask, baseline_rewards=torch.tensor([0.4, 0.5])
    )
    # G row 0 = [0.9, 1, 1], row 1 = [0.5, 0.5, -]; A = G - b
    torch.testing.assert_close(returns, torch.tensor([[0.9, 1.0, 1.0], [0.5, 0.5, 0.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[0.5, 0.6, 0.6], [0.0, 0.0, 0.0]]))


def test_remax_needs_baseline_rewards():
    rewards, mask = outcome_rewards([1.0], [1], 1)
    with pytest.raises(ValueError, match="baseline_rewards"):
        run("remax", token_level_rewards=rewards, response_mask=mask)


def test_none_estimator_gives_zeros():
    rewards, mask = outcome_rewards([1.0, 2.0], [2, 1], 2)
    advantages, returns = run("none", token_level_rewards=rewards, response_mask=mask)
    assert torch.equal(advantages, torch.zeros(2, 2)) and torch.equal(returns, torch.zeros(2, 2))


# ---- shared properties ----------------------------------------------------------------------


def test_estimators_declare_whether_they_need_groups_or_a_critic():
    grouped = {name for name in ADVANTAGE_FNS.names() if requires_groups(ADVANTAGE_FNS.get(name))}
    critic = {name for name in ADVANTAGE_FNS.names() if requires_critic(ADVANTAGE_FNS.get(name))}
    assert grouped == {
        "grpo", "grpo_verl", "rloo", "opmd", "reinforce", "asymre", "rec", "raft", "clipb", "clipv", "multi_step_grpo",
        "step_wise_grpo", "opmd_verl", "asymre_verl", "rloo_verl", "gigpo", "cod",
    }
    assert critic == {"ppo"}


@pytest.mark.parametrize("name", ["grpo", "rloo", "opmd", "ppo", "reinforceplusplus", "remax", "none"])
def test_estimators_build_no_graph_and_survive_all_zero_masks(name):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]], requires_grad=True)
    mask = torch.zeros(2, 2)
    values = torch.ones(2, 2, requires_grad=True)
    advantages, returns = run(
        name,
        token_level_rewards=rewards,
        response_mask=mask,
        group_ids=torch.tensor([0, 0]),
        values=values,
        baseline_rewards=torch.zeros(2),
    )
    assert not advantages.requires_grad and not returns.requires_grad
    assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()
    assert torch.equal(advantages, torch.zeros(2, 2))

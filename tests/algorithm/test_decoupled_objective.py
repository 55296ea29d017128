"""Decoupled PPO: pi_prox / pi_behav weights, checked against hand-computed values."""

import math

import pytest
import torch

from trivium.algorithm.decoupled import behaviour_importance_weights
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, ppo_policy_loss, scales_with_advantage


def test_weights_are_proximal_over_behaviour_capped_and_masked():
    proximal = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.2)]])
    behaviour = torch.tensor([[math.log(0.25), math.log(0.1), math.log(0.4)]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    weights, metrics = behaviour_importance_weights(
        proximal_logprobs=proximal, behaviour_logprobs=behaviour, response_mask=mask, cap=5.0
    )
    # 0.5 / 0.25 = 2; 0.9 / 0.1 = 9 -> capped at 5; masked token -> 0
    assert weights.tolist()[0] == pytest.approx([2.0, 5.0, 0.0], rel=1e-5)
    assert metrics["weight_mean"] == pytest.approx(3.5, rel=1e-5)
    assert metrics["weight_max"] == pytest.approx(5.0, rel=1e-5)
    assert metrics["capped_frac"] == pytest.approx(0.5)


def test_uncapped_weights_and_no_gradient():
    proximal = torch.tensor([[math.log(0.9)]], requires_grad=True)
    weights, _ = behaviour_importance_weights(
        proximal_logprobs=proximal, behaviour_logprobs=torch.tensor([[math.log(0.1)]]),
        response_mask=torch.ones(1, 1), cap=None,
    )
    assert weights.item() == pytest.approx(9.0, rel=1e-5)
    assert not weights.requires_grad


def test_weights_outside_the_kept_range_are_masked_before_the_cap():
    # pi_prox / pi_behav = 2, 9, 0.25, 1 on four response tokens; keep [0.5, 4], cap 3.
    proximal = torch.log(torch.tensor([[0.4, 0.9, 0.1, 0.3]]))
    behaviour = torch.log(torch.tensor([[0.2, 0.1, 0.4, 0.3]]))
    weights, metrics = behaviour_importance_weights(
        proximal_logprobs=proximal, behaviour_logprobs=behaviour, response_mask=torch.ones(1, 4),
        cap=3.0, keep_range=(0.5, 4.0),
    )
    # 9 is masked (not capped to 3), 0.25 is masked; 2 and 1 pass; nothing left above the cap.
    assert weights.tolist()[0] == pytest.approx([2.0, 0.0, 0.0, 1.0], rel=1e-5)
    assert metrics["masked_frac"] == pytest.approx(0.5) and metrics["capped_frac"] == 0.0
    assert metrics["weight_mean"] == pytest.approx(0.75, rel=1e-5)


def test_a_kept_range_that_is_not_low_below_high_is_refused():
    ones = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="0 <= low < high"):
        behaviour_importance_weights(
            proximal_logprobs=ones, behaviour_logprobs=ones, response_mask=ones, keep_range=(2.0, 0.5)
        )


def test_a_non_positive_cap_is_refused():
    ones = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="cap"):
        behaviour_importance_weights(proximal_logprobs=ones, behaviour_logprobs=ones, response_mask=ones, cap=0)


def test_decoupled_ppo_loss_by_hand():
    # One token: pi_theta = 0.6, pi_prox = 0.5, pi_behav = 0.25, A = 1, clip 0.2.
    # r = 0.6 / 0.5 = 1.2 (at the clip edge), w = 0.5 / 0.25 = 2:
    # L = w * max(-A r, -A clip(r, 0.8, 1.2)) = 2 * -1.2 = -2.4
    logprobs = torch.tensor([[math.log(0.6)]])
    proximal = torch.tensor([[math.log(0.5)]])
    weights, _ = behaviour_importance_weights(
        proximal_logprobs=proximal, behaviour_logprobs=torch.tensor([[math.log(0.25)]]),
        response_mask=torch.ones(1, 1),
    )
    loss, _ = ppo_policy_loss(
        logprobs=logprobs, old_logprobs=proximal, advantages=torch.ones(1, 1) * weights,
        response_mask=torch.ones(1, 1), clip_range=0.2,
    )
    assert loss.item() == pytest.approx(-2.4, rel=1e-5)


def test_ppo_loss_times_a_weight_equals_ppo_loss_of_weighted_advantages():
    torch.manual_seed(0)
    logprobs, old = torch.randn(3, 5) * 0.3 - 1, torch.randn(3, 5) * 0.3 - 1
    advantages, weights, mask = torch.randn(3, 5), torch.rand(3, 5) * 3, torch.ones(3, 5)
    weighted, _ = ppo_policy_loss(logprobs=logprobs, old_logprobs=old, advantages=advantages * weights,
                                  response_mask=mask, loss_agg_mode="token-mean")
    # Per token, with a one-token mask each: weight * loss of the plain advantage.
    by_token = torch.zeros(3, 5)
    for i in range(3):
        for j in range(5):
            one = torch.zeros(3, 5)
            one[i, j] = 1
            plain, _ = ppo_policy_loss(logprobs=logprobs, old_logprobs=old, advantages=advantages,
                                       response_mask=one, loss_agg_mode="token-mean")
            by_token[i, j] = weights[i, j] * plain
    assert weighted.item() == pytest.approx(by_token.mean().item(), rel=1e-5)
    assert scales_with_advantage(ppo_policy_loss)
    assert not scales_with_advantage(POLICY_LOSS_FNS.get("gspo"))

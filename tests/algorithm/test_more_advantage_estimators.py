"""The REINFORCE-family, veRL, distillation and entropy-filter advantages against hand-computed numbers."""

import math

import pytest
import torch

from trivium.algorithm.advantages import (
    ADVANTAGE_FNS,
    computed_by_explorer,
    requires_entropy,
    requires_teacher,
)
from trivium.algorithm.entropy import expected_entropy_signal_from_logits



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


def test_reinforce_uses_the_raw_score_without_baseline():
    rewards, mask = outcome_rewards([1.0, 0.0, 3.0], [2, 1, 2], 2)
    advantages, returns = run("reinforce", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1]))
    torch.testing.assert_close(advantages, torch.tensor([[1.0, 1.0], [0.0, 0.0], [3.0, 3.0]]))
    torch.testing.assert_close(returns, advantages)


def test_asymre_shifts_the_group_mean_down_and_leaves_single_samples_unshifted():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 2.0], [1, 1, 1, 1], 1)
    advantages, _ = run(
        "asymre", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 5]),
        baseline_shift=-0.1,
    )
    # group 0: baseline 1/3 - 0.1 = 0.2333; group 5 (alone): baseline 0
    b = 1 / 3 - 0.1
    assert advantages[:, 0].tolist() == pytest.approx([1 - b, -b, -b, 2.0])


def test_rec_subtracts_the_mean_and_optionally_the_std():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 1.0], [1, 1, 1, 1], 1)
    group = torch.zeros(4).long()
    plain, _ = run("rec", token_level_rewards=rewards, response_mask=mask, group_ids=group)
    assert plain[:, 0].tolist() == [0.5, -0.5, -0.5, 0.5]
    scaled, _ = run("rec", token_level_rewards=rewards, response_mask=mask, group_ids=group, std_normalize=True)
    # population std of [1, 0, 0, 1]: sqrt(4 * 0.25 / 4) = 0.5 (Trinity-RFT's REC; grpo uses the sample std)
    assert scaled[0, 0].item() == pytest.approx(0.5 / (0.5 + 1e-6))


def test_rec_balance_drops_extra_below_mean_samples():
    # mean 0.25: one sample above, three below -> two of the three below are dropped
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 0.0], [1, 1, 1, 1], 1)
    advantages, _ = run(
        "rec", token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(4).long(), drop="balance"
    )
    values = advantages[:, 0]
    assert int((values == 0).sum()) == 2
    # the kept pair {1, 0}: mean 0.5 -> +0.5 and -0.5
    assert values[0].item() == pytest.approx(0.5)
    assert sorted(values[1:].tolist()) == [-0.5, 0.0, 0.0]


def test_raft_selects_the_best_samples_of_each_group():
    rewards, mask = outcome_rewards([0.2, 0.9, 0.9, 0.1, 0.0], [1, 1, 1, 1, 1], 1)
    advantages, _ = run(
        "raft", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1, 1])
    )
    assert advantages[:, 0].tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    floored, _ = run(
        "raft", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 0, 1, 1]),
        reward_threshold=0.5,
    )
    assert floored[:, 0].tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_raft_with_one_sample_per_task_keeps_the_rewarded_rollouts():
    rewards, mask = outcome_rewards([1.0, 0.0], [1, 1], 1)
    advantages, _ = run("raft", token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 1]))
    assert advantages[:, 0].tolist() == [1.0, 0.0]


def test_grpo_std_threshold_drops_flat_groups_from_the_batch():
    from trivium.algorithm.advantages import row_selection

    rewards, mask = outcome_rewards([1.0, 1.001, 0.0, 1.0], [1, 1, 1, 1], 1)
    inputs = dict(token_level_rewards=rewards, response_mask=mask, group_ids=torch.tensor([0, 0, 1, 1]))
    advantages, _ = run("grpo", **inputs, std_threshold=0.01)
    assert advantages[2, 0].item() < 0 < advantages[3, 0].item()
    # group 0 (std 0.0007 <= 0.01) leaves the batch
    assert row_selection(ADVANTAGE_FNS.get("grpo"))(**inputs, std_threshold=0.01).tolist() == [2, 3]
    assert row_selection(ADVANTAGE_FNS.get("grpo"))(**inputs) is None


def test_grpo_verl_equals_grpo_and_is_computed_by_the_trainer():
    rewards, mask = outcome_rewards([1.0, 0.0, 2.0], [2, 2, 1], 2)
    group = torch.tensor([0, 0, 1])
    verl, _ = run("grpo_verl", token_level_rewards=rewards, response_mask=mask, group_ids=group)
    grpo, _ = run("grpo", token_level_rewards=rewards, response_mask=mask, group_ids=group)
    torch.testing.assert_close(verl, grpo)
    # the lone sample: (2 - 0) / (1 + 1e-6)
    assert verl[2, 0].item() == pytest.approx(2 / (1 + 1e-6))
    assert computed_by_explorer(ADVANTAGE_FNS.get("grpo"))
    assert not computed_by_explorer(ADVANTAGE_FNS.get("grpo_verl"))


def test_grpo_verl_sees_token_level_kl_penalties_in_the_score():
    # rewards after a KL penalty: the score is the row sum, as in veRL
    rewards = torch.tensor([[-0.1, 1.0], [-0.3, 0.0]])
    mask = torch.ones(2, 2)
    advantages, _ = run(
        "grpo_verl", token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(2).long(),
        std_normalize=False,
    )
    # scores 0.9 and -0.3, mean 0.3
    torch.testing.assert_close(advantages, torch.tensor([[0.6, 0.6], [-0.6, -0.6]]))


def test_on_policy_distill_advantage_is_teacher_minus_student_logprob():
    student = torch.tensor([[-1.0, -2.0, -0.5]])
    teacher = torch.tensor([[-0.5, -3.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    advantages, returns = run(
        "on_policy_distill", token_level_rewards=torch.zeros(1, 3), response_mask=mask,
        old_logprobs=student, teacher_logprobs=teacher, kl_coef=2.0,
    )
    torch.testing.assert_close(advantages, torch.tensor([[1.0, -2.0, 0.0]]))
    torch.testing.assert_close(returns, advantages)
    assert requires_teacher(ADVANTAGE_FNS.get("on_policy_distill"))


def test_jsd_advantage_matches_the_hand_computed_mixture_divergence():
    student = torch.tensor([[math.log(0.2), math.log(0.5)]])
    teacher = torch.tensor([[math.log(0.6), math.log(0.5)]])
    advantages, _ = run(
        "jsd", token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2),
        old_logprobs=student, teacher_logprobs=teacher, lambda_coef=0.5, kl_coef=1.0,
    )
    # token 0: m = 0.5 * 0.6 + 0.5 * 0.2 = 0.4; JSD_t = 0.5 ln(0.6 / 0.4) + 0.5 ln(0.2 / 0.4)
    # = 0.5 ln 0.75; A = -JSD_t > 0, the teacher likes the token more. Token 1: p = q = m -> 0.
    assert advantages[0, 0].item() == pytest.approx(-0.5 * math.log(0.75), rel=1e-5)
    assert advantages[0, 1].item() == pytest.approx(0.0, abs=1e-7)
    gradient, _ = run(
        "jsd", token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2),
        old_logprobs=student, teacher_logprobs=teacher, lambda_coef=0.5, kl_coef=1.0, advantage="gradient",
    )
    # the exact-gradient weight: (1 - 0.5) * ln(0.2 / 0.4) = 0.5 * ln(0.5); A is minus it
    assert gradient[0, 0].item() == pytest.approx(-0.5 * math.log(0.5), rel=1e-5)


def test_the_jsd_weight_is_the_exact_gradient_of_the_divergence():
    """grad_logits JSD(p, softmax(logits)) equals E_q[w(y) grad log q(y)], summed over the vocabulary."""
    from trivium.algorithm.distillation import jsd_gradient_weight

    torch.manual_seed(0)
    teacher = torch.randn(6).log_softmax(-1)
    logits = torch.randn(6, requires_grad=True)
    for lam in (0.3, 0.5, 0.8):
        student = logits.log_softmax(-1)
        q, p = student.exp(), teacher.exp()
        m = lam * p + (1 - lam) * q
        jsd = (lam * p * (p / m).log() + (1 - lam) * q * (q / m).log()).sum()
        (exact,) = torch.autograd.grad(jsd, logits)
        weight = jsd_gradient_weight(student.detach(), teacher, lam)
        (estimated,) = torch.autograd.grad((q.detach() * weight * logits.log_softmax(-1)).sum(), logits)
        torch.testing.assert_close(estimated, exact, rtol=1e-5, atol=1e-6)


def test_distillation_without_teacher_logprobs_says_what_is_missing():
    with pytest.raises(ValueError, match="teacher"):
        run("jsd", token_level_rewards=torch.zeros(1, 1), response_mask=torch.ones(1, 1), old_logprobs=torch.zeros(1, 1))


def test_expected_entropy_signal_matches_its_sum():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # p = [0.25, 0.75]
    p = torch.tensor([0.25, 0.75])
    entropy = -(p * p.log()).sum()
    expected = (p * p * (entropy + p.log())).sum()
    assert expected_entropy_signal_from_logits(logits).item() == pytest.approx(expected.item(), rel=1e-6)


def test_clipb_drops_negative_tokens_with_a_very_low_entropy_signal():
    rewards, mask = outcome_rewards([1.0, 0.0], [4, 4], 4)
    # S = p * (H + log p); row 1 (negative advantage) has one token with S far below the rest
    logprobs = torch.full((2, 4), math.log(0.5))
    entropy = torch.full((2, 4), math.log(2.0))  # S = 0 where p = 0.5, H = ln 2
    logprobs[1, 2] = math.log(0.01)
    entropy[1, 2] = 4.0  # S = 0.01 * (4 + ln 0.01) = -0.00605: the batch's only outlier
    kept, _ = run(
        "clipb", token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(2).long(),
        logprobs=logprobs, entropy=entropy, mu=2.0, clip_target="advantage",
    )
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(kept, torch.tensor([[a] * 4, [-a, -a, 0.0, -a]]))
    assert requires_entropy(ADVANTAGE_FNS.get("clipb"))


def test_clipv_drops_at_most_the_allowed_fraction_of_tokens():
    rewards, mask = outcome_rewards([1.0, 0.0], [4, 4], 4)
    logprobs = torch.full((2, 4), math.log(0.5))
    entropy = torch.full((2, 4), math.log(2.0))  # S = 0 everywhere
    signal = torch.zeros(2, 4)
    signal[1, 1], signal[1, 3] = 5.0, 3.0  # D = N - S: two large values on the negative row
    args = dict(
        token_level_rewards=rewards, response_mask=mask, group_ids=torch.zeros(2).long(),
        logprobs=logprobs, entropy=entropy, expected_entropy_signal=signal, mu=1.0,
    )
    # D's population std over 8 tokens: mean 1, var (16 + 4 + 6 * 1) / 8 = 3.25 -> std 1.80
    both, _ = run("clipv", max_frac=0.5, clip_target="advantage", **args)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(both, torch.tensor([[a] * 4, [-a, 0.0, -a, 0.0]]))
    one, _ = run("clipv", max_frac=0.1, clip_target="advantage", **args)  # max(1, 0.8) = 1 token: the largest D
    torch.testing.assert_close(one, torch.tensor([[a] * 4, [-a, 0.0, -a, -a]]))


@pytest.mark.parametrize(
    "name", ["reinforce", "asymre", "rec", "raft", "grpo_verl", "on_policy_distill", "jsd", "clipb", "clipv"]
)
def test_new_estimators_survive_an_all_zero_mask(name):
    zeros = torch.zeros(2, 3)
    extra = {
        "old_logprobs": zeros, "teacher_logprobs": zeros, "logprobs": zeros - 1.0, "entropy": zeros + 1.0,
        "expected_entropy_signal": zeros,
    }
    advantages, _ = run(name, token_level_rewards=zeros, response_mask=zeros, group_ids=torch.tensor([0, 0]), **extra)
    assert torch.isfinite(advantages).all() and torch.equal(advantages, torch.zeros(2, 3))

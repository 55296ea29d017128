"""Policy losses against hand-computed numbers, gradients and numerical edge cases."""

import math

import pytest
import torch
import torch.nn.functional as F

from trivium.algorithm.policy_losses import POLICY_LOSS_FNS
from trivium.errors import UserError


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def with_ratios(logprobs, ratios):
    """old_logprobs such that exp(logprobs - old_logprobs) = ratios."""
    return logprobs.detach() - torch.log(torch.tensor(ratios))


def loss_fn(name):
    return POLICY_LOSS_FNS.get(name)


# ---- ppo ------------------------------------------------------------------------------------


def test_ppo_takes_the_pessimistic_branch_and_counts_clipped_tokens():
    logprobs = leaf([[-1.0, -1.0, -1.0, -1.0]])
    old = with_ratios(logprobs, [[1.5, 0.5, 1.1, 9.0]])
    advantages = torch.tensor([[1.0, 1.0, -1.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, metrics = loss_fn("ppo")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=mask
    )
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(-0.5, -0.8) = -0.5; token 2: 1.1
    # token-mean over 3 tokens: (-1.2 - 0.5 + 1.1) / 3 = -0.2
    assert loss.item() == pytest.approx(-0.2, abs=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(1 / 3)
    assert metrics["ppo_kl"] == pytest.approx(-(math.log(1.5) + math.log(0.5) + math.log(1.1)) / 3, abs=1e-6)
    loss.backward()
    # d/dlogp of -A * r is -A * r for unclipped tokens, 0 for clipped ones; each / 3 tokens
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -0.5 / 3, 1.1 / 3, 0.0]]))


def test_ppo_dual_clip_caps_the_loss_of_negative_advantages():
    logprobs = leaf([[-1.0, -1.0]])
    old = with_ratios(logprobs, [[5.0, 5.0]])
    advantages = torch.tensor([[-1.0, 1.0]])
    loss, metrics = loss_fn("ppo")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 2)
    )
    # A<0: max(5, 1.2) = 5, capped at -A * c = 3;  A>0: max(-5, -1.2) = -1.2;  mean = (3 - 1.2) / 2
    assert loss.item() == pytest.approx(0.9, abs=1e-6)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(0.5)
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)


def test_ppo_without_dual_clip_keeps_the_uncapped_loss():
    logprobs = leaf([[-1.0]])
    old = with_ratios(logprobs, [[5.0]])
    loss, _ = loss_fn("ppo")(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor([[-1.0]]),
        response_mask=torch.ones(1, 1),
        clip_ratio_c=None,
    )
    assert loss.item() == pytest.approx(5.0, rel=1e-5)


def test_ppo_low_and_high_clip_ranges_override_the_symmetric_one():
    logprobs = leaf([[-1.0, -1.0]])
    old = with_ratios(logprobs, [[1.25, 0.85]])
    advantages = torch.tensor([[1.0, -1.0]])
    kwargs = {
        "logprobs": logprobs,
        "old_logprobs": old,
        "advantages": advantages,
        "response_mask": torch.ones(1, 2),
    }
    # symmetric 0.2: token 0 clipped at 1.2 -> -1.2; token 1: max(0.85, 0.8) = 0.85
    symmetric, _ = loss_fn("ppo")(**kwargs)
    assert symmetric.item() == pytest.approx((-1.2 + 0.85) / 2, abs=1e-6)
    # low 0.1, high 0.3: token 0 inside [0.9, 1.3] -> -1.25; token 1: max(0.85, 0.9) = 0.9
    asymmetric, metrics = loss_fn("ppo")(**kwargs, clip_range_low=0.1, clip_range_high=0.3)
    assert asymmetric.item() == pytest.approx((-1.25 + 0.9) / 2, abs=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(0.5)


def test_ppo_rejects_a_dual_clip_constant_not_above_one():
    logprobs = leaf([[-1.0]])
    with pytest.raises(ValueError, match="clip_ratio_c"):
        loss_fn("ppo")(
            logprobs=logprobs,
            old_logprobs=logprobs.detach(),
            advantages=torch.ones(1, 1),
            response_mask=torch.ones(1, 1),
            clip_ratio_c=0.5,
        )


# ---- gspo -----------------------------------------------------------------------------------


def test_gspo_uses_one_clipped_sequence_ratio_for_all_tokens():
    logprobs = leaf([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    # row 0: mean log-ratio over its two tokens = 0.2 (token 2 is padding, its 7.0 is ignored)
    # row 1: log-ratios 0, 1e-4, 2e-4 -> mean 1e-4
    old = logprobs.detach() - torch.tensor([[0.1, 0.3, 7.0], [0.0, 1e-4, 2e-4]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss, metrics = loss_fn("gspo")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=mask
    )
    # row 0: s = e^0.2 > 1 + 4e-4 and A > 0 -> clipped: -(1 + 4e-4)
    # row 1: s = e^1e-4 inside [1 - 3e-4, 1 + 4e-4] -> 2 * e^1e-4
    # seq-mean-token-mean: (-(1.0004) + 2 e^1e-4) / 2
    expected = (-(1 + 4e-4) + 2 * math.exp(1e-4)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 5)
    loss.backward()
    # clipped row: no gradient; unclipped row: every token gets (1/2)(1/3) * -A * s
    assert logprobs.grad[0].abs().max().item() == 0.0
    per_token = (1 / 6) * 2 * math.exp(1e-4)
    torch.testing.assert_close(logprobs.grad[1], torch.full((3,), per_token))


def test_gspo_clip_range_sets_both_sides():
    logprobs = leaf([[-1.0]])
    old = logprobs.detach() - 0.05  # s = e^0.05 ~ 1.0513
    kwargs = {
        "logprobs": logprobs,
        "old_logprobs": old,
        "advantages": torch.ones(1, 1),
        "response_mask": torch.ones(1, 1),
    }
    default_loss, _ = loss_fn("gspo")(**kwargs)
    wide_loss, _ = loss_fn("gspo")(**kwargs, clip_range=0.1)
    assert default_loss.item() == pytest.approx(-(1 + 4e-4), abs=1e-6)
    assert wide_loss.item() == pytest.approx(-math.exp(0.05), abs=1e-6)


# ---- cispo ----------------------------------------------------------------------------------


def test_cispo_clips_the_weight_and_stops_its_gradient():
    logprobs = leaf([[-1.0, -2.0]])
    old = with_ratios(logprobs, [[2.0, 0.5]])
    advantages = torch.tensor([[1.0, 1.0]])
    loss, metrics = loss_fn("cispo")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 2)
    )
    # w = clip(r, 0, 1.28) = [1.28, 0.5];  L = -(1.28 * 1 * -1 + 0.5 * 1 * -2) / 2 = (1.28 + 1) / 2
    assert loss.item() == pytest.approx(1.14, abs=1e-6)
    assert metrics["is_clipfrac"] == pytest.approx(0.5)
    loss.backward()
    # gradient is -w * A / 2 only: the weight is a constant (otherwise token 1 would get -0.5 * (1 + log pi) / 2)
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.64, -0.25]]))


# ---- opmd -----------------------------------------------------------------------------------


def test_opmd_with_the_log_ratio_penalty_adds_it_to_reinforce():
    logprobs = leaf([[-1.0, -2.0]])
    old = torch.tensor([[-1.5, -2.0]])
    advantages = torch.tensor([[2.0, -1.0]])
    loss, metrics = loss_fn("opmd")(
        logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=torch.ones(1, 2), tau=0.5,
        regularize_log_ratio=True,
    )
    # token 0: -2 * -1 + 0.25 * 0.5^2 = 2.0625;  token 1: -(-1) * -2 + 0 = -2;  mean = 0.03125
    assert loss.item() == pytest.approx(0.03125, abs=1e-6)
    assert metrics["opmd_regularizer"] == pytest.approx(0.0625 / 2)
    loss.backward()
    # gradient -(A - tau * log r) / 2:  token 0: -(2 - 0.25) / 2;  token 1: -(-1 - 0) / 2
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.875, 0.5]]))


# ---- sft ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4) / 2),
        ("seq-mean-token-sum", ((1 + 2 + 3) + 4) / 2),
    ],
)
def test_sft_is_the_aggregated_negative_log_likelihood(mode, expected):
    logprobs = leaf([[-1.0, -2.0, -3.0], [-4.0, -9.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    loss, metrics = loss_fn("sft")(
        logprobs=logprobs, old_logprobs=None, advantages=None, response_mask=mask, loss_agg_mode=mode
    )
    assert loss.item() == pytest.approx(expected)
    assert metrics["sft_loss"] == pytest.approx(expected)


# ---- dpo ------------------------------------------------------------------------------------


def dpo_inputs():
    # sequence log-probs (sum over the mask): policy c0=-3, r0=-5, c1=-4, r1=-2; ref c0=-4, r0=-4, c1=-4, r1=-3
    logprobs = leaf([[-1.0, -2.0], [-5.0, -50.0], [-2.0, -2.0], [-2.0, -50.0]])
    ref = torch.tensor([[-2.0, -2.0], [-4.0, -50.0], [-3.0, -1.0], [-3.0, -50.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    return logprobs, ref, mask


def test_dpo_loss_on_chosen_rejected_pairs():
    logprobs, ref, mask = dpo_inputs()
    loss, metrics = loss_fn("dpo")(
        logprobs=logprobs, old_logprobs=None, advantages=None, response_mask=mask, ref_logprobs=ref, beta=0.1
    )
    # rewards 0.1*(policy - ref): c0 = 0.1, r0 = -0.1 (margin 0.2); c1 = 0, r1 = 0.1 (margin -0.1)
    # loss = (-log sigmoid(0.2) - log sigmoid(-0.1)) / 2 = (log(1 + e^-0.2) + log(1 + e^0.1)) / 2
    expected = (math.log(1 + math.exp(-0.2)) + math.log(1 + math.exp(0.1))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["reward_accuracy"] == pytest.approx(0.5)
    assert metrics["reward_margin"] == pytest.approx(0.05, abs=1e-6)
    assert metrics["chosen_reward"] == pytest.approx(0.05, abs=1e-6)
    assert metrics["rejected_reward"] == pytest.approx(0.0, abs=1e-6)
    loss.backward()
    assert ref.grad is None
    # d loss / d log pi(chosen_0 token) = -(1/2) * beta * sigmoid(-0.2); padding gets none
    chosen_grad = -0.5 * 0.1 * torch.sigmoid(torch.tensor(-0.2))
    torch.testing.assert_close(logprobs.grad[0], torch.full((2,), chosen_grad.item()))
    assert logprobs.grad[1, 1].item() == 0.0


def test_dpo_label_smoothing_mixes_in_the_flipped_label():
    logprobs, ref, mask = dpo_inputs()
    loss, _ = loss_fn("dpo")(
        logprobs=logprobs,
        old_logprobs=None,
        advantages=None,
        response_mask=mask,
        ref_logprobs=ref,
        label_smoothing=0.1,
    )
    margins = torch.tensor([0.2, -0.1])
    expected = (-0.9 * F.logsigmoid(margins) - 0.1 * F.logsigmoid(-margins)).mean()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_dpo_needs_pairs_and_reference_logprobs():
    logprobs, ref, mask = dpo_inputs()
    with pytest.raises(ValueError, match="odd"):
        loss_fn("dpo")(logprobs=logprobs[:3], response_mask=mask[:3], ref_logprobs=ref[:3])
    with pytest.raises(ValueError, match="ref_logprobs"):
        loss_fn("dpo")(logprobs=logprobs, response_mask=mask)


# ---- mix ------------------------------------------------------------------------------------


def mix_inputs():
    logprobs = leaf([[-1.0, -1.0], [-1.0, -1.0], [-2.0, -4.0]])
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [7.0, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    expert = torch.tensor([False, False, True])
    return logprobs, advantages, mask, expert


def test_mix_weights_rl_on_policy_rows_and_sft_on_expert_rows():
    logprobs, advantages, mask, expert = mix_inputs()
    loss, metrics = loss_fn("mix")(
        logprobs=logprobs,
        old_logprobs=logprobs.detach(),
        advantages=advantages,
        response_mask=mask,
        expert_mask=expert,
        mu=0.25,
        exact_part_means=True,
    )
    # ratio 1, so rl token-mean over on-policy tokens = (-1 - 1 + 1) / 3 = -1/3
    # sft over the expert row = (2 + 4) / 2 = 3;  loss = 0.75 * (-1/3) + 0.25 * 3 = 0.5
    assert loss.item() == pytest.approx(0.5, abs=1e-6)
    assert metrics["rl/pg_loss"] == pytest.approx(-1 / 3, abs=1e-6)
    assert metrics["sft/sft_loss"] == pytest.approx(3.0)
    assert metrics["expert_fraction"] == pytest.approx(1 / 3)


def test_mix_without_expert_rows_is_the_scaled_rl_loss():
    logprobs, advantages, mask, _ = mix_inputs()
    loss, _ = loss_fn("mix")(
        logprobs=logprobs,
        old_logprobs=logprobs.detach(),
        advantages=advantages,
        response_mask=mask,
        expert_mask=torch.zeros(3, dtype=torch.bool),
        mu=0.25,
        exact_part_means=True,
    )
    # rl over all 5 tokens: (-1 - 1 + 1 - 7 - 7) / 5 = -3;  0.75 * -3
    assert loss.item() == pytest.approx(-2.25, abs=1e-6)


def test_mix_passes_its_inner_arguments_and_rejects_misspelt_ones():
    logprobs, advantages, mask, expert = mix_inputs()
    old = with_ratios(logprobs, [[2.0, 2.0], [1.0, 1.0], [1.0, 1.0]])
    kwargs = {
        "logprobs": logprobs,
        "old_logprobs": old,
        "advantages": advantages,
        "response_mask": mask,
        "expert_mask": expert,
    }
    _, metrics = loss_fn("mix")(**kwargs, rl_loss_fn_args={"clip_range": 0.5})
    # row 0 ratio 2 > 1.5 with A > 0: 2 of 3 on-policy tokens clipped
    assert metrics["rl/pg_clipfrac"] == pytest.approx(2 / 3)
    with pytest.raises(UserError, match="clip_range"):
        loss_fn("mix")(**kwargs, rl_loss_fn_args={"clip_rnage": 0.5})
    with pytest.raises(ValueError, match="expert_mask"):
        loss_fn("mix")(logprobs=logprobs, old_logprobs=old, advantages=advantages, response_mask=mask)


# ---- every loss: numerical edge cases ----------------------------------------------------------


def call_any_loss(name, logprobs, old, mask):
    batch = logprobs.shape[0]
    return loss_fn(name)(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor([[1.0, -1.0, 2.0]]).expand(batch, 3),
        response_mask=mask,
        ref_logprobs=old,
        expert_mask=torch.arange(batch) % 3 == 0,
    )


@pytest.mark.parametrize("name", sorted(POLICY_LOSS_FNS.names()))
@pytest.mark.parametrize("log_ratio", [50.0, -50.0])
def test_every_loss_stays_finite_for_extreme_log_ratios(name, log_ratio):
    logprobs = leaf([[-1.0, -0.5, -2.0]] * 4)
    old = logprobs.detach() - log_ratio
    loss, metrics = call_any_loss(name, logprobs, old, torch.ones(4, 3))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logprobs.grad).all()
    assert all(math.isfinite(value) for value in metrics.values())


@pytest.mark.parametrize("name", sorted(POLICY_LOSS_FNS.names()))
def test_every_loss_is_zero_for_an_all_zero_mask(name):
    logprobs = leaf([[-1.0, -0.5, -2.0]] * 4)
    loss, metrics = call_any_loss(name, logprobs, logprobs.detach() - 0.3, torch.zeros(4, 3))
    loss.backward()
    # dpo counts every pair, as Trinity-RFT does: a pair of empty rows has margin 0, loss ln 2
    assert loss.item() == pytest.approx(math.log(2.0) if name == "dpo" else 0.0)
    assert torch.equal(logprobs.grad, torch.zeros_like(logprobs))
    assert all(math.isfinite(value) for value in metrics.values())

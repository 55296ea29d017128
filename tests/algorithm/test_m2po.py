"""m2po: the second-moment trust region on the log-ratio, checked by hand."""

import math

import pytest
import torch

from trivium.algorithm import POLICY_LOSS_FNS, PRESETS
from trivium.algorithm.m2po import m2po_mask


def loss(log_ratios, advantages, mask=None, **args):
    log_ratio = torch.tensor([log_ratios], dtype=torch.float32)
    old = torch.zeros_like(log_ratio)
    logprobs = log_ratio.clone().requires_grad_(True)
    mask = torch.ones_like(log_ratio) if mask is None else torch.tensor([mask], dtype=torch.float32)
    value, metrics = POLICY_LOSS_FNS.get("m2po")(
        logprobs=logprobs,
        old_logprobs=old,
        advantages=torch.tensor([advantages], dtype=torch.float32),
        response_mask=mask,
        **args,
    )
    return value, metrics, logprobs


def test_the_largest_squared_log_ratios_of_the_trust_region_leave_until_the_mean_fits():
    # log r = [0.1, 0.3, 0.5, -0.4, 0.2], A = [1, 1, 1, -1, -1].
    # Trust region (A > 0, log r > 0 or A < 0, log r < 0): tokens 0, 1, 2, 3 (token 4: A < 0, log r > 0).
    # (log r)^2 = [0.01, 0.09, 0.25, 0.16]: mean 0.1275 > 0.04.
    # Sorted [0.01, 0.09, 0.16, 0.25], prefix means [0.01, 0.05, ...]: keep 1 -> only token 0 stays.
    log_ratio = torch.tensor([[0.1, 0.3, 0.5, -0.4, 0.2]])
    advantages = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]])
    keep, metrics = m2po_mask(log_ratio, advantages, torch.ones_like(log_ratio), 0.04)
    assert keep.tolist() == [[True, False, False, False, True]]
    assert metrics["m2_before"] == pytest.approx(0.1275)
    assert metrics["m2_after"] == pytest.approx(0.01)
    assert metrics["masked_fraction"] == pytest.approx(3 / 5)
    assert metrics["trust_region_fraction"] == pytest.approx(4 / 5)


def test_loss_is_minus_a_r_on_kept_tokens_over_every_response_token():
    # Same tokens: kept 0 (A 1, r e^0.1) and 4 (A -1, r e^0.2): loss = (-e^0.1 + e^0.2) / 5.
    value, metrics, logprobs = loss([0.1, 0.3, 0.5, -0.4, 0.2], [1, 1, 1, -1, -1])
    expected = (-math.exp(0.1) + math.exp(0.2)) / 5
    assert float(value.detach()) == pytest.approx(expected, rel=1e-6)
    assert metrics["pg_loss"] == pytest.approx(expected, rel=1e-6)
    value.backward()
    # d/d log pi of -A r / 5 = -A r / 5 on kept tokens, 0 on dropped ones
    grad = [-math.exp(0.1) / 5, 0.0, 0.0, 0.0, math.exp(0.2) / 5]
    assert logprobs.grad[0].tolist() == pytest.approx(grad, rel=1e-6, abs=1e-9)


def test_within_the_threshold_nothing_is_dropped():
    # (log r)^2 over the trust region = [0.01, 0.0004]: mean 0.0052 <= 0.04.
    value, metrics, _ = loss([0.1, -0.02], [2, -1])
    assert metrics["masked_fraction"] == 0.0
    assert float(value.detach()) == pytest.approx((-2 * math.exp(0.1) + math.exp(-0.02)) / 2, rel=1e-6)


def test_the_log_ratio_is_clamped_forward_with_the_unclamped_gradient():
    # log r = 2 with clip 1: r = e^1 forward; A = -1 keeps it outside the trust region.
    value, _, logprobs = loss([2.0], [-1], log_ratio_clip=1.0)
    assert float(value.detach()) == pytest.approx(math.e, rel=1e-6)
    value.backward()
    assert float(logprobs.grad[0, 0]) == pytest.approx(math.e, rel=1e-6)


def test_padding_is_outside_the_trust_region_and_the_denominator():
    value, metrics, _ = loss([0.1, 3.0], [1, 1], mask=[1, 0])
    assert float(value.detach()) == pytest.approx(-math.exp(0.1), rel=1e-6)
    assert metrics["trust_region_fraction"] == 1.0


def test_m2po_refuses_another_aggregation_and_a_negative_threshold():
    with pytest.raises(ValueError, match="token-mean"):
        loss([0.1], [1], loss_agg_mode="seq-mean-token-mean")
    with pytest.raises(ValueError, match="m2_threshold"):
        loss([0.1], [1], m2_threshold=-1.0)


def test_the_m2po_preset_pairs_grpo_advantages_with_the_m2po_loss():
    assert (PRESETS["m2po"].advantage_fn, PRESETS["m2po"].policy_loss_fn) == ("grpo", "m2po")

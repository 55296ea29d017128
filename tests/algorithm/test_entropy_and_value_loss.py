"""Token entropy, the entropy bonus, and the clipped critic loss."""

import math

import pytest
import torch

from trivium.algorithm.entropy import ENTROPY_LOSS_FNS, entropy_from_logits
from trivium.algorithm.value_loss import clipped_value_loss


def test_entropy_of_known_distributions():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -math.inf, -math.inf]]])
    # uniform over 4: ln 4;  p = [1/4, 3/4]: -(1/4 ln 1/4 + 3/4 ln 3/4)
    expected = [math.log(4), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([expected]))


def test_chunked_entropy_equals_the_direct_computation():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(entropy_from_logits(logits, chunk_size=4), entropy_from_logits(logits))


def test_entropy_is_stable_for_huge_logits_and_low_precision():
    logits = torch.tensor([[[1e4, 0.0, -1e4]]], dtype=torch.bfloat16)
    entropy = entropy_from_logits(logits)
    assert entropy.dtype == torch.float32 and torch.isfinite(entropy).all()
    assert entropy.item() == pytest.approx(0.0, abs=1e-6)


def test_default_entropy_loss_is_minus_coef_times_mean_entropy():
    entropy = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, metrics = ENTROPY_LOSS_FNS.get("default")(entropy=entropy, response_mask=mask, entropy_coef=0.01)
    # mean over masked tokens (1 + 2 + 3) / 3 = 2;  loss = -0.01 * 2
    assert loss.item() == pytest.approx(-0.02)
    assert metrics["entropy"] == pytest.approx(2.0)


def test_none_entropy_loss_is_zero():
    loss, metrics = ENTROPY_LOSS_FNS.get("none")(entropy=torch.ones(1, 2), response_mask=torch.ones(1, 2))
    assert loss.item() == 0.0 and metrics == {}


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_errors():
    values = torch.tensor([[1.0, 2.0, 0.0]], requires_grad=True)
    old_values = torch.tensor([[0.5, 0.5, 0.0]])
    returns = torch.tensor([[2.0, 3.0, 1.0]])
    loss, metrics = clipped_value_loss(
        values=values,
        old_values=old_values,
        returns=returns,
        response_mask=torch.ones(1, 3),
        cliprange_value=0.5,
    )
    # token 0: V_clip = 1.0, errors 1 and 1 -> 1
    # token 1: V_clip = 0.5 + 0.5 = 1.0, errors (2-3)^2 = 1, (1-3)^2 = 4 -> 4 (clipped)
    # token 2: unchanged, (0-1)^2 = 1;  loss = 0.5 * (1 + 4 + 1) / 3 = 1
    assert loss.item() == pytest.approx(1.0)
    assert metrics["vf_clipfrac"] == pytest.approx(1 / 3)
    loss.backward()
    # d/dV of 0.5 * (V - G)^2 / 3 = (V - G) / 3; the clipped token's branch is flat in V
    torch.testing.assert_close(values.grad, torch.tensor([[-1 / 3, 0.0, -1 / 3]]))


def test_value_loss_with_empty_mask_is_zero():
    loss, _ = clipped_value_loss(
        values=torch.ones(1, 2),
        old_values=torch.zeros(1, 2),
        returns=torch.zeros(1, 2),
        response_mask=torch.zeros(1, 2),
    )
    assert loss.item() == 0.0


def test_entropy_gradient_is_finite_with_masked_vocabulary():
    logits = torch.tensor([[[0.5, -math.inf, 1.0]]], requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    assert torch.isfinite(logits.grad).all()

"""The server's loss functions against values computed by hand."""

import math

import pytest
import torch

from trivium.tinker_server.losses import cross_entropy, importance_sampling


def test_cross_entropy_is_the_weighted_sum_of_negative_logprobs():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -4.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    weights = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.5, 9.0]])  # the 9 sits on padding
    loss, elementwise = cross_entropy(logprobs=logprobs, mask=mask, weights=weights)
    # 1*2 + 2*3 + 1*0.5 + 0.5*4 = 10.5
    assert float(loss) == pytest.approx(10.5)
    assert elementwise.tolist() == [[0.0, 2.0, 6.0], [0.5, 2.0, 0.0]]
    unweighted, _ = cross_entropy(logprobs=logprobs, mask=mask)
    assert float(unweighted) == pytest.approx(1 + 2 + 3 + 0.5 + 4)


def test_importance_sampling_sums_ratio_times_advantage_and_its_gradient():
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    sampling = torch.tensor([[-1.0, -1.5], [-1.0, -3.0]])
    advantages = torch.tensor([[0.0, 2.0], [-1.0, 7.0]])
    mask = torch.tensor([[True, True], [True, False]])
    loss, elementwise = importance_sampling(
        logprobs=logprobs, mask=mask, sampling_logprobs=sampling, advantages=advantages
    )
    # -(e^0 * 0 + e^-0.5 * 2 + e^0.5 * -1); the padded position does not count
    expected = -(2 * math.exp(-0.5) - math.exp(0.5))
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert elementwise[1, 1] == 0.0
    loss.backward()
    # dL/dlogp_t = -r_t * A_t
    expected_grad = [[0.0, -2 * math.exp(-0.5)], [math.exp(0.5), 0.0]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(expected_grad))

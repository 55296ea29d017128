"""Log-probabilities of chosen tokens."""

import math

import pytest
import torch

from trivium.algorithm.logprobs import logprobs_from_logits


def test_logprob_of_the_chosen_token():
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)]]])
    # p = 2 / (1 + 1 + 2)
    assert logprobs_from_logits(logits, torch.tensor([[2]])).item() == pytest.approx(math.log(0.5))


def test_temperature_divides_the_logits_first():
    logits = torch.tensor([[[0.0, 0.0, math.log(2.0)]]])
    # logits / 2 = [0, 0, ln(2)/2]: p = sqrt(2) / (2 + sqrt(2))
    value = logprobs_from_logits(logits, torch.tensor([[2]]), temperature=2.0).item()
    assert value == pytest.approx(math.log(math.sqrt(2) / (2 + math.sqrt(2))))


def test_matches_log_softmax_and_its_gradient_with_and_without_chunks():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 13, generator=generator, requires_grad=True)
    labels = torch.randint(0, 13, (2, 5), generator=generator)
    reference = torch.log_softmax(logits / 0.7, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    (reference_grad,) = torch.autograd.grad(reference.sum(), logits)
    for chunk_size in (None, 3):
        value = logprobs_from_logits(logits, labels, temperature=0.7, chunk_size=chunk_size)
        (grad,) = torch.autograd.grad(value.sum(), logits)
        torch.testing.assert_close(value, reference)
        torch.testing.assert_close(grad, reference_grad)


def test_low_precision_logits_give_float32_logprobs():
    logits = torch.randn(1, 4, 7).to(torch.bfloat16)
    labels = torch.zeros(1, 4, dtype=torch.long)
    value = logprobs_from_logits(logits, labels)
    assert value.dtype == torch.float32 and (value <= 0).all()


def test_mismatched_shapes_and_bad_temperature_are_rejected():
    with pytest.raises(ValueError, match="labels shape"):
        logprobs_from_logits(torch.zeros(1, 3, 5), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        logprobs_from_logits(torch.zeros(1, 3, 5), torch.zeros(1, 3, dtype=torch.long), temperature=0.0)

"""Sampling math on hand-made logits: penalties, top-k/top-p, stop blocking, the draw."""

import math

import torch

from trivium.models.engine.base import SamplingParams
from trivium.models.engine.sampling import (
    BatchSampler,
    apply_repetition_penalty,
    block_stop_tokens,
    draw,
    filter_top_k_top_p,
)

NEG_INF = float("-inf")


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    logits = torch.tensor([[2.0, -1.0, 3.0, -4.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, torch.tensor([[2.0]]))
    assert torch.equal(out, torch.tensor([[1.0, -2.0, 3.0, -4.0]]))


def test_top_k_keeps_the_k_largest_logits():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    out = filter_top_k_top_p(logits, torch.tensor([[2]]), torch.tensor([[1.0]]))
    assert torch.equal(out, torch.tensor([[NEG_INF, 4.0, 3.0, NEG_INF]]))


def test_top_p_keeps_the_smallest_nucleus_reaching_p():
    probs = torch.tensor([[0.1, 0.5, 0.25, 0.15]])
    logits = probs.log()
    # Sorted: 0.5, 0.25, 0.15, 0.1. Mass before each: 0, 0.5, 0.75, 0.9. With p = 0.7 the
    # first two are kept (0.5 < 0.7 before the second), the third starts at 0.75 >= 0.7.
    out = filter_top_k_top_p(logits, torch.tensor([[4]]), torch.tensor([[0.7]]))
    assert torch.isinf(out[0, 0]) and torch.isinf(out[0, 3])
    assert torch.allclose(out[0, 1:3], logits[0, 1:3])


def test_top_p_is_applied_after_top_k_renormalisation():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0]])  # uniform 0.25 each
    # top-k 2 leaves two tokens at 0.5 each; p = 0.5 then keeps only the first of them.
    out = filter_top_k_top_p(logits, torch.tensor([[2]]), torch.tensor([[0.5]]))
    assert int(torch.isfinite(out).sum()) == 1


def test_top_p_always_keeps_the_most_likely_token():
    logits = torch.tensor([[5.0, 0.0, 0.0]])
    out = filter_top_k_top_p(logits, torch.tensor([[3]]), torch.tensor([[1e-6]]))
    assert torch.isfinite(out).tolist() == [[True, False, False]]


def test_block_stop_tokens_only_for_rows_below_min_tokens():
    logits = torch.zeros(2, 5)
    stop_ids = torch.tensor([[1, 3], [4, -1]])
    out = block_stop_tokens(logits, stop_ids, torch.tensor([True, False]))
    assert torch.isinf(out[0]).tolist() == [False, True, False, True, False]
    assert torch.isfinite(out[1]).all()
    out = block_stop_tokens(logits, stop_ids, torch.tensor([False, True]))
    assert torch.isinf(out[1]).tolist() == [False, False, False, False, True]  # -1 blocks nothing


def test_draw_matches_the_distribution_and_skips_zero_probability():
    probs = torch.tensor([[0.5, 0.3, 0.2, 0.0]]).expand(20000, 4).contiguous()
    generator = torch.Generator().manual_seed(0)
    tokens = draw(probs, generator)
    frequencies = torch.bincount(tokens, minlength=4).float() / tokens.numel()
    assert frequencies[3] == 0
    # Standard error of each frequency is below 0.004; 0.015 is ~4 sigma.
    assert torch.allclose(frequencies[:3], torch.tensor([0.5, 0.3, 0.2]), atol=0.015)


def test_sampler_logprobs_are_raw_logits_log_softmax_whatever_the_temperature():
    logits = torch.tensor([[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]])
    params = [SamplingParams(temperature=0.3, top_k=2), SamplingParams(temperature=0)]
    sampler = BatchSampler(params, [[], []], vocab_size=3)
    tokens, logprobs = sampler.sample(logits, step=5, seen=None, generator=torch.Generator().manual_seed(0))
    assert tokens[1] == 2  # greedy row
    expected = logits.log_softmax(-1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.allclose(logprobs, expected)
    assert math.isclose(float(logprobs[1]), 3.0 - math.log(2 + math.exp(3.0)), rel_tol=1e-6)

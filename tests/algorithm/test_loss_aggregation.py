"""Masked reductions: hand-computed means, empty-mask rules, whitening."""

import math

import pytest
import torch

from trivium.algorithm.aggregation import (
    LOSS_AGG_MODES,
    aggregate_loss,
    aggregation_denominator,
    masked_mean,
    masked_whiten,
)
from trivium.errors import UserError

VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_token_mean_weighs_every_unmasked_token_equally():
    # (1 + 2 + 4) / 3
    assert aggregate_loss(VALUES, MASK, "token-mean").item() == pytest.approx(7 / 3)


def test_seq_mean_token_sum_sums_each_row_then_averages_rows():
    # ((1 + 2) + 4) / 2
    assert aggregate_loss(VALUES, MASK, "seq-mean-token-sum").item() == pytest.approx(3.5)


def test_seq_mean_token_mean_averages_each_row_then_rows():
    # ((1 + 2) / 2 + 4 / 1) / 2 = (1.5 + 4) / 2
    assert aggregate_loss(VALUES, MASK, "seq-mean-token-mean").item() == pytest.approx(2.75)


@pytest.mark.parametrize("mode", ["seq-mean-token-sum", "seq-mean-token-mean"])
def test_an_all_masked_row_counts_as_a_zero_sequence_as_in_the_reference(mode):
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # Trinity-RFT: row 0 gives sum 3 (mean 1.5), the empty row 0; the mean over both rows halves it
    expected = 1.5 if mode == "seq-mean-token-sum" else 0.75
    assert aggregate_loss(VALUES, mask, mode).item() == pytest.approx(expected)
    assert aggregation_denominator(mask, mode) == 2


@pytest.mark.parametrize("mode", ["seq-mean-token-sum-nonempty", "seq-mean-token-mean-nonempty"])
def test_the_nonempty_modes_leave_rows_without_tokens_out(mode):
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # only row 0 counts: sum = 3, mean = 1.5
    expected = 3.0 if mode.startswith("seq-mean-token-sum") else 1.5
    assert aggregate_loss(VALUES, mask, mode).item() == pytest.approx(expected)
    assert aggregation_denominator(mask, mode) == 1


def test_seq_mean_token_sum_norm_divides_the_token_sum_by_the_padded_length():
    # (1 + 2 + 4) / R with R = 3 columns
    assert aggregate_loss(VALUES, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 3)
    # the denominator of a micro-batch is its own padded length
    assert aggregation_denominator(MASK, "seq-mean-token-sum-norm") == 3


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_all_zero_mask_gives_zero_loss_and_zero_gradient(mode):
    values = VALUES.clone().requires_grad_(True)
    loss = aggregate_loss(values, torch.zeros_like(MASK), mode)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(values.grad, torch.zeros_like(values))


def test_unknown_mode_is_a_user_error_listing_the_choices():
    with pytest.raises(UserError, match="token-mean"):
        aggregate_loss(VALUES, MASK, "token-sum")


def test_masked_mean_along_rows_returns_zero_for_empty_rows():
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    # row 0: (1 + 3) / 2; row 1: empty
    assert masked_mean(VALUES, mask, dim=-1).tolist() == [2.0, 0.0]


def test_masked_whiten_uses_only_masked_statistics():
    values = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # mean = 2; unbiased variance = (1 + 0 + 1) / 2 = 1, so whitened = v - 2
    whitened = masked_whiten(values, mask)
    torch.testing.assert_close(whitened[0, :3], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6, rtol=0)


def test_masked_whiten_without_shift_keeps_the_mean():
    values = torch.tensor([[1.0, 3.0]])
    mask = torch.ones_like(values)
    # mean 2, unbiased variance (1 + 1) / 1 = 2: (v - 2) / sqrt(2) + 2
    expected = torch.tensor([[2 - 1 / math.sqrt(2), 2 + 1 / math.sqrt(2)]])
    torch.testing.assert_close(masked_whiten(values, mask, shift_mean=False), expected)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_scaled_by_their_denominator_share_reproduce_the_full_batch_loss(mode):
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    full = aggregate_loss(values, mask, mode)
    total = aggregation_denominator(mask, mode)
    # micro-batches trimmed to their own padded length, as the trainer's are
    pieces = ((values[:1, :2], mask[:1, :2]), (values[1:], mask[1:]))
    accumulated = sum(
        aggregate_loss(piece, piece_mask, mode) * aggregation_denominator(piece_mask, mode) / total
        for piece, piece_mask in pieces
    )
    assert accumulated.item() == pytest.approx(full.item())


def test_denominator_counts_tokens_or_sequences():
    # MASK has 3 tokens in 2 rows, both non-empty
    assert aggregation_denominator(MASK, "token-mean") == 3
    assert aggregation_denominator(MASK, "seq-mean-token-sum") == 2
    assert aggregation_denominator(MASK, "seq-mean-token-mean-nonempty") == 2

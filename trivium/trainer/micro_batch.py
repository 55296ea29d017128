"""Splitting a training batch into micro-batches, and the weight of each in the loss.

Gradient accumulation must give the same gradient as one pass over the whole batch, so each
micro-batch's loss is scaled by its share of what the aggregation divides by: tokens for
``token-mean``, sequences for the ``seq-mean-*`` modes, the padded response length for
``seq-mean-token-sum-norm`` (``aggregation_denominator``).
"""

from __future__ import annotations

import torch

from trivium.algorithm.aggregation import aggregation_denominator
from trivium.core.batch import ExperienceBatch


def split_by_count(batch: ExperienceBatch, micro_batch_size: int) -> list[list[int]]:
    size = max(1, int(micro_batch_size))
    rows = list(range(batch.batch_size))
    return [rows[start : start + size] for start in range(0, batch.batch_size, size)]


def split_by_token_budget(batch: ExperienceBatch, max_tokens: int, *, packed: bool = False) -> list[list[int]]:
    """Group rows, longest first, into micro-batches of at most ``max_tokens`` tokens: padded
    tokens (rows times the longest row), or real tokens when the micro-batches run packed.

    A row longer than the budget gets a micro-batch of its own rather than being dropped.
    """
    lengths = batch.attention_mask.sum(dim=1)
    order = torch.argsort(lengths, descending=True).tolist()
    groups: list[list[int]] = []
    current: list[int] = []
    current_max = current_sum = 0
    for row in order:
        length = int(lengths[row])
        widest = max(current_max, length)
        size = current_sum + length if packed else widest * (len(current) + 1)
        if current and size > max_tokens:
            groups.append(current)
            current, widest, current_sum = [], length, 0
        current.append(row)
        current_max = widest
        current_sum += length
    if current:
        groups.append(current)
    return [sorted(group) for group in groups]


def plan_micro_batches(
    batch: ExperienceBatch, *, use_dynamic_bsz: bool, micro_batch_size: int, max_token_len: int, packed: bool = False
) -> list[list[int]]:
    """Row indices of each micro-batch; ``batch.select(rows)`` builds it."""
    if use_dynamic_bsz:
        return split_by_token_budget(batch, max_token_len, packed=packed)
    return split_by_count(batch, micro_batch_size)


def loss_scale(micro: ExperienceBatch, whole: ExperienceBatch, loss_agg_mode: str) -> float:
    """The weight of a micro-batch's aggregated loss in the whole batch's loss."""
    total = aggregation_denominator(whole.response_mask, loss_agg_mode)
    return aggregation_denominator(micro.response_mask, loss_agg_mode) / total if total else 0.0

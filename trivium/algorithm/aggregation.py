"""Masked reductions: the one place that turns per-token values into a scalar loss.

Owns ``masked_sum``, ``masked_mean``, ``masked_whiten``, ``aggregate_loss`` and
``aggregation_denominator``. Every other algorithm module reduces through these, so the
rules for empty masks live here only: a reduction over no tokens is 0 (never NaN). The
sequence means count every row, an all-masked row as a 0 (Trinity-RFT's rule); the
``-nonempty`` modes leave such rows out of the mean instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.errors import UserError
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

LOSS_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean-token-sum-nonempty",
    "seq-mean-token-mean-nonempty",
)

# Smallest denominator used where a count may be 0; the result is then forced to 0 anyway.
_TINY = 1e-12


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``values * mask`` over ``dim`` (all elements when None)."""
    weighted = values * mask
    return weighted.sum() if dim is None else weighted.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is set; 0 where the mask is empty.

    values, mask: same shape (mask may be bool or float weights).
    Returns a scalar when ``dim`` is None, else the tensor reduced over ``dim``.
    """
    mask = mask.to(values.dtype)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    total = masked_sum(values, mask, dim)
    # mean = sum(v * m) / sum(m), defined as 0 when sum(m) == 0
    return torch.where(count > 0, total / count.clamp_min(_TINY), torch.zeros_like(total))


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked elements (scalar); 0 when fewer than two elements are set."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    mean = masked_mean(values, mask)
    squared_error = masked_sum((values - mean) ** 2, mask)
    # unbiased: sum((v - mean)^2) / (n - 1); biased: / n
    denominator = count - 1 if unbiased else count
    enough = count > 1 if unbiased else count > 0
    return torch.where(enough, squared_error / denominator.clamp_min(_TINY), torch.zeros_like(mean))


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, epsilon: float = 1e-8
) -> torch.Tensor:
    """Normalise the masked elements to mean 0 and variance 1 (statistics over the whole mask).

    values, mask: (B, R). Returns (B, R); positions outside the mask are transformed the same
    way but carry no meaning. With ``shift_mean=False`` the mean is added back (scale only).
    """
    mean = masked_mean(values, mask)
    variance = masked_var(values, mask)
    # whitened = (v - mean) / sqrt(var + epsilon)
    whitened = (values - mean) * torch.rsqrt(variance + epsilon)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def aggregate_loss(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Reduce per-token losses to a scalar.

    values, mask: (B, R). Modes:
      - ``token-mean``: every unmasked token in the batch weighs the same.
      - ``seq-mean-token-sum``: sum over each sequence's tokens, then mean over all B rows.
      - ``seq-mean-token-mean``: mean over each sequence's tokens, then mean over all B rows.
      - ``seq-mean-token-sum-norm``: sum over every unmasked token, divided by R (the padded
        response length, a constant: Dr. GRPO's normaliser).
      - ``seq-mean-token-sum-nonempty`` / ``seq-mean-token-mean-nonempty``: as the two
        sequence means, over the rows that have tokens only.
    In the sequence means an all-masked row counts as a row whose loss is 0. An empty batch
    gives 0.
    """
    if mode == "token-mean":
        return masked_mean(values, mask)
    _check_mode(mode)
    mask = mask.to(values.dtype)
    if mode == "seq-mean-token-sum-norm":
        # loss = sum_{i,t} v * m / R
        return masked_sum(values, mask) / max(values.shape[-1], 1)
    if mode.startswith("seq-mean-token-sum"):
        per_sequence = masked_sum(values, mask, dim=-1)
    else:
        per_sequence = masked_mean(values, mask, dim=-1)
    if mode.endswith("-nonempty"):
        # loss = mean over non-empty sequences of their per-sequence reduction
        return masked_mean(per_sequence, (mask.sum(dim=-1) > 0).to(values.dtype))
    # loss = (1 / B) * sum_i per_sequence_i, an all-masked row contributing 0
    return masked_mean(per_sequence, torch.ones_like(per_sequence))


def _check_mode(mode: str) -> None:
    if mode not in LOSS_AGG_MODES:
        raise UserError(f"Unknown loss_agg_mode '{mode}'. Choose one of: {', '.join(LOSS_AGG_MODES)}.")


def aggregation_denominator(mask: torch.Tensor, mode: str = "token-mean") -> int:
    """What ``aggregate_loss`` divides by: unmasked tokens (token-mean), rows (the sequence
    means), non-empty rows (``-nonempty``) or the padded response length (``-norm``).

    When a batch is split into micro-batches for gradient accumulation, scaling each
    micro-batch loss by ``denominator(micro) / denominator(whole batch)`` makes the summed
    gradients equal to those of the whole batch in one piece.
    """
    _check_mode(mode)
    if mode == "token-mean":
        return int((mask != 0).sum())
    if mode == "seq-mean-token-sum-norm":
        return int(mask.shape[-1])
    if mode.endswith("-nonempty"):
        return int((mask.sum(dim=-1) > 0).sum())
    return int(mask.shape[0])

"""Per-group statistics of sequence scores, broadcast back to the rows.

Group-based advantage estimators (grpo, rloo, opmd) compare each response with the other
responses to the same task; ``group_ids`` (B,) says which rows belong together. This module
computes the statistics, and the mean and std a group of one sample takes (veRL's
convention); the estimators decide what to do with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


@dataclass(frozen=True)
class GroupStats:
    """Statistics of each row's group, one value per row (all (B,))."""

    size: torch.Tensor  # number of rows in the group (float)
    total: torch.Tensor  # sum of the group's scores
    mean: torch.Tensor
    std: torch.Tensor  # sample standard deviation (n - 1 denominator); 0 for a single row


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> GroupStats:
    """scores: (B,) float; group_ids: (B,) integer labels (any values, need not be contiguous)."""
    if scores.dim() != 1 or group_ids.shape != scores.shape:
        raise ValueError(
            f"group_ids must have shape (B,) matching the batch; got scores {tuple(scores.shape)} "
            f"and group_ids {tuple(group_ids.shape)}"
        )
    _, row_to_group = torch.unique(group_ids, return_inverse=True)
    num_groups = int(row_to_group.max()) + 1 if row_to_group.numel() else 0
    scores = scores.float()
    size = torch.zeros(num_groups, device=scores.device).index_add_(0, row_to_group, torch.ones_like(scores))
    total = torch.zeros(num_groups, device=scores.device).index_add_(0, row_to_group, scores)
    mean = total / size
    squared_error = (scores - mean[row_to_group]) ** 2
    sum_squared_error = torch.zeros(num_groups, device=scores.device).index_add_(
        0, row_to_group, squared_error
    )
    # std = sqrt(sum((s - mean)^2) / (n - 1)), 0 for single-row groups
    std = torch.where(size > 1, sum_squared_error / (size - 1).clamp_min(1), torch.zeros_like(size)).sqrt()
    return GroupStats(
        size=size[row_to_group],
        total=total[row_to_group],
        mean=mean[row_to_group],
        std=std[row_to_group],
    )


def single_sample_convention(stats: GroupStats) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's group mean and std, with veRL's values for a group of one: mean 0, std 1."""
    alone = stats.size <= 1
    mean = torch.where(alone, torch.zeros_like(stats.mean), stats.mean)
    std = torch.where(alone, torch.ones_like(stats.std), stats.std)
    return mean, std


def group_logavgexp(scores: torch.Tensor, group_ids: torch.Tensor, tau: float) -> torch.Tensor:
    """Per-row soft maximum of its group: tau * log(mean(exp(s / tau))). (B,)"""
    _, row_to_group = torch.unique(group_ids, return_inverse=True)
    num_groups = int(row_to_group.max()) + 1 if row_to_group.numel() else 0
    scaled = scores.float() / tau
    # subtract each group's maximum before exp so large scores do not overflow
    group_max = torch.full((num_groups,), -torch.inf, device=scores.device).scatter_reduce(
        0, row_to_group, scaled, reduce="amax"
    )
    shifted = torch.exp(scaled - group_max[row_to_group])
    sums = torch.zeros(num_groups, device=scores.device).index_add_(0, row_to_group, shifted)
    size = torch.zeros(num_groups, device=scores.device).index_add_(0, row_to_group, torch.ones_like(scaled))
    # tau * (max + log(sum(exp(s/tau - max)) / n))
    per_group = tau * (group_max + torch.log(sums / size))
    return per_group[row_to_group]

"""Group baselines of the REINFORCE family: plain REINFORCE, AsymRE and REC.

Each is an outcome estimator with the signature documented in ``advantages.py``; each row's
score is its total reward and its group is the set of rows sampled from the same task. They
are registered into ``ADVANTAGE_FNS`` when this module is imported (on first lookup).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.advantages import (
    _group_advantages,
    _group_scores,
    computed_in_trainer,
    register_advantage_fn,
)
from trivium.algorithm.grouping import group_stats, single_sample_convention
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

# rec's ``drop`` choices: keep every sample (None, or the config's ``none``), or ``balance``.
REC_DROPS = (None, "none", "balance")


@register_advantage_fn("reinforce", needs_group=True)
@no_grad
def reinforce_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain REINFORCE without a baseline: every token's advantage is its row's score.

    Grouped only so that it runs where the other outcome estimators run (the explorer).
    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, _ = _group_scores("reinforce", token_level_rewards, response_mask, group_ids)
    # A_{i,t} = s_i
    return _group_advantages(scores, response_mask)


@register_advantage_fn("asymre", needs_group=True)
@no_grad
def asymre_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    baseline_shift: float = -0.1,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric REINFORCE: the group mean shifted by ``baseline_shift`` is the baseline.

    A negative shift lowers the baseline, so more samples count as good than as bad; this
    keeps off-policy REINFORCE stable (Arnal et al., 2025). A group of one sample has
    baseline 0 (no shift), following the single-sample convention.
    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, stats = _group_scores("asymre", token_level_rewards, response_mask, group_ids)
    mean, _ = single_sample_convention(stats)
    # b_g = mean_g + shift  (b = 0 for a group of one)
    baseline = torch.where(stats.size > 1, mean + baseline_shift, torch.zeros_like(mean))
    # a_i = s_i - b_g
    return _group_advantages(scores - baseline, response_mask)


computed_in_trainer("asymre_verl", asymre_advantages)


@register_advantage_fn("rec", needs_group=True)
@no_grad
def rec_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = False,
    drop: str | None = None,
    seed: int = 0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative REINFORCE for the REC losses: the group mean is the baseline.

    ``std_normalize`` divides by the group's population standard deviation (n denominator).
    ``drop="balance"``: in a group with more below-mean than at-or-above-mean samples, that
    many below-mean samples (chosen at random with ``seed``) are dropped (advantage 0) so both
    sides weigh the same; the kept samples' mean and population std are then used. A group
    of one sample, or with one kept sample, takes mean 0 and std 1.
    Returns (advantages, returns), both (B, R) and equal.
    """
    if drop not in REC_DROPS:
        raise ValueError(f"rec advantage: drop must be None or 'balance', got {drop!r}")
    scores, stats = _group_scores("rec", token_level_rewards, response_mask, group_ids)
    keep = torch.ones_like(scores, dtype=torch.bool)
    if drop == "balance":
        keep = _balanced_keep(scores, stats.mean, group_ids, seed)
    per_sequence = torch.zeros_like(scores)
    if bool(keep.any()):
        kept_stats = group_stats(scores[keep], group_ids[keep])
        mean, std = single_sample_convention(kept_stats)
        # population std: std_pop = std_sample * sqrt((n - 1) / n)
        n = kept_stats.size
        std = torch.where(n > 1, std * torch.sqrt((n - 1) / n), std)
        kept = scores[keep]
        # a_i = (s_i - mean_g) / (std_g + epsilon), or s_i - mean_g
        per_sequence[keep] = (kept - mean) / (std + epsilon) if std_normalize else kept - mean
    return _group_advantages(per_sequence, response_mask)


def _balanced_keep(
    scores: torch.Tensor, group_mean: torch.Tensor, group_ids: torch.Tensor, seed: int
) -> torch.Tensor:
    """(B,) bool: drop random below-mean rows until no group has more of them than others."""
    generator = torch.Generator().manual_seed(seed)
    keep = torch.ones_like(scores, dtype=torch.bool)
    for group in torch.unique(group_ids):
        rows = (group_ids == group).nonzero(as_tuple=True)[0]
        below = rows[scores[rows] < group_mean[rows]]
        extra = len(below) - (len(rows) - len(below))
        if extra > 0:
            chosen = below[torch.randperm(len(below), generator=generator)[:extra]]
            keep[chosen] = False
    return keep


@register_advantage_fn("raft", needs_group=True)
@no_grad
def raft_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    reward_threshold: float = 0.0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward ranking for RAFT: 1 for the best-scored sample(s) of each group, else 0.

    Ties at the top are all selected, and only samples scoring above ``reward_threshold``
    are: with one sample per task, RAFT keeps the rollouts that earned a reward.
    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, _ = _group_scores("raft", token_level_rewards, response_mask, group_ids)
    _, row_to_group = torch.unique(group_ids, return_inverse=True)
    best = torch.full((int(row_to_group.max()) + 1,), -torch.inf).scatter_reduce(
        0, row_to_group, scores, reduce="amax"
    )
    # a_i = 1 if s_i = max_g and s_i > threshold else 0
    selected = (scores >= best[row_to_group]) & (scores > reward_threshold)
    return _group_advantages(selected.float(), response_mask)

"""Multi-step GRPO: group-relative advantages over whole episodes of a multi-turn task.

An episode is every model turn of one attempt at a task. It is either one row (a token-in,
token-out sequence whose ``response_mask`` covers only the model's turns) or several rows
(one per step, sharing an ``episode_ids`` label). Either way the episode, not the row, is
the sample that the group statistics count: an episode of ten steps weighs as much as one
of two. Its advantage is then broadcast to every model token of every one of its rows.

    s_e = mean of the scores of episode e's rows (each row's score: its summed rewards)
    a_e = (s_e - mean_g) / (std_g + epsilon)  over the episodes e of group g
    A_{i,t} = a_{e(i)} * m_{i,t}

``std_cal_level: batch`` divides by the spread of every episode score in the batch (one
explorer step, which holds whole groups) instead of the group's; the mean stays the group's.
``std_threshold`` gives 0 to a group whose own spread is at most the threshold (as in grpo).
``enable_step_norm`` divides each row's advantage by its episode's number of rows, so an
episode's steps share its advantage instead of each carrying all of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.advantages import _broadcast, _check_inputs, _require, register_advantage_fn
from trivium.algorithm.grouping import group_stats
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


@register_advantage_fn("multi_step_grpo", needs_group=True, needs_episodes=True)
@no_grad
def multi_step_grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    episode_ids: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
    std_threshold: float | None = None,
    std_cal_level: str = "group",
    enable_step_norm: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO with episodes as the samples of a group.

    token_level_rewards, response_mask: (B, R); group_ids: (B,) the task of each row;
    episode_ids: (B,) the episode of each row (None: every row is its own episode).
    An episode belongs to one group. A group of one episode, or of equal scores, gets 0.
    std_cal_level: 'group' (each group's std) or 'batch' (the std of all episode scores).
    Returns (advantages, returns), both (B, R) and equal.
    """
    _check_inputs(token_level_rewards, response_mask)
    if std_cal_level not in ("group", "batch"):
        raise ValueError(f"multi_step_grpo: std_cal_level must be 'group' or 'batch', got {std_cal_level!r}")
    group_ids = _require(group_ids, "group_ids", "multi_step_grpo", "it compares episodes of the same task")
    if episode_ids is None:
        episode_ids = torch.arange(token_level_rewards.shape[0])
    # s_row = sum_t r_{row,t}
    row_scores = token_level_rewards.float().sum(dim=-1)
    episodes, row_to_episode = torch.unique(episode_ids, return_inverse=True)
    count = torch.zeros(len(episodes)).index_add_(0, row_to_episode, torch.ones_like(row_scores))
    # s_e = mean over the episode's rows
    episode_scores = torch.zeros(len(episodes)).index_add_(0, row_to_episode, row_scores) / count
    episode_groups = torch.zeros(len(episodes), dtype=group_ids.dtype).index_copy_(
        0, row_to_episode, group_ids
    )
    stats = group_stats(episode_scores, episode_groups)
    spread = _spread(stats.std, episode_scores, std_cal_level)
    if std_normalize:
        # a_e = (s_e - mean_g) / (std + epsilon), std = std_g or std_batch
        per_episode = (episode_scores - stats.mean) / (spread + epsilon)
    else:
        # a_e = s_e - mean_g
        per_episode = episode_scores - stats.mean
    keep = stats.size > 1
    if std_threshold is not None:
        # a_e = 0 where std_g <= threshold
        keep = keep & (stats.std > std_threshold)
    per_episode = torch.where(keep, per_episode, torch.zeros_like(per_episode))
    per_row = per_episode[row_to_episode]
    if enable_step_norm:
        # a_i = a_e / (number of rows of episode e)
        per_row = per_row / count[row_to_episode]
    advantages = _broadcast(per_row, response_mask)
    return advantages, advantages.clone()


def _spread(group_std: torch.Tensor, episode_scores: torch.Tensor, std_cal_level: str) -> torch.Tensor:
    """The std each episode's advantage is divided by, (E,): its group's, or the whole batch's."""
    if std_cal_level == "group":
        return group_std
    # std_batch over every episode of the batch (n - 1 denominator; 1 for a single episode)
    batch_std = float(episode_scores.std()) if episode_scores.numel() > 1 else 1.0
    return torch.full_like(group_std, batch_std)

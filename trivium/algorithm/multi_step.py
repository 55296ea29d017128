"""Multi-step GRPO: group-relative advantages over whole episodes of a multi-turn task.

An episode is every model turn of one attempt at a task. It is either one row (a token-in,
token-out sequence whose ``response_mask`` covers only the model's turns) or several rows
(one per step, sharing an ``episode_ids`` label). Either way the episode, not the row, is
the sample that the group statistics count: an episode of ten steps weighs as much as one
of two. Its advantage is then broadcast to every model token of every one of its rows.

    s_e = score of episode e's last row (its summed rewards: the episode's final reward)
    a_e = (s_e - mean_g) / (std_g + epsilon)  over the episodes e of group g
    A_{i,t} = a_{e(i)} * m_{i,t}

A group of one episode takes mean 0 and std 1 (so a_e = s_e / (1 + epsilon)), as in grpo.
``episode_score: mean`` scores an episode by the mean of its rows' scores instead of its
last row's. ``std_cal_level: batch`` divides by the spread of every episode score in the
batch (one explorer step, which holds whole groups) instead of the group's; the mean stays
the group's. ``std_threshold`` drops every row of a group of one episode or of a group whose
spread is at most the threshold (``multi_step_grpo_kept_rows``). ``enable_step_norm``
divides each row's advantage by its episode's number of rows, so an episode's steps share
its advantage instead of each carrying all of it. Registered as ``multi_step_grpo`` and as
``step_wise_grpo``, Trinity-RFT's name for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trivium.algorithm.advantages import (
    ADVANTAGE_FNS,
    STD_CAL_LEVELS,
    _broadcast,
    _check_inputs,
    _require,
    batch_spread,
    flat_or_lone_groups,
    kept_rows_of_groups,
    register_advantage_fn,
)
from trivium.algorithm.grouping import GroupStats, group_stats, single_sample_convention
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

EPISODE_SCORES = ("last", "mean")


@dataclass(frozen=True)
class Episodes:
    """Each row's episode and each episode's score, count and group."""

    row_to_episode: torch.Tensor  # (B,) episode index of each row
    scores: torch.Tensor  # (E,) episode scores
    rows: torch.Tensor  # (E,) number of rows of each episode
    groups: torch.Tensor  # (E,) group label of each episode
    stats: GroupStats  # per episode, statistics of its group's episode scores


def _episodes(
    token_level_rewards: torch.Tensor,
    group_ids: torch.Tensor,
    episode_ids: torch.Tensor | None,
    episode_score: str,
) -> Episodes:
    if episode_score not in EPISODE_SCORES:
        raise ValueError(f"multi_step_grpo: episode_score must be 'last' or 'mean', got {episode_score!r}")
    if episode_ids is None:
        episode_ids = torch.arange(token_level_rewards.shape[0])
    # s_row = sum_t r_{row,t}
    row_scores = token_level_rewards.float().sum(dim=-1)
    episodes, row_to_episode = torch.unique(episode_ids, return_inverse=True)
    count = torch.zeros(len(episodes)).index_add_(0, row_to_episode, torch.ones_like(row_scores))
    if episode_score == "mean":
        # s_e = mean over the episode's rows
        scores = torch.zeros(len(episodes)).index_add_(0, row_to_episode, row_scores) / count
    else:
        # s_e = score of the episode's last row in batch order
        last_row = torch.full((len(episodes),), -1, dtype=torch.long).scatter_reduce(
            0, row_to_episode, torch.arange(len(row_scores)), reduce="amax"
        )
        scores = row_scores[last_row]
    groups = torch.zeros(len(episodes), dtype=group_ids.dtype).index_copy_(0, row_to_episode, group_ids)
    return Episodes(row_to_episode, scores, count, groups, group_stats(scores, groups))


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
    episode_score: str = "last",
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO with episodes as the samples of a group.

    token_level_rewards, response_mask: (B, R); group_ids: (B,) the task of each row;
    episode_ids: (B,) the episode of each row (None: every row is its own episode).
    An episode belongs to one group. A group of equal scores gets 0; a group of one episode
    s_e / (1 + epsilon). std_cal_level: 'group' (each group's std) or 'batch' (the std of all
    episode scores). Returns (advantages, returns), both (B, R) and equal, for every row
    (``std_threshold`` acts through ``multi_step_grpo_kept_rows``).
    """
    _check_inputs(token_level_rewards, response_mask)
    if std_cal_level not in STD_CAL_LEVELS:
        raise ValueError(f"multi_step_grpo: std_cal_level must be 'group' or 'batch', got {std_cal_level!r}")
    group_ids = _require(group_ids, "group_ids", "multi_step_grpo", "it compares episodes of the same task")
    episodes = _episodes(token_level_rewards, group_ids, episode_ids, episode_score)
    mean, std = single_sample_convention(episodes.stats)
    if std_cal_level == "batch":
        std = torch.full_like(std, batch_spread(episodes.scores))
    if std_normalize:
        # a_e = (s_e - mean_g) / (std + epsilon), std = std_g or std_batch
        per_episode = (episodes.scores - mean) / (std + epsilon)
    else:
        # a_e = s_e - mean_g
        per_episode = episodes.scores - mean
    per_row = per_episode[episodes.row_to_episode]
    if enable_step_norm:
        # a_i = a_e / (number of rows of episode e)
        per_row = per_row / episodes.rows[episodes.row_to_episode]
    advantages = _broadcast(per_row, response_mask)
    return advantages, advantages.clone()


@no_grad
def multi_step_grpo_kept_rows(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    episode_ids: torch.Tensor | None = None,
    std_threshold: float | None = None,
    episode_score: str = "last",
    **_ignored,
) -> torch.Tensor | None:
    """The rows multi_step_grpo trains on: all (None) without ``std_threshold``; with it, the
    rows of groups of several episodes whose episode scores spread more than the threshold.
    (K,) long row indices."""
    if std_threshold is None:
        return None
    group_ids = _require(group_ids, "group_ids", "multi_step_grpo", "it compares episodes of the same task")
    episodes = _episodes(token_level_rewards, group_ids, episode_ids, episode_score)
    dropped = flat_or_lone_groups(episodes.stats, std_threshold)[episodes.row_to_episode]
    return kept_rows_of_groups(dropped, group_ids, duplicate_experiences=False)


multi_step_grpo_advantages.kept_rows = multi_step_grpo_kept_rows
ADVANTAGE_FNS.register("step_wise_grpo", multi_step_grpo_advantages)

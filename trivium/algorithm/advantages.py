"""Advantage estimators: rewards (and critic values) in, per-token advantages and returns out.

Every estimator has the same keyword-only signature::

    fn(*, token_level_rewards (B, R), response_mask (B, R), group_ids (B,) long | None,
       values (B, R) | None = None, baseline_rewards (B,) | None = None, **args)
        -> (advantages (B, R), returns (B, R))

Estimators that read more of the batch (``old_logprobs`` and ``teacher_logprobs`` for
distillation, ``logprobs`` and ``entropy`` for the entropy-based token filters) take them
by keyword too, and declare so with their flags.

A sequence's scalar reward sits on its last response token of ``token_level_rewards``; the
outcome estimators use each row's total reward as the sequence score. Advantages are
training targets, so they are computed without gradients. Each estimator carries two flags,
read with ``requires_groups`` / ``requires_critic``, that tell the pipeline whether it needs
several samples per task and whether it needs a value model; ``in_trainer`` estimators are
computed by the trainer even when they compare groups (after any KL penalty, as veRL does),
and ``needs_teacher`` / ``needs_entropy`` ones need those tensors from the trainer.

Single-sample groups follow veRL's convention: the group's mean is taken as 0 and its
standard deviation as 1, so the lone sample's advantage is its own score.

Some estimators also decide which rows to train on at all. They carry a ``kept_rows``
companion, read with ``row_selection``: called with the same keyword arguments, it returns
the row indices to keep, (K,) long, possibly repeating rows, or None for all of them (grpo
and multi_step_grpo with ``std_threshold``). Others narrow the response mask instead of
zeroing advantages; their ``response_mask_fn`` companion, read with ``response_mask_filter``,
returns the (B, R) mask every loss term then uses (clipb, clipv).

This module holds the registry, the traits, the shared group helpers and the grpo estimators;
``rloo``, ``opmd``, ``ppo``, ``reinforceplusplus``, ``remax`` and ``none`` live in
``baseline_advantages.py`` and are imported (and so registered) with it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.grouping import GroupStats, group_stats, single_sample_convention
from trivium.lazy import lazy_module, no_grad
from trivium.registry import Registry

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

# Quoted, so that importing this module does not import torch (see trivium.lazy).
AdvantageFn = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]

# The other advantage families register themselves when imported, on first lookup.
ADVANTAGE_FNS: Registry[AdvantageFn] = Registry(
    "advantage_fn",
    builtin_modules=(
        "trivium.algorithm.baseline_advantages",
        "trivium.algorithm.multi_step",
        "trivium.algorithm.reinforce_advantages",
        "trivium.algorithm.distillation",
        "trivium.algorithm.entropy_filters",
        "trivium.algorithm.gigpo",
        "trivium.algorithm.cod",
    ),
)


def register_advantage_fn(
    name: str,
    *,
    needs_group: bool = False,
    needs_critic: bool = False,
    in_trainer: bool = False,
    needs_teacher: bool = False,
    needs_entropy: bool = False,
    needs_episodes: bool = False,
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register ``fn`` under ``name`` and record what it needs from the pipeline."""

    def add(fn: AdvantageFn) -> AdvantageFn:
        fn.needs_group = needs_group
        fn.needs_critic = needs_critic
        fn.in_trainer = in_trainer
        fn.needs_teacher = needs_teacher
        fn.needs_entropy = needs_entropy
        fn.needs_episodes = needs_episodes
        return ADVANTAGE_FNS.register(name)(fn)

    return add


def requires_groups(fn: AdvantageFn) -> bool:
    """True if ``fn`` compares samples of the same task (plugins default to False)."""
    return bool(getattr(fn, "needs_group", False))


def requires_episodes(fn: AdvantageFn) -> bool:
    """True if ``fn`` takes ``episode_ids`` (B,): rows that are steps of one episode."""
    return bool(getattr(fn, "needs_episodes", False))


def row_selection(fn: AdvantageFn) -> Callable[..., torch.Tensor | None] | None:
    """``fn``'s companion choosing the rows to keep (see the module docstring), or None."""
    return getattr(fn, "kept_rows", None)


def response_mask_filter(fn: AdvantageFn) -> Callable[..., torch.Tensor] | None:
    """``fn``'s companion returning the narrowed (B, R) response mask, or None."""
    return getattr(fn, "response_mask_fn", None)


def requires_sequence_logprobs(fn: AdvantageFn) -> bool:
    """True if ``fn`` may read ``sequence_logprobs`` (B,): each row's mean sampling logprob."""
    return bool(getattr(fn, "needs_sequence_logprobs", False))


def requires_row_info(fn: AdvantageFn) -> bool:
    """True if ``fn`` reads ``row_info``: each row's ``info`` dict, in batch order (gigpo)."""
    return bool(getattr(fn, "needs_row_info", False))


def requires_critic(fn: AdvantageFn) -> bool:
    """True if ``fn`` reads critic ``values`` (plugins default to False)."""
    return bool(getattr(fn, "needs_critic", False))


def computed_by_explorer(fn: AdvantageFn) -> bool:
    """True if the explorer fills the advantages: group-based and not marked ``in_trainer``."""
    return requires_groups(fn) and not getattr(fn, "in_trainer", False)


def requires_teacher(fn: AdvantageFn) -> bool:
    """True if ``fn`` reads ``teacher_logprobs`` (B, R) of the sampled tokens."""
    return bool(getattr(fn, "needs_teacher", False))


def requires_entropy(fn: AdvantageFn) -> bool:
    """True if ``fn`` reads the current policy's ``logprobs`` and ``entropy`` (B, R)."""
    return bool(getattr(fn, "needs_entropy", False))


def _check_inputs(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> None:
    if token_level_rewards.dim() != 2 or token_level_rewards.shape != response_mask.shape:
        raise ValueError(
            "token_level_rewards and response_mask must both be (B, R); got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}"
        )


def _require(tensor: torch.Tensor | None, name: str, estimator: str, why: str) -> torch.Tensor:
    if tensor is None:
        raise ValueError(f"advantage_fn '{estimator}' needs {name}: {why}")
    return tensor


def _sequence_scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    # score_i = sum_t r_{i,t}; the outcome reward sits on the last token, so this picks it up
    return token_level_rewards.float().sum(dim=-1)


def _group_scores(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
) -> tuple[torch.Tensor, GroupStats]:
    """Each row's sequence score and its group's statistics, for the group-based estimators."""
    _check_inputs(token_level_rewards, response_mask)
    group_ids = _require(group_ids, "group_ids", estimator, "it compares samples of the same task")
    scores = _sequence_scores(token_level_rewards)
    return scores, group_stats(scores, group_ids)


def _group_advantages(
    per_sequence: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = _broadcast(per_sequence, response_mask)
    return advantages, advantages.clone()


def normalized_group_scores(
    scores: torch.Tensor, stats: GroupStats, *, epsilon: float, std_normalize: bool
) -> torch.Tensor:
    """(B,) each score against its group, single-sample groups taking mean 0 and std 1."""
    mean, std = single_sample_convention(stats)
    if std_normalize:
        # a_i = (s_i - mean_g) / (std_g + epsilon)
        return (scores - mean) / (std + epsilon)
    # a_i = s_i - mean_g
    return scores - mean


def _broadcast(per_sequence: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    # A_{i,t} = a_i * m_{i,t}
    return per_sequence.unsqueeze(-1) * response_mask.float()


STD_CAL_LEVELS = ("group", "batch")


def batch_spread(scores: torch.Tensor) -> float:
    """The sample std of every score of the batch, 1.0 for fewer than two (std_cal_level: batch)."""
    return float(scores.std()) if scores.numel() > 1 else 1.0


def rank_penalized_scores(
    scores: torch.Tensor, group_ids: torch.Tensor, sequence_logprobs: torch.Tensor, rank_penalty: float
) -> torch.Tensor:
    """Scores of groups of several rows scaled down by how likely the sampler found the row
    (He et al., 2025, arXiv:2506.02355): s' = s * (1 - rank / n * penalty), rank 0 for the
    group's least likely row (lowest mean logprob) up to n - 1 for its likeliest. (B,) in and out.
    """
    adjusted = scores.clone()
    for group in torch.unique(group_ids):
        rows = (group_ids == group).nonzero(as_tuple=True)[0]
        if len(rows) < 2:
            continue
        # rank_i / n, rank by mean logprob within the group
        rank = torch.argsort(torch.argsort(sequence_logprobs[rows].float())).float() / len(rows)
        # s'_i = s_i * (1 - rank_i / n * penalty)
        adjusted[rows] = scores[rows] * (1.0 - rank * rank_penalty)
    return adjusted


def flat_or_lone_groups(stats: GroupStats, std_threshold: float | None) -> torch.Tensor:
    """(B,) bool: rows of groups with one sample or a spread at most ``std_threshold``."""
    if std_threshold is None:
        return torch.zeros_like(stats.size, dtype=torch.bool)
    return (stats.size <= 1) | (stats.std <= std_threshold)


def kept_rows_of_groups(
    dropped: torch.Tensor, group_ids: torch.Tensor, duplicate_experiences: bool
) -> torch.Tensor | None:
    """(K,) long: the rows not ``dropped`` (B,) bool, in order; with ``duplicate_experiences``
    followed by every row of randomly drawn kept groups, one group per dropped group, so the
    batch keeps its number of groups (Polaris). None when nothing is dropped."""
    if not bool(dropped.any()):
        return None
    kept = (~dropped).nonzero(as_tuple=True)[0]
    if not duplicate_experiences or kept.numel() == 0:
        return kept
    kept_groups = list(dict.fromkeys(group_ids[kept].tolist()))
    dropped_count = len(set(group_ids[dropped].tolist()))
    drawn = torch.randint(0, len(kept_groups), (dropped_count,)).tolist()
    copies = [(group_ids == kept_groups[i]).nonzero(as_tuple=True)[0] for i in drawn]
    return torch.cat([kept, *copies])


@register_advantage_fn("grpo", needs_group=True)
@no_grad
def grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    sequence_logprobs: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
    std_threshold: float | None = None,
    duplicate_experiences: bool = False,
    rank_penalty: float | None = None,
    std_cal_level: str = "group",
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantage: each score compared with its group's mean (and spread).

    A group of one sample takes mean 0 and std 1 (veRL's convention), so its advantage is
    s / (1 + epsilon). Groups whose scores are all equal get 0. ``std_normalize=False``
    keeps only the mean subtraction (the "Dr. GRPO" variant). ``std_cal_level='batch'``
    divides by the sample std of every score of the batch instead of the group's (the mean
    stays the group's). ``rank_penalty`` scales each score of a group of several down by its
    likelihood rank (``rank_penalized_scores``; needs ``sequence_logprobs`` (B,)).
    ``std_threshold`` drops (see ``grpo_kept_rows``) every group of one sample and every group
    whose std is at most the threshold; ``duplicate_experiences`` refills the batch with
    copies of kept groups. Computed by the explorer. Returns (advantages, returns), both
    (B, R) and equal, for every row.
    """
    if std_cal_level not in STD_CAL_LEVELS:
        raise ValueError(f"grpo: std_cal_level must be 'group' or 'batch', got {std_cal_level!r}")
    scores, stats = _grpo_scores(
        token_level_rewards, response_mask, group_ids, sequence_logprobs, rank_penalty
    )
    mean, std = single_sample_convention(stats)
    if std_cal_level == "batch":
        std = torch.full_like(std, batch_spread(_sequence_scores(token_level_rewards)))
    if std_normalize:
        # a_i = (s_i - mean_g) / (std + epsilon), std = std_g or std_batch
        per_sequence = (scores - mean) / (std + epsilon)
    else:
        # a_i = s_i - mean_g
        per_sequence = scores - mean
    return _group_advantages(per_sequence, response_mask)


def _grpo_scores(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    sequence_logprobs: torch.Tensor | None,
    rank_penalty: float | None,
) -> tuple[torch.Tensor, GroupStats]:
    scores, stats = _group_scores("grpo", token_level_rewards, response_mask, group_ids)
    if rank_penalty is None:
        return scores, stats
    sequence_logprobs = _require(
        sequence_logprobs,
        "sequence_logprobs",
        "grpo",
        "rank_penalty ranks each row by its mean sampling logprob",
    )
    scores = rank_penalized_scores(scores, group_ids, sequence_logprobs, rank_penalty)
    return scores, group_stats(scores, group_ids)


@no_grad
def grpo_kept_rows(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    sequence_logprobs: torch.Tensor | None = None,
    std_threshold: float | None = None,
    duplicate_experiences: bool = False,
    rank_penalty: float | None = None,
    **_ignored,
) -> torch.Tensor | None:
    """The rows grpo trains on: without ``std_threshold`` all of them (None); with it, the rows
    of groups of several samples whose std (of the rank-penalised scores) is above the
    threshold, then, with ``duplicate_experiences``, copies of randomly drawn kept groups, one
    per dropped group. (K,) long row indices."""
    if std_threshold is None:
        return None
    _, stats = _grpo_scores(token_level_rewards, response_mask, group_ids, sequence_logprobs, rank_penalty)
    return kept_rows_of_groups(flat_or_lone_groups(stats, std_threshold), group_ids, duplicate_experiences)


grpo_advantages.kept_rows = grpo_kept_rows
grpo_advantages.needs_sequence_logprobs = True


@register_advantage_fn("grpo_verl", needs_group=True, in_trainer=True)
@no_grad
def grpo_verl_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO exactly as veRL computes it: in the trainer, on the token rewards after any KL
    penalty (the score is the row's sum), with the same single-sample convention as grpo.

    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, stats = _group_scores("grpo_verl", token_level_rewards, response_mask, group_ids)
    per_sequence = normalized_group_scores(scores, stats, epsilon=epsilon, std_normalize=std_normalize)
    return _group_advantages(per_sequence, response_mask)


def computed_in_trainer(name: str, fn: AdvantageFn) -> AdvantageFn:
    """Register under ``name`` the form of group estimator ``fn`` that the trainer computes, on
    the token rewards after any KL penalty (Trinity-RFT's ``*_verl`` estimators): same
    arguments, same numbers."""

    @functools.wraps(fn)
    def in_trainer(**kwargs):
        return fn(**kwargs)

    return register_advantage_fn(name, needs_group=True, in_trainer=True)(in_trainer)

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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import masked_whiten
from trivium.algorithm.grouping import GroupStats, group_logavgexp, group_stats
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
        "trivium.algorithm.multi_step",
        "trivium.algorithm.reinforce_advantages",
        "trivium.algorithm.distillation",
        "trivium.algorithm.entropy_filters",
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
    estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: torch.Tensor | None
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


def single_sample_convention(stats: GroupStats) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's group mean and std, with veRL's values for a group of one: mean 0, std 1."""
    alone = stats.size <= 1
    mean = torch.where(alone, torch.zeros_like(stats.mean), stats.mean)
    std = torch.where(alone, torch.ones_like(stats.std), stats.std)
    return mean, std


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


@register_advantage_fn("grpo", needs_group=True)
@no_grad
def grpo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    std_normalize: bool = True,
    std_threshold: float | None = None,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-relative advantage: each score compared with its group's mean (and spread).

    A group of one sample takes mean 0 and std 1 (veRL's convention), so its advantage is
    s / (1 + epsilon). Groups whose scores are all equal get 0. ``std_normalize=False``
    keeps only the mean subtraction (the "Dr. GRPO" variant). With ``std_threshold`` set, a
    group of several samples whose std is at most the threshold carries no signal and gets 0.
    Computed by the explorer. Returns (advantages, returns), both (B, R) and equal.
    """
    scores, stats = _group_scores("grpo", token_level_rewards, response_mask, group_ids)
    per_sequence = normalized_group_scores(scores, stats, epsilon=epsilon, std_normalize=std_normalize)
    if std_threshold is not None:
        # a_i = 0 where n_g > 1 and std_g <= threshold
        flat = (stats.size > 1) & (stats.std <= std_threshold)
        per_sequence = torch.where(flat, torch.zeros_like(per_sequence), per_sequence)
    return _group_advantages(per_sequence, response_mask)


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


@register_advantage_fn("rloo", needs_group=True)
@no_grad
def rloo_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out: the baseline of a sample is the mean of the other samples.

    A group of one sample has no other samples: its baseline is 0 (veRL's convention).
    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, stats = _group_scores("rloo", token_level_rewards, response_mask, group_ids)
    # a_i = s_i - (sum_g - s_i) / (n - 1); the sum of no other samples is 0
    leave_one_out_mean = (stats.total - scores) / (stats.size - 1).clamp_min(1)
    return _group_advantages(scores - leave_one_out_mean, response_mask)


@register_advantage_fn("opmd", needs_group=True)
@no_grad
def opmd_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    baseline: str = "mean",
    tau: float = 1.0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group baseline for online policy mirror descent, without std scaling.

    ``baseline="mean"``: b_g = mean of the group's scores.
    ``baseline="logavgexp"``: b_g = tau * log(mean(exp(s / tau))), an estimate of
    tau * log Z of the KL-regularised optimal policy; it tends to the mean as tau grows
    and to the group maximum as tau shrinks.
    A group of one sample takes baseline 0, as in the other group estimators.
    """
    scores, stats = _group_scores("opmd", token_level_rewards, response_mask, group_ids)
    if baseline == "mean":
        group_baseline, _ = single_sample_convention(stats)
    elif baseline == "logavgexp":
        if tau <= 0:
            raise ValueError(f"opmd advantage: tau must be > 0 for the logavgexp baseline, got {tau}")
        group_baseline = torch.where(
            stats.size > 1, group_logavgexp(scores, group_ids, tau), torch.zeros_like(scores)
        )
    else:
        raise ValueError(f"opmd advantage: baseline must be 'mean' or 'logavgexp', got '{baseline}'")
    # a_i = s_i - b_g
    return _group_advantages(scores - group_baseline, response_mask)


@register_advantage_fn("ppo", needs_critic=True)
@no_grad
def gae_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = True,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with critic values, whitened over the masked batch.

    Positions outside the mask (padding, or tool/environment tokens in multi-turn rows) are
    skipped: the recursion carries the next kept token's value and advantage across them.
    Returns: advantages (B, R), whitened unless ``whiten=False``; returns = raw GAE + values.
    """
    _check_inputs(token_level_rewards, response_mask)
    values = _require(values, "values", "ppo", "GAE bootstraps from the critic's value estimates")
    rewards = token_level_rewards.float()
    values = values.float()
    mask = response_mask.float()
    batch_size, response_length = rewards.shape
    next_value = torch.zeros(batch_size, device=rewards.device)
    next_advantage = torch.zeros(batch_size, device=rewards.device)
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(response_length)):
        # delta_t = r_t + gamma * V_{t+1} - V_t
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        # A_t = delta_t + gamma * lam * A_{t+1}
        advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = advantage
        keep = mask[:, t]
        next_advantage = keep * advantage + (1 - keep) * next_advantage
        next_value = keep * values[:, t] + (1 - keep) * next_value
    # G_t = A_t + V_t
    returns = (advantages + values) * mask
    if whiten:
        advantages = masked_whiten(advantages, mask)
    return advantages * mask, returns


@register_advantage_fn("reinforceplusplus")
@no_grad
def reinforce_plus_plus_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted reward-to-go per token, whitened over the masked batch (no critic).

    Masked positions are skipped the same way as in GAE: the running return passes over them
    unchanged. Returns: advantages (B, R) whitened; returns (B, R) the raw discounted returns.
    """
    _check_inputs(token_level_rewards, response_mask)
    rewards = token_level_rewards.float()
    mask = response_mask.float()
    running = torch.zeros(rewards.shape[0], device=rewards.device)
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        # G_t = r_t + gamma * G_{t+1}
        current = rewards[:, t] + gamma * running
        returns[:, t] = current
        running = mask[:, t] * current + (1 - mask[:, t]) * running
    returns = returns * mask
    advantages = masked_whiten(returns, mask) * mask
    return advantages, returns


@register_advantage_fn("remax")
@no_grad
def remax_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    baseline_rewards: torch.Tensor | None = None,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reward-to-go minus the reward of a greedy response to the same prompt.

    baseline_rewards: (B,) the greedy response's scalar reward for each row's prompt.
    Returns: advantages (B, R); returns (B, R) the undiscounted reward-to-go.
    """
    _check_inputs(token_level_rewards, response_mask)
    baseline_rewards = _require(
        baseline_rewards,
        "baseline_rewards",
        "remax",
        "the reward of a greedy response per prompt, shape (B,)",
    )
    mask = response_mask.float()
    # G_t = sum_{t' >= t} r_t'
    returns = torch.flip(torch.cumsum(torch.flip(token_level_rewards.float(), dims=[-1]), dim=-1), dims=[-1])
    returns = returns * mask
    # A_t = G_t - b
    advantages = (returns - baseline_rewards.float().unsqueeze(-1)) * mask
    return advantages, returns


@register_advantage_fn("none")
@no_grad
def no_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zeros, for losses that do not use advantages (sft, dpo)."""
    zeros = torch.zeros_like(token_level_rewards, dtype=torch.float32)
    return zeros, zeros.clone()

"""Advantage estimators that subtract a baseline other than grpo's group normalisation:
``rloo`` (the mean of the other samples of the group), ``opmd`` (the group's mean or
log-average-exp, and their ``*_verl`` forms computed in the trainer), ``ppo`` (generalised
advantage estimation from critic values), ``reinforceplusplus`` (discounted reward-to-go,
whitened over the batch), ``remax`` (a greedy response's reward) and ``none`` (zeros, for
losses without advantages).

They share the signature, registry and helpers of ``trivium.algorithm.advantages``, whose
registry imports this module on its first lookup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.advantages import (
    _check_inputs,
    _group_advantages,
    _group_scores,
    _require,
    computed_in_trainer,
    register_advantage_fn,
)
from trivium.algorithm.aggregation import masked_whiten
from trivium.algorithm.grouping import group_logavgexp, single_sample_convention
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


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
    Computed by the explorer, from the rewards a step's whole groups earned (serve mode's
    commits too); ``rloo_verl`` is the same estimator computed by the trainer after any KL
    penalty in the reward, Trinity-RFT's order. Without such a penalty the two are equal.
    Returns (advantages, returns), both (B, R) and equal.
    """
    scores, stats = _group_scores("rloo", token_level_rewards, response_mask, group_ids)
    # a_i = s_i - (sum_g - s_i) / (n - 1); the sum of no other samples is 0
    leave_one_out_mean = (stats.total - scores) / (stats.size - 1).clamp_min(1)
    return _group_advantages(scores - leave_one_out_mean, response_mask)


OPMD_BASELINES = ("mean", "logavgexp")


@register_advantage_fn("opmd", needs_group=True)
@no_grad
def opmd_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    opmd_baseline: str | None = None,
    baseline: str | None = None,
    tau: float = 1.0,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group baseline for online policy mirror descent, without std scaling.

    ``opmd_baseline`` (or its other spelling ``baseline``), default "mean":
    "mean": b_g = mean of the group's scores.
    "logavgexp": b_g = tau * log(mean(exp(s / tau))), an estimate of tau * log Z of the
    KL-regularised optimal policy; it tends to the mean as tau grows and to the group maximum
    as tau shrinks. A group of one sample takes baseline 0, as in the other group estimators.
    """
    choice = _opmd_baseline_choice(opmd_baseline, baseline)
    scores, stats = _group_scores("opmd", token_level_rewards, response_mask, group_ids)
    if choice == "mean":
        group_baseline, _ = single_sample_convention(stats)
    else:
        if tau <= 0:
            raise ValueError(f"opmd advantage: tau must be > 0 for the logavgexp baseline, got {tau}")
        group_baseline = torch.where(
            stats.size > 1, group_logavgexp(scores, group_ids, tau), torch.zeros_like(scores)
        )
    # a_i = s_i - b_g
    return _group_advantages(scores - group_baseline, response_mask)


def _opmd_baseline_choice(opmd_baseline: str | None, baseline: str | None) -> str:
    if opmd_baseline is not None and baseline is not None and opmd_baseline != baseline:
        raise ValueError(
            f"opmd advantage: opmd_baseline={opmd_baseline!r} and baseline={baseline!r} disagree; set one"
        )
    choice = opmd_baseline or baseline or "mean"
    if choice not in OPMD_BASELINES:
        raise ValueError(f"opmd advantage: opmd_baseline must be 'mean' or 'logavgexp', got {choice!r}")
    return choice


computed_in_trainer("opmd_verl", opmd_advantages)
computed_in_trainer("rloo_verl", rloo_advantages)


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
    skip_masked_tokens: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation with critic values, whitened over the masked batch.

    By default (veRL's and Trinity-RFT's recursion) every position takes part, a position
    outside the mask (padding, or a tool/environment token inside a multi-turn row) with
    value 0, as veRL's critic reports it there. ``skip_masked_tokens=True`` skips such
    positions instead: the recursion carries the next kept token's value and advantage across
    them, so an environment turn does not break the bootstrap. Both agree on rows whose mask
    has no holes. Returns: advantages (B, R), whitened unless ``whiten=False``;
    returns = raw GAE + values, both 0 outside the mask.
    """
    _check_inputs(token_level_rewards, response_mask)
    values = _require(values, "values", "ppo", "GAE bootstraps from the critic's value estimates")
    rewards = token_level_rewards.float()
    mask = response_mask.float()
    # V_t = 0 outside the mask
    values = values.float() * mask
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
        keep = mask[:, t] if skip_masked_tokens else torch.ones_like(mask[:, t])
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
    skip_masked_tokens: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discounted reward-to-go per token, whitened over the masked batch (no critic).

    Every position is discounted, as in Trinity-RFT; ``skip_masked_tokens=True`` lets the
    running return pass over positions outside the mask unchanged, as in GAE's option.
    Returns: advantages (B, R) whitened; returns (B, R) the raw discounted returns.
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
        keep = mask[:, t] if skip_masked_tokens else torch.ones_like(mask[:, t])
        running = keep * current + (1 - keep) * running
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

"""Entropy-aware token filters on top of veRL-style GRPO advantages (Clip_B).

A token's push on the policy's entropy is proportional to S_t = p_t * (H_t + log p_t), with
p_t the current probability of the sampled token and H_t the entropy of the distribution it
was sampled from. Lowering the probability of a token with a very negative S_t (a rare token
in a flat distribution) raises entropy the least and collapses it the most when done often;
Clip_B drops such tokens from the update when their advantage is negative.

Computed by the trainer, which passes the current policy's ``logprobs`` and ``entropy``::

    fn(*, token_level_rewards (B, R), response_mask (B, R), group_ids (B,), logprobs (B, R),
       entropy (B, R), **args) -> (advantages (B, R), returns (B, R))

A dropped token gets advantage 0; it still counts in the loss's token denominator.
"""

from __future__ import annotations

import torch

from trivium.algorithm.advantages import _broadcast, _group_scores, normalized_group_scores, register_advantage_fn


def entropy_signal(logprobs: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    """S_t = p_t * (H_t + log p_t), all (B, R)."""
    logprobs = logprobs.float()
    return torch.exp(logprobs) * (entropy.float() + logprobs)


@register_advantage_fn("clipb", needs_group=True, in_trainer=True, needs_entropy=True)
@torch.no_grad()
def clipb_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    mu: float = 2.5,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages (veRL convention); negative-advantage tokens whose entropy signal lies
    more than ``mu`` standard deviations below the batch mean get advantage 0.

    The mean and (population) standard deviation of S are taken over all response tokens of
    the batch; when that deviation is ~0, no token is dropped. Positive-advantage tokens are
    always kept. Returns (advantages, returns); returns keep every token.
    """
    if logprobs is None or entropy is None:
        raise ValueError("advantage_fn 'clipb' needs the current policy's logprobs and entropy (B, R)")
    scores, stats = _group_scores("clipb", token_level_rewards, response_mask, group_ids)
    per_sequence = normalized_group_scores(scores, stats, epsilon=epsilon, std_normalize=True)
    advantages = _broadcast(per_sequence, response_mask)
    mask = response_mask.float()
    signal = entropy_signal(logprobs, entropy)
    count = mask.sum().clamp_min(1.0)
    # mean_S = sum(S * m) / n;  std_S = sqrt(sum((S - mean_S)^2 * m) / n)
    mean = (signal * mask).sum() / count
    std = torch.sqrt((((signal - mean) ** 2) * mask).sum() / count)
    if float(std) < 1e-12:
        return advantages, advantages.clone()
    # drop where A < 0 and S - mean_S < -mu * std_S
    dropped = (advantages < 0) & (signal - mean < -mu * std)
    return advantages * (~dropped).float(), advantages.clone()

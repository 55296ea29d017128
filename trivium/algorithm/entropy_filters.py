"""Entropy-aware token filters on top of veRL-style GRPO advantages (Clip_B, Clip_V).

With p_t the current probability of the sampled token, H_t the entropy of the distribution
it was drawn from, S_t = p_t * (H_t + log p_t) and N_t = sum_v p_v^2 * (H_t + log p_v) (the
expectation of S over the next token), one policy-gradient step on the logits with advantage
A changes the entropy by about -eta * A * (S_t - N_t). So a negative-advantage token with a
large D_t = N_t - S_t lowers the entropy most. Clip_B drops negative-advantage tokens whose S_t
is far below the batch mean; Clip_V drops those whose D_t is far above zero, capped at a small
fraction of the batch's tokens.

Computed by the trainer, which passes the current policy's ``logprobs``, ``entropy`` and
``expected_entropy_signal`` (N)::

    fn(*, token_level_rewards (B, R), response_mask (B, R), group_ids (B,), logprobs (B, R),
       entropy (B, R), expected_entropy_signal (B, R), **args) -> (advantages (B, R), returns (B, R))

A dropped token gets advantage 0; it still counts in the loss's token denominator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.advantages import (
    _broadcast,
    _group_scores,
    normalized_group_scores,
    register_advantage_fn,
)
from trivium.lazy import lazy_module, no_grad

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


def entropy_signal(logprobs: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    """S_t = p_t * (H_t + log p_t), all (B, R)."""
    logprobs = logprobs.float()
    return torch.exp(logprobs) * (entropy.float() + logprobs)


@register_advantage_fn("clipb", needs_group=True, in_trainer=True, needs_entropy=True)
@no_grad
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


@register_advantage_fn("clipv", needs_group=True, in_trainer=True, needs_entropy=True)
@no_grad
def clipv_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    expected_entropy_signal: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    mu: float = 8.5,
    max_frac: float = 1e-4,
    **_ignored,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages (veRL convention); negative-advantage tokens with D = N - S above
    ``mu`` times D's (population, batch) standard deviation get advantage 0. When more than
    ``max_frac`` of the response tokens would be dropped, only the max(1, max_frac * n) tokens
    with the largest D are. Returns (advantages, returns); returns keep every token.
    """
    if logprobs is None or entropy is None or expected_entropy_signal is None:
        raise ValueError("advantage_fn 'clipv' needs the current logprobs, entropy and expected_entropy_signal (B, R)")
    scores, stats = _group_scores("clipv", token_level_rewards, response_mask, group_ids)
    per_sequence = normalized_group_scores(scores, stats, epsilon=epsilon, std_normalize=True)
    advantages = _broadcast(per_sequence, response_mask)
    mask = response_mask.float()
    # D = N - S
    deviation = expected_entropy_signal.float() - entropy_signal(logprobs, entropy)
    count = mask.sum().clamp_min(1.0)
    mean = (deviation * mask).sum() / count
    std = torch.sqrt((((deviation - mean) ** 2) * mask).sum() / count)
    if float(std) < 1e-12:
        return advantages, advantages.clone()
    candidates = (advantages < 0) & (mask > 0) & (deviation > mu * std)
    limit = max(int(max_frac * float(count)), 1)
    if int(candidates.sum()) > limit:
        # keep only the `limit` largest D among the candidates dropped
        ranked = deviation.masked_fill(~candidates, -torch.inf).flatten()
        chosen = torch.zeros_like(ranked, dtype=torch.bool)
        chosen[torch.topk(ranked, limit).indices] = True
        candidates = chosen.view_as(deviation)
    return advantages * (~candidates).float(), advantages.clone()

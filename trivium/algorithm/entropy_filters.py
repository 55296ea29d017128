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

A dropped token leaves the response mask (``clip_target="mask"``, Trinity-RFT's): the trainer
narrows the mask with the estimator's ``response_mask_fn`` companion, so the token weighs in
no loss term and in no denominator. ``clip_target="advantage"`` keeps the mask and gives the
token advantage 0 instead: it still counts in the denominators (and in the KL and entropy
terms). Only negative-advantage tokens are ever dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
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


CLIP_TARGETS = ("mask", "advantage")
DEFAULT_CLIP_TARGET = "mask"


def _grpo_token_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None,
    epsilon: float,
) -> torch.Tensor:
    scores, stats = _group_scores(name, token_level_rewards, response_mask, group_ids)
    per_sequence = normalized_group_scores(scores, stats, epsilon=epsilon, std_normalize=True)
    return _broadcast(per_sequence, response_mask)


def _population_spread(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    count = mask.sum().clamp_min(1.0)
    # mean = sum(v * m) / n;  std = sqrt(sum((v - mean)^2 * m) / n)
    mean = (values * mask).sum() / count
    return mean, torch.sqrt((((values - mean) ** 2) * mask).sum() / count)


def clipb_dropped(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    mu: float,
) -> torch.Tensor:
    """(B, R) bool: negative-advantage tokens whose S lies more than mu (population, batch)
    standard deviations below the batch mean; none when that deviation is ~0."""
    mask = response_mask.float()
    signal = entropy_signal(logprobs, entropy)
    mean, std = _population_spread(signal, mask)
    if float(std) < 1e-12:
        return torch.zeros_like(mask, dtype=torch.bool)
    # dropped where A < 0 and S - mean_S < -mu * std_S
    return (advantages < 0) & (mask > 0) & (signal - mean < -mu * std)


def clipv_dropped(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    logprobs: torch.Tensor,
    entropy: torch.Tensor,
    expected_entropy_signal: torch.Tensor,
    mu: float,
    max_frac: float,
) -> torch.Tensor:
    """(B, R) bool: negative-advantage tokens with D = N - S above mu times D's (population,
    batch) std, at most max(1, int(max_frac * n)) of them (the largest D); none when that std is ~0."""
    mask = response_mask.float()
    # D = N - S
    deviation = expected_entropy_signal.float() - entropy_signal(logprobs, entropy)
    count = mask.sum().clamp_min(1.0)
    _, std = _population_spread(deviation, mask)
    if float(std) < 1e-12:
        return torch.zeros_like(mask, dtype=torch.bool)
    candidates = (advantages < 0) & (mask > 0) & (deviation > mu * std)
    limit = max(int(max_frac * float(count)), 1)
    if int(candidates.sum()) > limit:
        # keep only the `limit` largest D among the candidates dropped
        ranked = deviation.masked_fill(~candidates, -torch.inf).flatten()
        chosen = torch.zeros_like(ranked, dtype=torch.bool)
        chosen[torch.topk(ranked, limit).indices] = True
        candidates = chosen.view_as(deviation)
    return candidates


FilterParts = tuple["torch.Tensor", Callable[[], "torch.Tensor"]]


def entropy_filter(parts_fn: Callable[..., FilterParts]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """Turn a filter's ``parts_fn`` into its estimator, with the ``response_mask_fn`` companion.

    ``parts_fn`` declares the estimator's keyword arguments (the registry reads them through
    the wrapper) and returns the GRPO advantages (B, R) and a function giving the (B, R) bool
    tokens the filter drops, computed only when ``clip_target`` needs them. The estimator
    zeroes the dropped tokens' advantages for ``clip_target="advantage"``; the companion
    removes them from the response mask for "mask". Returns keep every token.
    """

    @functools.wraps(parts_fn)
    def advantages_fn(**arguments) -> tuple[torch.Tensor, torch.Tensor]:
        clip_target = _clip_target(arguments)
        advantages, dropped = parts_fn(**arguments)
        if clip_target == "mask":
            return advantages, advantages.clone()
        return advantages * (~dropped()).float(), advantages.clone()

    @no_grad
    def response_mask_fn(**arguments) -> torch.Tensor:
        """The (B, R) response mask without the tokens the filter drops (unchanged for clip_target 'advantage')."""
        response_mask = arguments["response_mask"]
        if _clip_target(arguments) != "mask":
            return response_mask
        _, dropped = parts_fn(**arguments)
        # m'_t = m_t * (1 - dropped_t)
        return response_mask * (~dropped()).to(response_mask.dtype)

    estimator = no_grad(advantages_fn)
    estimator.response_mask_fn = response_mask_fn
    return estimator


def _clip_target(arguments: dict) -> str:
    clip_target = arguments.get("clip_target", DEFAULT_CLIP_TARGET)
    if clip_target not in CLIP_TARGETS:
        raise ValueError(f"clip_target must be 'mask' or 'advantage', got {clip_target!r}")
    return clip_target


@register_advantage_fn("clipb", needs_group=True, in_trainer=True, needs_entropy=True)
@entropy_filter
def clipb_advantages(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor | None = None,
    logprobs: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    mu: float = 2.5,
    clip_target: str = DEFAULT_CLIP_TARGET,
    **_ignored,
) -> FilterParts:
    """GRPO advantages (veRL convention); negative-advantage tokens whose entropy signal lies
    more than ``mu`` standard deviations below the batch mean are dropped (``clipb_dropped``).

    The mean and (population) standard deviation of S are taken over all response tokens of
    the batch. Positive-advantage tokens are always kept. With ``clip_target="advantage"`` a
    dropped token's advantage is 0; with "mask" the advantages are left whole and the
    ``response_mask_fn`` companion removes the token. Returns (advantages, returns); returns
    keep every token.
    """
    if logprobs is None or entropy is None:
        raise ValueError("advantage_fn 'clipb' needs the current policy's logprobs and entropy (B, R)")
    advantages = _grpo_token_advantages("clipb", token_level_rewards, response_mask, group_ids, epsilon)
    return advantages, lambda: clipb_dropped(advantages, response_mask, logprobs, entropy, mu)


@register_advantage_fn("clipv", needs_group=True, in_trainer=True, needs_entropy=True)
@entropy_filter
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
    clip_target: str = DEFAULT_CLIP_TARGET,
    **_ignored,
) -> FilterParts:
    """GRPO advantages (veRL convention); negative-advantage tokens with D = N - S above
    ``mu`` times D's (population, batch) standard deviation are dropped, at most
    max(1, max_frac * n) of them, those with the largest D (``clipv_dropped``). With
    ``clip_target="advantage"`` a dropped token's advantage is 0; with "mask" the advantages
    are left whole and the ``response_mask_fn`` companion removes the token.
    Returns (advantages, returns); returns keep every token.
    """
    if logprobs is None or entropy is None or expected_entropy_signal is None:
        raise ValueError(
            "advantage_fn 'clipv' needs the current logprobs, entropy and expected_entropy_signal (B, R)"
        )
    advantages = _grpo_token_advantages("clipv", token_level_rewards, response_mask, group_ids, epsilon)
    return advantages, lambda: clipv_dropped(
        advantages, response_mask, logprobs, entropy, expected_entropy_signal, mu, max_frac
    )

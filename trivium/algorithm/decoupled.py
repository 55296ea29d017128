"""Decoupled PPO: correcting for samples drawn by an older (behaviour) policy.

With asynchronous exploration a sample may come from weights a few versions older than the
trainer's. Decoupled PPO keeps two "old" policies apart: the *proximal* policy (the trainer's
weights before this update, whose ratio the PPO clip bounds) and the *behaviour* policy (the
weights the engine sampled with, whose logprobs every experience carries). The per-token
objective is

    L = w * max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high)),
    r = pi_theta / pi_prox,   w = min(pi_prox / pi_behav, cap)   (w carries no gradient).

Because w >= 0 multiplies a surrogate that is positively homogeneous in A, the same loss is
the plain PPO loss with advantages A * w; the trainer applies it that way to losses that
declare ``scales_with_advantage`` (``trivium.algorithm.policy_losses``).
"""

from __future__ import annotations

import torch

from trivium.algorithm.aggregation import masked_mean
from trivium.algorithm.policy_losses import clamped_log_ratio


def behaviour_importance_weights(
    *,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    cap: float | None = 5.0,
    keep_range: tuple[float, float] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights pi_prox / pi_behav, 0 outside the mask, no gradient.

    Two corrections, either or both: ``cap`` truncates each weight at ``cap`` (truncated
    importance sampling); ``keep_range`` (low, high) masks a token whose weight falls outside
    [low, high] (weight 0: the token takes no part in the update), so tokens the engine and
    the trainer disagree on most are dropped rather than only bounded (IcePop-style masking).
    Masking is decided on the raw weight, before the cap.

    Shapes: every tensor (batch, response_len). Metrics: weight_mean, weight_max,
    capped_frac and masked_frac (shares of response tokens capped and masked).
    """
    if cap is not None and cap <= 0:
        raise ValueError(f"the importance weight cap must be greater than 0, got {cap}")
    if keep_range is not None and not 0 <= keep_range[0] < keep_range[1]:
        raise ValueError(f"the kept weight range must be 0 <= low < high, got {keep_range}")
    mask = response_mask.to(proximal_logprobs.dtype)
    with torch.no_grad():
        # w = exp(clamp(log pi_prox - log pi_behav, -20, 20))
        weights = torch.exp(clamped_log_ratio(proximal_logprobs.detach(), behaviour_logprobs.detach()))
        masked = torch.zeros_like(weights, dtype=torch.bool)
        if keep_range is not None:
            # w = 0 where w < low or w > high
            masked = (weights < keep_range[0]) | (weights > keep_range[1])
            weights = weights.masked_fill(masked, 0.0)
        capped = torch.zeros_like(weights, dtype=torch.bool)
        if cap is not None:
            # w = min(w, cap)
            capped = weights > cap
            weights = torch.clamp(weights, max=cap)
        weights = weights * mask
    metrics = {
        "weight_mean": float(masked_mean(weights, mask)),
        "weight_max": float(weights.max()) if weights.numel() else 0.0,
        "capped_frac": float(masked_mean(capped.to(mask.dtype), mask)),
        "masked_frac": float(masked_mean(masked.to(mask.dtype), mask)),
    }
    return weights, metrics

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
) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token weights pi_prox / pi_behav, capped, 0 outside the mask, no gradient.

    Shapes: every tensor (batch, response_len). Metrics: weight_mean, weight_max,
    capped_frac (share of response tokens whose weight was capped).
    """
    if cap is not None and cap <= 0:
        raise ValueError(f"the importance weight cap must be greater than 0, got {cap}")
    mask = response_mask.to(proximal_logprobs.dtype)
    with torch.no_grad():
        # w = exp(clamp(log pi_prox - log pi_behav, -20, 20))
        weights = torch.exp(clamped_log_ratio(proximal_logprobs.detach(), behaviour_logprobs.detach()))
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
    }
    return weights, metrics

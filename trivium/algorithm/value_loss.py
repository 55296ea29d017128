"""The critic's loss: regression of value predictions on returns, with PPO-style clipping."""

from __future__ import annotations

import torch

from trivium.algorithm.aggregation import aggregate_loss, masked_mean


def clipped_value_loss(
    *,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float = 0.5,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped squared error between predicted values and returns.

    values: (B, R) current predictions (with gradient); old_values: (B, R) predictions of the
    critic that produced the advantages; returns: (B, R) targets. The prediction may move at
    most ``cliprange_value`` from old_values before the clipped branch takes over.
    Metrics: vf_loss, vf_clipfrac, vpred_mean.
    """
    if cliprange_value <= 0:
        raise ValueError(f"cliprange_value must be > 0, got {cliprange_value}")
    # V_clip = V_old + clip(V - V_old, -c, c)
    clipped_values = old_values + torch.clamp(values - old_values, -cliprange_value, cliprange_value)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    # L_v = 1/2 * agg(max((V - G)^2, (V_clip - G)^2))
    loss = 0.5 * aggregate_loss(torch.maximum(unclipped_error, clipped_error), response_mask, loss_agg_mode)
    metrics = {
        "vf_loss": float(loss.detach()),
        "vf_clipfrac": float(masked_mean((clipped_error > unclipped_error).float(), response_mask)),
        "vpred_mean": float(masked_mean(values.detach(), response_mask)),
    }
    return loss, metrics

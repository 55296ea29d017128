"""M2PO: a policy loss whose trust region bounds the second moment of the log-ratio.

Owns the ``m2po`` policy loss and its token mask. Instead of clipping each token's ratio,
M2PO (Second-Moment Trust Policy Optimization) looks at the tokens where PPO's clip could
act, ``A > 0, log r > 0`` or ``A < 0, log r < 0`` (the trust-region tokens), and drops from
the loss the ones with the largest ``(log r)^2`` until the mean of ``(log r)^2`` over the
trust-region tokens that remain is at most ``m2_threshold``:

    T   = {t in mask : (A_t > 0 and log r_t > 0) or (A_t < 0 and log r_t < 0)}
    M2  = mean_{t in T} (log r_t)^2
    if M2 > m2_threshold: sort T by (log r)^2 ascending and keep the longest prefix whose
    mean is <= m2_threshold; the rest of T leaves the loss.
    L_t = -A_t * exp(log r_t) on kept tokens, 0 on dropped ones
    loss = sum_t L_t / (number of response tokens)   (dropped tokens stay in the denominator)

The forward value of ``log r`` is clamped to ``[-log_ratio_clip, log_ratio_clip]`` before
``exp``; the gradient is that of the unclamped log-ratio (a straight-through clamp).
The mask is computed on the batch the loss is called with, without gradient.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss, masked_mean
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


def m2po_mask(
    log_ratio: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor, m2_threshold: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) bool: the response tokens the M2PO loss keeps, and the mask's metrics.

    ``m2_before`` / ``m2_after``: mean (log r)^2 over the trust-region tokens before and
    after dropping; ``masked_fraction`` / ``trust_region_fraction``: dropped and trust-region
    tokens over the response tokens.
    """
    if not math.isfinite(m2_threshold) or m2_threshold < 0:
        raise ValueError(f"m2po: m2_threshold must be finite and >= 0, got {m2_threshold}")
    with torch.no_grad():
        valid = response_mask.bool()
        log_ratio = log_ratio.detach().float()
        advantages = advantages.detach()
        # trust region: where PPO's clip could bind
        trust = valid & (((advantages > 0) & (log_ratio > 0)) | ((advantages < 0) & (log_ratio < 0)))
        positions = trust.reshape(-1).nonzero(as_tuple=True)[0]
        second_moment = log_ratio.square().reshape(-1)[positions]
        count = second_moment.numel()
        m2_before = float(second_moment.mean()) if count else 0.0
        kept = torch.ones(count, dtype=torch.bool)
        if count and m2_before > m2_threshold:
            ordered, order = torch.sort(second_moment, stable=True)
            # mean of the k smallest (log r)^2, k = 1..count; nondecreasing in k
            prefix_means = torch.cumsum(ordered, dim=0) / torch.arange(1, count + 1, dtype=ordered.dtype)
            keep_count = int((prefix_means <= m2_threshold).sum())
            kept[order[keep_count:]] = False
        keep = valid.clone().reshape(-1)
        keep[positions[~kept]] = False
        keep = keep.view_as(valid)
        valid_count = int(valid.sum())
        dropped = count - int(kept.sum())
        metrics = {
            "m2_before": m2_before,
            "m2_after": float(second_moment[kept].mean()) if bool(kept.any()) else 0.0,
            "masked_fraction": dropped / valid_count if valid_count else 0.0,
            "trust_region_fraction": count / valid_count if valid_count else 0.0,
        }
    return keep, metrics


@POLICY_LOSS_FNS.register("m2po")
def m2po_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    m2_threshold: float = 0.04,
    log_ratio_clip: float = 20.0,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``-A r`` on the tokens ``m2po_mask`` keeps, a token mean over every response token.

    All tensors (B, R). Only ``loss_agg_mode='token-mean'`` is accepted: the objective divides
    by every response token, the dropped ones included. Metrics: pg_loss, ppo_kl,
    ratio_mean and the mask's (m2_before, m2_after, masked_fraction, trust_region_fraction).
    """
    if loss_agg_mode != "token-mean":
        raise ValueError(
            f"m2po needs loss_agg_mode 'token-mean' (its objective divides by every response token), "
            f"got {loss_agg_mode!r}"
        )
    if not math.isfinite(log_ratio_clip) or log_ratio_clip <= 0:
        raise ValueError(f"m2po: log_ratio_clip must be finite and > 0, got {log_ratio_clip}")
    log_ratio = logprobs - old_logprobs
    if not bool(torch.isfinite(log_ratio[response_mask.bool()]).all()):
        raise ValueError("m2po: the log-ratio log pi - log pi_old is not finite on some response token")
    keep, mask_metrics = m2po_mask(log_ratio, advantages, response_mask, m2_threshold)
    # forward: clamp(log r, -c, c); gradient: that of log r
    clamped = torch.clamp(log_ratio, -log_ratio_clip, log_ratio_clip)
    straight_through = log_ratio + (clamped - log_ratio).detach()
    ratio = torch.exp(straight_through)
    # L_t = -A_t r_t on kept tokens, 0 on dropped ones
    per_token = torch.where(keep, -advantages * ratio, torch.zeros_like(ratio))
    loss = aggregate_loss(per_token, response_mask, "token-mean")
    metrics = {
        "pg_loss": float(loss.detach()),
        "ppo_kl": float(masked_mean(-straight_through.detach(), response_mask)),
        "ratio_mean": float(masked_mean(ratio.detach(), response_mask)),
        **mask_metrics,
    }
    return loss, metrics


# The objective divides by every response token; the config check refuses another mode.
m2po_policy_loss.required_loss_agg_mode = "token-mean"

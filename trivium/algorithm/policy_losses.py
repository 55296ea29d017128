"""Policy losses: current log-probabilities in, one scalar loss and its metrics out.

Every loss has the same keyword-only signature::

    fn(*, logprobs (B, R), old_logprobs (B, R), advantages (B, R), response_mask (B, R),
       loss_agg_mode="token-mean", **args) -> (loss (), metrics dict[str, float])

``logprobs`` carries the gradient; ``old_logprobs`` are those of the policy that sampled the
responses. Extra batch tensors some losses need (``ref_logprobs`` for dpo, ``expert_mask``
for mix) are passed by keyword; the other losses ignore them.

Log-ratios ``log r = log pi - log pi_old`` are clamped before ``exp``: to [-20, 20] where
Trinity-RFT clamps them (ppo, importance_sampling), elsewhere only to [-80, 80], a guard
that changes no number Trinity-RFT computes in float32 without overflowing. Each such loss
takes ``log_ratio_limit`` to set the clamp (20 clamps them all as tightly as ppo).

This module holds the registry, the traits and the ratio-clipped losses (ppo, gspo, cispo,
opmd); ``sft``, ``dpo`` and ``mix`` live in ``supervised_losses.py`` and are imported (and so
registered) with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss, masked_mean
from trivium.lazy import lazy_module
from trivium.registry import Registry

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = lazy_module("torch", globals())
    F = lazy_module("torch.nn.functional", globals())

# Quoted, so that importing this module does not import torch (see trivium.lazy).
PolicyLossFn = Callable[..., "tuple[torch.Tensor, dict[str, float]]"]

# The other loss families register themselves when imported, on first lookup.
POLICY_LOSS_FNS: Registry[PolicyLossFn] = Registry(
    "policy_loss_fn",
    builtin_modules=(
        "trivium.algorithm.supervised_losses",
        "trivium.algorithm.reinforce_losses",
        "trivium.algorithm.chord",
        "trivium.algorithm.m2po",
    ),
)


def needs_expert_mask(fn: PolicyLossFn) -> bool:
    """True if ``fn`` reads ``expert_mask`` (B,) (losses mixing SFT on expert rows into RL)."""
    return bool(getattr(fn, "needs_expert_mask", False))


def needs_reference_logprobs(fn: PolicyLossFn) -> bool:
    """True if ``fn`` itself reads ``ref_logprobs`` (dpo), whatever the KL settings."""
    return bool(getattr(fn, "needs_reference", False))


def scales_with_advantage(fn: PolicyLossFn) -> bool:
    """True if ``fn``'s per-token loss times a weight w >= 0 equals its loss with advantages A * w
    (what the decoupled objective needs, see ``trivium.algorithm.decoupled``)."""
    return bool(getattr(fn, "scales_with_advantage", False))


def pairs_rows(fn: PolicyLossFn) -> bool:
    """True if ``fn`` reads rows in (chosen, rejected) pairs that must share a micro-batch."""
    return bool(getattr(fn, "paired_rows", False))


def loss_agg_mode_switch(fn: PolicyLossFn) -> str | None:
    """The boolean argument that makes ``fn`` aggregate with ``loss_agg_mode`` instead of its own
    rule (rec's ``follow_loss_agg_mode``); None for a loss that always follows ``loss_agg_mode``."""
    return getattr(fn, "loss_agg_mode_switch", None)


def effective_loss_agg_mode(fn: PolicyLossFn, fn_args: dict, loss_agg_mode: str) -> str:
    """The aggregation ``fn`` applies when called with ``fn_args`` and ``loss_agg_mode``: the
    configured mode, unless the loss fixes its own (rec), so micro-batches are weighted by it."""
    own = getattr(fn, "loss_agg_mode_for", None)
    return own(loss_agg_mode=loss_agg_mode, **fn_args) if own is not None else loss_agg_mode


# Trinity-RFT clamps the log-ratio of ppo and importance_sampling to [-20, 20].
LOG_RATIO_LIMIT = 20.0
# The other losses compute exp(log r) unclamped there; exp(80) ~ 5.5e34 keeps a ratio, and
# its product with any realistic advantage, finite in float32 (exp(89) overflows).
SAFE_LOG_RATIO_LIMIT = 80.0
# Sequence ratios move far less than token ratios, hence GSPO's much narrower default clip.
GSPO_CLIP_LOW = 3e-4
GSPO_CLIP_HIGH = 4e-4


def clamped_log_ratio(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, limit: float = LOG_RATIO_LIMIT
) -> torch.Tensor:
    """log r = clamp(log pi - log pi_old, -limit, limit), (B, R)."""
    if limit <= 0:
        raise ValueError(f"log_ratio_limit must be > 0, got {limit}")
    # log r = clamp(log pi - log pi_old, -limit, limit)
    return torch.clamp(logprobs - old_logprobs, -limit, limit)


def _clip_bounds(
    clip_range: float | None, clip_range_low: float | None, clip_range_high: float | None
) -> tuple[float, float]:
    low = clip_range if clip_range_low is None else clip_range_low
    high = clip_range if clip_range_high is None else clip_range_high
    if low is None or high is None:
        raise ValueError("set clip_range, or both clip_range_low and clip_range_high")
    if low < 0 or high < 0:
        raise ValueError(f"clip ranges must be >= 0, got clip_range_low={low}, clip_range_high={high}")
    return low, high


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pessimistic PPO surrogate per token, and where the clipped branch was taken."""
    # L1 = -A * r;  L2 = -A * clip(r, 1 - low, 1 + high)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - low, 1.0 + high)
    # L = max(L1, L2)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _item(value: torch.Tensor) -> float:
    return float(value.detach())


@POLICY_LOSS_FNS.register("ppo")
def ppo_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    enable_sequence_masking: bool = False,
    delta_sequence_masking: float = 0.1,
    fallback_to_policy_gradient: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped-ratio PPO loss with dual clipping for negative advantages.

    ``clip_range_low`` / ``clip_range_high`` override ``clip_range`` on their side.
    ``clip_ratio_c`` (> 1) caps the loss of a negative-advantage token at -A * c, so a huge
    ratio on a bad token cannot dominate; None turns dual clipping off.
    ``enable_sequence_masking`` (DeepSeek-V3.2) zeroes the loss of negative-advantage tokens
    in rows whose mean -log r exceeds ``delta_sequence_masking``; those tokens still count in
    the aggregation's denominator. ``fallback_to_policy_gradient`` takes pi_old = sg[pi], so
    r = 1 with the gradient of log pi: the plain policy gradient, ignoring engine logprobs.
    Metrics: pg_loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl (and seq_mask/masked_tokens,
    seq_mask/mean_sequence_kl with sequence masking).
    """
    low, high = _clip_bounds(clip_range, clip_range_low, clip_range_high)
    if fallback_to_policy_gradient:
        # log pi_old := sg[log pi]
        old_logprobs = logprobs.detach()
    log_ratio = clamped_log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(log_ratio)
    per_token, clipped = _clipped_surrogate(ratio, advantages, low, high)
    lower_clipped = torch.zeros_like(clipped)
    if clip_ratio_c is not None:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (it caps -A * ratio), got {clip_ratio_c}")
        # dual clip, for A < 0 only: L = min(max(L1, L2), -A * c)
        cap = -advantages * clip_ratio_c
        negative = advantages < 0
        lower_clipped = negative & (per_token > cap)
        per_token = torch.where(negative, torch.minimum(per_token, cap), per_token)
    sequence_metrics = {}
    if enable_sequence_masking:
        per_token, sequence_metrics = _sequence_masked(
            per_token, log_ratio, advantages, response_mask, delta_sequence_masking
        )
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    metrics = {
        "pg_loss": _item(loss),
        "pg_clipfrac": _item(masked_mean(clipped.float(), response_mask)),
        "pg_clipfrac_lower": _item(masked_mean(lower_clipped.float(), response_mask)),
        # approximate KL(pi_old || pi) = mean(-log r)
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
        **sequence_metrics,
    }
    return loss, metrics


def _sequence_masked(
    per_token: torch.Tensor,
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    delta: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Zero the loss of A < 0 tokens in rows whose mean KL estimate exceeds delta; (B, R) in and out."""
    mask = response_mask.float()
    # KL_i = sum_t (-log r_{i,t}) m_{i,t} / sum_t m_{i,t}  (0 for an empty row)
    sequence_kl = masked_mean(-log_ratio, mask, dim=-1)
    dropped = (advantages < 0) & (sequence_kl > delta).unsqueeze(-1)
    metrics = {
        "seq_mask/masked_tokens": _item((dropped.float() * mask).sum() / mask.sum().clamp_min(1.0)),
        "seq_mask/mean_sequence_kl": _item(sequence_kl.mean()) if sequence_kl.numel() else 0.0,
    }
    # L'_t = L_t * (1 - [A_t < 0 and KL_i > delta])
    return per_token * (~dropped).float(), metrics


# max(-wA r, -wA clip(r)) = w max(-A r, -A clip(r)) and min(., -wA c) = w min(., -A c) for w >= 0.
ppo_policy_loss.scales_with_advantage = True


@POLICY_LOSS_FNS.register("gspo")
def gspo_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sequence-level importance ratio, clipped (GSPO).

    Every token of a sequence shares the ratio s_i = exp(mean_t log r_{i,t}); its gradient
    goes through each token's own log-probability, so with ``seq-mean-token-mean`` the
    update equals the sequence-level objective. Clip ranges are tiny because a sequence ratio
    moves much less than a token ratio: unless set, the lower side is 3e-4 and the upper
    4e-4; ``clip_range`` sets both sides at once. Metrics: pg_loss, pg_clipfrac, ppo_kl,
    ppo_kl_seq (the mean over rows of the sequences' mean -log r).
    """
    if clip_range is None:
        clip_range_low = GSPO_CLIP_LOW if clip_range_low is None else clip_range_low
        clip_range_high = GSPO_CLIP_HIGH if clip_range_high is None else clip_range_high
    low, high = _clip_bounds(clip_range, clip_range_low, clip_range_high)
    token_log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    # log s_i = (1 / |y_i|) * sum_t log r_{i,t}
    sequence_log_ratio = masked_mean(token_log_ratio, response_mask, dim=-1)
    # log s_{i,t} = sg[log s_i] + log pi_t - sg[log pi_t]: value of s_i, gradient of pi_t
    log_ratio = sequence_log_ratio.detach().unsqueeze(-1) + logprobs - logprobs.detach()
    ratio = torch.exp(log_ratio)
    per_token, clipped = _clipped_surrogate(ratio, advantages, low, high)
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    metrics = {
        "pg_loss": _item(loss),
        "pg_clipfrac": _item(masked_mean(clipped.float(), response_mask)),
        "ppo_kl": _item(masked_mean(-token_log_ratio, response_mask)),
        "ppo_kl_seq": _item(-sequence_log_ratio.mean()) if sequence_log_ratio.numel() else 0.0,
    }
    return loss, metrics


@POLICY_LOSS_FNS.register("cispo")
def cispo_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    clip_range_low: float = 1.0,
    clip_range_high: float = 0.28,
    enable_mask_clip: bool = False,
    mask_clip_range_low: float = 1.0,
    mask_clip_range_high: float = 0.28,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped importance-sampling weight times REINFORCE (CISPO).

    Unlike PPO no token is dropped from the gradient: the weight is clipped and treated as a
    constant. The default ``clip_range_low=1.0`` puts the lower bound at 0, i.e. only large
    weights are capped. ``enable_mask_clip`` also drops (loss 0, still counted in the
    denominator) tokens with A > 0 and r > 1 + mask_clip_range_high, and tokens with A < 0
    and r < 1 - mask_clip_range_low. Metrics: pg_loss, is_clipfrac, unmasked_frac, ppo_kl.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    ratio = torch.exp(log_ratio)
    # w = sg[clip(r, 1 - low, 1 + high)]
    weight = torch.clamp(ratio, 1.0 - clip_range_low, 1.0 + clip_range_high).detach()
    kept = torch.ones_like(ratio)
    if enable_mask_clip:
        # M = 0 where (A > 0 and r > 1 + high') or (A < 0 and r < 1 - low'), else 1
        dropped = ((advantages > 0) & (ratio > 1.0 + mask_clip_range_high)) | (
            (advantages < 0) & (ratio < 1.0 - mask_clip_range_low)
        )
        kept = (~dropped).float()
    # L = -w * M * A * log pi
    per_token = -weight * kept.detach() * advantages * logprobs
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    was_clipped = (ratio < 1.0 - clip_range_low) | (ratio > 1.0 + clip_range_high)
    metrics = {
        "pg_loss": _item(loss),
        "is_clipfrac": _item(masked_mean(was_clipped.float(), response_mask)),
        "unmasked_frac": _item(masked_mean(kept, response_mask)),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }
    return loss, metrics


@POLICY_LOSS_FNS.register("opmd")
def opmd_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau: float = 1.0,
    regularize_log_ratio: bool = False,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Online policy mirror descent.

    By default (Trinity-RFT's form) L = agg(-A * log pi) / (1 + tau): REINFORCE scaled down by
    the regularisation strength, whose pull towards the sampler is left to the advantage's
    baseline. ``regularize_log_ratio=True`` gives the mirror-descent step itself: per token
    L = -A * log pi + (tau / 2) * (log pi - log pi_old)^2, whose gradient
    -(A - tau * log r) * grad log pi is that of (1 / (2 tau)) * (A - tau * log r)^2, the
    regression of the advantage on tau * log r. Either way tau = 0 is plain REINFORCE.
    Metrics: pg_loss, opmd_loss, ppo_kl (and opmd_regularizer with the log-ratio penalty).
    """
    if tau < 0:
        raise ValueError(f"opmd: tau must be >= 0, got {tau}")
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    # L_pg = -A * log pi
    reinforce = -advantages * logprobs
    metrics = {}
    if regularize_log_ratio:
        # L_reg = (tau / 2) * (log r)^2
        regularizer = 0.5 * tau * log_ratio**2
        loss = aggregate_loss(reinforce + regularizer, response_mask, loss_agg_mode)
        metrics["opmd_regularizer"] = _item(aggregate_loss(regularizer, response_mask, loss_agg_mode))
    else:
        # L = agg(-A * log pi) / (1 + tau)
        loss = aggregate_loss(reinforce, response_mask, loss_agg_mode) / (1.0 + tau)
    metrics.update(
        {
            "pg_loss": _item(loss),
            "opmd_loss": _item(loss),
            "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
        }
    )
    return loss, metrics

"""KL estimators between the policy and the reference model, and their two uses.

A KL function maps per-token log-probabilities of the sampled tokens to a per-token
estimate of KL(pi || pi_ref)::

    fn(logprobs (B, R), ref_logprobs (B, R)) -> (B, R)

It is used either as a penalty folded into the rewards before advantages are computed
(``apply_kl_penalty``), or as a loss term added to the policy loss (``kl_loss``). A
function marked ``needs_old_logprobs`` (corrected_k3) also takes ``old_logprobs`` (B, R) of
the sampling policy; ``kl_loss`` passes them, the penalty does not (as in Trinity-RFT).
``adaptive_kl_coef`` is the adaptive controller of the penalty's coefficient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss, masked_mean
from trivium.lazy import lazy_module
from trivium.registry import Registry

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

# Quoted, so that importing this module does not import torch (see trivium.lazy).
KLFn = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]

KL_FNS: Registry[KLFn] = Registry("kl_fn")

LOG_RATIO_LIMIT = 20.0
LOW_VAR_KL_LIMIT = 10.0
# k3 needs exp(-d); below d = -80 (exp(80) ~ 5.5e34) float32 heads for overflow, so d is
# held there. Every k3 Trinity-RFT computes without overflowing keeps its value.
SAFE_LOG_RATIO_LIMIT = 80.0
# corrected_k3's importance ratio pi / pi_old is clamped to [0, 2].
CORRECTED_K3_RATIO_MAX = 2.0


def _log_ratio(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    # d = log pi - log pi_ref
    return logprobs.float() - ref_logprobs.float()


@KL_FNS.register("none")
def no_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Zeros: no KL regularisation."""
    return torch.zeros_like(logprobs, dtype=torch.float32)


@KL_FNS.register("k1")
def k1_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Unbiased but high-variance (can be negative): k1 = d."""
    return _log_ratio(logprobs, ref_logprobs)


@KL_FNS.register("abs")
def abs_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Absolute log-ratio: |d|."""
    return _log_ratio(logprobs, ref_logprobs).abs()


@KL_FNS.register("k2")
def k2_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Squared log-ratio, always >= 0; its gradient is that of the true KL: k2 = d^2 / 2."""
    return 0.5 * _log_ratio(logprobs, ref_logprobs) ** 2


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # k3 = (pi_ref / pi) - 1 - log(pi_ref / pi) = exp(-d) - 1 + d
    return torch.exp(-log_ratio) - 1.0 + log_ratio


@KL_FNS.register("k3")
def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Unbiased, always >= 0: k3 = exp(-d) - 1 + d, unclamped as in Trinity-RFT (d is only held
    at -80 and above, where exp(-d) still fits in float32)."""
    return _k3(torch.clamp(_log_ratio(logprobs, ref_logprobs), min=-SAFE_LOG_RATIO_LIMIT))


@KL_FNS.register("k3_clamped")
def k3_clamped_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 with d clamped to [-20, 20] before exp: tokens far off the reference weigh at most
    exp(20) instead of exp(80)."""
    return _k3(torch.clamp(_log_ratio(logprobs, ref_logprobs), -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


@KL_FNS.register("low_var_kl")
def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """veRL's k3: the log-ratio clamped to [-20, 20] before exp, then k3 clamped to [-10, 10],
    so a few outlier tokens cannot dominate the estimate."""
    return torch.clamp(k3_clamped_kl(logprobs, ref_logprobs), -LOW_VAR_KL_LIMIT, LOW_VAR_KL_LIMIT)


@KL_FNS.register("corrected_k3")
def corrected_k3_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """k3 weighted by the importance ratio of the current to the sampling policy, clamped to
    [0, 2]: clamp(pi / pi_old, 0, 2) * k3, so samples from an older policy estimate the KL of
    the current one. The ratio carries gradient (0 where clamped). Without ``old_logprobs``
    (the KL penalty) it is plain k3. Shapes: (B, R) in and out.
    """
    kl = k3_kl(logprobs, ref_logprobs)
    if old_logprobs is None:
        return kl
    # w = clamp(exp(log pi - log pi_old), 0, 2) = exp(min(log pi - log pi_old, log 2))
    ratio = torch.exp(torch.clamp(logprobs.float() - old_logprobs.float(), max=math.log(CORRECTED_K3_RATIO_MAX)))
    # KL = w * k3
    return ratio * kl


corrected_k3_kl.needs_old_logprobs = True


def needs_old_logprobs(fn: KLFn) -> bool:
    """True if ``fn`` takes the sampling policy's ``old_logprobs`` as a third argument."""
    return bool(getattr(fn, "needs_old_logprobs", False))


# veRL's names for the same estimators, so a veRL setting selects the same numbers.
KL_FNS.register("kl", k1_kl)
KL_FNS.register("mse", k2_kl)


def apply_kl_penalty(
    token_level_rewards: torch.Tensor,
    kl: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract the KL penalty from the rewards, token by token.

    token_level_rewards, kl, response_mask: (B, R). Returns the new rewards (B, R) and the
    metrics ``kl`` (the mean over rows of each row's mean per-token KL, an empty row counting
    as 0: the value the adaptive controller reads) and ``kl_coef``.
    """
    mask = response_mask.float()
    kl = kl.detach().float()
    # r'_t = r_t - beta * KL_t on response tokens
    rewards = token_level_rewards.float() - kl_coef * kl * mask
    # KL = (1 / B) * sum_i (sum_t KL_{i,t} m_{i,t} / sum_t m_{i,t})
    per_row = masked_mean(kl, mask, dim=-1)
    current = float(per_row.mean()) if per_row.numel() else 0.0
    return rewards, {"kl": current, "kl_coef": float(kl_coef)}


# The adaptive controller's proportional error is clipped to this band.
ADAPTIVE_KL_ERROR_LIMIT = 0.2


def adaptive_kl_coef(*, kl_coef: float, current_kl: float, target_kl: float, horizon: float, batch_size: int) -> float:
    """The next KL penalty coefficient of the adaptive controller (Ziegler et al., 2019; veRL's
    ``kl_ctrl.type: adaptive``): it grows while the measured KL is above the target and shrinks
    while it is below, by at most 20% of batch_size / horizon per update.
    """
    if target_kl <= 0 or horizon <= 0:
        raise ValueError(f"adaptive KL needs target_kl > 0 and horizon > 0, got {target_kl} and {horizon}")
    # e = clip(KL / KL_target - 1, -0.2, 0.2)
    error = min(max(current_kl / target_kl - 1.0, -ADAPTIVE_KL_ERROR_LIMIT), ADAPTIVE_KL_ERROR_LIMIT)
    # beta' = beta * (1 + e * n / horizon)
    return kl_coef * (1.0 + error * batch_size / horizon)


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_fn: str | KLFn = "k2",
    kl_coef: float = 0.001,
    loss_agg_mode: str = "token-mean",
    old_logprobs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL to the reference model as a loss term: kl_coef * agg(KL).

    logprobs carries the gradient; ref_logprobs (and old_logprobs, read only by functions
    that need them) are constants. ``kl_fn`` is a registered name or a callable.
    Returns (loss, {"kl_loss", "kl_coef"}).
    """
    fn = KL_FNS.get(kl_fn) if isinstance(kl_fn, str) else kl_fn
    if needs_old_logprobs(fn):
        per_token = fn(logprobs, ref_logprobs.detach(), None if old_logprobs is None else old_logprobs.detach())
    else:
        per_token = fn(logprobs, ref_logprobs.detach())
    kl_value = aggregate_loss(per_token, response_mask, loss_agg_mode)
    # L_kl = beta * agg(KL)
    loss = kl_coef * kl_value
    return loss, {"kl_loss": float(kl_value.detach()), "kl_coef": float(kl_coef)}

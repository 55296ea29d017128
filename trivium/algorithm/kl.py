"""KL estimators between the policy and the reference model, and their two uses.

A KL function maps per-token log-probabilities of the sampled tokens to a per-token
estimate of KL(pi || pi_ref)::

    fn(logprobs (B, R), ref_logprobs (B, R)) -> (B, R)

It is used either as a penalty folded into the rewards before advantages are computed
(``apply_kl_penalty``), or as a loss term added to the policy loss (``kl_loss``).
"""

from __future__ import annotations

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


@KL_FNS.register("k3")
def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Unbiased, always >= 0: k3 = exp(-d) - 1 + d (d clamped to [-20, 20] before exp)."""
    log_ratio = torch.clamp(_log_ratio(logprobs, ref_logprobs), -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    # k3 = (pi_ref / pi) - 1 - log(pi_ref / pi)
    return torch.exp(-log_ratio) - 1.0 + log_ratio


@KL_FNS.register("low_var_kl")
def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """veRL's k3: the log-ratio clamped to [-20, 20] before exp, then k3 clamped to [-10, 10],
    so a few outlier tokens cannot dominate the estimate. Plain ``k3`` keeps only the first clamp.
    """
    return torch.clamp(k3_kl(logprobs, ref_logprobs), -LOW_VAR_KL_LIMIT, LOW_VAR_KL_LIMIT)


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
    metrics ``kl`` (mean per-token KL over the mask) and ``kl_coef``.
    """
    mask = response_mask.float()
    kl = kl.detach().float()
    # r'_t = r_t - beta * KL_t on response tokens
    rewards = token_level_rewards.float() - kl_coef * kl * mask
    return rewards, {"kl": float(masked_mean(kl, mask)), "kl_coef": float(kl_coef)}


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_fn: str | KLFn = "k2",
    kl_coef: float = 0.001,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL to the reference model as a loss term: kl_coef * agg(KL).

    logprobs carries the gradient; ref_logprobs is treated as a constant. ``kl_fn`` is a
    registered name or a callable. Returns (loss, {"kl_loss", "kl_coef"}).
    """
    fn = KL_FNS.get(kl_fn) if isinstance(kl_fn, str) else kl_fn
    per_token = fn(logprobs, ref_logprobs.detach())
    kl_value = aggregate_loss(per_token, response_mask, loss_agg_mode)
    # L_kl = beta * agg(KL)
    loss = kl_coef * kl_value
    return loss, {"kl_loss": float(kl_value.detach()), "kl_coef": float(kl_coef)}

"""Policy losses of the REINFORCE family with reweighted or filtered tokens.

importance_sampling, topr, sapo, sppo, rec and raft; each has the signature documented in
``policy_losses.py`` and is registered into ``POLICY_LOSS_FNS`` when this module is imported
(on first lookup). Log-ratios are clamped as in the other losses (``log_ratio_limit``: 20 for
importance_sampling, whose Trinity-RFT form clamps there, the [-80, 80] guard elsewhere).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss, masked_mean
from trivium.algorithm.policy_losses import (
    LOG_RATIO_LIMIT,
    POLICY_LOSS_FNS,
    SAFE_LOG_RATIO_LIMIT,
    _item,
    clamped_log_ratio,
)
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

REC_CLIP_MODES = ("none", "one-side", "gspo-one-side", "two-side", "ring")
REC_WEIGHTS = (
    "none",
    "importance_sampling",
    "truncated_importance_sampling",
    "gspo_importance_sampling",
    "advantage",
)
# The REC loss averages over tokens whatever loss_agg_mode says (sequences for gspo-one-side).
REC_AGGREGATION = "token-mean"
REC_REGULARIZERS = ("none", "k2", "forward-kl")


@POLICY_LOSS_FNS.register("importance_sampling")
def importance_sampling_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    log_ratio_limit: float = LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Unclipped importance-weighted policy gradient: L = -r * A per token.

    Used by on-policy distillation, whose advantages are already small per-token log-ratios.
    Metrics: pg_loss, ratio_mean, ppo_kl.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    ratio = torch.exp(log_ratio)
    # L = -r * A
    loss = aggregate_loss(-ratio * advantages, response_mask, loss_agg_mode)
    return loss, {
        "pg_loss": _item(loss),
        "ratio_mean": _item(masked_mean(ratio, response_mask)),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }


@POLICY_LOSS_FNS.register("topr")
def topr_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    advantage_threshold: float = 0.0,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Tapered off-policy REINFORCE (TOPR, Le Roux et al., 2025).

    Good samples (A > threshold) get the full REINFORCE gradient; the others are weighted by
    their importance ratio truncated to [0, 1], so off-policy negatives cannot blow up.
    Metrics: pg_loss, topr_alpha_mean, ratio_mean.
    """
    ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit))
    # alpha = 1 if A > threshold else clip(r, 0, 1)
    alpha = torch.where(advantages > advantage_threshold, torch.ones_like(ratio), ratio.clamp(0.0, 1.0))
    # L = -sg(alpha) * A * log pi
    loss = aggregate_loss(-alpha.detach() * advantages * logprobs, response_mask, loss_agg_mode)
    return loss, {
        "pg_loss": _item(loss),
        "topr_alpha_mean": _item(masked_mean(alpha, response_mask)),
        "ratio_mean": _item(masked_mean(ratio, response_mask)),
    }


@POLICY_LOSS_FNS.register("sapo")
def sapo_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    surrogate: bool = False,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Soft adaptive policy optimisation (SAPO): a smooth sigmoid gate instead of a hard clip.

    The gate is f(r) = (4 / tau) * sigmoid(tau * (r - 1)), tau = tau_pos for A > 0 and
    tau_neg (usually larger) otherwise. By default (Trinity-RFT's form) the per-token loss is
    -A * sg[f(r)] * log pi: REINFORCE weighted by the gate's value. ``surrogate=True`` uses
    the paper's surrogate -A * f(r) itself; its gradient weight f'(r) * r = 4 s (1 - s) r
    (s the sigmoid) is 1 at r = 1 and fades smoothly as r leaves 1.
    Metrics: pg_loss, sapo_loss, avg_soft_gate (mean f(r)), avg_ratio, pos_adv_frac,
    sapo_gate_mean (mean gradient weight of the surrogate), ppo_kl.
    """
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"sapo: tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    sigmoid = torch.sigmoid(tau * (ratio - 1.0))
    # f(r) = (4 / tau) * sigmoid(tau * (r - 1))
    gate = sigmoid * (4.0 / tau)
    if surrogate:
        # L = -A * f(r)
        per_token = -advantages * gate
    else:
        # L = -A * sg[f(r)] * log pi
        per_token = -advantages * gate.detach() * logprobs
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    # surrogate's dL/dlog pi = -A * 4 * sigmoid * (1 - sigmoid) * r
    weight = 4.0 * sigmoid * (1.0 - sigmoid) * ratio
    return loss, {
        "pg_loss": _item(loss),
        "sapo_loss": _item(loss),
        "avg_soft_gate": _item(masked_mean(gate, response_mask)),
        "avg_ratio": _item(masked_mean(ratio, response_mask)),
        "pos_adv_frac": _item(masked_mean((advantages > 0).float(), response_mask)),
        "sapo_gate_mean": _item(masked_mean(weight, response_mask)),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }


@POLICY_LOSS_FNS.register("sppo")
def sppo_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    epsilon: float = 0.3,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """sPPO (Vaswani et al., 2021): the log of the ratio as surrogate, clipped symmetrically
    in log space: tokens with r outside [1 / (1 + eps), 1 + eps] give no gradient.

    Metrics: pg_loss, pg_clipfrac, ppo_kl.
    """
    if epsilon <= 0:
        raise ValueError(f"sppo: epsilon must be > 0, got {epsilon}")
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    ratio = torch.exp(log_ratio).detach()
    in_range = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)
    # L = -A * log r on tokens with r in [1/(1+eps), 1+eps]
    loss = aggregate_loss(-advantages * log_ratio * in_range.float(), response_mask, loss_agg_mode)
    return loss, {
        "pg_loss": _item(loss),
        "pg_clipfrac": _item(masked_mean((~in_range).float(), response_mask)),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }


def _rec_kept_tokens(
    clip_mode: str,
    ratio: torch.Tensor,
    sequence_ratio: torch.Tensor,
    advantages: torch.Tensor,
    low: float,
    high: float,
    low_prime: float,
    high_prime: float,
) -> torch.Tensor:
    """(B, R) bool: the tokens the REC clip mode keeps in the gradient."""
    positive, negative = advantages >= 0, advantages <= 0
    if clip_mode == "two-side":
        return (ratio >= 1 - low) & (ratio <= 1 + high)
    if clip_mode == "one-side":
        # good tokens may not rise above 1 + high; bad ones may not fall below 1 - low
        return (positive & (ratio <= 1 + high)) | (negative & (ratio >= 1 - low))
    if clip_mode == "gspo-one-side":
        return (positive & (sequence_ratio <= 1 + high)) | (negative & (sequence_ratio >= 1 - low))
    if clip_mode == "ring":
        # the trust band, plus far-out tokens on the side where the update pulls them back
        inside = (ratio >= 1 - low) & (ratio <= 1 + high)
        return inside | (positive & (ratio <= 1 - low_prime)) | (negative & (ratio >= 1 + high_prime))
    return torch.ones_like(ratio, dtype=torch.bool)


def _check_rec_choices(clip_mode: str, weight: str, regularizer: str) -> None:
    """Raise ``ValueError`` for a rec argument outside its choices."""
    for name, value, allowed in (
        ("clip_mode", clip_mode, REC_CLIP_MODES),
        ("weight", weight, REC_WEIGHTS),
        ("regularizer", regularizer, REC_REGULARIZERS),
    ):
        if value not in allowed:
            raise ValueError(f"rec: {name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_rec_ranges(
    epsilon_low: float,
    epsilon_high: float,
    epsilon_low_prime: float,
    epsilon_high_prime: float,
    temp: float,
    regularizer_coef: float,
) -> None:
    """Raise ``ValueError`` for a rec clip bound, temperature or coefficient out of range."""
    if (
        not 0 < epsilon_low <= 1
        or epsilon_high <= 0
        or temp <= 0
        or regularizer_coef < 0
        or not 0 < epsilon_low_prime <= 1
        or epsilon_high_prime <= 0
    ):
        raise ValueError(
            "rec: need 0 < epsilon_low <= 1, epsilon_high > 0, 0 < epsilon_low_prime <= 1, epsilon_high_prime > 0, "
            "temp > 0, regularizer_coef >= 0"
        )


def _rec_weights(
    weight: str,
    ratio: torch.Tensor,
    sequence_ratio: torch.Tensor,
    advantages: torch.Tensor,
    temp: float,
    low_prime: float,
    high_prime: float,
) -> torch.Tensor:
    """(B, R): the REC token weight w named by ``weight``."""
    return {
        "none": torch.ones_like(ratio),
        "importance_sampling": ratio,
        "truncated_importance_sampling": ratio.clamp(1 - low_prime, 1 + high_prime),
        "gspo_importance_sampling": sequence_ratio.expand_as(ratio),
        "advantage": torch.exp(advantages / temp),
    }[weight]


def _rec_regularized(
    per_token: torch.Tensor, regularizer: str, coef: float, log_ratio: torch.Tensor, logprobs: torch.Tensor
) -> torch.Tensor:
    """(B, R): the per-token REC loss with the ``regularizer`` term added."""
    if regularizer == "k2":
        # + coef * (log pi - log pi_old)^2
        return per_token + coef * log_ratio**2
    if regularizer == "forward-kl":
        # - coef * log pi
        return per_token - coef * logprobs
    return per_token


@POLICY_LOSS_FNS.register("rec")
def rec_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    epsilon_low_prime: float = 0.4,
    epsilon_high_prime: float = 0.4,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
    follow_loss_agg_mode: bool = False,
    log_ratio_limit: float = SAFE_LOG_RATIO_LIMIT,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE with clipping, weighting and regularisation chosen separately (REC family).

    L = -w * A * log pi on the tokens ``clip_mode`` keeps (none, one-side, gspo-one-side,
    two-side, ring), where w (``weight``) is 1, the ratio r, r clipped to [1 - eps_low',
    1 + eps_high'], the sequence ratio, or exp(A / temp). ``regularizer`` adds
    coef * (log r)^2 ("k2") or subtracts coef * log pi ("forward-kl"). The ring's outer
    epsilons default to 0.4 / 0.4 (what Trinity-RFT uses when any argument is given).
    The loss is a token mean whatever ``loss_agg_mode`` says (a seq-mean-token-mean for
    gspo-one-side), as in Trinity-RFT; ``follow_loss_agg_mode=True`` aggregates with
    loss_agg_mode instead. Metrics: pg_loss, pg_clipfrac.
    """
    _check_rec_choices(clip_mode, weight, regularizer)
    _check_rec_ranges(
        epsilon_low, epsilon_high, epsilon_low_prime, epsilon_high_prime, temp, regularizer_coef
    )
    log_ratio = clamped_log_ratio(logprobs, old_logprobs, log_ratio_limit)
    ratio = torch.exp(log_ratio).detach()
    # s_i = exp(mean_t log r_{i,t})
    sequence_ratio = torch.exp(masked_mean(log_ratio, response_mask, dim=-1)).detach().unsqueeze(-1)
    kept = _rec_kept_tokens(
        clip_mode,
        ratio,
        sequence_ratio,
        advantages,
        epsilon_low,
        epsilon_high,
        epsilon_low_prime,
        epsilon_high_prime,
    )
    weights = _rec_weights(
        weight, ratio, sequence_ratio, advantages, temp, epsilon_low_prime, epsilon_high_prime
    )
    # L = -w * A * log pi on kept tokens
    per_token = -weights * advantages * logprobs * kept.float()
    per_token = _rec_regularized(per_token, regularizer, regularizer_coef, log_ratio, logprobs)
    mode = rec_loss_agg_mode(
        loss_agg_mode=loss_agg_mode, clip_mode=clip_mode, follow_loss_agg_mode=follow_loss_agg_mode
    )
    loss = aggregate_loss(per_token, response_mask, mode)
    return loss, {"pg_loss": _item(loss), "pg_clipfrac": _item(masked_mean((~kept).float(), response_mask))}


def rec_loss_agg_mode(
    *,
    loss_agg_mode: str = "token-mean",
    clip_mode: str = "none",
    follow_loss_agg_mode: bool = False,
    **_ignored,
) -> str:
    """The aggregation the rec loss uses with these arguments."""
    if clip_mode == "gspo-one-side":
        return "seq-mean-token-mean"
    return loss_agg_mode if follow_loss_agg_mode else REC_AGGREGATION


rec_policy_loss.loss_agg_mode_for = rec_loss_agg_mode
rec_policy_loss.loss_agg_mode_switch = "follow_loss_agg_mode"


@POLICY_LOSS_FNS.register("raft")
def raft_loss(
    *,
    logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Reward-ranked fine-tuning: negative log-likelihood of the selected rows only.

    A row is selected when its advantage is positive (the ``raft`` advantage marks the best
    samples of each group with 1). Metrics: sft_loss, raft_selected_fraction.
    """
    selected = (advantages > 0).float() * response_mask.float()
    # L = -log pi(y_t) on selected rows
    loss = aggregate_loss(-logprobs, selected, loss_agg_mode)
    rows = (response_mask.sum(dim=-1) > 0).float()
    fraction = masked_mean((selected.sum(dim=-1) > 0).float(), rows) if rows.any() else torch.zeros(())
    return loss, {"sft_loss": _item(loss), "raft_selected_fraction": _item(fraction)}

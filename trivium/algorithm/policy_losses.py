"""Policy losses: current log-probabilities in, one scalar loss and its metrics out.

Every loss has the same keyword-only signature::

    fn(*, logprobs (B, R), old_logprobs (B, R), advantages (B, R), response_mask (B, R),
       loss_agg_mode="token-mean", **args) -> (loss (), metrics dict[str, float])

``logprobs`` carries the gradient; ``old_logprobs`` are those of the policy that sampled the
responses. Extra batch tensors some losses need (``ref_logprobs`` for dpo, ``expert_mask``
for mix) are passed by keyword; the other losses ignore them. Log-ratios are clamped to
[-20, 20] before ``exp`` so that stale or mismatched log-probabilities never overflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss, masked_mean, masked_sum
from trivium.algorithm.arguments import check_fn_args
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
    "policy_loss_fn", builtin_modules=("trivium.algorithm.reinforce_losses", "trivium.algorithm.chord")
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

LOG_RATIO_LIMIT = 20.0
# Arguments Trinity-RFT's mix losses take to rescale micro-batches by hand; trivium
# aggregates each part over its own rows exactly, so they are accepted and not used (the
# config rules note them).
REFERENCE_BATCH_ARGS = (
    "use_dynamic_bsz", "ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ngpus_trainer",
    "train_batch_size_usual", "train_batch_size_expert", "use_token_level_loss_in_sft",
)
# Sequence ratios move far less than token ratios, hence GSPO's much narrower default clip.
GSPO_CLIP_LOW = 3e-4
GSPO_CLIP_HIGH = 4e-4


def clamped_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    # log r = clamp(log pi - log pi_old, -20, 20)
    return torch.clamp(logprobs - old_logprobs, -LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)


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
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped-ratio PPO loss with dual clipping for negative advantages.

    ``clip_range_low`` / ``clip_range_high`` override ``clip_range`` on their side.
    ``clip_ratio_c`` (> 1) caps the loss of a negative-advantage token at -A * c, so a huge
    ratio on a bad token cannot dominate; None turns dual clipping off.
    Metrics: pg_loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl.
    """
    low, high = _clip_bounds(clip_range, clip_range_low, clip_range_high)
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
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    metrics = {
        "pg_loss": _item(loss),
        "pg_clipfrac": _item(masked_mean(clipped.float(), response_mask)),
        "pg_clipfrac_lower": _item(masked_mean(lower_clipped.float(), response_mask)),
        # approximate KL(pi_old || pi) = mean(-log r)
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }
    return loss, metrics


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
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sequence-level importance ratio, clipped (GSPO).

    Every token of a sequence shares the ratio s_i = exp(mean_t log r_{i,t}); its gradient
    goes through each token's own log-probability, so with ``seq-mean-token-mean`` the
    update equals the sequence-level objective. Clip ranges are tiny because a sequence ratio
    moves much less than a token ratio: unless set, the lower side is 3e-4 and the upper
    4e-4; ``clip_range`` sets both sides at once. Metrics: pg_loss, pg_clipfrac, ppo_kl.
    """
    if clip_range is None:
        clip_range_low = GSPO_CLIP_LOW if clip_range_low is None else clip_range_low
        clip_range_high = GSPO_CLIP_HIGH if clip_range_high is None else clip_range_high
    low, high = _clip_bounds(clip_range, clip_range_low, clip_range_high)
    token_log_ratio = clamped_log_ratio(logprobs, old_logprobs)
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
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped importance-sampling weight times REINFORCE (CISPO).

    Unlike PPO no token is dropped from the gradient: the weight is clipped and treated as a
    constant. The default ``clip_range_low=1.0`` puts the lower bound at 0, i.e. only large
    weights are capped. Metrics: pg_loss, is_clipfrac, ppo_kl.
    """
    log_ratio = clamped_log_ratio(logprobs, old_logprobs)
    ratio = torch.exp(log_ratio)
    # w = sg[clip(r, 1 - low, 1 + high)]
    weight = torch.clamp(ratio, 1.0 - clip_range_low, 1.0 + clip_range_high).detach()
    # L = -w * A * log pi
    per_token = -weight * advantages * logprobs
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    was_clipped = (ratio < 1.0 - clip_range_low) | (ratio > 1.0 + clip_range_high)
    metrics = {
        "pg_loss": _item(loss),
        "is_clipfrac": _item(masked_mean(was_clipped.float(), response_mask)),
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
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Online policy mirror descent: REINFORCE plus a squared log-ratio penalty.

    Per token, L = -A * log pi + (tau / 2) * (log pi - log pi_old)^2. Its gradient,
    -(A - tau * log r) * grad log pi, is the gradient of (1 / (2 tau)) * (A - tau * log r)^2,
    the mirror-descent regression of the advantage (reward minus the group's tau * log Z
    estimate) on tau * log r. tau is the strength of the pull towards the sampling policy;
    tau = 0 is plain REINFORCE. Metrics: pg_loss, opmd_regularizer, ppo_kl.
    """
    if tau < 0:
        raise ValueError(f"opmd: tau must be >= 0, got {tau}")
    log_ratio = clamped_log_ratio(logprobs, old_logprobs)
    # L_pg = -A * log pi
    reinforce = -advantages * logprobs
    # L_reg = (tau / 2) * (log r)^2
    regularizer = 0.5 * tau * log_ratio**2
    loss = aggregate_loss(reinforce + regularizer, response_mask, loss_agg_mode)
    metrics = {
        "pg_loss": _item(loss),
        "opmd_regularizer": _item(aggregate_loss(regularizer, response_mask, loss_agg_mode)),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    }
    return loss, metrics


@POLICY_LOSS_FNS.register("sft")
def sft_loss(
    *,
    logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Negative log-likelihood of the response tokens; old_logprobs and advantages are unused.

    Metrics: sft_loss.
    """
    # L = -log pi(y_t)
    loss = aggregate_loss(-logprobs, response_mask, loss_agg_mode)
    return loss, {"sft_loss": _item(loss)}


@POLICY_LOSS_FNS.register("dpo")
def dpo_loss(
    *,
    logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None = None,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Direct preference optimisation on rows ordered [chosen_0, rejected_0, chosen_1, ...].

    ref_logprobs: (B, R) from the frozen reference model (no gradient flows into it).
    Sequence log-probabilities are sums over the response mask; the loss is the mean over
    pairs whose two rows both have tokens (``loss_agg_mode`` does not apply).
    ``label_smoothing`` is the assumed probability that a preference label is flipped.
    Metrics: dpo_loss, reward_accuracy, reward_margin, chosen_reward, rejected_reward.
    """
    if ref_logprobs is None:
        raise ValueError("dpo loss needs ref_logprobs (B, R) from the reference model")
    if logprobs.shape[0] % 2:
        raise ValueError(
            f"dpo loss needs rows in (chosen, rejected) pairs, got an odd batch of {logprobs.shape[0]} rows"
        )
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"dpo: label_smoothing must be in [0, 0.5), got {label_smoothing}")
    policy_sequence = masked_sum(logprobs, response_mask, dim=-1)
    reference_sequence = masked_sum(ref_logprobs.detach(), response_mask, dim=-1)
    # implicit reward of a row: beta * (log pi(y) - log pi_ref(y))
    implicit_rewards = beta * (policy_sequence - reference_sequence)
    chosen_rewards, rejected_rewards = implicit_rewards[0::2], implicit_rewards[1::2]
    margin = chosen_rewards - rejected_rewards
    # L = -(1 - eps) * log sigmoid(margin) - eps * log sigmoid(-margin)
    per_pair = -(1.0 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)
    has_tokens = response_mask.sum(dim=-1) > 0
    valid_pairs = (has_tokens[0::2] & has_tokens[1::2]).float()
    loss = masked_mean(per_pair, valid_pairs)
    metrics = {
        "dpo_loss": _item(loss),
        "reward_accuracy": _item(masked_mean((margin > 0).float(), valid_pairs)),
        "reward_margin": _item(masked_mean(margin, valid_pairs)),
        "chosen_reward": _item(masked_mean(chosen_rewards, valid_pairs)),
        "rejected_reward": _item(masked_mean(rejected_rewards, valid_pairs)),
    }
    return loss, metrics


dpo_loss.needs_reference = True
dpo_loss.paired_rows = True


@POLICY_LOSS_FNS.register("mix")
def mix_policy_loss(
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    expert_mask: torch.Tensor | None = None,
    mu: float = 0.1,
    rl_loss_fn: str = "ppo",
    rl_loss_fn_args: dict | None = None,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    sft_loss_agg_mode: str | None = None,
    **extra_batch_inputs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """RL on the policy's own rows plus SFT on expert rows: (1 - mu) * L_rl + mu * L_sft.

    expert_mask: (B,) bool, True for rows taken from expert demonstrations.
    ``rl_loss_fn`` names the inner RL loss (default ppo), configured by ``rl_loss_fn_args``;
    ``clip_range``/``clip_range_low``/``clip_range_high`` are passed to it unless those args
    set them. ``sft_loss_agg_mode`` aggregates the SFT part (loss_agg_mode when unset).
    Each part is aggregated over its own rows only; a part without rows contributes 0.
    Metrics: the inner losses' metrics prefixed ``rl/`` and ``sft/``, and expert_fraction.
    """
    for name in REFERENCE_BATCH_ARGS:
        extra_batch_inputs.pop(name, None)
    if expert_mask is None:
        raise ValueError("mix loss needs expert_mask (B,) bool marking the expert rows")
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mix: mu must be in [0, 1], got {mu}")
    if rl_loss_fn == "mix":
        raise ValueError("mix: rl_loss_fn cannot be 'mix' itself")
    rl_fn = POLICY_LOSS_FNS.get(rl_loss_fn)
    rl_args = dict(rl_loss_fn_args or {})
    clips = {"clip_range": clip_range, "clip_range_low": clip_range_low, "clip_range_high": clip_range_high}
    rl_args = {**{k: v for k, v in clips.items() if v is not None}, **rl_args}
    check_fn_args(rl_fn, rl_args, key="mix rl_loss_fn_args")
    is_expert = expert_mask.bool().unsqueeze(-1)
    mask = response_mask.float()
    rl_loss, rl_metrics = rl_fn(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        response_mask=mask * (~is_expert).float(),
        loss_agg_mode=loss_agg_mode,
        **extra_batch_inputs,
        **rl_args,
    )
    expert_loss, sft_metrics = sft_loss(
        logprobs=logprobs, response_mask=mask * is_expert.float(), loss_agg_mode=sft_loss_agg_mode or loss_agg_mode
    )
    # L = (1 - mu) * L_rl + mu * L_sft
    loss = (1.0 - mu) * rl_loss + mu * expert_loss
    metrics = {f"rl/{name}": value for name, value in rl_metrics.items()}
    metrics.update({f"sft/{name}": value for name, value in sft_metrics.items()})
    metrics["expert_fraction"] = _item(expert_mask.float().mean()) if expert_mask.numel() else 0.0
    return loss, metrics


mix_policy_loss.needs_expert_mask = True
mix_policy_loss.accepted_unused_args = REFERENCE_BATCH_ARGS

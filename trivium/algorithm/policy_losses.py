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
    "policy_loss_fn",
    builtin_modules=("trivium.algorithm.reinforce_losses", "trivium.algorithm.chord", "trivium.algorithm.m2po"),
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
        per_token, sequence_metrics = _sequence_masked(per_token, log_ratio, advantages, response_mask,
                                                       delta_sequence_masking)
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
    metrics.update({
        "pg_loss": _item(loss),
        "opmd_loss": _item(loss),
        "ppo_kl": _item(masked_mean(-log_ratio, response_mask)),
    })
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
    skip_empty_pairs: bool = False,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Direct preference optimisation on rows ordered [chosen_0, rejected_0, chosen_1, ...].

    ref_logprobs: (B, R) from the frozen reference model (no gradient flows into it).
    Sequence log-probabilities are sums over each row's response mask; the loss is the mean
    over the B / 2 pairs (``loss_agg_mode`` does not apply). A pair with an all-masked row
    counts with margin computed from sums over no tokens; ``skip_empty_pairs`` leaves such
    pairs out of the mean and the metrics instead.
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
    valid_pairs = torch.ones_like(per_pair)
    if skip_empty_pairs:
        has_tokens = response_mask.sum(dim=-1) > 0
        valid_pairs = (has_tokens[0::2] & has_tokens[1::2]).float()
    # L = mean over pairs of L_pair
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


def mixed_loss(
    rl_loss: torch.Tensor, rl_metrics: dict, expert_loss: torch.Tensor, sft_metrics: dict, *,
    usual: torch.Tensor, expert: torch.Tensor, mu: float, exact_part_means: bool, batch_rows: int, **batch_sizes,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The RL part (rows ``usual``) and the SFT part (rows ``expert``) of a mixed loss, weighed
    together; without ``exact_part_means`` each part is scaled by its rows and ``part_weights``."""
    if not exact_part_means:
        weight_usual, weight_expert = part_weights(batch_rows=batch_rows, **batch_sizes)
        # L_rl <- n_usual * w_usual * L_rl;  L_sft <- n_expert * w_expert * L_sft
        rl_loss = rl_loss * float(usual.sum()) * weight_usual
        expert_loss = expert_loss * float(expert.sum()) * weight_expert
    # L = (1 - mu) * L_rl + mu * L_sft
    loss = (1.0 - mu) * rl_loss + mu * expert_loss
    metrics = {f"rl/{name}": value for name, value in rl_metrics.items()}
    metrics.update({f"sft/{name}": value for name, value in sft_metrics.items()})
    return loss, metrics


def part_weights(
    *,
    batch_rows: int,
    use_dynamic_bsz: bool | None,
    ppo_mini_batch_size: int,
    ppo_micro_batch_size_per_gpu: int,
    ngpus_trainer: int,
    train_batch_size_usual: int,
    train_batch_size_expert: int,
) -> tuple[float, float]:
    """Trinity-RFT's per-row weights (w_usual, w_expert) of the mix losses' two parts.

    A part's loss is multiplied by its row count times its weight, so that summed over the
    micro-batches of a mini-batch each part becomes a mean over that part's rows of a GPU:
    with ``use_dynamic_bsz`` w = (mini / gpus) / (B * part_rows / gpus), else
    w = (mini / micro) / (part_rows / gpus) (integer divisions, as Trinity-RFT takes them).
    """
    usual_per_gpu = train_batch_size_usual // ngpus_trainer
    expert_per_gpu = train_batch_size_expert // ngpus_trainer
    if usual_per_gpu <= 0 or expert_per_gpu <= 0 or ppo_micro_batch_size_per_gpu <= 0:
        raise ValueError(
            "mix: train_batch_size_usual and train_batch_size_expert must be at least ngpus_trainer, and "
            f"ppo_micro_batch_size_per_gpu > 0; got {train_batch_size_usual}, {train_batch_size_expert}, "
            f"{ngpus_trainer}, {ppo_micro_batch_size_per_gpu}"
        )
    if use_dynamic_bsz:
        experience_per_gpu = ppo_mini_batch_size // ngpus_trainer
        # w = experiences per GPU / (B * part rows per GPU)
        return (
            experience_per_gpu / (batch_rows * usual_per_gpu),
            experience_per_gpu / (batch_rows * expert_per_gpu),
        )
    gradient_accumulation = ppo_mini_batch_size // ppo_micro_batch_size_per_gpu
    # w = micro-batches per mini-batch / part rows per GPU
    return gradient_accumulation / usual_per_gpu, gradient_accumulation / expert_per_gpu


def select_rows(rows: torch.Tensor, batch_size: int, tensors: dict) -> dict:
    """``tensors`` with every (B, ...) tensor cut to ``rows`` (B,) bool; other values unchanged."""
    return {
        name: value[rows] if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch_size
        else value
        for name, value in tensors.items()
    }


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
    grpo_loss_agg_mode: str | None = None,
    use_dynamic_bsz: bool | None = None,
    ppo_mini_batch_size: int = 1,
    ppo_micro_batch_size_per_gpu: int = 1,
    ngpus_trainer: int = 1,
    train_batch_size_usual: int = 1,
    train_batch_size_expert: int = 1,
    exact_part_means: bool = False,
    **extra_batch_inputs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """RL on the policy's own rows plus SFT on expert rows.

    expert_mask: (B,) bool, True for rows taken from expert demonstrations. Each part is
    computed on its own rows: the RL loss (``rl_loss_fn``, default ppo, configured by
    ``rl_loss_fn_args``; ``clip_range*`` are passed to it unless those args set them),
    aggregated with ``grpo_loss_agg_mode`` (default loss_agg_mode), and the SFT loss,
    aggregated with ``sft_loss_agg_mode`` (default loss_agg_mode). By default the parts are
    weighted as Trinity-RFT weights them:
        L = (1 - mu) * n_usual * w_usual * L_rl + mu * n_expert * w_expert * L_sft
    with the weights of ``part_weights`` from the batch-size arguments (with their defaults,
    w = 1: each part's loss times its row count). ``exact_part_means=True`` drops those
    factors, L = (1 - mu) * L_rl + mu * L_sft, which with trivium's exact micro-batch scaling
    is each part's mean over its rows of the whole batch. A part without rows contributes 0.
    Metrics: the inner losses' metrics prefixed ``rl/`` and ``sft/``, and expert_fraction.
    """
    if expert_mask is None:
        raise ValueError("mix loss needs expert_mask (B,) bool marking the expert rows")
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"mix: mu must be in [0, 1], got {mu}")
    if rl_loss_fn == "mix":
        raise ValueError("mix: rl_loss_fn cannot be 'mix' itself")
    extra_batch_inputs.pop("use_token_level_loss_in_sft", None)
    rl_fn = POLICY_LOSS_FNS.get(rl_loss_fn)
    rl_args = dict(rl_loss_fn_args or {})
    clips = {"clip_range": clip_range, "clip_range_low": clip_range_low, "clip_range_high": clip_range_high}
    rl_args = {**{k: v for k, v in clips.items() if v is not None}, **rl_args}
    check_fn_args(rl_fn, rl_args, key="mix rl_loss_fn_args")
    expert = expert_mask.bool()
    usual = ~expert
    batch = {"logprobs": logprobs, "old_logprobs": old_logprobs, "advantages": advantages,
             "response_mask": response_mask, **extra_batch_inputs}
    if bool(usual.any()):
        rl_loss, rl_metrics = rl_fn(
            **select_rows(usual, logprobs.shape[0], batch),
            loss_agg_mode=grpo_loss_agg_mode or loss_agg_mode,
            **rl_args,
        )
    else:
        rl_loss, rl_metrics = logprobs.new_zeros(()), {}
    if bool(expert.any()):
        expert_loss, sft_metrics = sft_loss(
            logprobs=logprobs[expert], response_mask=response_mask[expert],
            loss_agg_mode=sft_loss_agg_mode or loss_agg_mode,
        )
    else:
        expert_loss, sft_metrics = logprobs.new_zeros(()), {}
    loss, metrics = mixed_loss(
        rl_loss, rl_metrics, expert_loss, sft_metrics, usual=usual, expert=expert, mu=mu,
        exact_part_means=exact_part_means, batch_rows=logprobs.shape[0], use_dynamic_bsz=use_dynamic_bsz,
        ppo_mini_batch_size=ppo_mini_batch_size, ppo_micro_batch_size_per_gpu=ppo_micro_batch_size_per_gpu,
        ngpus_trainer=ngpus_trainer, train_batch_size_usual=train_batch_size_usual,
        train_batch_size_expert=train_batch_size_expert,
    )
    metrics["expert_fraction"] = _item(expert_mask.float().mean()) if expert_mask.numel() else 0.0
    return loss, metrics


mix_policy_loss.needs_expert_mask = True
mix_policy_loss.accepted_unused_args = ("use_token_level_loss_in_sft",)

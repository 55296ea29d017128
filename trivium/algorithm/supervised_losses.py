"""Losses that learn from given responses rather than from the policy's own advantages alone:
``sft`` (likelihood of the responses), ``dpo`` (preference pairs against a reference model) and
``mix`` (an RL loss on the policy's rows plus SFT on expert rows), with the part weights of mix.

They share the signature, registry and helpers of ``trivium.algorithm.policy_losses``, whose
registry imports this module on its first lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trivium.algorithm.aggregation import aggregate_loss, masked_mean, masked_sum
from trivium.algorithm.arguments import check_fn_args, with_shared_args
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, PolicyLossFn, _item
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
else:
    torch = lazy_module("torch", globals())
    F = lazy_module("torch.nn.functional", globals())


def weighted_sft(
    metric: str, weight: Callable[[torch.Tensor], torch.Tensor] | None, doc: str
) -> PolicyLossFn:
    """A supervised loss over the response tokens, L = -sg(weight(p_t)) * log p_t (plain negative
    log-likelihood when ``weight`` is None), aggregated with loss_agg_mode and reported as
    ``metric``; old_logprobs and advantages are unused. ``doc`` is its docstring."""

    def loss_fn(
        *,
        logprobs: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        **_ignored,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        # L = -sg(w(p_t)) * log p_t, w = 1 without a weight
        per_token = -logprobs if weight is None else -weight(torch.exp(logprobs).detach()) * logprobs
        loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
        return loss, {metric: _item(loss)}

    loss_fn.__name__ = loss_fn.__qualname__ = metric
    loss_fn.__doc__ = doc
    return loss_fn


sft_loss = POLICY_LOSS_FNS.register(
    "sft",
    weighted_sft("sft_loss", None, "Negative log-likelihood of the response tokens. Metrics: sft_loss."),
)


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
    rl_loss: torch.Tensor,
    rl_metrics: dict,
    expert_loss: torch.Tensor,
    sft_metrics: dict,
    *,
    usual: torch.Tensor,
    expert: torch.Tensor,
    mu: float,
    exact_part_means: bool,
    batch_rows: int,
    **batch_sizes,
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
        name: value[rows]
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch_size
        else value
        for name, value in tensors.items()
    }


# The arguments both mix losses (``mix``, ``mix_chord``) take to aggregate and weigh their two
# parts: each part's aggregation mode (default loss_agg_mode), and ``mixed_loss``'s weighting.
MIX_PART_ARGS: dict[str, Any] = {
    "sft_loss_agg_mode": None,
    "grpo_loss_agg_mode": None,
    "use_dynamic_bsz": None,
    "ppo_mini_batch_size": 1,
    "ppo_micro_batch_size_per_gpu": 1,
    "ngpus_trainer": 1,
    "train_batch_size_usual": 1,
    "train_batch_size_expert": 1,
    "exact_part_means": False,
}


def take_mix_part_args(kwargs: dict, loss_agg_mode: str) -> tuple[tuple[str, str], dict]:
    """Pops ``MIX_PART_ARGS`` from a mix loss's ``kwargs``: the (RL, SFT) aggregation modes and
    the weighting arguments of ``mixed_loss``."""
    parts = {name: kwargs.pop(name) for name in MIX_PART_ARGS}
    agg_modes = (
        parts.pop("grpo_loss_agg_mode") or loss_agg_mode,
        parts.pop("sft_loss_agg_mode") or loss_agg_mode,
    )
    return agg_modes, parts


@POLICY_LOSS_FNS.register("mix")
@with_shared_args(MIX_PART_ARGS)
def mix_policy_loss(
    *,
    expert_mask: torch.Tensor | None = None,
    loss_agg_mode: str = "token-mean",
    mu: float = 0.1,
    rl_loss_fn: str = "ppo",
    rl_loss_fn_args: dict | None = None,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    **inputs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """RL on the policy's own rows plus SFT on expert rows.

    ``inputs``: the four tensors of ``take_loss_batch``, the ``MIX_PART_ARGS`` and any other
    batch inputs, which reach the RL loss. expert_mask: (B,) bool, True for rows taken from expert demonstrations. Each part is
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
    inputs.pop("use_token_level_loss_in_sft", None)
    agg_modes, weighting = take_mix_part_args(inputs, loss_agg_mode)
    clips = {"clip_range": clip_range, "clip_range_low": clip_range_low, "clip_range_high": clip_range_high}
    rl_fn, rl_args = _mix_rl_loss(rl_loss_fn, rl_loss_fn_args, clips)
    batch = take_loss_batch(inputs)
    batch.update(inputs)
    loss, metrics = mix_parts(rl_fn, rl_args, sft_loss, batch, expert_mask, mu, agg_modes, weighting)
    metrics["expert_fraction"] = _item(expert_mask.float().mean()) if expert_mask.numel() else 0.0
    return loss, metrics


mix_policy_loss.needs_expert_mask = True
mix_policy_loss.accepted_unused_args = ("use_token_level_loss_in_sft",)


# The four (B, R) tensors every policy loss takes, by their keyword names.
LOSS_BATCH_KEYS = ("logprobs", "old_logprobs", "advantages", "response_mask")


def take_loss_batch(inputs: dict) -> dict[str, torch.Tensor]:
    """Pops the four tensors of ``LOSS_BATCH_KEYS`` from a loss's keyword ``inputs``."""
    missing = [key for key in LOSS_BATCH_KEYS if key not in inputs]
    if missing:
        raise TypeError(f"a policy loss needs the batch inputs {', '.join(missing)}")
    return {key: inputs.pop(key) for key in LOSS_BATCH_KEYS}


def mix_parts(
    rl_fn: PolicyLossFn,
    rl_args: dict,
    sft_fn: PolicyLossFn,
    batch: dict,
    expert_mask: torch.Tensor,
    mu: float,
    agg_modes: tuple[str, str],
    weighting: dict,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``mixed_loss`` of ``rl_fn`` on the rows of ``batch`` that ``expert_mask`` (B,) leaves out and
    ``sft_fn`` on the rows it marks, aggregated with ``agg_modes`` (RL, SFT) and weighed with mu
    and ``weighting`` (``take_mix_part_args``)."""
    expert = expert_mask.bool()
    usual = ~expert
    rl_loss, rl_metrics = rl_part(rl_fn, rl_args, batch, usual, agg_modes[0])
    logprobs, response_mask = batch["logprobs"], batch["response_mask"]
    expert_loss, sft_metrics = sft_part(sft_fn, logprobs, response_mask, expert, agg_modes[1])
    return mixed_loss(
        rl_loss,
        rl_metrics,
        expert_loss,
        sft_metrics,
        usual=usual,
        expert=expert,
        mu=mu,
        batch_rows=logprobs.shape[0],
        **weighting,
    )


def _mix_rl_loss(rl_loss_fn: str, rl_loss_fn_args: dict | None, clips: dict) -> tuple[PolicyLossFn, dict]:
    """The RL loss of mix and its checked arguments; ``clips`` fill the ones ``rl_loss_fn_args`` leaves unset."""
    if rl_loss_fn == "mix":
        raise ValueError("mix: rl_loss_fn cannot be 'mix' itself")
    rl_fn = POLICY_LOSS_FNS.get(rl_loss_fn)
    rl_args = {**{k: v for k, v in clips.items() if v is not None}, **(rl_loss_fn_args or {})}
    check_fn_args(rl_fn, rl_args, key="mix rl_loss_fn_args")
    return rl_fn, rl_args


def rl_part(
    rl_fn: PolicyLossFn, rl_args: dict, batch: dict, usual: torch.Tensor, loss_agg_mode: str
) -> tuple[torch.Tensor, dict[str, float]]:
    """The RL loss on the ``usual`` rows (B,) bool of ``batch``; 0 and no metrics without such rows."""
    if not bool(usual.any()):
        return batch["logprobs"].new_zeros(()), {}
    rows = select_rows(usual, batch["logprobs"].shape[0], batch)
    return rl_fn(**rows, loss_agg_mode=loss_agg_mode, **rl_args)


def sft_part(
    sft_fn: PolicyLossFn,
    logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    expert: torch.Tensor,
    loss_agg_mode: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The SFT loss ``sft_fn`` on the ``expert`` rows (B,) bool; 0 and no metrics without such rows."""
    if not bool(expert.any()):
        return logprobs.new_zeros(()), {}
    return sft_fn(logprobs=logprobs[expert], response_mask=response_mask[expert], loss_agg_mode=loss_agg_mode)

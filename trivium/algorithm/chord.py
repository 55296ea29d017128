"""CHORD: RL on the policy's own rows and a scheduled, token-weighted SFT on expert rows.

``mix_chord`` blends an RL loss (ppo) on on-policy rows with an SFT loss on expert rows,
with a weight mu that follows a warm-up then cosine-decay schedule over training steps
(Zhang et al., 2025, "On-Policy RL Meets Off-Policy Experts"). ``sft_is`` and ``sft_phi``
are the token-weighted SFT losses it can use; both are selectable on their own too.
Registered into ``POLICY_LOSS_FNS`` when this module is imported (on first lookup).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss
from trivium.algorithm.arguments import with_shared_args
from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, _item, ppo_policy_loss
from trivium.algorithm.supervised_losses import (
    MIX_PART_ARGS,
    mix_parts,
    sft_loss,
    take_loss_batch,
    take_mix_part_args,
    weighted_sft,
)
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())


def mu_schedule(*, step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """The SFT weight at ``step``: linear 0 -> peak over warm-up, cosine peak -> valley, then valley."""
    if step < warmup_steps:
        # mu = peak * step / warmup
        return peak * step / warmup_steps
    if decay_steps <= 0 or step >= warmup_steps + decay_steps:
        return valley
    progress = (step - warmup_steps) / decay_steps
    # mu = valley + (peak - valley) * (1 + cos(pi * progress)) / 2
    return valley + (peak - valley) * 0.5 * (1.0 + math.cos(math.pi * progress))


# L = -sg(p_t) * log p_t
sft_is_loss = POLICY_LOSS_FNS.register(
    "sft_is",
    weighted_sft(
        "sft_is_loss",
        lambda probs: probs,
        "SFT weighted by the token's own probability: L = -sg(p) * log p. Tokens the policy finds "
        "unlikely are pushed less, which keeps expert data from disrupting the policy. Metrics: sft_is_loss.",
    ),
)


@POLICY_LOSS_FNS.register("sft_phi")
def sft_phi_loss(
    *,
    logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    cutoff_prob: float = 1.0,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SFT weighted by phi(p) = p * (1 - p), which fades out both near-certain and very unlikely
    tokens (CHORD-phi). ``cutoff_prob`` < 1 also stops the gradient of tokens above it.

    Metrics: sft_phi_loss.
    """
    if not 0.0 < cutoff_prob <= 1.0:
        raise ValueError(f"sft_phi: cutoff_prob must be in (0, 1], got {cutoff_prob}")
    probs = torch.exp(logprobs).detach()
    if cutoff_prob < 1.0:
        logprobs = torch.clamp(logprobs, max=math.log(cutoff_prob))
    # L = -sg(p * (1 - p)) * log p
    per_token = -(probs * (1.0 - probs)) * logprobs
    loss = aggregate_loss(per_token, response_mask, loss_agg_mode)
    return loss, {"sft_phi_loss": _item(loss)}


@with_shared_args(MIX_PART_ARGS)
def mix_chord_loss(
    *,
    expert_mask: torch.Tensor | None = None,
    loss_agg_mode: str = "token-mean",
    global_step: int = 0,
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
    enable_phi_function: bool = True,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    **inputs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = (1 - mu_t) * L_ppo(on-policy rows) + mu_t * L_sft(expert rows), mu_t from ``mu_schedule``.

    ``inputs``: the four tensors of ``take_loss_batch`` and the ``MIX_PART_ARGS``; other batch
    inputs are not used.
    expert_mask: (B,) bool marking expert rows; global_step: the trainer's step, for mu_t.
    The SFT part is sft_phi when ``enable_phi_function`` (CHORD-phi), else plain sft. Each
    part is computed on its own rows (the PPO part aggregated with ``grpo_loss_agg_mode``,
    the SFT part with ``sft_loss_agg_mode``, both defaulting to loss_agg_mode) and, unless
    ``exact_part_means``, weighted by its row count times Trinity-RFT's per-row weight, as
    in ``mix`` (see ``part_weights``). A part without rows contributes 0.
    Metrics: the parts' metrics prefixed ``rl/`` and ``sft/``, mu, expert_fraction.
    """
    if expert_mask is None:
        raise ValueError("mix_chord loss needs expert_mask (B,) bool marking the expert rows")
    mu = mu_schedule(
        step=global_step,
        warmup_steps=mu_warmup_steps,
        decay_steps=mu_decay_steps,
        peak=mu_peak,
        valley=mu_valley,
    )
    batch = take_loss_batch(inputs)
    clips = {"clip_range": clip_range, "clip_range_low": clip_range_low, "clip_range_high": clip_range_high}
    sft_fn = sft_phi_loss if enable_phi_function else sft_loss
    agg_modes, weighting = take_mix_part_args(inputs, loss_agg_mode)
    loss, metrics = mix_parts(ppo_policy_loss, clips, sft_fn, batch, expert_mask, mu, agg_modes, weighting)
    metrics["mu"] = mu
    metrics["expert_fraction"] = _item(expert_mask.float().mean()) if expert_mask.numel() else 0.0
    return loss, metrics


mix_chord_loss.needs_expert_mask = True
mix_chord_loss.accepted_unused_args = ("use_token_level_loss_in_sft",)
POLICY_LOSS_FNS.register("mix_chord", mix_chord_loss)

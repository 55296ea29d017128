"""Sampling-mask replay in the trainer: logprobs renormalised over each token's kept set.

With ``trainer.replay_sampling_mask`` the engine sampled each response token from its
top-k / top-p set at temperature T and recorded that set (``core/sampling_mask.py``). The
trainer's logprob of the token is then taken under the same truncated distribution,

    log p_masked(t) = z_t / T - logsumexp_{v in kept} (z_v / T),

so a ratio against the engine's logprob compares like with like. A token without a set
(not sampled, sampled without truncation, or a set over the cap) is scored over the whole
vocabulary at T. Entropy is not changed by replay: it stays the full-vocabulary entropy of
the temperature-1 distribution (``algorithm/entropy.py``).

Owns that formula, the check that trained rows carry their sets, and the replay metrics. The
forwards (``forward.py``, ``token_head.py``) call the formula; it never runs a model.
"""

from __future__ import annotations

import torch

from trivium.core import metric_names as names
from trivium.core.experience import Experience
from trivium.core.sampling_mask import CAPPED
from trivium.errors import UserError

NEG_INF = float("-inf")


def kept_set_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, kept_token_ids: torch.Tensor, temperature: torch.Tensor
) -> torch.Tensor:
    """log softmax(logits / T) over each position's kept set, at its label.

    logits: (..., V); labels: (...) int; kept_token_ids: (..., K) int64, -1 padding (a row of
    -1: the whole vocabulary); temperature: broadcastable to (...). Returns (...) float32,
    differentiable in ``logits``.
    """
    scaled = logits.float() / temperature.float().unsqueeze(-1)
    chosen = scaled.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    present = kept_token_ids >= 0
    has_set = present.any(dim=-1, keepdim=True)
    in_set = scaled.gather(-1, kept_token_ids.clamp(min=0)).masked_fill(~present, NEG_INF)
    # A position without a set takes the other branch; a finite placeholder keeps its unused
    # logsumexp (and so its gradient) free of NaN.
    in_set = torch.where(has_set, in_set, torch.zeros_like(in_set))
    normaliser = torch.where(
        has_set.squeeze(-1), torch.logsumexp(in_set, dim=-1), torch.logsumexp(scaled, dim=-1)
    )
    return chosen - normaliser


def require_sampling_masks(experiences: list[Experience]) -> None:
    """Every trained rollout row carries its sets; a row without them would silently be scored
    over the whole vocabulary against a truncated engine logprob."""
    missing = [
        e
        for e in experiences
        if e.sampling_mask is None
        and not e.is_expert
        and e.action_mask is not None
        and bool(e.action_mask.any())
    ]
    if missing:
        raise UserError(
            f"trainer.replay_sampling_mask is on but {len(missing)} of {len(experiences)} experiences carry no "
            f"sampling mask (e.g. task {missing[0].task_id!r}): they were written without it (an older buffer, "
            "another engine, or a workflow that builds experiences itself); turn replay off or regenerate them"
        )


def sampling_mask_metrics(experiences: list[Experience]) -> dict[str, float]:
    """``sampling_mask/mean_kept``: mean size of the recorded sets; ``sampling_mask/capped_share``:
    the share of truncated tokens whose set exceeded ``trainer.sampling_mask_max_tokens`` (scored
    over the whole vocabulary instead); ``sampling_mask/max_kept``: the largest recorded set."""
    counts = [e.sampling_mask.counts for e in experiences if e.sampling_mask is not None]
    if not counts:
        return {}
    every = torch.cat(counts).long()
    recorded = every[every > 0]
    truncated = int((every != 0).sum())
    return {
        names.SAMPLING_MASK_KEPT: float(recorded.float().mean()) if recorded.numel() else 0.0,
        "sampling_mask/max_kept": float(recorded.max()) if recorded.numel() else 0.0,
        names.SAMPLING_MASK_CAPPED: float((every == CAPPED).sum()) / truncated if truncated else 0.0,
    }

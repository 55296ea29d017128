"""Token entropy of the policy's distribution and the entropy bonus built on it.

``entropy_from_logits`` is the math; ``ENTROPY_LOSS_FNS`` holds the loss terms, each::

    fn(*, entropy (B, R), response_mask (B, R), loss_agg_mode="token-mean", **args)
        -> (loss (), metrics dict[str, float])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trivium.algorithm.aggregation import aggregate_loss
from trivium.lazy import lazy_module
from trivium.registry import Registry

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

# Quoted, so that importing this module does not import torch (see trivium.lazy).
EntropyLossFn = Callable[..., "tuple[torch.Tensor, dict[str, float]]"]

ENTROPY_LOSS_FNS: Registry[EntropyLossFn] = Registry("entropy_loss_fn")


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    # -inf logits (vocabulary masking) would make p * z = 0 * -inf = NaN; a huge finite
    # negative gives p = 0 exactly and p * z = 0.
    logits = logits.float().clamp_min(torch.finfo(torch.float32).min)
    log_normalizer = torch.logsumexp(logits, dim=-1)
    probs = torch.softmax(logits, dim=-1)
    # H = logsumexp(z) - sum_v p_v * z_v  (= -sum_v p_v log p_v, without log of tiny p)
    return log_normalizer - (probs * logits).sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Entropy of softmax(logits) over the last axis.

    logits: (..., V), any float dtype (computed in float32). Returns (...) float32.
    ``chunk_size`` processes that many positions at a time, so the float32 copy and the
    probabilities never exist for the whole batch at once (lower peak memory).
    """
    if chunk_size is None:
        return _entropy(logits)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    flat = logits.reshape(-1, logits.shape[-1])
    pieces = [_entropy(chunk) for chunk in torch.split(flat, chunk_size, dim=0)]
    return torch.cat(pieces).reshape(logits.shape[:-1])


def expected_entropy_signal_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """N = sum_v p_v * p_v * (H + log p_v): the expectation, over the next token, of the entropy
    signal S = p * (H + log p) (see ``entropy_filters``). logits: (..., V); returns (...) float32.
    """
    logits = logits.float().clamp_min(torch.finfo(torch.float32).min)
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = torch.exp(log_probs)
    entropy = -(probs * log_probs).sum(dim=-1, keepdim=True)
    # N = sum_v p_v^2 * (H + log p_v)
    return (probs * probs * (entropy + log_probs)).sum(dim=-1)


@ENTROPY_LOSS_FNS.register("default")
def entropy_bonus(
    *,
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    entropy_coef: float = 0.0,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Reward exploration: loss = -entropy_coef * agg(entropy). Off (coef 0) by default.

    Metrics: entropy (the aggregated entropy, reported even when the coefficient is 0).
    """
    mean_entropy = aggregate_loss(entropy, response_mask, loss_agg_mode)
    # L_ent = -c * agg(H)
    loss = -entropy_coef * mean_entropy
    return loss, {"entropy": float(mean_entropy.detach())}


@ENTROPY_LOSS_FNS.register("mix")
def on_policy_entropy_bonus(
    *,
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    entropy_coef: float = 0.0,
    expert_mask: torch.Tensor | None = None,
    **_ignored,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The entropy bonus over the policy's own rows only; expert rows (expert_mask (B,) True)
    are left out of the aggregation (not counted as rows either), since their tokens were not
    sampled by the policy. Metrics: entropy.
    """
    if expert_mask is not None:
        own = ~expert_mask.bool()
        entropy, response_mask = entropy[own], response_mask[own]
    return entropy_bonus(
        entropy=entropy, response_mask=response_mask, loss_agg_mode=loss_agg_mode, entropy_coef=entropy_coef
    )


on_policy_entropy_bonus.needs_expert_mask = True


@ENTROPY_LOSS_FNS.register("none")
def no_entropy_loss(
    *, entropy: torch.Tensor, response_mask: torch.Tensor, **_ignored
) -> tuple[torch.Tensor, dict[str, float]]:
    """No entropy term: a zero loss on the entropy's device."""
    return torch.zeros((), device=entropy.device), {}

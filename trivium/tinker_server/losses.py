"""The loss functions ``forward_backward`` computes, as pure tensor functions.

Each takes the per-token logprobs of the target tokens under the current model, ``(B, T)``
with a ``(B, T)`` mask of real (unpadded) tokens, and the datums' ``loss_fn_inputs`` padded
the same way. Losses are sums over tokens and datums, as the Tinker API defines them; the
elementwise losses go back to the client per datum. Which inputs each loss needs is declared
in ``LOSS_INPUTS`` so the server refuses a datum before any work is done.
"""

from __future__ import annotations

import torch

from trivium.algorithm.aggregation import masked_sum
from trivium.algorithm.policy_losses import LOG_RATIO_LIMIT, clamped_log_ratio
from trivium.algorithm.reinforce_losses import importance_sampling_loss

# loss name -> (required inputs, optional inputs); target_tokens is what the logprobs score.
LOSS_INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cross_entropy": (("target_tokens",), ("weights",)),
    "importance_sampling": (("target_tokens", "logprobs", "advantages"), ()),
}


def cross_entropy(
    *, logprobs: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, elementwise loss (B, T)): L = -sum_{i,t} w_{i,t} * log p(target_{i,t}).

    ``weights`` default to 1 on every real token.
    """
    weights = mask.to(logprobs.dtype) if weights is None else weights * mask
    # l_{i,t} = -w_{i,t} * log p_{i,t}
    elementwise = -weights * logprobs
    return masked_sum(elementwise, mask), elementwise.detach()


def importance_sampling(
    *, logprobs: torch.Tensor, mask: torch.Tensor, sampling_logprobs: torch.Tensor, advantages: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, elementwise loss (B, T)): L = -sum_{i,t} exp(log p - log q)_{i,t} * A_{i,t}.

    ``sampling_logprobs`` (log q) are the sampler's logprobs of the same tokens. The per-token
    term is trivium's ``importance_sampling`` policy loss (its log-ratio clamp included);
    "seq-mean-token-sum" averages the per-datum sums, so times B it is their sum.
    """
    batch_size = logprobs.shape[0]
    loss, _metrics = importance_sampling_loss(
        logprobs=logprobs,
        old_logprobs=sampling_logprobs,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode="seq-mean-token-sum",
    )
    with torch.no_grad():
        ratio = torch.exp(clamped_log_ratio(logprobs, sampling_logprobs, LOG_RATIO_LIMIT))
        elementwise = -ratio * advantages * mask
    return loss * batch_size, elementwise

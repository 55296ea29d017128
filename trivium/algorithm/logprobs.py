"""Log-probabilities of given tokens under a model's logits; shared by trainer and engine.

Only the chosen token's log-probability is kept, computed as z_label - logsumexp(z): the
full (B, R, V) log-softmax is never stored, and ``chunk_size`` bounds the float32 working
copy to that many positions at a time.
"""

from __future__ import annotations

import torch


def _chosen_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    chosen = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    # log p(y) = z_y - log sum_v exp(z_v)
    return chosen - torch.logsumexp(logits, dim=-1)


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """log softmax(logits / temperature)[label] for every position.

    logits: (..., V) any float dtype; labels: (...) int64 token ids in [0, V).
    Returns (...) float32. The temperature must match the one used for sampling, so that
    the trainer's log-probabilities are comparable with the engine's.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"labels shape {tuple(labels.shape)} must match logits without the vocab axis "
            f"{tuple(logits.shape[:-1])}"
        )
    labels = labels.long()
    if chunk_size is None:
        return _chosen_logprobs(logits, labels, temperature)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1)
    pieces = [
        _chosen_logprobs(logit_chunk, label_chunk, temperature)
        for logit_chunk, label_chunk in zip(
            torch.split(flat_logits, chunk_size), torch.split(flat_labels, chunk_size)
        )
    ]
    return torch.cat(pieces).reshape(labels.shape)

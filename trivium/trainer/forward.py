"""Forward passes that turn a padded batch into per-response-token quantities (B, R)."""

from __future__ import annotations

import torch

from trivium.algorithm.entropy import entropy_from_logits
from trivium.algorithm.logprobs import logprobs_from_logits
from trivium.core.batch import ExperienceBatch


def response_logits(model: torch.nn.Module, batch: ExperienceBatch) -> torch.Tensor:
    """Logits that predict each response token: (B, R, V)."""
    output = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask.long(),
        position_ids=batch.position_ids,
        use_cache=False,
    )
    P, R = batch.prompt_length, batch.response_length
    # The logit at position t predicts token t + 1.
    return output.logits[:, P - 1 : P + R - 1, :]


def response_logprobs(
    model: torch.nn.Module, batch: ExperienceBatch, *, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = response_logits(model, batch).float()
    labels = batch.input_ids[:, batch.prompt_length :]
    logprobs = logprobs_from_logits(logits, labels)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logprobs, entropy


@torch.no_grad()
def whole_batch_logprobs(model: torch.nn.Module, batch: ExperienceBatch, plan: list[list[int]]) -> torch.Tensor:
    """Response logprobs (B, R) for ``batch``, computed micro-batch by micro-batch without grad."""
    out = torch.zeros_like(batch.response_mask)
    for rows in plan:
        micro = batch.select(rows)
        logprobs, _ = response_logprobs(model, micro)
        out[rows, : micro.response_length] = logprobs
    return out

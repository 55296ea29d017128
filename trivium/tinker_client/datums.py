"""Experiences as the Tinker service's ``Datum``s, and the service's logprobs back on trivium's grid.

A sequence of T tokens is sent as its first T-1 tokens with the last T-1 as targets, so the
service's logprob at input position i scores token i+1. A response that starts at token
``prompt_length`` therefore has its logprobs at positions ``prompt_length - 1`` onwards;
``response_grid`` puts them on the (B, R) response grid of ``ExperienceBatch`` (left-aligned,
zero beyond each response), keeping the autograd graph of the tensors the SDK hands the
custom loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from trivium.core.experience import Experience


def sequence_datum(tokens: Sequence[int]):
    """One sequence as a ``Datum`` the ``cross_entropy`` loss (and the custom-loss path) takes."""
    from tinker import types

    tokens = [int(t) for t in tokens]
    if len(tokens) < 2:
        raise ValueError("a sequence needs at least two tokens (a prompt token and a response token)")
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:]},
    )


def experience_datums(experiences: Sequence[Experience]) -> list:
    return [sequence_datum(e.tokens.tolist()) for e in experiences]


def response_logprobs(
    sequence_logprobs: torch.Tensor, prompt_length: int, response_length: int
) -> torch.Tensor:
    """The logprobs of a sequence's response tokens, from the service's per-position logprobs."""
    start = prompt_length - 1
    values = sequence_logprobs.reshape(-1)[start : start + response_length]
    if values.numel() != response_length:
        raise ValueError(
            f"the service returned {sequence_logprobs.numel()} logprobs for a sequence of "
            f"{prompt_length + response_length} tokens"
        )
    return values


def response_grid(
    experiences: Sequence[Experience], sequence_logprobs: Sequence[torch.Tensor], width: int
) -> torch.Tensor:
    """(B, width) logprobs of each experience's response tokens, zero-padded on the right."""
    rows = [
        F.pad(response_logprobs(lp, e.prompt_length, e.response_length), (0, width - e.response_length))
        for e, lp in zip(experiences, sequence_logprobs, strict=True)
    ]
    return torch.stack(rows).float()

"""The language-model head, chunked: per-token logprob and entropy without a (tokens × vocabulary) tensor.

A model's head turns hidden states (tokens, H) into logits (tokens, V); with a 150k
vocabulary the float32 logits of one micro-batch (and their gradient) are often the largest
tensors of a step. While ``chunked_token_head`` is active, the model's output embedding
returns, for each position it is given, two numbers instead of V logits: the logprob of the
token that position predicts (the targets the caller names before each forward) and the
entropy of its distribution. It computes them ``chunk_size`` positions at a time, each
chunk under activation checkpointing, so forward and backward hold the logits of one chunk
at a time; the numbers equal the full computation's (tested to 1e-5, gradients included).

With sampling-mask replay the caller also names each position's kept set and temperature
(``kept``), and the logprob is taken over that set (``sampling_mask.py``); the entropy stays
the full distribution's.

The head is swapped inside the model's own forward, so every wrapper around the model
(FSDP2's parameter gathering, peft) runs as usual. Heads that are not a plain linear layer
(a LoRA-adapted head, for one) are left alone: ``chunked_token_head`` then yields None and
the caller computes from full logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from trivium.algorithm.entropy import entropy_from_logits
from trivium.trainer.sampling_mask import kept_set_logprobs

DEFAULT_CHUNK_TOKENS = 1024
# Below this vocabulary size a micro-batch's whole logits are small, and one matmul beats chunks.
CHUNKED_VOCABULARY = 32768


def logit_chunk_tokens(configured: int | None, model: torch.nn.Module) -> int | None:
    """Positions per chunk: ``configured`` (0: never chunked), or chosen from the vocabulary."""
    if configured is not None:
        return configured or None
    vocabulary = getattr(getattr(model, "config", None), "vocab_size", 0) or 0
    return DEFAULT_CHUNK_TOKENS if vocabulary >= CHUNKED_VOCABULARY else None


def _chunk_statistics(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      targets: torch.Tensor, kept: torch.Tensor | None = None,
                      temperatures: torch.Tensor | None = None) -> torch.Tensor:
    """(n, 2): log softmax(h W^T + b)[target] (over the ``kept`` (n, K) sets at ``temperatures``
    (n,) when given) and the entropy, for n positions."""
    logits = F.linear(hidden, weight, bias).float()
    if kept is not None:
        chosen = kept_set_logprobs(logits, targets, kept, temperatures)
    else:
        # log p(y) = z_y - log sum_v exp(z_v)
        chosen = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.stack([chosen, entropy_from_logits(logits)], dim=-1)


class TokenStatisticsHead:
    """Stands in for the head's forward; ``targets`` must be set before each model call, or
    ``whole_logits`` for a call that needs the plain logits (then returned as usual). With
    ``replays``, ``kept`` (sets (..., K), temperatures (...)) must be set with the targets."""

    def __init__(self, head: torch.nn.Linear, chunk_size: int):
        self.head, self.chunk_size = head, chunk_size
        self.targets: torch.Tensor | None = None
        self.whole_logits = False
        self.replays = False
        self.kept: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (..., H) -> (..., 2): [logprob of the target, entropy] per position."""
        if self.whole_logits:
            self.whole_logits = False
            return F.linear(hidden, self.head.weight, self.head.bias)
        if self.targets is None or self.targets.shape != hidden.shape[:-1]:
            expected = None if self.targets is None else tuple(self.targets.shape)
            raise RuntimeError(f"the chunked head got positions {tuple(hidden.shape[:-1])} but targets {expected}")
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])
        flat_targets = self.targets.reshape(-1).long()
        flat_kept = flat_temperatures = None
        if self.replays:
            if self.kept is None or self.kept[0].shape[:-1] != hidden.shape[:-1]:
                expected = None if self.kept is None else tuple(self.kept[0].shape[:-1])
                raise RuntimeError(f"the chunked head got positions {tuple(hidden.shape[:-1])} but kept sets {expected}")
            flat_kept = self.kept[0].reshape(-1, self.kept[0].shape[-1])
            flat_temperatures = self.kept[1].reshape(-1)
        weight, bias = self.head.weight, self.head.bias
        pieces = []
        for start in range(0, flat_hidden.shape[0], self.chunk_size):
            part = slice(start, start + self.chunk_size)
            sets = (None, None) if flat_kept is None else (flat_kept[part], flat_temperatures[part])
            if torch.is_grad_enabled() and flat_hidden.requires_grad:
                pieces.append(checkpoint(
                    _chunk_statistics, flat_hidden[part], weight, bias, flat_targets[part], *sets, use_reentrant=False
                ))
            else:
                pieces.append(_chunk_statistics(flat_hidden[part], weight, bias, flat_targets[part], *sets))
        self.targets = self.kept = None  # one forward, one set of targets
        return torch.cat(pieces).reshape(*hidden.shape[:-1], 2)


@contextmanager
def chunked_token_head(model: torch.nn.Module, chunk_size: int | None) -> Iterator[TokenStatisticsHead | None]:
    """Within the block the model's head returns [logprob, entropy] per position (see the module)."""
    head = model.get_output_embeddings() if chunk_size and hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear:
        yield None
        return
    statistics = TokenStatisticsHead(head, chunk_size)
    head.forward = statistics
    try:
        yield statistics
    finally:
        del head.forward  # the class's forward again

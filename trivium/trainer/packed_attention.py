"""Attention over packed sequences with PyTorch's SDPA, for devices without FlashAttention.

transformers' own ``sdpa`` attention reads a packed row as one sequence under a dense
(T, T) block-diagonal mask: correct, but its cost grows with the square of the whole packed
length. ``varlen_sdpa`` (registered under ``VARLEN_SDPA``) instead reads the sequence
boundaries a packed forward passes (``cu_seq_lens_q``, ``max_length_q``), lays the queries,
keys and values of each sequence in a row of their own, right-padded, and runs causal SDPA
on those rows: each sequence attends over itself only, at the cost of padded attention,
while everything outside attention still runs on real tokens. Calls without boundaries
(padded batches, the shared-prompt pass with its cache) go to transformers' ``sdpa``
unchanged, so a model switched to this implementation computes the same everywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

VARLEN_SDPA = "trivium_varlen_sdpa"
# Implementations that already keep packed sequences apart (FlashAttention's varlen kernels
# read cu_seq_lens; flex attention builds a block mask from the position ids).
NATIVE_VARLEN = ("flash_attention_2", "flash_attention_3", "flex_attention")


def varlen_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """query (1, Hq, T, D), key/value (1, Hkv, T, D) -> (1, T, Hq, D), like transformers' sdpa."""
    boundaries = kwargs.get("cu_seq_lens_q")
    if boundaries is None or attention_mask is not None or query.shape[0] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    rows, back = sequence_rows(boundaries, int(kwargs["max_length_q"]))

    def by_sequence(states: torch.Tensor) -> torch.Tensor:  # (1, H, T, D) -> (n, H, L, D)
        return states[0][:, rows].transpose(0, 1)

    out = F.scaled_dot_product_attention(
        by_sequence(query),
        by_sequence(key),
        by_sequence(value),
        dropout_p=dropout,
        is_causal=True,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )  # (n, Hq, L, D)
    heads, dim = out.shape[1], out.shape[3]
    flat = out.transpose(0, 1).reshape(heads, -1, dim)[:, back]  # (Hq, T, D)
    return flat.transpose(0, 1).unsqueeze(0).contiguous(), None


def sequence_rows(cu_seq_lens: torch.Tensor, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows (n, L): the packed position of each sequence's i-th token, right-padded;
    back (T,): where each packed position lands in the flattened (n * L) rows).

    Padding slots repeat the sequence's first position; they sit after its last token, so a
    causal mask keeps every real query off them.
    """
    starts = cu_seq_lens[:-1].long()
    lengths = cu_seq_lens[1:].long() - starts
    offsets = torch.arange(max_length, device=cu_seq_lens.device)
    rows = starts[:, None] + offsets[None, :]
    rows = torch.where(offsets[None, :] < lengths[:, None], rows, starts[:, None])
    sequence = torch.repeat_interleave(torch.arange(len(lengths), device=cu_seq_lens.device), lengths)
    back = sequence * max_length + torch.arange(int(cu_seq_lens[-1]), device=cu_seq_lens.device) - starts[sequence]
    return rows, back


def _mask(*, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor | None:
    """No mask for packed rows (the boundaries replace it); transformers' SDPA mask otherwise."""
    if attention_mask is None:
        return None
    return sdpa_mask(attention_mask=attention_mask, **kwargs)


AttentionInterface.register(VARLEN_SDPA, varlen_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(VARLEN_SDPA, _mask)


def use_packed_attention(model: torch.nn.Module) -> None:
    """Switch ``model`` to ``varlen_sdpa`` unless its attention already handles packed rows."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) in (*NATIVE_VARLEN, VARLEN_SDPA):
        return
    model.set_attn_implementation(VARLEN_SDPA)

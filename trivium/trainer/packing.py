"""Sequence packing: a padded micro-batch laid end to end as one row, without padding.

Each sequence keeps its own position ids (restarting at 0) and its attention stays inside
it: the forward receives the sequence boundaries as ``cu_seq_lens_q/k`` and
``max_length_q/k``, the keyword arguments transformers' varlen attention reads (FlashAttention
on GPUs; ``trivium/trainer/packed_attention.py`` on other devices). Linear layers and the
language-model head then see real tokens only, and the head runs only on the positions that
predict a response token. What comes back is laid out like the padded batch, (B, R, ...),
so losses never know which forward ran.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trivium.core.batch import ExperienceBatch

# Model families whose forward passes ``cu_seq_lens_*`` through to attention and builds its
# mask with transformers' masking utilities (tested against the padded forward).
PACKED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")


@dataclass(frozen=True)
class PackedBatch:
    input_ids: torch.Tensor  # (1, T): the real tokens of every row, row after row
    position_ids: torch.Tensor  # (1, T): 0, 1, ... within each row
    cu_seq_lens: torch.Tensor  # (B + 1,) int32: where each row starts in T, then T
    max_length: int  # the longest row
    predicting: torch.Tensor  # (B, R): the packed position whose output predicts response token r
    keep: torch.Tensor  # (K,): the distinct positions of ``predicting`` (the head's only inputs)
    kept_index: torch.Tensor  # (B, R): where each ``predicting`` position sits in ``keep``

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def forward_kwargs(self) -> dict:
        """What a transformers forward needs to treat the row as separate sequences."""
        return {
            "input_ids": self.input_ids,
            "position_ids": self.position_ids,
            "cu_seq_lens_q": self.cu_seq_lens,
            "cu_seq_lens_k": self.cu_seq_lens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
            "use_cache": False,
        }


def pack(batch: ExperienceBatch) -> PackedBatch:
    """Lay ``batch``'s real tokens end to end; see the module docstring."""
    mask = batch.attention_mask.bool()
    lengths = mask.sum(dim=1)
    device = batch.input_ids.device
    # The packed position of every (row, column) that holds a token; -1 at padding.
    packed_at = torch.full(mask.shape, -1, dtype=torch.long, device=device)
    packed_at[mask] = torch.arange(int(lengths.sum()), device=device)
    P, R = batch.prompt_length, batch.response_length
    # The output at column c predicts the token at c + 1; a prompt's last column always holds
    # a token (prompts are left-padded), so every response token has a predicting position.
    predicting = packed_at[:, P - 1 : P + R - 1]
    # Padding after a short response predicts nothing: point it at a real position; the
    # response mask keeps it out of every loss, exactly as the padded forward's outputs there.
    predicting = torch.where(predicting >= 0, predicting, predicting.new_zeros(()))
    keep, kept_index = torch.unique(predicting, return_inverse=True)
    cu_seq_lens = torch.zeros(batch.batch_size + 1, dtype=torch.int32, device=device)
    cu_seq_lens[1:] = torch.cumsum(lengths, dim=0)
    return PackedBatch(
        input_ids=batch.input_ids[mask].unsqueeze(0),
        position_ids=batch.position_ids[mask].unsqueeze(0),
        cu_seq_lens=cu_seq_lens,
        max_length=int(lengths.max()),
        predicting=predicting,
        keep=keep,
        kept_index=kept_index,
    )


def packs(model: torch.nn.Module) -> bool:
    """Whether ``model``'s family is one whose packed forward is known to equal the padded one."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return model_type in PACKED_MODEL_TYPES

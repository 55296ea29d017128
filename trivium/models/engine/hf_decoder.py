"""Generic decoder: the Hugging Face model's own forward with its DynamicCache.

The fallback for architectures the fast decoder does not cover (sliding windows, q/k norms,
dynamic RoPE, anything else ``AutoModelForCausalLM`` loads). Same interface as FastDecoder,
without row compaction.
"""

from __future__ import annotations

import torch

from trivium.models.kv_cache import cache_keyword, output_cache


class HFDecoder:
    def __init__(self, model):
        self.model = model
        self.attention_mask: torch.Tensor | None = None
        self.past = None

    def bind_weights(self, *, force: bool = False) -> None:
        """Nothing to rebuild: the forward reads the live parameters."""

    @torch.inference_mode()
    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, capacity: int
    ) -> torch.Tensor:
        device = self.model.device
        self.attention_mask = attention_mask.long().to(device)
        output = self.model(
            input_ids=input_ids.to(device),
            attention_mask=self.attention_mask,
            position_ids=position_ids.to(device),
            use_cache=True,
            logits_to_keep=1,
        )
        self.past = output_cache(output)
        return output.logits[:, -1].float().cpu()  # sampling runs on CPU

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        ones = self.attention_mask.new_ones(self.attention_mask.shape[0], 1)
        self.attention_mask = torch.cat([self.attention_mask, ones], dim=1)
        device = self.model.device
        output = self.model(
            input_ids=tokens.unsqueeze(1).to(device),
            attention_mask=self.attention_mask,
            position_ids=position_ids.unsqueeze(1).to(device),
            use_cache=True,
            **{cache_keyword(self.model): self.past},
        )
        self.past = output_cache(output)
        return output.logits[:, -1].float().cpu()

    keep_rows = None  # row compaction is not supported; finished rows are masked instead

    def release(self) -> None:
        self.attention_mask, self.past = None, None

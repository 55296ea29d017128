"""The critic: a causal LM trunk with a scalar value head, for PPO's GAE advantages."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from trivium.core.batch import ExperienceBatch
from trivium.trainer.packing import pack, packs


class CriticModel(torch.nn.Module):
    def __init__(self, trunk: torch.nn.Module):
        super().__init__()
        self.trunk = trunk
        self.value_head = torch.nn.Linear(trunk.config.hidden_size, 1)
        # Start near zero so early advantages are reward-driven, not noise-driven.
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: torch.dtype = torch.float32, config_overrides: dict | None = None
    ) -> CriticModel:
        critic = cls(AutoModel.from_pretrained(path, dtype=dtype, **(config_overrides or {})))
        head = Path(path) / "value_head.safetensors"
        if head.exists():
            critic.value_head.load_state_dict(load_file(str(head)))
        return critic

    def save_value_head(self, directory: str | Path, *, state: dict[str, torch.Tensor] | None = None) -> None:
        """Write the head's weights (``state``: whole weights gathered from a sharded critic)."""
        state = self.value_head.state_dict() if state is None else state
        save_file({k: v.contiguous() for k, v in state.items()}, str(Path(directory) / "value_head.safetensors"))

    def response_values(self, batch: ExperienceBatch, *, packed: bool = False) -> torch.Tensor:
        """Value of the state before each response token: (B, R); ``packed``: run the batch
        as one row without padding (trainer/packing.py) when the trunk's family allows it."""
        return self(batch, packed=packed)  # through forward: a sharded critic gathers its weights there

    def forward(self, batch: ExperienceBatch, packed: bool = False) -> torch.Tensor:
        """Value of the state before each response token: (B, R)."""
        if packed and packs(self.trunk):
            rows = pack(batch)
            hidden = self.trunk(**rows.forward_kwargs()).last_hidden_state  # (1, T, H)
            return self.value_head(hidden[0][rows.predicting]).squeeze(-1).float()
        hidden = self.trunk(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask.long(),
            position_ids=batch.position_ids,
            use_cache=False,
        ).last_hidden_state
        P, R = batch.prompt_length, batch.response_length
        return self.value_head(hidden[:, P - 1 : P + R - 1, :]).squeeze(-1).float()

"""ExperienceBatch: a list of experiences as padded tensors, in the veRL layout.

Prompts are left-padded to a common length P and responses right-padded to R, so every
sequence is ``(B, P + R)`` and every per-token quantity the losses use is ``(B, R)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from trivium.core.experience import Experience


@dataclass
class ExperienceBatch:
    input_ids: torch.Tensor  # (B, P + R) int64
    attention_mask: torch.Tensor  # (B, P + R) bool
    position_ids: torch.Tensor  # (B, P + R) int64
    response_mask: torch.Tensor  # (B, R) float: 1 where the token enters the loss
    old_logprobs: torch.Tensor  # (B, R) engine logprobs (0 where unknown)
    rewards: torch.Tensor  # (B,)
    advantages: torch.Tensor  # (B, R)
    returns: torch.Tensor  # (B, R)
    model_versions: torch.Tensor  # (B,) int64
    prompt_length: int  # P
    # Rows from an expert (SFT) buffer inside an RL batch, for the ``mix`` loss.
    expert_mask: torch.Tensor | None = None  # (B,) bool

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def response_length(self) -> int:
        return int(self.response_mask.shape[1])

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def to(self, device: torch.device | str) -> ExperienceBatch:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return ExperienceBatch(**{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in values.items()})

    def select(self, index: torch.Tensor | list[int] | slice) -> ExperienceBatch:
        """Rows ``index`` of every tensor; trims padding columns nobody uses."""
        if isinstance(index, list):
            index = torch.as_tensor(index, dtype=torch.long)
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = value[index] if isinstance(value, torch.Tensor) else value
        return ExperienceBatch(**values).trimmed()

    def trimmed(self) -> ExperienceBatch:
        """Drop all-padding prompt columns on the left and response columns on the right."""
        P = self.prompt_length
        prompt_used = self.attention_mask[:, :P].any(dim=0)
        first = int(prompt_used.float().argmax()) if prompt_used.any() else P
        response_used = self.attention_mask[:, P:].any(dim=0)
        last = int(response_used.nonzero().max()) + 1 if response_used.any() else 0
        if first == 0 and last == self.response_length:
            return self
        seq = slice(first, P + last)
        return ExperienceBatch(
            input_ids=self.input_ids[:, seq],
            attention_mask=self.attention_mask[:, seq],
            position_ids=self.position_ids[:, seq],
            response_mask=self.response_mask[:, :last],
            old_logprobs=self.old_logprobs[:, :last],
            rewards=self.rewards,
            advantages=self.advantages[:, :last],
            returns=self.returns[:, :last],
            model_versions=self.model_versions,
            prompt_length=P - first,
            expert_mask=self.expert_mask,
        )

    @classmethod
    def from_experiences(cls, experiences: list[Experience], pad_token_id: int = 0) -> ExperienceBatch:
        if not experiences:
            raise ValueError("cannot build a batch from zero experiences")
        B = len(experiences)
        P = max(e.prompt_length for e in experiences)
        R = max(max(e.response_length for e in experiences), 1)
        input_ids = torch.full((B, P + R), pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((B, P + R), dtype=torch.bool)
        response_mask = torch.zeros((B, R), dtype=torch.float32)
        old_logprobs = torch.zeros((B, R), dtype=torch.float32)
        advantages = torch.zeros((B, R), dtype=torch.float32)
        returns = torch.zeros((B, R), dtype=torch.float32)
        rewards = torch.zeros(B, dtype=torch.float32)
        versions = torch.zeros(B, dtype=torch.long)
        expert_mask = torch.zeros(B, dtype=torch.bool)
        for i, exp in enumerate(experiences):
            p, r = exp.prompt_length, exp.response_length
            input_ids[i, P - p : P] = exp.tokens[:p]
            input_ids[i, P : P + r] = exp.tokens[p:]
            attention_mask[i, P - p : P + r] = True
            if not exp.prompt_truncated:
                response_mask[i, :r] = exp.action_mask[:r].float()
            if exp.logprobs is not None:
                old_logprobs[i, :r] = exp.logprobs[:r]
            if exp.advantages is not None:
                advantages[i, :r] = exp.advantages[:r]
            if exp.returns is not None:
                returns[i, :r] = exp.returns[:r]
            rewards[i] = float(exp.reward or 0.0)
            versions[i] = exp.model_version
            expert_mask[i] = bool(exp.info.get("is_expert", False))
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            response_mask=response_mask,
            old_logprobs=old_logprobs,
            rewards=rewards,
            advantages=advantages,
            returns=returns,
            model_versions=versions,
            prompt_length=P,
            expert_mask=expert_mask,
        )

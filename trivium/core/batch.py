"""ExperienceBatch: a list of experiences as padded tensors, in the veRL layout.

Prompts are left-padded to a common length P and responses right-padded to R, so every
sequence is ``(B, P + R)`` and every per-token quantity the losses use is ``(B, R)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from trivium.core.experience import Experience
from trivium.core.sampling_mask import padded_kept_sets


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
    # Rows from an expert (SFT) buffer inside an RL batch, for the ``mix`` losses.
    expert_mask: torch.Tensor | None = None  # (B,) bool
    # A teacher's logprobs of the response tokens (distillation); 0 where unknown.
    teacher_logprobs: torch.Tensor | None = None  # (B, R)
    # The reward of a greedy response to each row's task (remax); 0 where unknown.
    baseline_rewards: torch.Tensor | None = None  # (B,)
    # Sampling-mask replay (core/sampling_mask.py): each response token's kept ids, -1 padded
    # (all -1: the whole vocabulary), and each row's sampling temperature.
    kept_token_ids: torch.Tensor | None = None  # (B, R, K) int64
    sampling_temperatures: torch.Tensor | None = None  # (B,)

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
            teacher_logprobs=None if self.teacher_logprobs is None else self.teacher_logprobs[:, :last],
            baseline_rewards=self.baseline_rewards,
            kept_token_ids=None if self.kept_token_ids is None else self.kept_token_ids[:, :last],
            sampling_temperatures=self.sampling_temperatures,
        )

    @classmethod
    def from_experiences(
        cls, experiences: list[Experience], pad_token_id: int = 0, *, train_truncated_episodes: bool = False
    ) -> ExperienceBatch:
        """Pad and stack; each field is one concatenation and one scatter, not a copy per row.

        Rows with a truncated prompt, and episodes cut at max_model_len unless
        ``train_truncated_episodes``, keep a zero ``response_mask``: present, never trained on.
        """
        if not experiences:
            raise ValueError("cannot build a batch from zero experiences")
        B = len(experiences)
        prompt_lengths = torch.tensor([e.prompt_length for e in experiences], dtype=torch.long)
        response_lengths = torch.tensor([e.response_length for e in experiences], dtype=torch.long)
        P = int(prompt_lengths.max())
        R = max(int(response_lengths.max()), 1)
        rows = torch.arange(B)
        # A row's tokens fill one run of columns, from P - p to P + r: left padding, then right.
        token_index = _runs(rows * (P + R) + P - prompt_lengths, prompt_lengths + response_lengths)
        input_ids = torch.full((B * (P + R),), pad_token_id, dtype=torch.long)
        input_ids[token_index] = torch.cat([e.tokens for e in experiences]).long()
        attention_mask = torch.zeros(B * (P + R), dtype=torch.bool)
        attention_mask[token_index] = True
        attention_mask = attention_mask.view(B, P + R)

        def per_token(values: list[torch.Tensor | None]) -> torch.Tensor:
            return _padded_responses(values, response_lengths, R)

        def trained(e: Experience) -> bool:
            return not e.prompt_truncated and (train_truncated_episodes or not e.episode_truncated)

        response_mask = per_token([e.action_mask if trained(e) else None for e in experiences])
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        kept_token_ids = sampling_temperatures = None
        if any(e.sampling_mask is not None for e in experiences):
            kept_token_ids, sampling_temperatures = padded_kept_sets([e.sampling_mask for e in experiences], R)
        return cls(
            input_ids=input_ids.view(B, P + R),
            attention_mask=attention_mask,
            position_ids=position_ids,
            response_mask=response_mask,
            old_logprobs=per_token([e.logprobs for e in experiences]),
            rewards=torch.tensor([float(e.reward or 0.0) for e in experiences], dtype=torch.float32),
            advantages=per_token([e.advantages for e in experiences]),
            returns=per_token([e.returns for e in experiences]),
            model_versions=torch.tensor([e.model_version for e in experiences], dtype=torch.long),
            prompt_length=P,
            expert_mask=torch.tensor([e.is_expert for e in experiences], dtype=torch.bool),
            teacher_logprobs=(
                per_token([e.teacher_logprobs for e in experiences])
                if any(e.teacher_logprobs is not None for e in experiences)
                else None
            ),
            baseline_rewards=torch.tensor([float(e.baseline_reward or 0.0) for e in experiences]),
            kept_token_ids=kept_token_ids,
            sampling_temperatures=sampling_temperatures,
        )


def _runs(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Flat indices start_i, start_i + 1, ..., start_i + length_i - 1 for every i, in order."""
    run_starts = torch.repeat_interleave(starts, lengths)
    first_of_run = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    return run_starts + torch.arange(int(lengths.sum())) - first_of_run


def _padded_responses(values: list[torch.Tensor | None], lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(B, width) float32: row i holds values[i][:lengths[i]], zeros after it and for None rows."""
    out = torch.zeros(len(values) * width, dtype=torch.float32)
    present = torch.tensor([v is not None for v in values])
    if not bool(present.any()):
        return out.view(len(values), width)
    kept = lengths * present
    index = _runs(torch.arange(len(values)) * width, kept)
    out[index] = torch.cat([v[:n] for v, n in zip(values, kept.tolist()) if v is not None]).float()
    return out.view(len(values), width)

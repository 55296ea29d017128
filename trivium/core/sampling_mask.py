"""SamplingMask: the token sets an engine's top-k / top-p truncation kept, one per response token.

Owns the record an Experience carries when ``trainer.replay_sampling_mask`` is on, its plain
(JSON) form for the durable storages, and its padded (response_length, K) form for a batch.
It knows nothing about engines or the trainer's forward.

Layout, compact for storage (a CSR-style list of sets):
  counts:    (response_length,) int32. ``c > 0``: the token was drawn from the ``c`` ids that
             follow in ``token_ids``; ``UNRECORDED`` (0): no set (a token the model did not
             sample, or sampled without truncation); ``CAPPED`` (-1): the set held more ids than
             ``trainer.sampling_mask_max_tokens`` and was not recorded. Both 0 and -1 stand for
             the whole vocabulary.
  token_ids: (sum of the positive counts,) int32, each set's ids ascending, sets in order.
  temperature: what the engine divided the logits by before truncating (1 for greedy rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trivium.core.array_pickling import arrays_to_tensors, tensors_to_arrays
from trivium.lazy import lazy_module

if TYPE_CHECKING:
    import torch
else:
    torch = lazy_module("torch", globals())

UNRECORDED = 0
CAPPED = -1


@dataclass
class SamplingMask:
    counts: torch.Tensor
    token_ids: torch.Tensor
    temperature: float = 1.0

    def __post_init__(self) -> None:
        self.counts = torch.as_tensor(self.counts, dtype=torch.int32).reshape(-1)
        self.token_ids = torch.as_tensor(self.token_ids, dtype=torch.int32).reshape(-1)
        self.temperature = float(self.temperature)
        if self.temperature <= 0:
            raise ValueError(f"SamplingMask: temperature must be > 0, got {self.temperature}")
        if self.counts.numel() and int(self.counts.min()) < CAPPED:
            raise ValueError(f"SamplingMask: a count is {int(self.counts.min())}; counts are >= -1")
        recorded = int(self.counts.clamp(min=0).sum())
        if recorded != self.token_ids.numel():
            raise ValueError(
                f"SamplingMask: the counts add up to {recorded} ids but token_ids holds {self.token_ids.numel()}"
            )

    def __getstate__(self) -> dict[str, Any]:  # as an Experience is (core/array_pickling.py)
        return tensors_to_arrays(self.__dict__, ("counts", "token_ids"))

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(arrays_to_tensors(state, ("counts", "token_ids")))

    @classmethod
    def unrecorded(cls, length: int, temperature: float = 1.0) -> SamplingMask:
        """``length`` tokens without a set (the whole vocabulary each)."""
        return cls(torch.zeros(length, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), temperature)

    @property
    def length(self) -> int:
        return int(self.counts.numel())

    @property
    def max_count(self) -> int:
        return int(self.counts.max()) if self.counts.numel() else 0

    def sets(self) -> list[list[int] | None]:
        """Each token's kept ids, or None where no set was recorded (unrecorded or capped)."""
        out: list[list[int] | None] = []
        start = 0
        ids = self.token_ids.tolist()
        for count in self.counts.tolist():
            if count > 0:
                out.append(ids[start : start + count])
                start += count
            else:
                out.append(None)
        return out

    def extended(self, other: SamplingMask) -> SamplingMask:
        """This mask followed by ``other`` (the next turn of an episode); both at one temperature."""
        # Only tokens with a set (or a capped one) depend on the temperature.
        mine, theirs = bool(self.counts.ne(0).any()), bool(other.counts.ne(0).any())
        if mine and theirs and other.temperature != self.temperature:
            raise ValueError(
                f"an episode's turns were sampled at temperatures {self.temperature} and {other.temperature}; "
                "sampling-mask replay needs one temperature per experience"
            )
        temperature = self.temperature if mine or not theirs else other.temperature
        return SamplingMask(
            torch.cat([self.counts, other.counts]), torch.cat([self.token_ids, other.token_ids]), temperature
        )

    def padded(self, width: int) -> torch.Tensor:
        """(length, width) int64: row i holds token i's set, -1 after it; all -1 without a set."""
        out = torch.full((self.length, width), -1, dtype=torch.long)
        positive = self.counts.clamp(min=0).long()
        if width and self.token_ids.numel():
            rows = torch.repeat_interleave(torch.arange(self.length), positive)
            starts = torch.repeat_interleave(torch.cumsum(positive, 0) - positive, positive)
            columns = torch.arange(self.token_ids.numel()) - starts
            out[rows, columns] = self.token_ids.long()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "counts": self.counts.tolist(),
            "token_ids": self.token_ids.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingMask:
        return cls(
            counts=torch.tensor(data["counts"], dtype=torch.int32),
            token_ids=torch.tensor(data["token_ids"], dtype=torch.int32),
            temperature=float(data["temperature"]),
        )

    @classmethod
    def from_sets(cls, sets: Sequence[Sequence[int] | int], temperature: float = 1.0) -> SamplingMask:
        """From one entry per token: its kept ids, or UNRECORDED / CAPPED."""
        counts, ids = [], []
        for entry in sets:
            if isinstance(entry, int):
                counts.append(entry)
            else:
                counts.append(len(entry))
                ids.extend(sorted(int(i) for i in entry))
        return cls(torch.tensor(counts, dtype=torch.int32), torch.tensor(ids, dtype=torch.int32), temperature)


def padded_kept_sets(masks: Sequence[SamplingMask | None], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's sets: (B, width, K) int64 ids with -1 padding (all -1: the whole vocabulary,
    also for rows without a mask), K the largest set; and (B,) float32 temperatures (1 without a mask)."""
    largest = max((m.max_count for m in masks if m is not None), default=0)
    kept = torch.full((len(masks), width, max(largest, 1)), -1, dtype=torch.long)
    temperatures = torch.ones(len(masks), dtype=torch.float32)
    for row, mask in enumerate(masks):
        if mask is None:
            continue
        length = min(mask.length, width)
        kept[row, :length] = mask.padded(kept.shape[2])[:length]
        temperatures[row] = mask.temperature
    return kept, temperatures

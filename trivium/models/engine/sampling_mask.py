"""Recording the token set each sampled token was drawn from (sampling-mask replay).

Owns, for one decoding step, the kept set of every row (the tokens top-k / top-p truncation
left finite) and the logprob of the drawn token under the distribution it was really drawn
from: ``log p(t) = z_t / T - logsumexp(z[kept] / T)``, which the trainer recomputes over the
same set (``trivium/trainer/sampling_mask.py``); and, for a whole generation, each row's sets
as a ``SamplingMask``. Used by the hf engine's sampler only when ``sampling_mask_cap`` is set,
so the common path pays nothing.

A row without truncation (top_k and top_p off) records no set; a set larger than the cap is
recorded as CAPPED. Both then report the whole vocabulary's logprob at temperature T, which
is what the trainer computes for a token without a set. Greedy rows keep the argmax alone
(logprob 0). Stop tokens blocked below ``min_tokens`` are outside the kept set of a
truncating row; a row without a set is scored over the whole vocabulary, blocked ones included.
"""

from __future__ import annotations

import torch

from trivium.core.sampling_mask import CAPPED, UNRECORDED, SamplingMask

NEG_INF = float("-inf")


def kept_set_step(
    processed: torch.Tensor,
    raw: torch.Tensor,
    tokens: torch.Tensor,
    *,
    temperature: torch.Tensor,
    truncates: torch.Tensor,
    greedy: torch.Tensor,
    cap: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's sets and logprobs.

    processed: (B, V) logits after temperature, stop blocking and truncation (-inf outside the
    kept set); raw: (B, V) the model's logits; tokens: (B,) drawn; temperature: (B, 1);
    truncates, greedy: (B,) bool. Returns logprobs (B,) float32, counts (B,) int64 (the set
    size, UNRECORDED or CAPPED) and kept (B, V) bool (the recorded rows' sets, empty elsewhere).
    """
    kept = torch.isfinite(processed)
    if bool(greedy.any()):
        kept[greedy] = torch.nn.functional.one_hot(tokens[greedy], processed.shape[1]).bool()
    sizes = kept.sum(dim=1)
    sets = truncates | greedy
    recorded = sets & (sizes <= cap)
    label = tokens.unsqueeze(1)
    # log p(t) = z_t / T - logsumexp(z[kept] / T)
    within = processed.masked_fill(~kept, NEG_INF).log_softmax(dim=-1).gather(1, label).squeeze(1)
    if bool(recorded.all()):
        logprobs = within
    else:  # without a set: the whole vocabulary at temperature T (greedy rows always have a set)
        whole = (raw / temperature).log_softmax(dim=-1).gather(1, label).squeeze(1)
        logprobs = torch.where(recorded, within, whole)
    counts = torch.where(recorded, sizes, torch.where(sets, CAPPED, UNRECORDED))
    kept &= recorded.unsqueeze(1)
    return logprobs, counts, kept


class KeptSetLog:
    """The sets of one generation batch, step by step, gathered per original row at the end."""

    def __init__(self, rows: int, temperatures: list[float]):
        self.rows = rows
        # Greedy rows (temperature 0) record temperature 1: a one-token set has logprob 0 at any T.
        self.temperatures = [t if t > 0 else 1.0 for t in temperatures]
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._per_row: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def add(self, row_ids: torch.Tensor, counts: torch.Tensor, kept: torch.Tensor) -> None:
        """One step: ``row_ids`` (b,) the original rows of the running rows, their counts and kept (b, V)."""
        # Row-major: each recorded row's ids ascending, rows in running order.
        self.steps.append((row_ids.clone(), counts.clone(), kept.nonzero()[:, 1]))

    def _gather(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each original row's counts (steps in order) and ids, sorted out of the steps at once."""
        if self._per_row is None:
            rows = torch.cat([step[0] for step in self.steps])
            counts = torch.cat([step[1] for step in self.steps])
            ids = torch.cat([step[2] for step in self.steps])
            id_rows = torch.repeat_interleave(rows, counts.clamp(min=0))
            # Stable sorts by row keep each row's steps (and each set's ids) in order.
            by_row = counts[torch.argsort(rows, stable=True)]
            ids_by_row = ids[torch.argsort(id_rows, stable=True)]
            self._per_row = (
                list(by_row.split(torch.bincount(rows, minlength=self.rows).tolist())),
                list(ids_by_row.split(torch.bincount(id_rows, minlength=self.rows).tolist())),
            )
        return self._per_row

    def mask(self, row: int, length: int) -> SamplingMask:
        """Row ``row``'s first ``length`` tokens' sets."""
        counts, ids = self._gather()
        row_counts = counts[row][:length]
        return SamplingMask(
            row_counts, ids[row][: int(row_counts.clamp(min=0).sum())], self.temperatures[row]
        )

"""The decoding loop shared by the hf backend's decoders.

Owns batching of rows (left padding, positions, capacity), per-step sampling, stop and
length handling, and dropping finished rows. A decoder provides ``prefill``, ``decode`` and
optionally ``keep_rows``; the loop knows nothing about weights or tokenizers.

Rows with the same prompt (the ``n`` samples of a request) share one prefill: the decoder
runs each distinct prompt once and ``keep_rows`` copies its cache to every row that needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trivium.core.sampling_mask import SamplingMask
from trivium.models.engine.base import SamplingParams
from trivium.models.engine.sampling import BatchSampler
from trivium.models.engine.sampling_mask import KeptSetLog

# Drop finished rows once at least this fraction of the running rows is done (and 4+ rows).
COMPACT_FRACTION = 0.25


@dataclass
class SampledRow:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    sampling_mask: SamplingMask | None = None  # only with a kept_set_cap


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P) ids and bool mask, prompts aligned to the right edge."""
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    # One tensor from Python lists: a tensor op per row costs more than the rows' tokens.
    input_ids = torch.tensor([[pad_token_id] * (width - n) + list(p) for p, n in zip(prompts, lengths)], dtype=torch.long)
    mask = torch.arange(width) >= width - torch.tensor(lengths).unsqueeze(1)
    return input_ids, mask


def distinct_prompts(prompts: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """For each distinct prompt the first row that has it, and for each row its prompt's index."""
    first_rows: dict[tuple[int, ...], int] = {}
    for row, prompt in enumerate(prompts):
        first_rows.setdefault(tuple(prompt), row)
    index = {prompt: i for i, prompt in enumerate(first_rows)}
    row_to_distinct = [index[tuple(prompt)] for prompt in prompts]
    return torch.tensor(list(first_rows.values()), dtype=torch.long), torch.tensor(row_to_distinct, dtype=torch.long)


def prefill_rows(decoder, input_ids, mask, positions, prompts, capacity: int) -> torch.Tensor:
    """Prefill every row; rows with equal prompts share one prefill when the decoder can copy rows."""
    first_rows, row_to_distinct = distinct_prompts(prompts)
    if decoder.keep_rows is None or len(first_rows) == len(prompts):
        return decoder.prefill(input_ids, mask, positions, capacity=capacity)
    # Same padded width as the full batch, so every row's cache columns match its positions.
    logits = decoder.prefill(input_ids[first_rows], mask[first_rows], positions[first_rows], capacity=capacity)
    decoder.keep_rows(row_to_distinct)
    return logits[row_to_distinct]


def sample_rows(
    decoder,
    prompts: Sequence[Sequence[int]],
    params: Sequence[SamplingParams],
    stop_token_ids: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    pad_token_id: int,
    generator: torch.Generator | None,
    forced_tokens: Sequence[Sequence[int]] | None = None,
    kept_set_cap: int | None = None,
) -> list[SampledRow]:
    """Sample one continuation per row; ``params[i].max_tokens`` must already fit the model.

    ``forced_tokens[i]`` (a replay) makes row ``i`` pick those tokens in turn instead of
    drawing; its logprobs are then the ones sampling would report for them. ``kept_set_cap``
    (sampling-mask replay): record each token's kept set (``sampling_mask.py``).
    """
    rows = len(prompts)
    input_ids, mask = left_pad(prompts, pad_token_id)
    positions = (mask.long().cumsum(dim=1) - 1).clamp(min=0)
    max_new = max(p.max_tokens for p in params)
    max_tokens = torch.tensor([p.max_tokens for p in params], dtype=torch.long)
    sampler = BatchSampler(params, stop_token_ids, vocab_size, kept_set_cap if forced_tokens is None else None)
    kept_sets = None if sampler.kept_set_cap is None else KeptSetLog(rows, [p.temperature for p in params])

    seen = None
    if sampler.any_penalty:
        # Repetition penalty looks at prompt tokens too; padding goes to a spare column.
        columns = torch.where(mask, input_ids, vocab_size)
        seen = torch.zeros(rows, vocab_size + 1, dtype=torch.bool).scatter_(1, columns, True)[:, :vocab_size]

    out_tokens = torch.zeros(rows, max_new, dtype=torch.long)
    out_logprobs = torch.zeros(rows, max_new, dtype=torch.float32)
    out_lengths = torch.full((rows,), max_new, dtype=torch.long)
    stopped = torch.zeros(rows, dtype=torch.bool)
    row_ids = torch.arange(rows)  # original row of each running row
    next_position = positions[:, -1] + 1
    done = torch.zeros(rows, dtype=torch.bool)
    compacted = False
    check_stops = sampler.stop_ids.shape[1] > 0
    length_limits = {p.max_tokens for p in params}

    forced = None
    if forced_tokens is not None:
        forced = torch.zeros(rows, max_new, dtype=torch.long)
        for row, tokens in enumerate(forced_tokens):
            forced[row, : len(tokens)] = torch.as_tensor(list(tokens)[:max_new], dtype=torch.long)

    logits = prefill_rows(decoder, input_ids, mask, positions, prompts, input_ids.shape[1] + max_new)
    for step in range(max_new):
        step_forced = None if forced is None else forced[row_ids, step]
        tokens, logprobs = sampler.sample(logits, step, seen, generator, step_forced)
        if kept_sets is not None:
            kept_sets.add(row_ids, *sampler.step_kept)
        if compacted:
            out_tokens[row_ids, step] = tokens
            out_logprobs[row_ids, step] = logprobs
        else:  # rows still in their original order: a plain column copy
            out_tokens[:, step] = tokens
            out_logprobs[:, step] = logprobs
        # Stop ids cannot be drawn while every row is below min_tokens, and length limits are
        # known in advance: skip both checks (and their host sync) on steps where nothing can end.
        finished = hit_stop = None
        if check_stops and step >= sampler.min_min_tokens:
            finished = hit_stop = sampler.is_stop(tokens) & ~done
        if step + 1 in length_limits:
            hit_length = (step + 1 >= max_tokens) & ~done
            finished = hit_length if finished is None else finished | hit_length
        if finished is not None and bool(finished.any()):
            out_lengths[row_ids[finished]] = step + 1
            if hit_stop is not None:
                stopped[row_ids[hit_stop]] = True
            done = done | finished
            if bool(done.all()):
                break
            running = int((~done).sum())
            if decoder.keep_rows is not None and running >= 4 and done.sum() >= COMPACT_FRACTION * len(done):
                keep = (~done).nonzero().squeeze(1)
                decoder.keep_rows(keep)
                sampler.keep_rows(keep)
                row_ids, tokens, next_position = row_ids[keep], tokens[keep], next_position[keep]
                max_tokens, done = max_tokens[keep], done[keep]
                compacted = True
                seen = None if seen is None else seen[keep]
        if seen is not None:
            seen.scatter_(1, tokens.unsqueeze(1), True)
        logits = decoder.decode(tokens, next_position)
        next_position = next_position + 1
    decoder.release()

    results = []
    for row in range(rows):
        length = int(out_lengths[row])
        results.append(
            SampledRow(
                token_ids=out_tokens[row, :length].tolist(),
                logprobs=out_logprobs[row, :length].tolist(),
                finish_reason="stop" if bool(stopped[row]) else "length",
                sampling_mask=None if kept_sets is None else kept_sets.mask(row, length),
            )
        )
    return results

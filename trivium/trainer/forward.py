"""Forward passes that turn a padded batch into per-response-token quantities (B, R).

GRPO-style batches hold several samples of each prompt. For decoder families whose cache
the model's own forward accepts (Llama, Qwen2, Qwen3, Mistral), rows with the same prompt
share one prompt pass: each distinct prompt runs once, its key/value cache is copied to the
rows that need it (differentiably, so gradients reach the prompt pass), and only response
tokens run per row. The result equals the full forward (tested, values and gradients); with
8 samples of 22-token prompts and 10-token responses it halves the tokens the model sees.

With sequence packing on (``trivium/trainer/packing.py``) a micro-batch can also run as one
row without padding. Each micro-batch runs the exact forward that feeds the model the fewest
tokens among those allowed: padded, shared prompt, or packed. Every forward computes the
language-model head only at the positions that predict a response token.

With sampling-mask replay (``replay_sampling_mask``, ``sampling_mask.py``) every route scores
each response token over the set the engine kept when it sampled it, at its temperature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from trivium.algorithm.entropy import entropy_from_logits, expected_entropy_signal_from_logits
from trivium.algorithm.logprobs import logprobs_from_logits
from trivium.core.batch import ExperienceBatch
from trivium.core.experience import Experience
from trivium.models.kv_cache import cache_keyword, output_cache
from trivium.trainer.packing import pack, packs
from trivium.trainer.sampling_mask import kept_set_logprobs
from trivium.trainer.token_head import TokenStatisticsHead, chunked_token_head

SHARED_PROMPT_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Share the prompt pass only when it at least halves the prompt rows.
MIN_ROWS_PER_PROMPT = 2


def response_logits(
    model: torch.nn.Module,
    batch: ExperienceBatch,
    share_prompts: bool = True,
    *,
    pack_sequences: bool = False,
    head: TokenStatisticsHead | None = None,
) -> torch.Tensor:
    """Logits that predict each response token: (B, R, V); with a chunked ``head`` active,
    (B, R, 2): the logprob of each response token and the entropy there."""
    route, groups = cheapest_forward(model, batch, share_prompts=share_prompts, pack_sequences=pack_sequences)
    if route == "shared":
        return _shared_prompt_logits(model, batch, *groups, head=head)
    if route == "packed":
        return _packed_logits(model, batch, head=head)
    P, R = batch.prompt_length, batch.response_length
    if head is not None:
        # The kept positions P-1 .. P+R-1 predict the tokens P .. P+R-1 (the last predicts none).
        head.targets = F.pad(batch.input_ids[:, P : P + R], (0, 1))
        if head.replays:
            head.kept = _head_kept_sets(batch, 0, R, extra_position=True)
    output = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask.long(),
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=R + 1,  # the last prompt position and the response positions
    )
    # The logit at position t predicts token t + 1.
    return output.logits[:, :R, :]


def cheapest_forward(
    model: torch.nn.Module, batch: ExperienceBatch, *, share_prompts: bool, pack_sequences: bool
) -> tuple[str, tuple[torch.Tensor, torch.Tensor] | None]:
    """("padded" | "shared" | "packed", the prompt groups when shared): the allowed forward
    that feeds the model the fewest tokens; the padded one on a tie."""
    B, P, R = batch.batch_size, batch.prompt_length, batch.response_length
    tokens = {"padded": B * (P + R)}
    groups = prompt_groups(model, batch) if share_prompts else None
    if groups is not None:
        tokens["shared"] = len(groups[0]) * P + B * (R - 1)
    if pack_sequences and packs(model):
        tokens["packed"] = batch.num_tokens
    route = min(tokens, key=tokens.get)
    return route, groups if route == "shared" else None


def _packed_logits(model: torch.nn.Module, batch: ExperienceBatch, *, head: TokenStatisticsHead | None) -> torch.Tensor:
    packed = pack(batch)
    if head is not None:
        # A kept position predicts the packed token after it (clamped at the end: padding only).
        after = (packed.keep + 1).clamp(max=packed.num_tokens - 1)
        head.targets = packed.input_ids[:, after]
        if head.replays:
            head.kept = _packed_kept_sets(batch, packed.kept_index, packed.keep.numel())
    output = model(**packed.forward_kwargs(), logits_to_keep=packed.keep)  # logits (1, K, V)
    return output.logits[0][packed.kept_index]


def prompt_groups(model: torch.nn.Module, batch: ExperienceBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first row of each distinct prompt, each row's prompt index), or None when not worth it."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SHARED_PROMPT_MODEL_TYPES or batch.response_length < 2:
        return None
    P = batch.prompt_length
    # Padding is part of the key: equal prompts are equally left-padded in one batch.
    prompts = batch.input_ids[:, :P] * batch.attention_mask[:, :P] - (~batch.attention_mask[:, :P].bool()).long()
    distinct, row_to_distinct = torch.unique(prompts, dim=0, return_inverse=True)
    if distinct.shape[0] * MIN_ROWS_PER_PROMPT > batch.batch_size:
        return None
    first_rows = torch.full((distinct.shape[0],), batch.batch_size, dtype=torch.long, device=row_to_distinct.device)
    first_rows.scatter_reduce_(0, row_to_distinct, torch.arange(batch.batch_size, device=row_to_distinct.device), "amin")
    return first_rows, row_to_distinct


def _shared_prompt_logits(
    model: torch.nn.Module,
    batch: ExperienceBatch,
    first_rows: torch.Tensor,
    row_to_distinct: torch.Tensor,
    *,
    head: TokenStatisticsHead | None,
) -> torch.Tensor:
    P, R = batch.prompt_length, batch.response_length
    mask = batch.attention_mask.long()
    if head is not None:
        # One position per distinct prompt, but each row predicts its own first token there.
        head.whole_logits = True
    prompt = model(
        input_ids=batch.input_ids[first_rows, :P],
        attention_mask=mask[first_rows, :P],
        position_ids=batch.position_ids[first_rows, :P],
        use_cache=True,
        logits_to_keep=1,  # the last prompt position predicts the first response token
    )
    cache = output_cache(prompt)
    cache.batch_select_indices(row_to_distinct)  # indexing: the copies stay in the autograd graph
    # The other response tokens are predicted from the response positions before them.
    if head is not None:
        head.targets = batch.input_ids[:, P + 1 : P + R]
        if head.replays:
            head.kept = _head_kept_sets(batch, 1, R)
    rest = model(
        input_ids=batch.input_ids[:, P : P + R - 1],
        attention_mask=mask[:, : P + R - 1],
        position_ids=batch.position_ids[:, P : P + R - 1],
        use_cache=True,
        **{cache_keyword(model): cache},
    )
    first = prompt.logits[row_to_distinct]
    if head is not None:
        first = first.float()
        labels = batch.input_ids[:, P : P + 1]
        if head.replays:
            kept, temperatures = _head_kept_sets(batch, 0, 1)
            chosen = kept_set_logprobs(first, labels, kept, temperatures)
        else:
            chosen = logprobs_from_logits(first, labels)
        first = torch.stack([chosen, entropy_from_logits(first)], dim=-1)
    return torch.cat([first, rest.logits], dim=1)


def _head_kept_sets(
    batch: ExperienceBatch, start: int, stop: int, *, extra_position: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept sets (B, n, K) and temperatures (B, n) of response tokens start..stop-1, plus
    one position without a set when the head also sees the position after the last token."""
    kept = batch.kept_token_ids[:, start:stop]
    if extra_position:
        kept = F.pad(kept, (0, 0, 0, 1), value=-1)
    return kept, batch.sampling_temperatures.unsqueeze(1).expand(kept.shape[:2])


def _packed_kept_sets(
    batch: ExperienceBatch, kept_index: torch.Tensor, positions: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept sets (1, positions, K) and temperatures (1, positions) at the packed head's
    positions; a position only padding points at gets no set (it enters no loss)."""
    P, R = batch.prompt_length, batch.response_length
    real = batch.attention_mask[:, P : P + R].bool()
    kept = batch.kept_token_ids.new_full((positions, batch.kept_token_ids.shape[-1]), -1)
    temperatures = batch.sampling_temperatures.new_ones(positions)
    kept[kept_index[real]] = batch.kept_token_ids[real]
    temperatures[kept_index[real]] = batch.sampling_temperatures.unsqueeze(1).expand(-1, R)[real]
    return kept.unsqueeze(0), temperatures.unsqueeze(0)


def _token_logprobs(logits: torch.Tensor, batch: ExperienceBatch, replay: bool) -> torch.Tensor:
    """(B, R) logprobs of the response tokens from their (B, R, V) logits; over each token's
    kept set at its temperature when ``replay`` and the batch carries sets."""
    labels = batch.input_ids[:, batch.prompt_length :]
    if replay and batch.kept_token_ids is not None:
        return kept_set_logprobs(logits, labels, batch.kept_token_ids, batch.sampling_temperatures.unsqueeze(1))
    return logprobs_from_logits(logits, labels)


def response_logprobs(
    model: torch.nn.Module,
    batch: ExperienceBatch,
    *,
    with_entropy: bool = False,
    share_prompts: bool = True,
    pack_sequences: bool = False,
    chunk_tokens: int | None = None,
    replay_sampling_mask: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logprobs, entropy or None), each (B, R). ``chunk_tokens``: compute the head that many
    positions at a time (``token_head.py``), never holding the whole micro-batch's logits.
    ``replay_sampling_mask``: logprobs over each token's kept set (``sampling_mask.py``)."""
    with chunked_token_head(model, chunk_tokens) as head:
        if head is not None:
            head.replays = replay_sampling_mask and batch.kept_token_ids is not None
            statistics = response_logits(model, batch, share_prompts, pack_sequences=pack_sequences, head=head)
            return statistics[..., 0], statistics[..., 1] if with_entropy else None
    logits = response_logits(model, batch, share_prompts, pack_sequences=pack_sequences).float()
    logprobs = _token_logprobs(logits, batch, replay_sampling_mask)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return logprobs, entropy


@torch.no_grad()
def whole_batch_logprobs(
    model: torch.nn.Module,
    batch: ExperienceBatch,
    plan: list[list[int]],
    share_prompts: bool = True,
    *,
    pack_sequences: bool = False,
    chunk_tokens: int | None = None,
    replay_sampling_mask: bool = False,
) -> torch.Tensor:
    """Response logprobs (B, R) for ``batch``, computed micro-batch by micro-batch without grad."""

    def logprobs_of(micro: ExperienceBatch) -> dict[str, torch.Tensor]:
        logprobs, _ = response_logprobs(
            model,
            micro,
            share_prompts=share_prompts,
            pack_sequences=pack_sequences,
            chunk_tokens=chunk_tokens,
            replay_sampling_mask=replay_sampling_mask,
        )
        return {"logprobs": logprobs}

    return _rows_by_micro_batch(batch, plan, ("logprobs",), logprobs_of)["logprobs"]


ENTROPY_TERMS = ("logprobs", "entropy", "expected_entropy_signal")


@torch.no_grad()
def whole_batch_entropy_terms(
    model: torch.nn.Module,
    batch: ExperienceBatch,
    plan: list[list[int]],
    share_prompts: bool = True,
    **forward_options: Any,
) -> dict[str, torch.Tensor]:
    """What the entropy-aware advantages read, each (B, R): the current ``logprobs`` of the
    sampled tokens, the ``entropy`` and the ``expected_entropy_signal`` of each position.

    The expected entropy signal needs each position's whole distribution, so this pass is not
    chunked: of the trainer's ``forward_options`` it reads ``pack_sequences`` and
    ``replay_sampling_mask`` only. It runs without gradients, one micro-batch at a time."""
    pack_sequences = bool(forward_options.get("pack_sequences", False))
    replay = bool(forward_options.get("replay_sampling_mask", False))

    def terms_of(micro: ExperienceBatch) -> dict[str, torch.Tensor]:
        logits = response_logits(model, micro, share_prompts, pack_sequences=pack_sequences).float()
        return {
            "logprobs": _token_logprobs(logits, micro, replay),
            "entropy": entropy_from_logits(logits),
            "expected_entropy_signal": expected_entropy_signal_from_logits(logits),
        }

    return _rows_by_micro_batch(batch, plan, ENTROPY_TERMS, terms_of)


def _rows_by_micro_batch(
    batch: ExperienceBatch,
    plan: list[list[int]],
    names: tuple[str, ...],
    compute: Callable[[ExperienceBatch], dict[str, torch.Tensor]],
) -> dict[str, torch.Tensor]:
    """The (B, R) tensors ``names``, zero where no micro-batch of ``plan`` fills them;
    ``compute`` gives each micro-batch its (rows, R_micro) values by name."""
    out = {name: torch.zeros_like(batch.response_mask) for name in names}
    for rows in plan:
        micro = batch.select(rows)
        values = compute(micro)
        for name in names:
            out[name][rows, : micro.response_length] = values[name]
    return out


@torch.no_grad()
def trainer_logprobs(model: torch.nn.Module, probes: list[Experience], pad_token_id: int = 0) -> list[torch.Tensor]:
    """Each probe's response logprobs (response_length,) under ``model`` in eval mode: the
    trainer's side of the weight-sync self-check (``trivium.sync.self_check``)."""
    batch = ExperienceBatch.from_experiences(probes, pad_token_id)
    training = model.training
    model.eval()  # as the engine scores: no dropout (LoRA's, or the model's own)
    try:
        logprobs, _ = response_logprobs(model, batch)
    finally:
        model.train(training)
    return [logprobs[i, : exp.response_length].clone() for i, exp in enumerate(probes)]

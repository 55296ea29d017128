"""Sampling from a model: tokens, their logprobs, and the conditions that end a sequence.

``generate`` draws ``num_samples`` continuations of one prompt in one batch, with the
model's key/value cache. The logprob of each sampled token is taken under the distribution
it was drawn from, ``softmax(logits / temperature)`` (temperature 0 is greedy, its logprobs
at temperature 1). A sequence stops at ``max_tokens`` ("length"), or "stop" when it samples a
stop token or its text comes to contain a stop string; the stopping token is kept. Without
stop conditions (``stop`` unset) the end-of-sequence token stops; ``stop=[]`` stops only at
``max_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trivium.models.kv_cache import cache_keyword, output_cache
from trivium.tinker_server.wire import SampledSequence


@dataclass(frozen=True)
class StopConditions:
    token_ids: frozenset[int]
    strings: tuple[str, ...]


def stop_conditions(stop, eos_token_id: int | None) -> StopConditions:
    """The SDK's ``SamplingParams.stop`` (None, a string, strings or token ids) as stop tokens and strings."""
    if stop is None:
        return StopConditions(frozenset([eos_token_id]) if eos_token_id is not None else frozenset(), ())
    if isinstance(stop, str):
        return StopConditions(frozenset(), (stop,))
    tokens = [item for item in stop if isinstance(item, int)]
    strings = tuple(item for item in stop if isinstance(item, str))
    return StopConditions(frozenset(tokens), strings)


@torch.no_grad()
def generate(
    model,
    tokenizer,
    prompt: list[int],
    *,
    num_samples: int,
    max_tokens: int,
    temperature: float,
    stop: StopConditions,
    seed: int | None,
) -> list[SampledSequence]:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    input_ids = torch.tensor([prompt] * num_samples, dtype=torch.long)
    keyword = cache_keyword(model)
    output = model(input_ids=input_ids, use_cache=True)
    cache, logits = output_cache(output), output.logits[:, -1, :]
    sequences = [SampledSequence(tokens=[], logprobs=[], stopped=False) for _ in range(num_samples)]
    finished = [False] * num_samples
    for step in range(max_tokens):
        scaled = logits.float() / temperature if temperature > 0 else logits.float()
        logprobs = torch.log_softmax(scaled, dim=-1)
        if temperature > 0:
            chosen = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
        else:
            chosen = logprobs.argmax(dim=-1)
        chosen_logprobs = logprobs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
        for row, sequence in enumerate(sequences):
            if finished[row]:
                continue
            token = int(chosen[row])
            sequence.tokens.append(token)
            sequence.logprobs.append(float(chosen_logprobs[row]))
            if token in stop.token_ids or (
                stop.strings and _ends_in_stop_string(tokenizer, sequence.tokens, stop.strings)
            ):
                sequence.stopped = finished[row] = True
        if all(finished) or step == max_tokens - 1:
            break
        output = model(input_ids=chosen.unsqueeze(-1), use_cache=True, **{keyword: cache})
        cache, logits = output_cache(output), output.logits[:, -1, :]
    return sequences


def _ends_in_stop_string(tokenizer, tokens: list[int], strings: tuple[str, ...]) -> bool:
    text = tokenizer.decode(tokens, skip_special_tokens=False)
    return any(string in text for string in strings)


@torch.no_grad()
def prompt_logprobs(model, prompt: list[int]) -> list[float]:
    """log p(prompt_t | prompt_<t) for every position; NaN at the first, which has no context."""
    logits = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, :-1].float()
    scores = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(prompt[1:]).unsqueeze(-1)).squeeze(-1)
    return [float("nan")] + scores.tolist()

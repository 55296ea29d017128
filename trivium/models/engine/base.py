"""The inference-engine interface every backend implements (hf, vllm, external).

An engine turns token ids into sampled token ids plus their logprobs, scores given
sequences, and accepts new weights tagged with a version. It knows nothing about chat
templates, prompts as text, or experiences; that is the ModelWrapper's job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from trivium.core.sampling_mask import SamplingMask
from trivium.errors import UserError

if TYPE_CHECKING:  # torch only in type hints: reading the engine registry's traits stays cheap
    import torch


@dataclass
class SamplingParams:
    """How to sample one prompt's continuations.

    ``temperature == 0`` means greedy (argmax). ``top_k <= 0`` disables top-k. ``stop_token_ids``
    empty means "the engine's end-of-sequence ids". ``seed`` makes the call reproducible: the
    same prompts, params and weights give the same tokens.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 1
    n: int = 1
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    logprobs: bool = True  # sampled-token logprobs; top-N alternatives are not returned

    def __post_init__(self) -> None:
        self.stop_token_ids = tuple(int(t) for t in self.stop_token_ids)
        checks = [
            (self.temperature >= 0, "temperature must be >= 0 (0 means greedy)"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0 (1.0 disables it)"),
            (self.max_tokens >= 1, "max_tokens must be >= 1"),
            (0 <= self.min_tokens <= self.max_tokens, "min_tokens must be in [0, max_tokens]"),
            (self.n >= 1, "n must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise UserError(f"Invalid sampling parameters: {message} (got {self})")

    def with_overrides(self, **overrides) -> SamplingParams:
        """A copy with the given fields replaced; unknown keys are an error naming the valid ones."""
        unknown = set(overrides) - set(self.__dataclass_fields__)
        if unknown:
            raise UserError(
                f"Unknown rollout argument(s) {sorted(unknown)}; valid: {sorted(self.__dataclass_fields__)}"
            )
        return replace(self, **overrides)


@dataclass
class GenerationOutput:
    """One sampled continuation. ``logprobs[i]`` is the logprob of ``token_ids[i]``; a stop
    token that ended the sequence is the last of ``token_ids`` (and is not in ``text``)."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: Literal["stop", "length"]
    model_version: int = 0  # the weights that produced it
    # Each token's kept set, from engines that record them (``records_sampling_masks``) when asked.
    sampling_mask: SamplingMask | None = None


class InferenceEngine(ABC):
    """Backend contract.

    Logprobs, both from ``generate`` and ``compute_logprobs``, are log-softmax of the model's
    raw logits (temperature 1, no top-k/top-p/penalty): the same quantity the trainer
    recomputes, so the two can be compared directly. Sampling-mask replay is the exception:
    an engine with ``records_sampling_masks`` built with a ``sampling_mask_cap`` reports
    ``generate``'s logprobs over each token's kept set at the sampling temperature, which the
    trainer then recomputes the same way.
    """

    tokenizer = None
    # Trait: ``replay_logprobs`` runs the engine's sampling path (the weight-sync self-check uses it).
    replays_samples = False
    # Trait: built with ``sampling_mask_cap``, ``generate`` records each sampled token's kept set
    # (``GenerationOutput.sampling_mask``) and reports logprobs under the truncated distribution.
    records_sampling_masks = False
    # Trait: the engine's own workers join the trainer's weight broadcast group
    # (``weight_broadcast_ranks`` / ``join_weight_broadcast`` / ``receive_weight_broadcast``);
    # otherwise the process hosting the engine receives the buckets and calls ``update_weights``.
    joins_weight_broadcast = False
    # Trait: ``hold_weights`` makes the engine compute with the given tensors themselves, not a
    # copy of them (an engine in the trainer's process, on the trainer's device and dtype).
    holds_outside_weights = False

    @abstractmethod
    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        """``params.n`` outputs for each prompt. ``params`` may be one per prompt."""

    @abstractmethod
    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        """For each sequence, the (len - prompt_length,) logprobs of its response tokens."""

    @staticmethod
    def check_scored_sequences(sequences: Sequence[Sequence[int]], prompt_lengths: Sequence[int]) -> None:
        """``compute_logprobs``'s arguments: one prompt length per sequence, within the sequence."""
        if len(sequences) != len(prompt_lengths):
            raise ValueError(f"{len(sequences)} sequences but {len(prompt_lengths)} prompt lengths")
        for index, (sequence, length) in enumerate(zip(sequences, prompt_lengths)):
            if not 1 <= length <= len(sequence):
                raise ValueError(f"sequence {index}: prompt_length {length} outside [1, {len(sequence)}]")

    def replay_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        """Engines with ``replays_samples``: for each sequence, the (len - prompt_length,)
        logprobs ``generate`` reports when it samples exactly that response, each token forced
        in turn: what a rollout records, through the same decoding path."""
        raise NotImplementedError(f"{type(self).__name__} cannot replay samples; use compute_logprobs")

    @abstractmethod
    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        """Load (possibly partial) weights; returns the version now served, as confirmation."""

    def hold_weights(self, tensors: dict[str, torch.Tensor]) -> int:
        """Engines with ``holds_outside_weights``: compute with ``tensors`` (whole weights by
        state-dict name) in place of the engine's own, which are freed. The owner changes them
        in place only while the engine waits, and calls ``update_weights`` with them before the
        engine samples again. Returns the bytes of the engine's own weights given up."""
        raise NotImplementedError(f"{type(self).__name__} keeps weights of its own; use update_weights")

    @abstractmethod
    def version(self) -> int:
        """The model version currently served."""

    def park(self) -> None:
        """Between explorer steps (the trainer may run now): release what the engine can give back."""

    def close(self) -> None:
        """Release resources (threads, servers, GPU memory). Safe to call twice."""


def params_per_prompt(
    prompts: Sequence, params: SamplingParams | Sequence[SamplingParams]
) -> list[SamplingParams]:
    """Normalise ``params`` to one SamplingParams per prompt."""
    if isinstance(params, SamplingParams):
        return [params] * len(prompts)
    params = list(params)
    if len(params) != len(prompts):
        raise ValueError(f"got {len(params)} SamplingParams for {len(prompts)} prompts; give one or one each")
    return params


def check_prompt_lengths(prompts: Sequence[Sequence[int]], max_model_len: int | None) -> None:
    for index, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise UserError(f"prompt {index} is empty; every prompt needs at least one token")
        if max_model_len is not None and len(prompt) >= max_model_len:
            raise UserError(
                f"prompt {index} has {len(prompt)} tokens, which leaves no room to generate within "
                f"max_model_len={max_model_len}; shorten the prompt, enable prompt truncation, "
                "or raise model.max_model_len"
            )

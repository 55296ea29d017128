"""A vLLM logits processor that makes a request sample tokens given in advance.

The weight-sync self-check replays sequences through the ``vllm`` engine's sampling path:
the same ``generate`` call, decode steps, KV cache and sampler that rollouts use, with each
response token forced in turn. vLLM reports the logprob of a sampled token from the raw
logits before any logits processor runs (``logprobs_mode="raw_logprobs"``), so forcing a
token changes which token is sampled, never the logprob reported for it.

A request asks for it with ``SamplingParams(extra_args={FORCED_TOKENS_KEY: [ids...]})``;
every other request passes through untouched. vLLM loads the class by name in its worker
processes (``logits_processors`` engine argument).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

FORCED_TOKENS_KEY = "trivium_forced_tokens"


class ForcedTokens(AdapterLogitsProcessor):
    """At output position ``i`` of a request, every logit but that of ``forced[i]`` becomes -inf."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        forced = (sampling_params.extra_args or {}).get(FORCED_TOKENS_KEY)
        if forced is None:
            return
        if not forced or not all(isinstance(token, int) and token >= 0 for token in forced):
            raise ValueError(f"{FORCED_TOKENS_KEY} must be a non-empty list of token ids, got {forced!r}")
        if sampling_params.max_tokens is not None and sampling_params.max_tokens > len(forced):
            raise ValueError(
                f"max_tokens={sampling_params.max_tokens} asks for more tokens than the {len(forced)} forced"
            )

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax

    def new_req_logits_processor(
        self, params: SamplingParams
    ) -> Callable[[list[int], torch.Tensor], torch.Tensor] | None:
        forced = (params.extra_args or {}).get(FORCED_TOKENS_KEY)
        if not forced:
            return None
        forced = [int(token) for token in forced]

        def force(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            """logits: (V,) for this request's next token."""
            token = forced[min(len(output_ids), len(forced) - 1)]
            logits.fill_(float("-inf"))
            logits[token] = 0.0
            return logits

        return force

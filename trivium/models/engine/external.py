"""The ``external`` engine: any OpenAI-compatible completions API (a vLLM server, a hosted model).

Prompts go out as token ids and sampled tokens come back as ids (``return_tokens_as_token_ids``,
which vLLM-style servers understand); a server that only returns text has its reply
re-tokenized locally, and then logprobs are kept only if they line up one per token. The
base URL and key come from arguments, else from the environment variables NAMED by
``base_url_env`` / ``api_key_env``. Its weights are not ours: ``update_weights`` refuses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams, params_per_prompt

TOKEN_ID_PREFIX = "token_id:"


class ExternalEngine(InferenceEngine):
    def __init__(
        self,
        *,
        tokenizer_path: str | None,
        model_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        base_url_env: str = "OPENAI_BASE_URL",
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrent_requests: int = 16,
        timeout: float = 600.0,
        **_ignored,  # dtype, seed, max_model_len: decided by the server
    ):
        from openai import OpenAI
        from transformers import AutoTokenizer

        base_url = base_url or os.environ.get(base_url_env)
        if not base_url:
            raise UserError(
                f"the external engine needs the API base URL: set the environment variable {base_url_env} "
                "(or model.external_model.base_url_env to the variable that holds it)"
            )
        if not tokenizer_path:
            raise UserError(
                "the external engine needs model.model_path to point at the served model's tokenizer"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        self.client = OpenAI(
            base_url=base_url, api_key=api_key or os.environ.get(api_key_env) or "EMPTY", timeout=timeout
        )
        self.model_name = model_name or self._first_served_model()
        self._pool = ThreadPoolExecutor(
            max_workers=max_concurrent_requests, thread_name_prefix="trivium-external"
        )

    def _first_served_model(self) -> str:
        models = self.client.models.list().data
        if not models:
            raise UserError("the external API serves no model; set model.external_model.model_name")
        return models[0].id

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        per_prompt = params_per_prompt(prompts, params)
        return list(self._pool.map(self._complete, prompts, per_prompt))

    def _complete(self, prompt: list[int], p: SamplingParams) -> list[GenerationOutput]:
        extra = {
            "top_k": p.top_k,
            "repetition_penalty": p.repetition_penalty,
            "min_tokens": p.min_tokens,
            "return_tokens_as_token_ids": True,
        }
        if p.stop_token_ids:
            extra["stop_token_ids"] = list(p.stop_token_ids)
        response = self.client.completions.create(
            model=self.model_name,
            prompt=list(prompt),
            max_tokens=p.max_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            n=p.n,
            seed=p.seed,
            logprobs=0 if p.logprobs else None,
            extra_body=extra,
        )
        outputs = []
        for choice in sorted(response.choices, key=lambda c: c.index):
            token_ids, logprobs = self._tokens_of(choice)
            outputs.append(
                GenerationOutput(
                    prompt_ids=list(prompt),
                    token_ids=token_ids,
                    logprobs=logprobs,
                    text=choice.text,
                    finish_reason="length" if choice.finish_reason == "length" else "stop",
                )
            )
        return outputs

    def _tokens_of(self, choice) -> tuple[list[int], list[float]]:
        tokens = getattr(choice.logprobs, "tokens", None) or []
        values = list(getattr(choice.logprobs, "token_logprobs", None) or [])
        if tokens and all(t.startswith(TOKEN_ID_PREFIX) for t in tokens):
            return [int(t[len(TOKEN_ID_PREFIX) :]) for t in tokens], [float(v) for v in values]
        token_ids = list(self.tokenizer(choice.text, add_special_tokens=False)["input_ids"])
        return token_ids, [float(v) for v in values] if len(values) == len(token_ids) else []

    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        return list(self._pool.map(self._score, sequences, prompt_lengths))

    def _score(self, sequence: list[int], prompt_length: int) -> torch.Tensor:
        # echo returns the prompt's own logprobs (None for the first token), then one new token.
        response = self.client.completions.create(
            model=self.model_name,
            prompt=list(sequence),
            max_tokens=1,
            temperature=0.0,
            echo=True,
            logprobs=0,
            extra_body={"return_tokens_as_token_ids": True},
        )
        values = response.choices[0].logprobs.token_logprobs[prompt_length : len(sequence)]
        if any(v is None for v in values) or len(values) != len(sequence) - prompt_length:
            raise RuntimeError("the external API did not return prompt logprobs (completions with echo=True)")
        return torch.tensor(values, dtype=torch.float32)

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        raise NotImplementedError(
            "an external API model's weights are managed by its server; it cannot be synchronized. "
            "Use engine_type hf or vllm for the model being trained."
        )

    def version(self) -> int:
        return 0

    def close(self) -> None:
        self._pool.shutdown(wait=False)

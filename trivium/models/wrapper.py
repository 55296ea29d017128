"""ModelWrapper: what workflows call to sample from the rollout model.

Owns the step from messages or text to Experiences: chat template, prompt limits, rollout
arguments, and the fields every experience carries (exact token ids, engine logprobs, model
version, truncation flag). Concurrent calls from threads or coroutines are merged into
shared engine batches by a RequestBatcher. Knows nothing about how the engine samples.

Multi-turn chats are re-rendered with the chat template on each call; a path that feeds the
previous turns' exact token ids back (token-in, token-out across turns) is future work.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import torch

from trivium.core.experience import Experience
from trivium.errors import UserError
from trivium.models.chat import (
    encode_chat_prompt,
    encode_text_prompt,
    fit_prompt,
    load_chat_template,
    render_chat,
)
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.models.engine.batcher import RequestBatcher
from trivium.models.engine.busy_clients import BusyClients

ROLLOUT_ARG_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "repetition_penalty",
    "max_tokens",
    "min_tokens",
    "n",
    "seed",
    "logprobs",
)


class ModelWrapper:
    def __init__(
        self,
        engine: InferenceEngine,
        *,
        chat_template: str | None = None,
        chat_template_path: str | None = None,
        max_prompt_tokens: int | None = None,
        max_response_tokens: int | None = None,
        min_response_tokens: int = 1,
        max_model_len: int | None = None,
        enable_prompt_truncation: bool = True,
        default_rollout_args: dict[str, Any] | None = None,
        enable_history: bool = False,
        enable_thinking: bool | None = None,
    ):
        if max_response_tokens is None and max_model_len is None:
            raise UserError(
                "set model.max_response_tokens or model.max_model_len: the response length needs a limit"
            )
        if max_response_tokens is not None and not 0 <= min_response_tokens <= max_response_tokens:
            raise UserError(
                f"model.min_response_tokens ({min_response_tokens}) must be between 0 and "
                f"model.max_response_tokens ({max_response_tokens})"
            )
        self.engine = engine
        self.chat_template = load_chat_template(chat_template, chat_template_path)
        self.max_prompt_tokens = max_prompt_tokens
        self.max_response_tokens = max_response_tokens
        self.min_response_tokens = min_response_tokens
        self.max_model_len = max_model_len
        self.enable_prompt_truncation = enable_prompt_truncation
        self.default_rollout_args = self._checked_args(default_rollout_args or {})
        self.enable_history = enable_history
        self.enable_thinking = enable_thinking
        self.clients = BusyClients()
        self._batcher = RequestBatcher(engine, busy=self.clients)
        self._history: list[Experience] = []
        self._history_lock = threading.Lock()

    # ---- public API ----------------------------------------------------------------------

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def share_busy_clients(self, clients: BusyClients) -> None:
        """Use the gauge the runner pool updates, so requests of one step are merged."""
        self.clients = self._batcher.busy = clients

    @property
    def model_version(self) -> int:
        return self.engine.version()

    def chat(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None, **rollout_args
    ) -> list[Experience]:
        """``n`` sampled replies to ``messages`` (rendered with the chat template)."""
        request = self._chat_request(messages, tools, n, rollout_args)
        return self._finish([request], self._wait(self._batcher.submit(*self._engine_inputs([request]))))[0]

    def generate(self, prompts: list[str], n: int = 1, **rollout_args) -> list[list[Experience]]:
        """``n`` continuations of each raw-text prompt, all sampled in one engine call."""
        requests = [self._text_request(prompt, n, rollout_args) for prompt in prompts]
        if not requests:
            return []
        return self._finish(requests, self._wait(self._batcher.submit(*self._engine_inputs(requests))))

    async def chat_async(
        self, messages: list[dict], n: int = 1, *, tools: list[dict] | None = None, **rollout_args
    ) -> list[Experience]:
        request = self._chat_request(messages, tools, n, rollout_args)
        outputs = await self._wait_async(self._batcher.submit(*self._engine_inputs([request])))
        return self._finish([request], outputs)[0]

    async def generate_async(self, prompts: list[str], n: int = 1, **rollout_args) -> list[list[Experience]]:
        requests = [self._text_request(prompt, n, rollout_args) for prompt in prompts]
        if not requests:
            return []
        outputs = await self._wait_async(self._batcher.submit(*self._engine_inputs(requests)))
        return self._finish(requests, outputs)

    def logprobs(self, tokens: list[int] | torch.Tensor, prompt_length: int) -> torch.Tensor:
        """(len(tokens) - prompt_length,) raw-logit logprobs of the response tokens."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        return self.engine.compute_logprobs([list(tokens)], [prompt_length])[0]

    def extract_experience_from_history(self, clear: bool = True) -> list[Experience]:
        """Experiences returned since the last extraction (only with ``enable_history``)."""
        with self._history_lock:
            experiences = list(self._history)
            if clear:
                self._history.clear()
        return experiences

    def park(self) -> None:
        """Release the engine's serving thread until the next request (between steps)."""
        self._batcher.park()
        self.engine.park()

    def close(self) -> None:
        self._batcher.close()

    # ---- request building ----------------------------------------------------------------

    def _checked_args(self, args: dict[str, Any]) -> dict[str, Any]:
        unknown = set(args) - set(ROLLOUT_ARG_KEYS)
        if unknown:
            raise UserError(f"Unknown rollout argument(s) {sorted(unknown)}; valid: {list(ROLLOUT_ARG_KEYS)}")
        return {key: value for key, value in args.items() if value is not None}

    def _chat_request(self, messages, tools, n, rollout_args) -> dict:
        text = render_chat(
            self.tokenizer,
            messages,
            chat_template=self.chat_template,
            enable_thinking=self.enable_thinking,
            tools=tools,
        )
        return self._request(text, encode_chat_prompt(self.tokenizer, text), n, rollout_args)

    def _text_request(self, prompt: str, n, rollout_args) -> dict:
        return self._request(prompt, encode_text_prompt(self.tokenizer, prompt), n, rollout_args)

    def _request(self, text: str, ids: list[int], n: int, rollout_args: dict) -> dict:
        args = {**self.default_rollout_args, **self._checked_args(rollout_args)}
        if n != 1 or "n" not in args:  # an explicit n wins over rollout_args' n
            args["n"] = n
        max_tokens = args.pop("max_tokens", None) or self.max_response_tokens
        if max_tokens is None:  # no response limit configured: fill the context
            max_tokens = self.max_model_len - min(len(ids), self.max_prompt_tokens or len(ids))
        fitted = fit_prompt(
            ids,
            max_tokens=max_tokens,
            max_prompt_tokens=self.max_prompt_tokens,
            max_model_len=self.max_model_len,
            enable_prompt_truncation=self.enable_prompt_truncation,
        )
        min_tokens = min(args.pop("min_tokens", self.min_response_tokens), fitted.max_tokens)
        args["logprobs"] = True  # experiences always carry sampled-token logprobs
        params = SamplingParams(max_tokens=fitted.max_tokens, min_tokens=min_tokens, **args)
        prompt_text = self.tokenizer.decode(fitted.ids) if fitted.truncated else text
        return {
            "ids": fitted.ids,
            "params": params,
            "truncated": fitted.truncated,
            "prompt_text": prompt_text,
        }

    def _engine_inputs(self, requests: list[dict]) -> tuple[list[list[int]], list[SamplingParams]]:
        return [r["ids"] for r in requests], [r["params"] for r in requests]

    def _wait(self, future: Future) -> list[list[GenerationOutput]]:
        with self.clients.waiting():
            return future.result()

    async def _wait_async(self, future: Future) -> list[list[GenerationOutput]]:
        with self.clients.waiting():
            return await asyncio.wrap_future(future)

    def _finish(self, requests: list[dict], outputs: list[list[GenerationOutput]]) -> list[list[Experience]]:
        results = []
        for request, samples in zip(requests, outputs):
            experiences = [self._experience(request, sample) for sample in samples]
            results.append(experiences)
        if self.enable_history:
            with self._history_lock:
                self._history.extend(e for group in results for e in group)
        return results

    @staticmethod
    def _experience(request: dict, sample: GenerationOutput) -> Experience:
        response = len(sample.token_ids)
        return Experience(
            tokens=torch.tensor(sample.prompt_ids + sample.token_ids, dtype=torch.long),
            prompt_length=len(sample.prompt_ids),
            logprobs=torch.tensor(sample.logprobs, dtype=torch.float32) if sample.logprobs else None,
            action_mask=torch.ones(response, dtype=torch.bool),
            model_version=sample.model_version,
            prompt_truncated=request["truncated"],
            prompt_text=request["prompt_text"],
            response_text=sample.text,
            info={"finish_reason": sample.finish_reason},
        )

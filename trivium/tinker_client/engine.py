"""The ``tinker`` rollout engine: sampling through a Tinker service's sampling client.

It serves the base model until the trainer publishes weights: each published version is
a ``tinker://`` sampler path (``save_weights_for_sampler``), and ``use_sampler`` switches
to a sampling client of that path and confirms the version. Sampled token ids and their
logprobs come from the service; the tokenizer (``model.model_path``) stays local, for the
chat template and the stop tokens.

What the service's sampling parameters cannot express (``min_tokens``, a repetition
penalty) is refused, never dropped.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from trivium.errors import UserError
from trivium.models.engine.base import (
    GenerationOutput,
    InferenceEngine,
    SamplingParams,
    check_prompt_lengths,
    params_per_prompt,
)
from trivium.tinker_client.connection import call, service_client, submit, wait


class TinkerEngine(InferenceEngine):
    # Trait: weights arrive as a service path (``use_sampler``), never as tensors.
    takes_sampler_paths = True

    def __init__(
        self,
        *,
        model_path: str | None,
        base_model: str | None = None,
        seed: int | None = None,
        max_model_len: int | None = None,
        request_timeout: float = 1200.0,
        **_placement,  # dtype: chosen by the service
    ):
        from transformers import AutoTokenizer

        if not model_path:
            raise UserError(
                "the tinker engine needs model.model_path: the local directory of the model's tokenizer"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.base_model = base_model or model_path
        self.seed = seed
        self.max_model_len = max_model_len
        self.timeout = float(request_timeout)
        self.service = service_client()
        self._lock = threading.Lock()
        self._version = 0
        self._sampler = call(
            lambda: self.service.create_sampling_client(base_model=self.base_model),
            f"creating a sampling client of {self.base_model!r}",
            self.timeout,
        )
        eos = self.tokenizer.eos_token_id
        self.default_stop_ids = () if eos is None else (int(eos),)

    # ------------------------------------------------------------------ sampling
    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        per_prompt = params_per_prompt(prompts, params)
        check_prompt_lengths(prompts, self.max_model_len)
        with self._lock:
            sampler, version = self._sampler, self._version
        # Every prompt is in flight at once; the service queues and batches them.
        requests = [
            (self._model_input(prompt), p.n, self._service_params(p, index))
            for index, (prompt, p) in enumerate(zip(prompts, per_prompt))
        ]
        futures = submit(lambda: [sampler.sample(*request) for request in requests], "sampling", self.timeout)
        outputs = []
        for prompt, future in zip(prompts, futures):
            response = wait(future, "sampling", self.timeout)
            outputs.append([self._output(prompt, sequence, version) for sequence in response.sequences])
        return outputs

    def _service_params(self, p: SamplingParams, index: int) -> Any:
        from tinker import types

        if p.min_tokens > 1 or p.repetition_penalty != 1.0:
            raise UserError(
                "the tinker engine cannot honour min_tokens > 1 or repetition_penalty != 1 (the service's "
                f"sampling has neither); got min_tokens={p.min_tokens}, repetition_penalty={p.repetition_penalty}"
            )
        seed = p.seed if p.seed is not None else (None if self.seed is None else self.seed + index)
        return types.SamplingParams(
            max_tokens=p.max_tokens,
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            stop=list(p.stop_token_ids or self.default_stop_ids),
            seed=seed,
        )

    def _output(self, prompt: list[int], sequence: Any, version: int) -> GenerationOutput:
        tokens = [int(t) for t in sequence.tokens]
        logprobs = [float(v) for v in (sequence.logprobs or [])]
        if len(logprobs) != len(tokens):
            raise RuntimeError(
                f"the Tinker service returned {len(logprobs)} logprobs for {len(tokens)} sampled tokens"
            )
        stop = str(getattr(sequence, "stop_reason", "stop"))
        finish = "length" if stop.endswith("length") else "stop"
        text_ids = (
            tokens[:-1] if finish == "stop" and tokens and tokens[-1] in self.default_stop_ids else tokens
        )
        return GenerationOutput(
            prompt_ids=list(prompt),
            token_ids=tokens,
            logprobs=logprobs,
            text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
            finish_reason=finish,
            model_version=version,
        )

    @staticmethod
    def _model_input(tokens: Sequence[int]) -> Any:
        from tinker import types

        return types.ModelInput.from_ints([int(t) for t in tokens])

    # ------------------------------------------------------------------ scoring
    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        with self._lock:
            sampler = self._sampler
        inputs = [self._model_input(sequence) for sequence in sequences]
        futures = submit(
            lambda: [sampler.compute_logprobs(i) for i in inputs], "scoring sequences", self.timeout
        )
        scored = []
        for sequence, prompt_length, future in zip(sequences, prompt_lengths, futures):
            values = wait(future, "scoring a sequence", self.timeout)[prompt_length : len(sequence)]
            if any(v is None for v in values):
                raise RuntimeError("the Tinker service did not score every response token")
            scored.append(torch.tensor(values, dtype=torch.float32))
        return scored

    # ------------------------------------------------------------------ weights
    def use_sampler(self, sampler_path: str, version: int) -> int:
        """Sample from the weights the trainer saved at ``sampler_path`` from now on."""
        sampler = call(
            lambda: self.service.create_sampling_client(model_path=sampler_path),
            f"opening the sampler weights {sampler_path} (version {version})",
            self.timeout,
        )
        with self._lock:
            self._sampler, self._version = sampler, int(version)
        return self._version

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        raise UserError(
            "the tinker engine's weights live on the Tinker service; they are updated from the trainer's "
            "saved sampler weights, not from tensors (use model.tinker.enable with its own trainer)"
        )

    def version(self) -> int:
        return self._version

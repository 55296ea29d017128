"""The ``vllm`` engine: vLLM's offline ``LLM`` API behind the InferenceEngine interface.

Imported only when ``engine_type: vllm`` is chosen; vLLM is an optional extra
(``pip install trivium[vllm]``) that needs a GPU. Logprobs are requested in vLLM's
``raw_logprobs`` mode so they mean the same as the hf engine's (raw logits, temperature 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams, params_per_prompt


def _import_vllm():
    try:
        import vllm
    except ImportError as error:
        raise UserError(
            "engine_type 'vllm' needs the vllm package, which is not installed. Install it with "
            "`pip install 'trivium[vllm]'` on a machine with a supported GPU, or use engine_type: hf."
        ) from error
    return vllm


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Runs inside each vLLM worker (via collective_rpc): load named tensors into its model."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMEngine(InferenceEngine):
    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 42,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        **llm_kwargs,
    ):
        vllm = _import_vllm()
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            logprobs_mode="raw_logprobs",
            **llm_kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self._version = 0

    def _vllm_params(self, p: SamplingParams):
        return self._vllm.SamplingParams(
            n=p.n,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k if p.top_k > 0 else -1,
            repetition_penalty=p.repetition_penalty,
            max_tokens=p.max_tokens,
            min_tokens=p.min_tokens,
            stop_token_ids=list(p.stop_token_ids) or None,
            seed=p.seed,
            logprobs=0 if p.logprobs else None,  # 0 = only the sampled token's logprob
        )

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        per_prompt = params_per_prompt(prompts, params)
        from vllm.inputs import TokensPrompt

        version = self._version
        results = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            sampling_params=[self._vllm_params(p) for p in per_prompt],
            use_tqdm=False,
        )
        outputs = []
        for prompt, result in zip(prompts, results):
            samples = []
            for completion in result.outputs:
                token_ids = list(completion.token_ids)
                logprobs = (
                    [step[token].logprob for step, token in zip(completion.logprobs, token_ids)]
                    if completion.logprobs
                    else []
                )
                samples.append(
                    GenerationOutput(
                        prompt_ids=list(prompt),
                        token_ids=token_ids,
                        logprobs=logprobs,
                        text=completion.text,
                        finish_reason="length" if completion.finish_reason == "length" else "stop",
                        model_version=version,
                    )
                )
            outputs.append(samples)
        return outputs

    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        from vllm.inputs import TokensPrompt

        scoring = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        results = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(s)) for s in sequences],
            sampling_params=scoring,
            use_tqdm=False,
        )
        scored = []
        for sequence, prompt_length, result in zip(sequences, prompt_lengths, results):
            # prompt_logprobs[t] is a {token_id: Logprob} dict for token t (None for t = 0).
            steps = result.prompt_logprobs[prompt_length:]
            scored.append(
                torch.tensor([step[token].logprob for step, token in zip(steps, sequence[prompt_length:])])
            )
        return scored

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        # Passing a function to the workers needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 with the
        # multiprocess executor; the in-process executor takes it as is.
        self.llm.collective_rpc(_load_weights_on_worker, args=(list(state_dict.items()),))
        self.llm.reset_prefix_cache()
        self._version = int(version)
        return self._version

    def version(self) -> int:
        return self._version

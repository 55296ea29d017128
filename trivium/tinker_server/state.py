"""What the server holds (sessions, training models, samplers) and each operation on it.

Every operation checks its request first and raises ``BadRequest`` for anything it cannot
serve, so a wrong request is a 4xx answer before any work is queued; the work itself runs
on the ``JobQueue`` worker and its result is what ``retrieve_future`` returns. Model ids
are ``<session id>:train:<n>`` (the SDK derives them the same way), sampler ids
``<session id>:sample:<n>``.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch

from trivium.models.server_guard import BadRequest
from trivium.tinker_server import checkpoints, losses, sampling, wire
from trivium.tinker_server.forward_backward import run_forward_backward
from trivium.tinker_server.jobs import JobQueue, Result
from trivium.tinker_server.policy_model import LoraSpec, PolicyModel, read_checkpoint_meta
from trivium.tinker_server.request_checks import check_adam, check_datum

PROTOBUF = "application/x-protobuf"
SUPPORTED_LOSSES = tuple(losses.LOSS_INPUTS)
# In-memory weight snapshots kept per training model (save_weights_and_get_sampling_client);
# a sampler on an older one is refused and names save_weights_for_sampler(name) instead.
SNAPSHOTS_PER_MODEL = 8
ADAM_KEYS = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")


@dataclass(frozen=True)
class ServerOptions:
    base_models: dict[str, str]  # name the SDK sends as base_model -> local model directory
    checkpoint_root: Path
    max_samples: int = 64  # num_samples in one sample request
    max_tokens: int = 4096  # max_tokens of one sample request


EXPIRED: dict = {}  # the weights of a snapshot sampler whose snapshot was dropped


@dataclass
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    model: PolicyModel | None = None  # the model it samples with (loaded on first use when None)
    weights: dict[str, torch.Tensor] | None = None  # swapped into ``model`` while sampling
    checkpoint_dir: Path | None = None


class TinkerState:
    """The server's sessions, training models and samplers; one method per operation."""

    def __init__(self, options: ServerOptions):
        if not options.base_models:
            raise BadRequest("serve-tinker needs at least one base model (--model)")
        self.options = options
        self.jobs = JobQueue()
        self.sessions: set[str] = set()
        self.models: dict[str, PolicyModel] = {}
        self.samplers: dict[str, Sampler] = {}
        # training model id -> its snapshot samplers, oldest first
        self._snapshots: dict[str, deque[str]] = {}
        self._loaded: dict[str, PolicyModel] = {}  # models loaded for sampling, by base model or checkpoint
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lookup
    def base_path(self, base_model: str | None) -> tuple[str, str]:
        for name, path in self.options.base_models.items():
            if base_model in (name, path):
                return name, path
        raise BadRequest(
            f"base model {base_model!r} is not served here; served: {sorted(self.options.base_models)}"
        )

    def model(self, model_id: str) -> PolicyModel:
        if model_id not in self.models:
            raise BadRequest(f"no training model {model_id!r} on this server")
        return self.models[model_id]

    def session(self, session_id: str) -> str:
        if session_id not in self.sessions:
            raise BadRequest(f"no session {session_id!r} on this server")
        return session_id

    def capabilities(self) -> dict:
        return {
            "supported_models": [
                {"model_name": name, "trainable": True, "sampleable": True}
                for name in self.options.base_models
            ]
        }

    # ---------------------------------------------------------------- sessions
    def create_session(self) -> str:
        session_id = f"session-{uuid.uuid4().hex[:12]}"
        with self._lock:
            self.sessions.add(session_id)
        return session_id

    # ------------------------------------------------------------------ models
    def create_model(self, body: dict) -> str:
        session_id, seq = body.get("session_id", ""), int(body.get("model_seq_id", 0))
        self.session(session_id)
        base_model, base_path = self.base_path(body.get("base_model"))
        check_adam(body.get("optimizer_config"))
        lora_config = body.get("lora_config")
        if lora_config is not None and not (
            isinstance(lora_config.get("rank"), int) and lora_config["rank"] >= 1
        ):
            raise BadRequest(
                f"lora_config.rank must be an integer of at least 1, got {lora_config.get('rank')!r}"
            )
        lora = (
            None
            if lora_config is None
            else LoraSpec(
                rank=int(lora_config["rank"]),
                seed=lora_config.get("seed"),
                train_attn=bool(lora_config.get("train_attn", True)),
                train_mlp=bool(lora_config.get("train_mlp", True)),
                train_unembed=bool(lora_config.get("train_unembed", True)),
            )
        )
        model_id = f"{session_id}:train:{seq}"

        def work() -> Result:
            self.models[model_id] = PolicyModel(base_model, base_path, lora)
            return Result({"model_id": model_id, "type": "create_model"})

        return self.jobs.submit(work)

    def info(self, model_id: str) -> dict:
        model = self.model(model_id)
        return {
            "type": "get_info",
            "model_id": model_id,
            "model_name": model.base_model,
            "model_data": {
                "arch": model.model.config.model_type,
                "model_name": model.base_model,
                "tokenizer_id": model.base_path,
            },
            "is_lora": model.lora is not None,
            "lora_rank": model.lora.rank if model.lora else None,
        }

    # ---------------------------------------------------------------- training
    def forward_backward(self, call: wire.ForwardBackwardCall) -> str:
        model = self.model(call.model_id)
        if call.loss_fn not in losses.LOSS_INPUTS:
            raise BadRequest(
                f"loss function {call.loss_fn!r} is not served here; served: {', '.join(SUPPORTED_LOSSES)}"
            )
        if call.loss_fn_config:
            raise BadRequest(
                f"loss_fn_config {sorted(call.loss_fn_config)} is not taken by {call.loss_fn} on this server"
            )
        if not call.datums:
            raise BadRequest("forward_backward needs at least one datum")
        required, optional = losses.LOSS_INPUTS[call.loss_fn]
        vocab = model.model.config.vocab_size
        for index, datum in enumerate(call.datums):
            check_datum(index, datum, call.loss_fn, required, optional, vocab, model.context_length)

        def work() -> Result:
            return Result(run_forward_backward(model, call), PROTOBUF)

        return self.jobs.submit(work)

    def optim_step(self, body: dict) -> str:
        model = self.model(body.get("model_id", ""))
        params = body.get("adam_params")
        if params is None:
            raise BadRequest("optim_step takes adam_params only (the AdamW optimizer)")
        unknown = sorted(set(params) - set(ADAM_KEYS) - {"type"})
        if unknown:
            raise BadRequest(f"adam_params {unknown} are not known; known: {', '.join(ADAM_KEYS)}")
        defaults = {
            "learning_rate": 1e-4,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-12,
            "weight_decay": 0.0,
            "grad_clip_norm": 0.0,
        }
        hyper = {key: float(params.get(key, default)) for key, default in defaults.items()}

        def work() -> Result:
            return Result({"type": "optim_step", "metrics": model.optim_step(**hyper)})

        return self.jobs.submit(work)

    # ------------------------------------------------------------- checkpoints
    def save_weights(self, body: dict) -> str:
        model_id = body.get("model_id", "")
        model = self.model(model_id)
        path = checkpoints.CheckpointPath(
            model_id, "weights", checkpoints.check_segment(body.get("path") or "", "name")
        )
        directory = path.directory(self.options.checkpoint_root)
        overwrite = bool(body.get("overwrite", False))

        def work() -> Result:
            if directory.exists():
                if not overwrite:
                    raise BadRequest(
                        f"checkpoint {path.uri} exists; save under another name or pass overwrite=True"
                    )
                shutil.rmtree(directory)
            model.save(directory, with_optimizer=True)
            return Result({"path": path.uri, "type": "save_weights"})

        return self.jobs.submit(work)

    def load_weights(self, body: dict) -> str:
        path = checkpoints.parse(body.get("path", ""))
        if path.kind != "weights":
            raise BadRequest(
                f"{path.uri} holds weights for sampling; load_state takes a tinker://.../weights/... path"
            )
        directory = path.directory(self.options.checkpoint_root)
        if not directory.is_dir():
            raise BadRequest(f"no checkpoint {path.uri} on this server")
        with_optimizer = bool(body.get("optimizer", False))
        if body.get("model_id"):
            model_id = body["model_id"]
            model = self.model(model_id)

            def work() -> Result:
                model.load(directory, with_optimizer=with_optimizer)
                return Result({"path": path.uri, "model_id": model_id, "type": "load_weights"})

            return self.jobs.submit(work)
        session_id, seq = body.get("session_id", ""), int(body.get("model_seq_id", 0))
        self.session(session_id)
        check_adam(body.get("optimizer_config"))
        base_model, lora = read_checkpoint_meta(directory)
        base_model, base_path = self.base_path(body.get("base_model") or base_model)
        model_id = f"{session_id}:train:{seq}"

        def create_and_load() -> Result:
            model = PolicyModel(base_model, base_path, lora)
            model.load(directory, with_optimizer=with_optimizer)
            self.models[model_id] = model
            return Result({"path": path.uri, "model_id": model_id, "type": "load_weights"})

        return self.jobs.submit(create_and_load)

    # ---------------------------------------------------------------- sampling
    def save_weights_for_sampler(self, body: dict) -> str:
        model_id = body.get("model_id", "")
        model = self.model(model_id)
        if body.get("kind", "snapshot") != "snapshot":
            raise BadRequest(
                f"sampling client kind {body.get('kind')!r} is not served here; served: snapshot"
            )
        name = body.get("path")
        if name:
            path = checkpoints.CheckpointPath(
                model_id, "sampler_weights", checkpoints.check_segment(name, "name")
            )

            def save() -> Result:
                model.save(path.directory(self.options.checkpoint_root), with_optimizer=False)
                return Result({"path": path.uri, "type": "save_weights_for_sampler"})

            return self.jobs.submit(save)
        session_id = model_id.split(":train:")[0]
        sampler_id = f"{session_id}:sample:{int(body.get('sampling_session_seq_id') or 0)}"

        def snapshot() -> Result:
            uri = f"tinker://{model_id}/sampler_weights/snapshot-{model.steps}"
            self.samplers[sampler_id] = Sampler(
                sampler_id, model.base_model, uri, model=model, weights=model.snapshot()
            )
            kept = self._snapshots.setdefault(model_id, deque())
            kept.append(sampler_id)
            while len(kept) > SNAPSHOTS_PER_MODEL:
                self.samplers[kept.popleft()].weights = EXPIRED
            return Result(
                {"path": uri, "sampling_session_id": sampler_id, "type": "save_weights_for_sampler"}
            )

        return self.jobs.submit(snapshot)

    def create_sampling_session(self, body: dict) -> str:
        session_id = body.get("session_id", "")
        self.session(session_id)
        sampler_id = f"{session_id}:sample:{int(body.get('sampling_session_seq_id', 0))}"
        model_path = body.get("model_path")
        if model_path:
            path = checkpoints.parse(model_path)
            directory = path.directory(self.options.checkpoint_root)
            if not directory.is_dir():
                raise BadRequest(f"no checkpoint {model_path} on this server")
            base_model, _lora = read_checkpoint_meta(directory)
            sampler = Sampler(sampler_id, base_model, model_path, checkpoint_dir=directory)
        else:
            base_model, _path = self.base_path(body.get("base_model"))
            sampler = Sampler(sampler_id, base_model, None)
        self.samplers[sampler_id] = sampler
        return sampler_id

    def sampler(self, sampler_id: str) -> Sampler:
        if sampler_id not in self.samplers:
            raise BadRequest(f"no sampling session {sampler_id!r} on this server")
        return _not_expired(self.samplers[sampler_id])

    def sample(self, body: dict) -> tuple[str, list[str]]:
        sampler = self.sampler(body.get("sampling_session_id") or "")
        prompt = wire.model_input_tokens(body.get("prompt"), "prompt")
        params = body.get("sampling_params") or {}
        num_samples = int(body.get("num_samples", 1))
        if not 1 <= num_samples <= self.options.max_samples:
            raise BadRequest(f"num_samples={num_samples}; this server takes 1 to {self.options.max_samples}")
        for key, neutral in (("top_k", -1), ("top_p", 1)):
            if params.get(key, neutral) != neutral:
                raise BadRequest(
                    f"sampling_params.{key}={params[key]} is not served here; leave it at {neutral}"
                )
        for key in ("topk_prompt_logprobs", "topk_sample_logprobs", "prompt_alt_tokens_k"):
            if body.get(key):
                raise BadRequest(f"{key} is not served here")
        for key in ("target_prompt_logprobs", "prompt_logprobs_last_n"):
            if body.get(key) is not None:
                raise BadRequest(f"{key} is not served here")
        if not prompt:
            raise BadRequest("the prompt is empty")
        max_tokens = params.get("max_tokens")
        max_tokens = self.options.max_tokens if max_tokens is None else int(max_tokens)
        if not 1 <= max_tokens <= self.options.max_tokens:
            raise BadRequest(f"max_tokens={max_tokens}; this server takes 1 to {self.options.max_tokens}")
        temperature = float(params.get("temperature", 1.0))
        if temperature < 0:
            raise BadRequest(f"temperature={temperature} must be >= 0")
        want_prompt_logprobs = bool(body.get("prompt_logprobs"))
        stop, seed = params.get("stop"), params.get("seed")

        def work() -> Result:
            model = self._sampling_model(_not_expired(sampler))
            if (
                len(prompt) + max_tokens > model.context_length
                or max(prompt) >= model.model.config.vocab_size
            ):
                raise BadRequest(
                    f"the prompt ({len(prompt)} tokens) plus max_tokens={max_tokens} exceed the context "
                    f"of {model.context_length}, or a prompt token is outside the vocabulary"
                )
            with model.weights_swapped(sampler.weights):
                conditions = sampling.stop_conditions(stop, model.tokenizer.eos_token_id)
                sequences = sampling.generate(
                    model.model,
                    model.tokenizer,
                    prompt,
                    num_samples=num_samples,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stop=conditions,
                    seed=seed,
                )
                scores = sampling.prompt_logprobs(model.model, prompt) if want_prompt_logprobs else None
            return Result(wire.sample_response(sequences, scores), PROTOBUF)

        request_id = self.jobs.submit(work)
        return request_id, [f"{request_id}:{index}" for index in range(num_samples)]

    def _sampling_model(self, sampler: Sampler) -> PolicyModel:
        """The model a sampler samples with, loaded once per checkpoint or base model (worker thread)."""
        if sampler.model is None:
            key = str(sampler.checkpoint_dir or sampler.base_model)
            if key not in self._loaded:
                if sampler.checkpoint_dir is not None:
                    base_model, lora = read_checkpoint_meta(sampler.checkpoint_dir)
                    model = PolicyModel(*self.base_path(base_model), lora)
                    model.load(sampler.checkpoint_dir, with_optimizer=False)
                else:
                    model = PolicyModel(*self.base_path(sampler.base_model), None)
                self._loaded[key] = model
            sampler.model = self._loaded[key]
        return sampler.model


def _not_expired(sampler: Sampler) -> Sampler:
    if sampler.weights is EXPIRED:
        raise BadRequest(
            f"sampler {sampler.sampler_id!r} sampled an in-memory snapshot that {SNAPSHOTS_PER_MODEL} newer ones "
            "replaced; sample from a newer one, or save weights under a name with save_weights_for_sampler"
        )
    return sampler

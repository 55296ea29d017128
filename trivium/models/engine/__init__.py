"""Inference engines behind one interface, and the factory that builds them by name.

``create_engine("hf" | "vllm" | "external" | "tinker", ...)``; a dotted path ``pkg.module:Factory``
selects a plugin engine. ``tinker`` registers from ``trivium.tinker_client.engine_factory``. Backends with optional dependencies are imported only when chosen.
"""

from __future__ import annotations

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.registry import Registry, RegistryError

# Engine types built on a higher package register themselves from it, imported on first lookup.
ENGINES: Registry = Registry("engine type", builtin_modules=("trivium.tinker_client.engine_factory",))


# vLLM options that only change speed or logging: engines without them run the same without.
VLLM_PERFORMANCE_OPTIONS = ("enable_prefix_caching", "enable_chunked_prefill", "use_v1", "enable_log_requests")
# vLLM options that change what a run does: engines without them must refuse, not ignore them.
VLLM_BEHAVIOUR_OPTIONS = ("ignore_eos",)


def without_vllm_options(engine_type: str, kwargs: dict) -> dict:
    """Drops the performance options (``trivium plan`` lists them as unused) and refuses the others."""
    refused = [name for name in VLLM_BEHAVIOUR_OPTIONS if kwargs.get(name)]
    if refused:
        raise UserError(
            f"explorer.rollout_model / auxiliary_models: the {engine_type} engine cannot honour "
            f"{', '.join(refused)} (vLLM options that change what the engine does); use engine_type: vllm or "
            "remove them"
        )
    return {k: v for k, v in kwargs.items() if k not in VLLM_PERFORMANCE_OPTIONS + VLLM_BEHAVIOUR_OPTIONS}


@ENGINES.register("hf")
def _create_hf(model_path: str | None, **kwargs) -> InferenceEngine:
    if not model_path:
        raise UserError("the hf engine needs model.model_path (a local Hugging Face model directory)")
    from trivium.models.engine.hf import HFEngine

    return HFEngine.from_pretrained(model_path, **without_vllm_options("hf", kwargs))


# Trait: the hf engine applies LoRA adapters sent alone (it merges them into its layers).
_create_hf.takes_lora_adapters = True
# Trait: built with ``sampling_mask_cap``, the hf engine records each token's kept set.
_create_hf.records_sampling_masks = True
# Trait: several hf engines can run in one process beside the explorer, on a CPU.
_create_hf.shares_explorer_process = True


@ENGINES.register("vllm")
def _create_vllm(model_path: str, **kwargs) -> InferenceEngine:
    from trivium.models.engine.vllm import VLLMEngine

    return VLLMEngine(model_path, **kwargs)


# Traits: vLLM serves a LoRA adapter sent alone as an adapter of its own (models/engine/vllm_lora.py),
# started with vLLM's LoRA options (enable_lora, lora_kwargs; config/lora_serving.py).
_create_vllm.takes_lora_adapters = True
_create_vllm.takes_lora_engine_options = True


@ENGINES.register("external")
def _create_external(model_path: str | None = None, **kwargs) -> InferenceEngine:
    from trivium.models.engine.external import ExternalEngine

    kwargs = without_vllm_options("external", kwargs)
    kwargs.pop("trust_remote_code", None)  # the tokenizer is loaded without model code
    if kwargs.get("rope_scaling") or kwargs.get("rope_theta") is not None:
        raise UserError(
            "model.rope_scaling / rope_theta: an external engine serves its own model; set RoPE on its server"
        )
    return ExternalEngine(tokenizer_path=model_path, **kwargs)


# Trait: an external engine is a client of a server elsewhere: any number fit in the explorer's process.
_create_external.shares_explorer_process = True


def _factory_trait(engine_type: str, trait: str) -> bool:
    """A trait the factory of ``engine_type`` declares as an attribute (plugin engines too);
    False when it does not, or the type is unknown."""
    try:
        return bool(getattr(ENGINES.get(engine_type), trait, False))
    except RegistryError:
        return False


def takes_lora_adapters(engine_type: str) -> bool:
    """Whether engines of ``engine_type`` accept a LoRA adapter alone (``models/lora_delta.py``);
    others are sent whole merged weights."""
    return _factory_trait(engine_type, "takes_lora_adapters")


def records_sampling_masks(engine_type: str) -> bool:
    """Whether engines of ``engine_type`` record each sampled token's kept set when built with
    ``sampling_mask_cap`` (sampling-mask replay)."""
    return _factory_trait(engine_type, "records_sampling_masks")


def shares_explorer_process(engine_type: str) -> bool:
    """Whether engines of ``engine_type`` can run, several to a process, inside the explorer's
    process on a CPU (``cluster.engines_in_explorer``)."""
    return _factory_trait(engine_type, "shares_explorer_process")


def create_engine(engine_type: str = "hf", model_path: str | None = None, **kwargs) -> InferenceEngine:
    """Build an engine. Common keywords: dtype, seed, max_model_len; others are backend-specific,
    including the rollout-engine options of the config (``schema.InferenceModelConfig`` fields
    marked ``engine_option``), passed only when set."""
    try:
        factory = ENGINES.get(engine_type)
    except RegistryError as error:
        raise UserError(f"explorer.rollout_model.engine_type: {error}") from None
    return factory(model_path=model_path, **kwargs)


__all__ = ["ENGINES", "GenerationOutput", "InferenceEngine", "SamplingParams", "create_engine", "records_sampling_masks",
           "shares_explorer_process", "takes_lora_adapters"]

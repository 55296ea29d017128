"""Inference engines behind one interface, and the factory that builds them by name.

``create_engine("hf" | "vllm" | "external", ...)``; a dotted path ``pkg.module:Factory``
selects a plugin engine. Backends with optional dependencies are imported only when chosen.
"""

from __future__ import annotations

from trivium.errors import UserError
from trivium.models.engine.base import GenerationOutput, InferenceEngine, SamplingParams
from trivium.registry import Registry, RegistryError

ENGINES: Registry = Registry("engine type")


@ENGINES.register("hf")
def _create_hf(model_path: str | None, **kwargs) -> InferenceEngine:
    if not model_path:
        raise UserError("the hf engine needs model.model_path (a local Hugging Face model directory)")
    from trivium.models.engine.hf import HFEngine

    return HFEngine.from_pretrained(model_path, **kwargs)


@ENGINES.register("vllm")
def _create_vllm(model_path: str, **kwargs) -> InferenceEngine:
    from trivium.models.engine.vllm import VLLMEngine

    return VLLMEngine(model_path, **kwargs)


@ENGINES.register("external")
def _create_external(model_path: str | None = None, **kwargs) -> InferenceEngine:
    from trivium.models.engine.external import ExternalEngine

    return ExternalEngine(tokenizer_path=model_path, **kwargs)


def create_engine(engine_type: str = "hf", model_path: str | None = None, **kwargs) -> InferenceEngine:
    """Build an engine. Common keywords: dtype, seed, max_model_len; others are backend-specific."""
    try:
        factory = ENGINES.get(engine_type)
    except RegistryError as error:
        raise UserError(f"explorer.rollout_model.engine_type: {error}") from None
    return factory(model_path=model_path, **kwargs)


__all__ = ["ENGINES", "GenerationOutput", "InferenceEngine", "SamplingParams", "create_engine"]

"""The ``tinker`` engine type in ``trivium.models.engine.ENGINES``, which imports this module on
its first lookup; the engine itself (``engine.py``, with torch and the SDK) is imported when
one is built."""

from __future__ import annotations

from trivium.errors import UserError
from trivium.models.engine import ENGINES, InferenceEngine, without_vllm_options


@ENGINES.register("tinker")
def create_tinker_engine(model_path: str | None = None, **kwargs) -> InferenceEngine:
    from trivium.tinker_client.engine import TinkerEngine

    kwargs = without_vllm_options("tinker", kwargs)
    if kwargs.pop("rope_scaling", None) or kwargs.pop("rope_theta", None) is not None:
        raise UserError("model.rope_scaling / rope_theta: a Tinker service serves its own model; remove them")
    kwargs.pop("trust_remote_code", None)  # the tokenizer is loaded without model code
    return TinkerEngine(model_path=model_path, **kwargs)

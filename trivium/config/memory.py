"""Rough GPU memory estimates, for suggestions only.

Parameter counts come from the model's local ``config.json`` (no weights are read); device
memory comes from torch when a GPU is visible. Without either, no estimate is made.
"""

from __future__ import annotations

import json
from pathlib import Path

from trivium.config.errors import Suggestion
from trivium.config.schema import TriviumConfig

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
# AdamW training in mixed precision: weights + gradients + fp32 master copy + two moments.
TRAIN_BYTES_PER_PARAM_EXTRA = 4 + 4 + 4


def estimate_parameters(model_path: str | None) -> int | None:
    """Approximate parameter count of a decoder-only transformer from its config.json."""
    if not model_path:
        return None
    config_file = Path(model_path) / "config.json"
    if not config_file.is_file():
        return None
    try:
        spec = json.loads(config_file.read_text())
        hidden = int(spec["hidden_size"])
        layers = int(spec["num_hidden_layers"])
        vocab = int(spec["vocab_size"])
        intermediate = int(spec.get("intermediate_size", 4 * hidden))
    except (KeyError, ValueError, TypeError, json.JSONDecodeError):
        return None
    # Attention (4 h^2) + gated MLP (3 h i) per layer, plus input and output embeddings.
    per_layer = 4 * hidden * hidden + 3 * hidden * intermediate
    tied = bool(spec.get("tie_word_embeddings", False))
    return layers * per_layer + vocab * hidden * (1 if tied else 2)


def device_memory_bytes() -> int | None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def memory_suggestions(config: TriviumConfig, device_bytes: int | None = None) -> list[Suggestion]:
    if config.cluster.device_type != "cuda":
        return []
    parameters = estimate_parameters(config.model.model_path)
    if parameters is None:
        return []
    device_bytes = device_bytes if device_bytes is not None else device_memory_bytes()
    if not device_bytes:
        return []
    advice = []
    rollout = config.explorer.rollout_model
    weight_bytes = DTYPE_BYTES.get(rollout.dtype or config.model.dtype, 2)
    per_engine_device = parameters * weight_bytes / rollout.tensor_parallel_size
    budget = rollout.gpu_memory_utilization * device_bytes
    if config.cluster.explorer_devices and per_engine_device > 0.8 * budget:
        advice.append(Suggestion(
            "explorer.rollout_model.tensor_parallel_size",
            f"the weights alone take ~{per_engine_device / 2**30:.1f} GiB per GPU, close to or over "
            f"gpu_memory_utilization x memory ({budget / 2**30:.1f} GiB); raise tensor_parallel_size or "
            "gpu_memory_utilization",
        ))
    trainer_devices = config.cluster.trainer_devices or 0
    if trainer_devices:
        train_bytes = parameters * (DTYPE_BYTES.get(config.model.dtype, 2) + TRAIN_BYTES_PER_PARAM_EXTRA)
        if train_bytes / trainer_devices > device_bytes:
            advice.append(Suggestion(
                "cluster",
                f"training state needs ~{train_bytes / 2**30:.0f} GiB, more than {trainer_devices} trainer GPU(s) "
                f"hold when sharded evenly ({device_bytes * trainer_devices / 2**30:.0f} GiB); give the trainer "
                "more GPUs, use LoRA, or a smaller model",
            ))
    return advice

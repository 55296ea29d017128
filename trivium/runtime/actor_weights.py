"""The weights of a checkpoint's actor, as the rollout engines take them: the whole weights,
a LoRA adapter alone (or merged into its base model for engines that take whole weights
only), or the sampler path a Tinker service saved for them."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trivium.errors import UserError
from trivium.models.lora_delta import delta_from_adapter_dir, is_adapter_dir, read_adapter_config


def service_sampler_path(actor_dir: Path) -> str | None:
    """The sampler weights a training service saved for a checkpoint's actor (a Tinker run), or None."""
    from trivium.tinker_client.checkpoints import STATE_FILE

    state_file = actor_dir / STATE_FILE
    if not state_file.is_file():
        return None
    path = json.loads(state_file.read_text()).get("sampler_path")
    if not path:
        raise UserError(f"{state_file} records no sampler weights (sampler_path) for the rollout engine")
    return str(path)


def load_actor_weights(actor_dir: Path, *, merge_adapter: bool = False) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint's actor as an update; a LoRA adapter alone, or merged into
    its base model when ``merge_adapter`` (for engines that take whole weights only)."""
    from trivium.trainer.trainer_setup import load_causal_lm

    if is_adapter_dir(actor_dir):
        if not merge_adapter:
            return delta_from_adapter_dir(actor_dir)
        from trivium.trainer.lora import merged_model_from_adapter

        base = read_adapter_config(actor_dir).get("base_model_name_or_path")
        if not base:
            raise UserError(f"the adapter in {actor_dir} does not record its base model (base_model_name_or_path)")
        return merged_model_from_adapter(actor_dir, base).state_dict()
    if not (actor_dir / "config.json").exists():
        raise UserError(f"{actor_dir} holds no model (config.json is missing); is the checkpoint complete?")
    return load_causal_lm(str(actor_dir), trainable=False).state_dict()

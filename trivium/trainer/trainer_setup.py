"""The trainer's set-up: its models, built once from its settings.

``load_causal_lm`` loads a causal language model from a model directory (also used outside
the trainer, to read a checkpoint's actor). ``build_trainer_models`` builds what a trainer
trains with: the actor (with its LoRA adapter and gradient checkpointing when configured),
the reference policy, the critic, and the optimizer and learning-rate schedule of each
trained model, sharded over the ranks with FSDP2 (or replicated for ``ddp``) before the
optimizers are built. Nothing here trains or touches checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from trivium.errors import UserError
from trivium.models.model_dir import check_model_dir
from trivium.models.rope import rope_config_overrides
from trivium.trainer import lora
from trivium.trainer.critic import CriticModel
from trivium.trainer.data_parallel import DataParallel
from trivium.trainer.fsdp import shard_model
from trivium.trainer.optim import build_optimizer, build_scheduler
from trivium.trainer.packed_attention import use_packed_attention
from trivium.trainer.packing import PACKED_MODEL_TYPES, packs
from trivium.trainer.settings import TrainerSettings

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "auto": torch.float32,
}


def load_causal_lm(
    path: str,
    dtype: str = "float32",
    trainable: bool = True,
    device: str = "cpu",
    key: str = "model.model_path",
    packed: bool = False,
    config_overrides: dict[str, Any] | None = None,
) -> torch.nn.Module:
    """``packed``: the model will also run packed micro-batches (trainer/packing.py);
    ``config_overrides``: config attributes set over the model's config.json (models/rope.py)."""
    check_model_dir(path, key=key)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=DTYPES.get(dtype, torch.float32), **(config_overrides or {})
        ).to(device)
    except (OSError, ValueError) as error:
        raise UserError(f"Cannot load the model in {key}={path!r}: {error}") from error
    model.config.use_cache = False
    if packed:
        use_packed_attention(model)
    if not trainable:
        model.eval()
        model.requires_grad_(False)
    return model


@dataclass
class TrainerModels:
    """What a trainer trains with; ``reference`` is None under LoRA (the actor without its
    adapter serves) or when no loss term needs it, the critic's three None without a critic."""

    actor: torch.nn.Module
    reference: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: Any
    critic: CriticModel | None = None
    critic_optimizer: torch.optim.Optimizer | None = None
    critic_scheduler: Any = None


def build_trainer_models(
    settings: TrainerSettings, *, device: torch.device, parallel: DataParallel
) -> TrainerModels:
    """The actor, its reference, the critic, their optimizers and schedules (sharded over the ranks)."""
    overrides = rope_config_overrides(
        settings.model_path, rope_scaling=settings.rope_scaling, rope_theta=settings.rope_theta
    )
    actor = _load_actor(settings, device=device, parallel=parallel, config_overrides=overrides)
    # Under LoRA the reference is the actor with its adapter switched off: no second copy.
    reference = (
        load_causal_lm(
            settings.model_path,
            settings.dtype,
            trainable=False,
            device=str(device),
            packed=settings.pack_sequences,
            config_overrides=overrides,
        )
        if settings.loss.needs_reference and settings.lora is None
        else None
    )
    _shard(actor, reference, settings=settings, device=device, parallel=parallel)
    schedule = {
        "scheduler_type": settings.lr_scheduler_type,
        "total_steps": settings.total_steps,
        "warmup_ratio": settings.lr_warmup_steps_ratio,
        "warmup_steps": settings.lr_warmup_steps,
        "min_lr_ratio": settings.min_lr_ratio,
    }
    optimizer = build_optimizer(
        actor.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=settings.betas
    )
    models = TrainerModels(actor, reference, optimizer, build_scheduler(optimizer, **schedule))
    if settings.use_critic:
        models.critic = _load_critic(settings, device=device, parallel=parallel, config_overrides=overrides)
        models.critic_optimizer = build_optimizer(
            models.critic.parameters(), lr=settings.critic_lr, weight_decay=settings.weight_decay
        )
        models.critic_scheduler = build_scheduler(models.critic_optimizer, **schedule)
    return models


def _load_actor(
    settings: TrainerSettings,
    *,
    device: torch.device,
    parallel: DataParallel,
    config_overrides: dict[str, Any],
) -> torch.nn.Module:
    """The trained policy, in training mode: with its LoRA adapter and gradient checkpointing when
    configured; refused when packed micro-batches are asked of a model that cannot run them."""
    actor = load_causal_lm(
        settings.model_path,
        settings.dtype,
        device=str(device),
        packed=settings.pack_sequences,
        config_overrides=config_overrides,
    )
    if settings.lora is not None:
        actor = lora.wrap_with_lora(actor, settings.lora)
        # A new adapter's A is random: the ranks shard rank 0's, as one process would train it.
        parallel.copy_from_first_rank(lora.adapter_parameters(actor))
    if settings.gradient_checkpointing:
        # Non-reentrant (transformers' default, stated because FSDP2 needs it): the recomputation
        # runs inside FSDP2's hooks, which gather the sharded parameters again.
        actor.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if settings.lora is not None:
            actor.enable_input_require_grads()  # frozen embeddings: checkpointed blocks still need grads
    actor.train()
    if settings.pack_sequences and not packs(actor):
        raise UserError(
            f"trainer.use_remove_padding: packed micro-batches are implemented for {', '.join(PACKED_MODEL_TYPES)} "
            f"models; {settings.model_path} is a {actor.config.model_type!r} model. Set it to false"
        )
    return actor


def _load_critic(
    settings: TrainerSettings,
    *,
    device: torch.device,
    parallel: DataParallel,
    config_overrides: dict[str, Any],
) -> CriticModel:
    """The critic, in training mode and sharded: its own model path, or the trained model's."""
    critic_key = "model.critic_model_path" if settings.critic_model_path else "model.model_path"
    critic_path = check_model_dir(settings.critic_model_path or settings.model_path, key=critic_key)
    # The rope overrides are the trained model's: a critic of its own keeps its config.
    critic_overrides = {} if settings.critic_model_path else config_overrides
    critic = CriticModel.from_pretrained(str(critic_path), config_overrides=critic_overrides).to(device)
    if settings.pack_sequences:
        use_packed_attention(critic.trunk)
    critic.train()
    _shard(critic, settings=settings, device=device, parallel=parallel)
    return critic


def _shard(
    *models: torch.nn.Module | None, settings: TrainerSettings, device: torch.device, parallel: DataParallel
) -> None:
    """FSDP2 over the ranks, or replicas for ``ddp`` (before the optimizers are built: they hold the shards)."""
    if not parallel.sharded:
        return
    for model in models:
        if model is not None:
            shard_model(
                model,
                device_type=device.type,
                world_size=parallel.world_size,
                replicate=settings.strategy == "ddp",
                offload_params=settings.param_offload,
            )

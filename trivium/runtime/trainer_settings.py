"""The resolved config turned into ``TrainerSettings`` (``trivium/trainer/settings.py``), with
the checks of what the built-in trainer refuses: its ranks, strategy, offload and LoRA."""

from __future__ import annotations

from typing import Any

from trivium.algorithm.advantages import ADVANTAGE_FNS, requires_critic
from trivium.algorithm.presets import PRESETS
from trivium.errors import UserError
from trivium.models.engine import takes_lora_adapters
from trivium.trainer.settings import LoRASettings, LossSettings, TinkerSettings, TrainerSettings

# trainer.trainer_strategy -> TrainerSettings.strategy ("fsdp" is veRL's name for the same FSDP2 code).
TRAINER_STRATEGY_NAMES = {"fsdp": "fsdp2", "fsdp2": "fsdp2", "ddp": "ddp", "none": "none"}


def check_supported(config: Any) -> None:
    """Config keys the schema accepts but the built-in trainer does not implement yet."""
    trainer = config.trainer
    if trainer.ulysses_sequence_parallel_size > 1:
        raise NotImplementedError(
            "sequence parallelism (trainer.ulysses_sequence_parallel_size > 1) is not implemented; set it to 1"
        )
    check_trainer_parallelism(config)


def check_trainer_parallelism(config: Any) -> None:
    """Ranks, strategy, placement and offload of the trainer (docs/fsdp.md)."""
    trainer, cluster = config.trainer, config.cluster
    ranks = int(trainer.data_parallel_size or 1)
    on_gpu = cluster.device_type == "cuda"
    if ranks < 1:
        raise UserError(f"trainer.data_parallel_size must be >= 1, got {ranks}")
    if ranks > 1 and trainer.trainer_strategy == "none":
        raise UserError(
            f"trainer.data_parallel_size is {ranks} but trainer.trainer_strategy is 'none' (one rank); "
            "set trainer_strategy: fsdp2 or data_parallel_size: 1"
        )
    if ranks > 1 and on_gpu and ranks > int(cluster.trainer_devices or 0):
        raise UserError(
            f"trainer.data_parallel_size is {ranks} but the trainer has {cluster.trainer_devices} GPU(s) "
            "(cluster.trainer_devices); use at most one rank per GPU"
        )
    offload = [key for key in ("param_offload", "optimizer_offload") if getattr(trainer, key)]
    if offload and not on_gpu:
        raise UserError(
            f"trainer.{offload[0]} moves GPU memory to the CPU; this run trains on the CPU already. Remove it"
        )
    if offload and ranks < 2:
        raise NotImplementedError(
            f"trainer.{offload[0]} is applied through FSDP2 and needs trainer.data_parallel_size >= 2"
        )
    if offload and trainer.trainer_strategy == "ddp":
        raise UserError(
            f"trainer.{offload[0]} offloads FSDP2's shards, but trainer_strategy 'ddp' keeps whole models on "
            "every rank; use trainer_strategy: fsdp2 to shard and offload"
        )
    if trainer.optimizer_offload and not trainer.param_offload:
        raise UserError(
            "trainer.optimizer_offload without trainer.param_offload: FSDP2 keeps the optimizer state with "
            "the parameter shards; set param_offload: true to offload both"
        )


def loss_settings(algorithm: Any) -> LossSettings:
    """Coefficients come from the preset or the user (resolve() merged them into the *_args)."""
    penalty_args = algorithm.kl_penalty_fn_args or {}
    adaptive = bool(penalty_args.get("adaptive", False))
    return LossSettings(
        policy_loss_fn=algorithm.policy_loss_fn,
        policy_loss_fn_args=dict(algorithm.policy_loss_fn_args or {}),
        advantage_fn=algorithm.advantage_fn or "none",
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        kl_penalty_fn=algorithm.kl_penalty_fn or "none",
        kl_penalty_coef=float(penalty_args.get("kl_coef", 0.0)),
        kl_penalty_adaptive=adaptive,
        kl_penalty_target=float(penalty_args["target_kl"]) if adaptive else None,
        kl_penalty_horizon=float(penalty_args["horizon"]) if adaptive else None,
        kl_loss_fn=algorithm.kl_loss_fn or "none",
        kl_loss_coef=float((algorithm.kl_loss_fn_args or {}).get("kl_coef", 0.0)),
        entropy_loss_fn=algorithm.entropy_loss_fn or "none",
        entropy_coef=float((algorithm.entropy_loss_fn_args or {}).get("entropy_coef", 0.0)),
        loss_agg_mode=algorithm.loss_agg_mode or "token-mean",
    )


LORA_DTYPES = ("auto", "float32", "bfloat16", "float16")


def lora_settings(config: Any) -> LoRASettings | None:
    """The adapter of model.lora_configs, or None (train all weights)."""
    adapters = config.model.lora_configs
    if not adapters:
        return None
    adapter, key = adapters[0], "model.lora_configs[0]"
    if int(adapter.lora_rank) < 1:
        raise UserError(f"{key}.lora_rank must be >= 1, got {adapter.lora_rank}")
    if not 0 <= float(adapter.lora_dropout) < 1:
        raise UserError(f"{key}.lora_dropout must be in [0, 1), got {adapter.lora_dropout}")
    if adapter.lora_dtype not in LORA_DTYPES:
        raise UserError(f"{key}.lora_dtype is {adapter.lora_dtype!r}; use one of {', '.join(LORA_DTYPES)}")
    targets = adapter.target_modules
    if not isinstance(targets, str):
        if not targets or not all(isinstance(name, str) for name in targets):
            raise UserError(f"{key}.target_modules must be 'all-linear' or a list of module names, got {targets!r}")
        targets = tuple(targets)
    return LoRASettings(
        rank=int(adapter.lora_rank),
        alpha=float(adapter.lora_alpha),
        target_modules=targets,
        exclude_modules=adapter.exclude_modules,
        dropout=float(adapter.lora_dropout),
        dtype=str(adapter.lora_dtype),
        init_path=adapter.path,
        sync_merged=not takes_lora_adapters(config.explorer.rollout_model.engine_type),
    )


def tinker_settings(config: Any) -> TinkerSettings | None:
    """The Tinker service's training client, or None (the weights train here)."""
    tinker = config.model.tinker
    if not tinker.enable:
        return None
    prefix = "-".join(part for part in (config.project, config.group, config.name) if part) or "trivium"
    return TinkerSettings(
        base_model=tinker.base_model or config.model.model_path,
        rank=int(tinker.rank),
        seed=tinker.seed,
        train_mlp=bool(tinker.train_mlp),
        train_attn=bool(tinker.train_attn),
        train_unembed=bool(tinker.train_unembed),
        request_timeout=float(config.synchronizer.sync_timeout),
        name_prefix=prefix,
    )


def trainer_settings(config: Any, model_path: str | None = None, *, cpu_threads: int | None = None) -> TrainerSettings:
    check_supported(config)
    algorithm, trainer = config.algorithm, config.trainer
    loss = loss_settings(algorithm)
    strategy_args = dict(algorithm.sample_strategy_args or {})
    staleness_limit = None
    if algorithm.sample_strategy == "staleness_control":
        staleness_limit = int(strategy_args.get("max_staleness", 1))
    optimizer = algorithm.optimizer
    return TrainerSettings(
        model_path=model_path or config.model.model_path,
        critic_model_path=config.model.critic_model_path,
        use_critic=loss.advantage_fn != "none" and requires_critic(ADVANTAGE_FNS.get(loss.advantage_fn)),
        lr=float(optimizer.lr),
        weight_decay=float(optimizer.weight_decay),
        betas=tuple(optimizer.betas),
        lr_scheduler_type=optimizer.lr_scheduler_type,
        lr_warmup_steps_ratio=float(optimizer.lr_warmup_steps_ratio),
        lr_warmup_steps=optimizer.lr_warmup_steps,
        min_lr_ratio=float(optimizer.min_lr_ratio),
        critic_lr=float(trainer.critic_lr),
        cliprange_value=float(trainer.cliprange_value),
        grad_clip=float(trainer.grad_clip),
        ppo_epochs=int(trainer.ppo_epochs),
        micro_batch_size=int(trainer.ppo_micro_batch_size_per_gpu),
        use_dynamic_bsz=bool(trainer.use_dynamic_bsz),
        max_token_len_per_gpu=int(trainer.max_token_len_per_gpu),
        total_steps=trainer.total_steps,
        old_logprobs_source=trainer.old_logprobs_source,
        behaviour_weight_cap=None if trainer.behaviour_weight_cap is None else float(trainer.behaviour_weight_cap),
        behaviour_weight_range=(
            None if trainer.behaviour_weight_range is None else tuple(float(v) for v in trainer.behaviour_weight_range)
        ),
        share_prompt_forward=bool(trainer.share_prompt_forward),
        pack_sequences=bool(trainer.use_remove_padding),
        gradient_checkpointing=bool(trainer.enable_gradient_checkpointing),
        logit_chunk_tokens=None if trainer.logit_chunk_tokens is None else int(trainer.logit_chunk_tokens),
        staleness_limit=staleness_limit,
        staleness_mode=str(strategy_args.get("mode", "drop")),
        truncation=trainer.truncation,
        learns_from_rollouts=PRESETS[algorithm.algorithm_type].learns_from_rollouts,
        loss=loss,
        lora=lora_settings(config),
        tinker=tinker_settings(config),
        dtype=config.model.dtype,
        device="cuda" if config.cluster.compute_device == "cuda" else "cpu",
        rope_scaling=dict(config.model.rope_scaling) if config.model.rope_scaling else None,
        rope_theta=None if config.model.rope_theta is None else float(config.model.rope_theta),
        cpu_threads=cpu_threads,
        data_parallel_size=int(trainer.data_parallel_size or 1),
        strategy=TRAINER_STRATEGY_NAMES[trainer.trainer_strategy],
        param_offload=bool(trainer.param_offload),
        collective_timeout=float(config.synchronizer.sync_timeout),
    )

"""The resolved config turned into ``TrainerSettings`` (``trivium/trainer/settings.py``).

A plain copy: what the built-in trainer refuses (its ranks, strategy, offload and LoRA) is
checked by ``validate()`` (``config/trainer_rules.py``), so ``trivium plan`` refuses it too."""

from __future__ import annotations

from typing import Any

from trivium.algorithm.advantages import ADVANTAGE_FNS, requires_critic
from trivium.algorithm.presets import PRESETS
from trivium.algorithm.sample_strategies import sample_strategy
from trivium.config.lora_serving import serves_adapter
from trivium.config.none_name import named
from trivium.trainer.settings import LoRASettings, LossSettings, TinkerSettings, TrainerSettings

# trainer.trainer_strategy -> TrainerSettings.strategy ("fsdp" is veRL's name for the same FSDP2 code);
# trainer_strategy none (one rank) is None.
TRAINER_STRATEGY_NAMES = {"fsdp": "fsdp2", "fsdp2": "fsdp2", "ddp": "ddp"}


def _strategy(name: str | None) -> str | None:
    return None if name is None else TRAINER_STRATEGY_NAMES[name]


def loss_settings(algorithm: Any) -> LossSettings:
    """Coefficients come from the preset or the user (resolve() merged them into the *_args);
    a function the config leaves out (``none``) is None."""
    penalty_args = algorithm.kl_penalty_fn_args or {}
    adaptive = bool(penalty_args.get("adaptive", False))
    return LossSettings(
        policy_loss_fn=algorithm.policy_loss_fn,
        policy_loss_fn_args=dict(algorithm.policy_loss_fn_args or {}),
        advantage_fn=named(algorithm.advantage_fn),
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        kl_penalty_fn=named(algorithm.kl_penalty_fn),
        kl_penalty_coef=float(penalty_args.get("kl_coef", 0.0)),
        kl_penalty_adaptive=adaptive,
        kl_penalty_target=float(penalty_args["target_kl"]) if adaptive else None,
        kl_penalty_horizon=float(penalty_args["horizon"]) if adaptive else None,
        kl_loss_fn=named(algorithm.kl_loss_fn),
        kl_loss_coef=float((algorithm.kl_loss_fn_args or {}).get("kl_coef", 0.0)),
        entropy_loss_fn=named(algorithm.entropy_loss_fn),
        entropy_coef=float((algorithm.entropy_loss_fn_args or {}).get("entropy_coef", 0.0)),
        loss_agg_mode=algorithm.loss_agg_mode or "token-mean",
    )


def lora_settings(config: Any) -> LoRASettings | None:
    """The adapter of model.lora_configs, or None (train all weights)."""
    adapters = config.model.lora_configs
    if not adapters:
        return None
    adapter = adapters[0]  # validate() checked its values (config/trainer_rules.py)
    targets = (
        adapter.target_modules if isinstance(adapter.target_modules, str) else tuple(adapter.target_modules)
    )
    return LoRASettings(
        rank=int(adapter.lora_rank),
        alpha=float(adapter.lora_alpha),
        target_modules=targets,
        exclude_modules=adapter.exclude_modules,
        dropout=float(adapter.lora_dropout),
        dtype=str(adapter.lora_dtype),
        init_path=adapter.path,
        sync_merged=not serves_adapter(
            config.explorer.rollout_model.engine_type, config.explorer.rollout_model.enable_lora
        ),
    )


def tinker_settings(config: Any) -> TinkerSettings | None:
    """The Tinker service's training client, or None (the weights train here)."""
    tinker = config.model.tinker
    if not tinker.enable:
        return None
    prefix = "-".join(part for part in (config.project, config.group, config.name) if part) or "trivium"
    return TinkerSettings(
        base_model=tinker.base_model,  # resolve() named the policy's path when unset
        rank=int(tinker.rank),
        seed=tinker.seed,
        train_mlp=bool(tinker.train_mlp),
        train_attn=bool(tinker.train_attn),
        train_unembed=bool(tinker.train_unembed),
        request_timeout=float(config.synchronizer.sync_timeout),
        name_prefix=prefix,
    )


def trainer_settings(
    config: Any, model_path: str | None = None, *, cpu_threads: int | None = None
) -> TrainerSettings:
    algorithm, trainer = config.algorithm, config.trainer
    loss = loss_settings(algorithm)
    strategy_args = dict(algorithm.sample_strategy_args or {})  # resolve() filled the strategy's defaults
    controls_staleness = sample_strategy(algorithm.sample_strategy).controls_staleness
    optimizer = algorithm.optimizer
    return TrainerSettings(
        model_path=model_path or config.model.model_path,
        critic_model_path=config.model.critic_model_path,
        use_critic=loss.advantage_fn is not None and requires_critic(ADVANTAGE_FNS.get(loss.advantage_fn)),
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
        behaviour_weight_cap=None
        if trainer.behaviour_weight_cap is None
        else float(trainer.behaviour_weight_cap),
        behaviour_weight_range=(
            None
            if trainer.behaviour_weight_range is None
            else tuple(float(v) for v in trainer.behaviour_weight_range)
        ),
        replay_sampling_mask=bool(trainer.replay_sampling_mask),
        share_prompt_forward=bool(trainer.share_prompt_forward),
        pack_sequences=bool(trainer.use_remove_padding),
        gradient_checkpointing=bool(trainer.enable_gradient_checkpointing),
        logit_chunk_tokens=None if trainer.logit_chunk_tokens is None else int(trainer.logit_chunk_tokens),
        staleness_limit=int(strategy_args["max_staleness"]) if controls_staleness else None,
        staleness_mode=str(strategy_args["mode"]) if controls_staleness else "drop",
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
        strategy=_strategy(named(trainer.trainer_strategy)),
        param_offload=bool(trainer.param_offload),
        collective_timeout=float(config.synchronizer.sync_timeout),
    )

"""Turning the resolved config into components. The only place the runtime reads raw config.

Each builder takes the resolved ``TriviumConfig`` (or one section) and returns a plain
object; the loops in ``trivium.runtime`` never look at the config again.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from trivium.algorithm.advantages import ADVANTAGE_FNS, computed_by_explorer, requires_critic
from trivium.algorithm.presets import PRESETS
from trivium.config.unused_keys import engine_options
from trivium.explorer.explorer import EvalSet, Explorer
from trivium.explorer.runner import RunnerPool
from trivium.models.engine.busy_clients import BusyClients
from trivium.trainer.settings import LossSettings, TrainerSettings


def _get(mapping: Any, *path: str, default: Any = None) -> Any:
    """Nested lookup in an open mapping (trainer_config) that may be None or partial."""
    current = mapping
    for key in path:
        if current is None:
            return default
        current = current.get(key) if hasattr(current, "get") else getattr(current, key, None)
    return default if current is None else current


def run_dir_of(config: Any) -> Path:
    return Path(config.checkpoint_job_dir)


# ---------------------------------------------------------------- trainer
def check_supported(config: Any) -> None:
    """Config keys the schema accepts but the built-in trainer does not implement yet."""
    model, trainer = config.model, config.trainer
    if model.lora_configs:
        raise NotImplementedError(
            "LoRA training (model.lora_configs) is not implemented by the built-in trainer; "
            "remove model.lora_configs to train all weights"
        )
    if model.tinker.enable:
        raise NotImplementedError("the Tinker training service (model.tinker.enable) is not implemented")
    if trainer.ulysses_sequence_parallel_size > 1:
        raise NotImplementedError(
            "sequence parallelism (trainer.ulysses_sequence_parallel_size > 1) is not implemented; set it to 1"
        )
    if (config.cluster.trainer_devices or 0) > 1 and config.cluster.device_type == "cuda":
        raise NotImplementedError(
            f"the built-in trainer runs on one device; the config gives it {config.cluster.trainer_devices} "
            "(FSDP over several GPUs is not implemented)"
        )


def trainer_settings(config: Any, model_path: str | None = None) -> TrainerSettings:
    check_supported(config)
    algorithm, trainer = config.algorithm, config.trainer
    extra = trainer.trainer_config or {}
    loss = LossSettings(
        policy_loss_fn=algorithm.policy_loss_fn,
        policy_loss_fn_args=dict(algorithm.policy_loss_fn_args or {}),
        advantage_fn=algorithm.advantage_fn or "none",
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        kl_penalty_fn=algorithm.kl_penalty_fn or "none",
        kl_penalty_coef=float((algorithm.kl_penalty_fn_args or {}).get("kl_coef", 0.001)),
        kl_loss_fn=algorithm.kl_loss_fn or "none",
        kl_loss_coef=float((algorithm.kl_loss_fn_args or {}).get("kl_coef", 0.001)),
        entropy_loss_fn=algorithm.entropy_loss_fn or "none",
        entropy_coef=float((algorithm.entropy_loss_fn_args or {}).get("entropy_coef", 0.0)),
        loss_agg_mode=algorithm.loss_agg_mode or "token-mean",
    )
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
        critic_lr=float(_get(extra, "critic", "optim", "lr", default=1e-5)),
        cliprange_value=float(_get(extra, "critic", "cliprange_value", default=0.5)),
        grad_clip=float(trainer.grad_clip),
        ppo_epochs=int(trainer.ppo_epochs),
        micro_batch_size=int(trainer.ppo_micro_batch_size_per_gpu),
        use_dynamic_bsz=bool(trainer.use_dynamic_bsz),
        max_token_len_per_gpu=int(trainer.max_token_len_per_gpu or 16384),
        total_steps=trainer.total_steps,
        old_logprobs_source=str(_get(extra, "old_logprobs_source", default="auto")),
        share_prompt_forward=bool(_get(extra, "share_prompt_forward", default=True)),
        gradient_checkpointing=bool(
            _get(extra, "actor_rollout_ref", "model", "enable_gradient_checkpointing", default=False)
        ),
        staleness_limit=staleness_limit,
        staleness_mode=str(strategy_args.get("mode", "drop")),
        loss=loss,
        learns_from_rollouts=PRESETS[algorithm.algorithm_type].learns_from_rollouts,
        dtype=config.model.dtype,
        device="cuda" if config.cluster.device_type == "cuda" else "cpu",
    )


# ---------------------------------------------------------------- engines and model wrappers
def build_engines(config: Any, model_path: str | None = None) -> list[Any]:
    from trivium.models.engine import create_engine

    rollout = config.explorer.rollout_model
    if config.model.external_model.enable:
        rollout = replace(rollout, engine_type="external")
    engines = []
    for index in range(max(1, rollout.engine_num)):
        engines.append(
            create_engine(
                rollout.engine_type,
                model_path=model_path or rollout.model_path or config.model.model_path,
                dtype=rollout.dtype or config.model.dtype,
                seed=(rollout.seed if rollout.seed is not None else config.seed) + index,
                max_model_len=config.model.max_model_len,
                **_external_engine_args(config) if rollout.engine_type == "external" else {},
                **engine_options(rollout),
            )
        )
    return engines


def _external_engine_args(config: Any) -> dict[str, Any]:
    external = config.model.external_model
    return {
        "base_url": os.environ.get(external.base_url_env),
        "api_key": os.environ.get(external.api_key_env),
        "model_name": external.model_name,
    }


def build_wrappers(config: Any, engines: list[Any]) -> list[Any]:
    from trivium.models.wrapper import ModelWrapper

    model = config.model
    return [
        ModelWrapper(
            engine,
            chat_template=model.custom_chat_template,
            chat_template_path=model.chat_template_path,
            max_prompt_tokens=model.max_prompt_tokens,
            max_response_tokens=model.max_response_tokens,
            min_response_tokens=model.min_response_tokens,
            max_model_len=model.max_model_len,
            enable_prompt_truncation=model.enable_prompt_truncation,
            default_rollout_args={
                "temperature": model.temperature,
                "top_p": model.top_p,
                "top_k": model.top_k,
                "repetition_penalty": model.repetition_penalty,
            },
            enable_history=config.explorer.rollout_model.enable_history,
            enable_thinking=model.enable_thinking,
        )
        for engine in engines
    ]


def build_auxiliary_wrappers(config: Any) -> list[Any]:
    from trivium.models.engine import create_engine
    from trivium.models.wrapper import ModelWrapper

    wrappers = []
    for aux in config.explorer.auxiliary_models:
        engine = create_engine(
            aux.engine_type,
            model_path=aux.model_path,
            dtype=aux.dtype or config.model.dtype,
            seed=aux.seed if aux.seed is not None else config.seed,
            max_model_len=aux.max_model_len,
            **engine_options(aux),
        )
        wrappers.append(
            ModelWrapper(
                engine,
                max_prompt_tokens=aux.max_prompt_tokens,
                max_response_tokens=aux.max_response_tokens or 512,
                max_model_len=aux.max_model_len,
                enable_thinking=aux.enable_thinking,
            )
        )
    return wrappers


# ---------------------------------------------------------------- explorer
def build_runner_pool(
    config: Any, wrappers: list[Any], auxiliary: list[Any], run_dir: Path, *, runners: int | None = None
) -> RunnerPool:
    from trivium.monitor.logs import setup_component_logger
    from trivium.workflows.registry import WORKFLOWS

    explorer = config.explorer
    for key, value in (explorer.env_vars or {}).items():
        os.environ[str(key)] = str(value)
    num_runners = runners or max(1, explorer.runner_per_model) * len(wrappers)
    loggers = [
        setup_component_logger(run_dir, f"explorer_runner_{i}", config.log.level, config.log.group_by_node)
        for i in range(num_runners)
    ]

    busy = BusyClients()
    for wrapper in [*wrappers, *auxiliary]:
        wrapper.share_busy_clients(busy)

    def make_workflow(task, runner_id: int):
        workflow_class = WORKFLOWS.get(task.workflow)
        return workflow_class(
            task=task,
            model=wrappers[runner_id % len(wrappers)],
            auxiliary_models=auxiliary,
            logger=loggers[runner_id % len(loggers)],
        )

    return RunnerPool(
        make_workflow=make_workflow,
        num_runners=num_runners,
        concurrent_mode=explorer.concurrent_mode,
        max_timeout=explorer.max_timeout,
        max_retry_times=explorer.max_retry_times,
        runner_loggers=loggers,
        logger=logging.getLogger("trivium.explorer"),
        busy=busy,
    )


def build_taskset_reader(config: Any) -> Any:
    from trivium.buffer.task_reader import MultiTasksetReader, TaskReader

    buffer = config.buffer
    readers = [
        TaskReader(taskset, total_epochs=buffer.total_epochs, total_steps=buffer.total_steps, default_seed=config.seed)
        for taskset in buffer.explorer_input.tasksets
    ]
    if not readers:
        return None
    return readers[0] if len(readers) == 1 else MultiTasksetReader(readers)


def build_eval_sets(config: Any) -> list[EvalSet]:
    from trivium.buffer.task_reader import TaskReader

    sets = []
    for taskset in config.buffer.explorer_input.eval_tasksets:
        sets.append(
            EvalSet(
                name=taskset.name,
                reader=None,
                make_reader=lambda ts=taskset: TaskReader(ts, is_eval=True, total_epochs=1, default_seed=config.seed),
            )
        )
    return sets


def build_experience_pipeline(config: Any) -> Any:
    pipeline = config.data_processor.experience_pipeline
    if pipeline is None or not pipeline.operators:
        return None
    from trivium.buffer.pipeline import ExperiencePipeline

    return ExperiencePipeline.from_configs(pipeline.operators)


def build_explorer(
    config: Any,
    *,
    taskset_reader: Any,
    writer: Any,
    pool: RunnerPool,
    eval_pool: RunnerPool,
    version_fn,
    auxiliary: list[Any] = (),
) -> Explorer:
    algorithm = config.algorithm
    preset = PRESETS[algorithm.algorithm_type]
    advantage_fn = algorithm.advantage_fn
    group_based = advantage_fn not in (None, "none") and computed_by_explorer(ADVANTAGE_FNS.get(advantage_fn))
    if preset.needs_teacher_logprobs and not auxiliary:
        raise ValueError(
            f"algorithm {algorithm.algorithm_type} scores rollouts with a teacher: set explorer.auxiliary_models "
            "(the first one is the teacher)"
        )
    return Explorer(
        taskset_reader=taskset_reader,
        writer=writer,
        runner_pool=pool,
        eval_runner_pool=eval_pool,
        batch_size=config.buffer.batch_size,
        eval_sets=build_eval_sets(config),
        experience_pipeline=build_experience_pipeline(config),
        advantage_fn=advantage_fn if group_based else None,
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        max_repeat_times_per_runner=config.explorer.max_repeat_times_per_runner,
        model_version=version_fn,
        logger=logging.getLogger("trivium.explorer"),
        greedy_baseline=preset.needs_greedy_baseline,
        # The teacher of distillation presets is the first auxiliary model.
        teacher=auxiliary[0] if preset.needs_teacher_logprobs else None,
    )

"""The resolved config turned into ``ExplorerSettings`` (``trivium/explorer/settings.py``): the
rollout and auxiliary engines, their wrappers, the runners, over-rollout and serve mode.

A copy of resolved values: what the engines cannot run is refused by ``validate()``
(``config/engine_rules.py``). Read here, at run time, are only the environment variables that
hold an external engine's address and the served API's key."""

from __future__ import annotations

import os
from typing import Any

from trivium.algorithm.advantages import ADVANTAGE_FNS, computed_by_explorer
from trivium.algorithm.presets import PRESETS
from trivium.config.modes import traits_of
from trivium.config.none_name import named, text_or_none
from trivium.config.unused_keys import engine_options
from trivium.errors import UserError
from trivium.explorer.over_rollout import OverRollout
from trivium.explorer.settings import (
    EngineSettings,
    ExplorerSettings,
    RunnerSettings,
    ServeSettings,
    WrapperSettings,
)


def rollout_engine_settings(config: Any, compute_threads: int | None = None) -> EngineSettings:
    rollout, cluster = config.explorer.rollout_model, config.cluster
    external = config.model.external_model
    is_external = rollout.engine_type == "external"
    on_gpu = cluster.compute_device == "cuda"
    # Separate GPUs in one process: the engines take the devices after the trainer's.
    first_device = cluster.trainer_devices if on_gpu and not cluster.shared_devices and not cluster.uses_ray else None
    return EngineSettings(
        **_model_engine_fields(rollout),
        count=int(rollout.engine_num),
        device="cuda" if on_gpu else "cpu",
        first_device=first_device,
        enable_sleep_mode=traits_of(config.mode).takes_turns and on_gpu,
        compute_threads=compute_threads,
        base_url=os.environ.get(external.base_url_env) if is_external else None,
        api_key=os.environ.get(external.api_key_env) if is_external else None,
        model_name=external.model_name if is_external else _tinker_base_model(config, rollout),
        request_timeout=float(config.synchronizer.sync_timeout),
        options={**engine_options(rollout), **_sampling_mask_option(config)},
        rope_scaling=dict(config.model.rope_scaling) if config.model.rope_scaling else None,
        rope_theta=None if config.model.rope_theta is None else float(config.model.rope_theta),
    )


def _model_engine_fields(model: Any) -> dict[str, Any]:
    """The engine settings a model section gives alike for the rollout and the auxiliary models."""
    return {
        "engine_type": model.engine_type,
        "model_path": model.model_path,
        "dtype": model.dtype,
        "seed": int(model.seed),
        "max_model_len": model.max_model_len,
        "tensor_parallel_size": int(model.tensor_parallel_size),
        "gpu_memory_utilization": float(model.gpu_memory_utilization),
        "enforce_eager": bool(model.enforce_eager),
        "name": model.name,
    }


def _sampling_mask_option(config: Any) -> dict[str, int]:
    """Sampling-mask replay: the engine records kept sets of at most this many ids (validate()
    refused engines that cannot: config/sampling_mask_rules.py)."""
    trainer = config.trainer
    return {"sampling_mask_cap": int(trainer.sampling_mask_max_tokens)} if trainer.replay_sampling_mask else {}


def _tinker_base_model(config: Any, rollout: Any) -> str | None:
    """The Tinker service's name of the sampled model (engine_type tinker; filled by resolve())."""
    return config.model.tinker.base_model if rollout.engine_type == "tinker" else None


def auxiliary_engine_settings(config: Any) -> tuple[EngineSettings, ...]:
    """One engine per auxiliary model (validate() refuses engine_num above 1: config/engine_rules.py)."""
    return tuple(
        EngineSettings(**_model_engine_fields(aux), count=1, options=engine_options(aux))
        for aux in config.explorer.auxiliary_models
    )


def api_key_from_env(variable: str | None) -> str | None:
    """The API key in environment variable ``variable`` (explorer.api_key_env); None when unset."""
    if not variable:
        return None
    key = os.environ.get(variable)
    if not key:
        raise UserError(f"explorer.api_key_env names the environment variable {variable!r}, which is not set or empty")
    return key


def rollout_wrapper_settings(config: Any) -> WrapperSettings:
    """The rollout model's limits: explorer.rollout_model overrides (resolve() filled them from model.*)."""
    model, rollout = config.model, config.explorer.rollout_model
    return WrapperSettings(
        **_model_wrapper_fields(rollout),
        chat_template=text_or_none(model.custom_chat_template),
        chat_template_path=model.chat_template_path,
        max_response_tokens=rollout.max_response_tokens,
        min_response_tokens=int(model.min_response_tokens),
        enable_prompt_truncation=bool(model.enable_prompt_truncation),
        default_rollout_args={
            "temperature": model.temperature,
            "top_p": model.top_p,
            "top_k": model.top_k,
            "repetition_penalty": model.repetition_penalty,
        },
    )


def _model_wrapper_fields(model: Any) -> dict[str, Any]:
    """The wrapper settings a model section gives alike for the rollout and the auxiliary models."""
    return {
        "max_prompt_tokens": model.max_prompt_tokens,
        "max_model_len": model.max_model_len,
        "enable_history": bool(model.enable_history),
        "enable_thinking": model.enable_thinking,
        "enable_openai_api": bool(model.enable_openai_api),
        "enable_auto_tool_choice": bool(model.enable_auto_tool_choice),
        "tool_call_parser": named(model.tool_call_parser),
        "reasoning_parser": named(model.reasoning_parser),
    }


def auxiliary_wrapper_settings(config: Any) -> tuple[WrapperSettings, ...]:
    return tuple(
        WrapperSettings(
            **_model_wrapper_fields(aux),
            chat_template=None,
            chat_template_path=None,
            max_response_tokens=aux.max_response_tokens or 512,
            min_response_tokens=1,
            enable_prompt_truncation=True,
            default_rollout_args={},
        )
        for aux in config.explorer.auxiliary_models
    )


def expected_explore_steps(config: Any) -> int | None:
    """Explorer steps the run will take: in a mode that trains what it explores, those its
    trainer uses (at most the tasksets' steps); otherwise the tasksets' steps."""
    from trivium.config.resolve import explorer_steps_to_train, explorer_total_steps

    if traits_of(config.mode).trains_what_it_explores:
        return explorer_steps_to_train(config)
    return explorer_total_steps(config)


def explorer_settings(config: Any, engine_threads: int | None = None) -> ExplorerSettings:
    explorer, buffer, algorithm = config.explorer, config.buffer, config.algorithm
    traits = traits_of(config.mode)
    reads_tasksets = traits.reads_training_tasksets
    advantage_fn = named(algorithm.advantage_fn)
    group_based = advantage_fn is not None and computed_by_explorer(ADVANTAGE_FNS.get(advantage_fn))
    preset = PRESETS[algorithm.algorithm_type]
    return ExplorerSettings(
        batch_size=int(buffer.batch_size),
        total_steps=expected_explore_steps(config) if reads_tasksets else None,
        step_limit=expected_explore_steps(config) if traits.trains_what_it_explores else None,
        buffer_total_steps=buffer.total_steps,
        tasksets=tuple(buffer.explorer_input.tasksets) if reads_tasksets else (),
        eval_tasksets=tuple(buffer.explorer_input.eval_tasksets),
        experience_buffer=buffer.trainer_input.experience_buffer,
        task_pipeline=config.data_processor.task_pipeline,
        experience_pipeline=config.data_processor.experience_pipeline,
        group_advantage_fn=advantage_fn if group_based else None,
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        greedy_baseline=preset.needs_greedy_baseline,
        # A teacher scores the rollouts a run trains on; a mode that only evaluates has none.
        uses_teacher=preset.needs_teacher_logprobs and not traits_of(config.mode).evaluates_only,
        runners=RunnerSettings(
            runner_per_model=int(explorer.runner_per_model),
            concurrent_mode=explorer.concurrent_mode,
            max_timeout=float(explorer.max_timeout),
            max_retry_times=int(explorer.max_retry_times),
            env_vars={str(k): str(v) for k, v in (explorer.env_vars or {}).items()},
            max_repeat_times_per_runner=explorer.max_repeat_times_per_runner,
            max_failed_steps=explorer.max_failed_steps,
            dynamic_timeout_ratio=float(explorer.dynamic_timeout.ratio) if explorer.dynamic_timeout.enable else None,
        ),
        over_rollout=OverRollout(
            ratio=float(explorer.over_rollout.ratio),
            wait_after_min=float(explorer.over_rollout.wait_after_min),
            return_partial_tasks=bool(explorer.over_rollout.return_partial_tasks),
        ),
        eval_interval=int(explorer.eval_interval),
        eval_on_startup=bool(explorer.eval_on_startup),
        runner_state_report_interval=float(explorer.runner_state_report_interval or 0),
        bench_on_latest_checkpoint=bool(explorer.bench_on_latest_checkpoint),
        rollout=rollout_engine_settings(config, engine_threads),
        auxiliary=auxiliary_engine_settings(config),
        wrapper=rollout_wrapper_settings(config),
        auxiliary_wrappers=auxiliary_wrapper_settings(config),
        serve=ServeSettings(
            listen_address=str(explorer.listen_address), port=int(explorer.proxy_port),
            api_key_env=explorer.api_key_env, api_key=api_key_from_env(explorer.api_key_env),
            status_check_interval=float(explorer.service_status_check_interval),
            min_running_engines=int(explorer.min_running_model_num),
        ),
    )

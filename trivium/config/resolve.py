"""resolve(): the one place where every derived configuration value is computed.

Input: a loaded (and, with stages, expanded) TriviumConfig. Output: a copy where nothing
the runtime needs is left to guess: preset functions, batch sizes, per-taskset settings,
token limits, the device split, the sync method, step counts, names and the run directory.
Each rule is one small function, called by ``resolve_with_notes`` in the order they depend on
each other: those for devices, engines, placement and sync live in ``resolve_devices``, those
for the trainer and step counts in ``resolve_trainer``, the others below. Running
resolve() twice gives the same result. Checks that are not needed to derive a value live in
``validate.py``; notes about what was derived are returned as Suggestions.
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path

from trivium.algorithm.presets import PRESETS
from trivium.algorithm.sample_strategies import SAMPLE_STRATEGIES
from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.lora_serving import fill_lora_serving
from trivium.config.none_name import named
from trivium.config.resolve_devices import (
    auto_engine_type,
    detect_gpu_count,
    engine_devices,
    fill_compute_device,
    fill_devices,
    fill_engine_types,
    fill_engines_in_explorer,
    fill_eval_interval,
    fill_placement,
    fill_placement_keys,
    fill_sync,
)
from trivium.config.resolve_trainer import (
    DEFAULT_MICRO_BATCH_TOKENS,
    TRAINER_CONFIG_ALIASES,
    explorer_steps_to_train,
    explorer_total_steps,
    fill_trainer,
    trainer_total_steps,
)
from trivium.config.run_dir import choose_run_name
from trivium.config.schema import (
    AlgorithmConfig,
    StorageConfig,
    TaskSelectorConfig,
    TriviumConfig,
    field_choices,
)

# What other modules import from here; the rules of two groups live in modules of their own.
__all__ = [
    "DEFAULT_MICRO_BATCH_TOKENS",
    "EXPERIENCE_BUFFER_NAME",
    "TRAINER_CONFIG_ALIASES",
    "auto_engine_type",
    "detect_gpu_count",
    "engine_devices",
    "explorer_steps_to_train",
    "explorer_total_steps",
    "resolve",
    "resolve_with_notes",
    "trainer_total_steps",
]

EXPERIENCE_BUFFER_NAME = "experience_buffer"


def resolve(config: TriviumConfig) -> TriviumConfig:
    return resolve_with_notes(config)[0]


def resolve_with_notes(config: TriviumConfig) -> tuple[TriviumConfig, list[Suggestion]]:
    config = copy.deepcopy(config)
    notes: list[Suggestion] = []
    _fill_algorithm(config, notes)
    _fill_batch_sizes(config)
    _fill_tasksets(config, notes)
    _fill_experience_buffer(config)
    _fill_token_limits(config)
    _fill_inference_models(config)
    fill_devices(config, notes)
    fill_compute_device(config, notes)
    fill_placement_keys(config)
    fill_engine_types(config, notes)
    fill_lora_serving(config)
    fill_placement(config, notes)
    fill_engines_in_explorer(config, notes)
    fill_sync(config, notes)
    fill_eval_interval(config, notes)
    fill_trainer(config, notes)
    _fill_names(config)
    return config, notes


# ---------------------------------------------------------------- algorithm


def _fill_algorithm(config: TriviumConfig, notes: list[Suggestion]) -> None:
    algorithm = config.algorithm
    optimizer = algorithm.optimizer
    if optimizer.warmup_style is not None:
        message = "is deprecated; its value was copied to algorithm.optimizer.lr_scheduler_type"
        warnings.warn(f"algorithm.optimizer.warmup_style {message}", DeprecationWarning, stacklevel=3)
        notes.append(Suggestion("algorithm.optimizer.warmup_style", message, "deprecated"))
        optimizer.lr_scheduler_type = optimizer.warmup_style
        optimizer.warmup_style = None
    preset = PRESETS.get(algorithm.algorithm_type)
    if preset is None:
        return  # validate() reports the unknown name
    if preset.fixed_repeat_times is not None and algorithm.repeat_times != preset.fixed_repeat_times:
        notes.append(
            Suggestion(
                "algorithm.repeat_times",
                f"set to {preset.fixed_repeat_times}: {algorithm.algorithm_type} always uses that many responses per prompt",
                "note",
            )
        )
        algorithm.repeat_times = preset.fixed_repeat_times
    for name in (
        "advantage_fn",
        "policy_loss_fn",
        "kl_penalty_fn",
        "kl_loss_fn",
        "entropy_loss_fn",
        "sample_strategy",
        "loss_agg_mode",
    ):
        if getattr(algorithm, name) is None:
            setattr(algorithm, name, getattr(preset, name))
    if preset.needs_rollout_logprobs and algorithm.bypass_old_logprobs is None \
            and config.trainer.old_logprobs_source == "auto":
        algorithm.bypass_old_logprobs = True  # read as trainer.old_logprobs_source: engine
    if algorithm.sample_strategy == "warmup":
        # Trinity-RFT keeps 'warmup' as a deprecated name of its default strategy.
        notes.append(
            Suggestion(
                "algorithm.sample_strategy",
                "'warmup' is the deprecated name of 'default'; set to default",
                "deprecated",
            )
        )
        algorithm.sample_strategy = "default"
    # Preset arguments apply only to the preset's own function; user arguments win.
    if algorithm.advantage_fn == preset.advantage_fn:
        algorithm.advantage_fn_args = {**preset.advantage_fn_args, **algorithm.advantage_fn_args}
    if algorithm.policy_loss_fn == preset.policy_loss_fn:
        algorithm.policy_loss_fn_args = {**preset.policy_loss_fn_args, **algorithm.policy_loss_fn_args}
    _fold_policy_loss_agg_mode(algorithm, notes)
    _fill_coefficients(algorithm)
    _fill_sample_strategy_args(algorithm)


def _fold_policy_loss_agg_mode(algorithm: AlgorithmConfig, notes: list[Suggestion]) -> None:
    """policy_loss_fn_args.loss_agg_mode gives way to algorithm.loss_agg_mode (filled above), as in
    Trinity-RFT, which overwrites the one with the other: the policy loss aggregates with
    algorithm.loss_agg_mode. A loss with an aggregation rule of its own (rec) is switched to follow it."""
    args = algorithm.policy_loss_fn_args
    if not isinstance(args, dict) or "loss_agg_mode" not in args:
        return
    key = "algorithm.policy_loss_fn_args.loss_agg_mode"
    given = args.pop("loss_agg_mode")
    choices = field_choices(AlgorithmConfig, "loss_agg_mode")
    if given not in choices:
        raise ConfigError(Problem(key, f"invalid value {given!r}; choose one of: {', '.join(choices)}"))
    from trivium.algorithm.policy_losses import POLICY_LOSS_FNS, loss_agg_mode_switch

    if algorithm.policy_loss_fn in POLICY_LOSS_FNS:
        switch = loss_agg_mode_switch(POLICY_LOSS_FNS.get(algorithm.policy_loss_fn))
        if switch is not None:
            args.setdefault(switch, True)
    if given != algorithm.loss_agg_mode:
        notes.append(
            Suggestion(
                key,
                f"{given!r} gives way to algorithm.loss_agg_mode {algorithm.loss_agg_mode!r}, which decides "
                f"the policy loss's aggregation (as in Trinity-RFT); set algorithm.loss_agg_mode: {given} to "
                "aggregate that way",
                "note",
            )
        )


# Coefficients of the KL and entropy terms when the user names the function but not its weight.
DEFAULT_KL_COEF = 0.001
DEFAULT_ENTROPY_COEF = 0.0


def _fill_coefficients(algorithm) -> None:
    for fn_name, args_name, key, default in (
        ("kl_penalty_fn", "kl_penalty_fn_args", "kl_coef", DEFAULT_KL_COEF),
        ("kl_loss_fn", "kl_loss_fn_args", "kl_coef", DEFAULT_KL_COEF),
        ("entropy_loss_fn", "entropy_loss_fn_args", "entropy_coef", DEFAULT_ENTROPY_COEF),
    ):
        if named(getattr(algorithm, fn_name)) is not None and key not in getattr(algorithm, args_name):
            setattr(algorithm, args_name, {**getattr(algorithm, args_name), key: default})


def _fill_sample_strategy_args(algorithm: AlgorithmConfig) -> None:
    """The arguments the sample strategy reads, where the config leaves them out."""
    defaults = SAMPLE_STRATEGIES[algorithm.sample_strategy].defaults if algorithm.sample_strategy in SAMPLE_STRATEGIES else {}
    if defaults:
        algorithm.sample_strategy_args = {**defaults, **(algorithm.sample_strategy_args or {})}


# ---------------------------------------------------------------- buffer


def _fill_batch_sizes(config: TriviumConfig) -> None:
    buffer = config.buffer
    if not buffer.train_batch_size:
        buffer.train_batch_size = buffer.batch_size * config.algorithm.repeat_times


def _fill_tasksets(config: TriviumConfig, notes: list[Suggestion]) -> None:
    explorer_input = config.buffer.explorer_input
    single = explorer_input.taskset
    if single is not None:
        if not explorer_input.tasksets:
            explorer_input.tasksets = [copy.deepcopy(single)]
        elif explorer_input.tasksets[0] != single and _taskset_key(single) != _taskset_key(
            explorer_input.tasksets[0]
        ):
            raise ConfigError(
                Problem(
                    "buffer.explorer_input.taskset",
                    "set either taskset (one dataset) or tasksets (a list), not both",
                )
            )
    for index, taskset in enumerate(explorer_input.tasksets):
        _fill_taskset(config, taskset, is_eval=False, default_name=f"taskset_{index}")
    for index, taskset in enumerate(explorer_input.eval_tasksets):
        _fill_taskset(config, taskset, is_eval=True, default_name=f"eval_taskset_{index}")
    # Keep the single-taskset spelling readable: it shows the first (canonical) entry.
    if explorer_input.tasksets and (single is not None or len(explorer_input.tasksets) == 1):
        explorer_input.taskset = copy.deepcopy(explorer_input.tasksets[0])


def _taskset_key(taskset: StorageConfig) -> tuple:
    return (taskset.name, taskset.path, taskset.split, taskset.subset_name)


def _fill_taskset(config: TriviumConfig, taskset: StorageConfig, is_eval: bool, default_name: str) -> None:
    explorer_input = config.buffer.explorer_input
    model = config.model
    taskset.is_eval = is_eval
    taskset.name = taskset.name or default_name
    if taskset.repeat_times is None:
        taskset.repeat_times = 1 if is_eval else config.algorithm.repeat_times
    if taskset.default_workflow_type is None:
        taskset.default_workflow_type = (
            (explorer_input.default_eval_workflow_type or explorer_input.default_workflow_type)
            if is_eval
            else explorer_input.default_workflow_type
        )
    if taskset.default_reward_fn_type is None:
        taskset.default_reward_fn_type = explorer_input.default_reward_fn_type
    # Taskset rollout_args win over the model-wide sampling settings.
    base = {"temperature": model.temperature, "top_p": model.top_p, "top_k": model.top_k}
    if model.logprobs:
        base["logprobs"] = model.logprobs
    taskset.rollout_args = {**base, **taskset.rollout_args}
    _default_seed(config, taskset)


def _fill_experience_buffer(config: TriviumConfig) -> None:
    trainer_input = config.buffer.trainer_input
    if trainer_input.experience_buffer is None:
        trainer_input.experience_buffer = StorageConfig(name=EXPERIENCE_BUFFER_NAME, storage_type="queue")
    buffer = trainer_input.experience_buffer
    buffer.name = buffer.name or EXPERIENCE_BUFFER_NAME
    for name, auxiliary in trainer_input.auxiliary_buffers.items():
        auxiliary.name = auxiliary.name or name
    # Datasets read by the trainer (SFT/DPO files, expert data) shuffle with the global seed too.
    for storage in [buffer, *trainer_input.auxiliary_buffers.values()]:
        _default_seed(config, storage)


def _default_seed(config: TriviumConfig, storage: StorageConfig) -> None:
    _fold_selector_aliases(storage)
    if storage.task_selector.seed is None:
        storage.task_selector.seed = config.seed


def _fold_selector_aliases(storage: StorageConfig) -> None:
    """data_selector is another name for task_selector, and kwargs for its args."""
    if storage.data_selector is not None:
        if storage.task_selector != TaskSelectorConfig():
            raise ConfigError(
                Problem(
                    f"{storage.name or 'taskset'}.data_selector",
                    "is another name for task_selector: set only one of them",
                )
            )
        storage.task_selector, storage.data_selector = storage.data_selector, None
    selector = storage.task_selector
    if selector.kwargs:
        selector.args = {**selector.kwargs, **selector.args}
        selector.kwargs = {}


# ---------------------------------------------------------------- model and engines


def _fill_token_limits(config: TriviumConfig) -> None:
    model = config.model
    if model.critic_model_path is None:
        model.critic_model_path = model.model_path
    prompt, response = model.max_prompt_tokens, model.max_response_tokens
    if model.max_model_len is None:
        if prompt is None or response is None:
            raise ConfigError(
                Problem(
                    "model.max_model_len",
                    "is not set and cannot be derived: set it, or set both model.max_prompt_tokens and "
                    "model.max_response_tokens (their sum becomes max_model_len)",
                )
            )
        model.max_model_len = prompt + response
    elif prompt is None and response is not None:
        model.max_prompt_tokens = model.max_model_len - response
    elif response is None and prompt is not None:
        model.max_response_tokens = model.max_model_len - prompt
    # Both unset: responses are limited only by max_model_len minus the prompt length.


def _fill_inference_models(config: TriviumConfig) -> None:
    model = config.model
    rollout = config.explorer.rollout_model
    if model.external_model.enable and rollout.engine_type in ("auto", "hf"):
        rollout.engine_type = "external"
    if model.tinker.enable and rollout.engine_type == "auto":
        rollout.engine_type = "tinker"  # the weights train on the service: sample from it too
    if model.tinker.enable and not model.tinker.base_model:
        model.tinker.base_model = model.model_path  # the service's name of the policy, unless given
    for engine, is_rollout in [(rollout, True)] + [(aux, False) for aux in config.explorer.auxiliary_models]:
        engine.dtype = engine.dtype or model.dtype
        if engine.seed is None:
            engine.seed = config.seed
        if is_rollout:
            engine.model_path = engine.model_path or model.model_path
            for name in ("max_model_len", "max_prompt_tokens", "max_response_tokens", "enable_thinking"):
                if getattr(engine, name) is None:
                    setattr(engine, name, getattr(model, name))
        elif engine.max_model_len is None and engine.max_prompt_tokens and engine.max_response_tokens:
            engine.max_model_len = engine.max_prompt_tokens + engine.max_response_tokens


# ---------------------------------------------------------------- names


def _fill_names(config: TriviumConfig) -> None:
    if config.checkpoint_job_dir is None:
        config.name = choose_run_name(config)
        config.checkpoint_job_dir = os.fspath(Path(config.checkpoint_root_dir) / config.project / config.name)
    if config.ray_namespace is None:
        config.ray_namespace = f"{config.project}/{config.name}"
    # The components' names in logs and Ray: an empty name means the default one.
    config.explorer.name = config.explorer.name or "explorer"
    config.trainer.name = config.trainer.name or "trainer"

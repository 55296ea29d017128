"""resolve(): the one place where every derived configuration value is computed.

Input: a loaded (and, with stages, expanded) TriviumConfig. Output: a copy where nothing
the runtime needs is left to guess: preset functions, batch sizes, per-taskset settings,
token limits, the device split, the sync method, step counts, names and the run directory.
Each rule is one small function below, in the order they depend on each other. Running
resolve() twice gives the same result. Checks that are not needed to derive a value live in
``validate.py``; notes about what was derived are returned as Suggestions.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import os
import warnings
from pathlib import Path

from trivium.algorithm.presets import PRESETS
from trivium.config.errors import ConfigError, Problem, Suggestion
from trivium.config.gpu_layout import derived_placement_keys
from trivium.config.modes import EXPLORING_MODES, TRAINING_MODES
from trivium.config.run_dir import choose_run_name
from trivium.config.schema import (
    InferenceModelConfig,
    OptimizerConfig,
    StorageConfig,
    TaskSelectorConfig,
    TrainerConfig,
    TriviumConfig,
    field_choices,
    field_default,
)
from trivium.config.taskset_size import count_rows

EXPERIENCE_BUFFER_NAME = "experience_buffer"
DEFAULT_MICRO_BATCH_TOKENS = 16384


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
    _fill_devices(config, notes)
    _fill_compute_device(config, notes)
    _fill_placement_keys(config)
    _fill_engine_types(config, notes)
    _fill_placement(config, notes)
    _fill_sync(config, notes)
    _fill_eval_interval(config, notes)
    _fill_trainer(config, notes)
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
        notes.append(Suggestion(
            "algorithm.repeat_times",
            f"set to {preset.fixed_repeat_times}: {algorithm.algorithm_type} always uses that many responses per prompt",
            "note",
        ))
        algorithm.repeat_times = preset.fixed_repeat_times
    for name in ("advantage_fn", "policy_loss_fn", "kl_penalty_fn", "kl_loss_fn", "entropy_loss_fn",
                 "sample_strategy", "loss_agg_mode"):
        if getattr(algorithm, name) is None:
            setattr(algorithm, name, getattr(preset, name))
    if algorithm.sample_strategy == "warmup":
        # Trinity-RFT keeps 'warmup' as a deprecated name of its default strategy.
        notes.append(Suggestion("algorithm.sample_strategy", "'warmup' is the deprecated name of 'default'; set "
                                "to default", "deprecated"))
        algorithm.sample_strategy = "default"
    # Preset arguments apply only to the preset's own function; user arguments win.
    if algorithm.advantage_fn == preset.advantage_fn:
        algorithm.advantage_fn_args = {**preset.advantage_fn_args, **algorithm.advantage_fn_args}
    if algorithm.policy_loss_fn == preset.policy_loss_fn:
        algorithm.policy_loss_fn_args = {**preset.policy_loss_fn_args, **algorithm.policy_loss_fn_args}
    _fill_coefficients(algorithm)


# Coefficients of the KL and entropy terms when the user names the function but not its weight.
DEFAULT_KL_COEF = 0.001
DEFAULT_ENTROPY_COEF = 0.0


def _fill_coefficients(algorithm) -> None:
    for fn_name, args_name, key, default in (
        ("kl_penalty_fn", "kl_penalty_fn_args", "kl_coef", DEFAULT_KL_COEF),
        ("kl_loss_fn", "kl_loss_fn_args", "kl_coef", DEFAULT_KL_COEF),
        ("entropy_loss_fn", "entropy_loss_fn_args", "entropy_coef", DEFAULT_ENTROPY_COEF),
    ):
        if getattr(algorithm, fn_name) not in (None, "none") and key not in getattr(algorithm, args_name):
            setattr(algorithm, args_name, {**getattr(algorithm, args_name), key: default})


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
        elif explorer_input.tasksets[0] != single and _taskset_key(single) != _taskset_key(explorer_input.tasksets[0]):
            raise ConfigError(Problem(
                "buffer.explorer_input.taskset",
                "set either taskset (one dataset) or tasksets (a list), not both",
            ))
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
            if is_eval else explorer_input.default_workflow_type
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
            raise ConfigError(Problem(
                f"{storage.name or 'taskset'}.data_selector",
                "is another name for task_selector: set only one of them",
            ))
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
            raise ConfigError(Problem(
                "model.max_model_len",
                "is not set and cannot be derived: set it, or set both model.max_prompt_tokens and "
                "model.max_response_tokens (their sum becomes max_model_len)",
            ))
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


# ---------------------------------------------------------------- devices


def engine_devices(engine: InferenceModelConfig) -> int:
    """Devices one model's engines occupy; an external API occupies none."""
    if engine.engine_type in ("external", "tinker"):
        return 0
    return engine.engine_num * engine.tensor_parallel_size


def detect_gpu_count() -> int:
    import torch  # imported here: resolving a config with explicit devices must stay cheap

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _fill_devices(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.gpu_per_node is None:
        cluster.gpu_per_node = detect_gpu_count()
        notes.append(Suggestion("cluster.gpu_per_node", f"detected {cluster.gpu_per_node} GPU(s)", "note"))
    total = cluster.node_num * cluster.gpu_per_node
    mode = config.mode
    explorer = engine_devices(config.explorer.rollout_model) if mode in EXPLORING_MODES else 0
    auxiliary = sum(engine_devices(aux) for aux in config.explorer.auxiliary_models) if mode in EXPLORING_MODES else 0
    if total == 0:
        cluster.device_type, cluster.shared_devices = "cpu", True
        cluster.explorer_devices = cluster.auxiliary_devices = cluster.trainer_devices = 0
        if mode in EXPLORING_MODES and mode in TRAINING_MODES:
            notes.append(Suggestion("cluster", "no GPU: explorer, auxiliary models and trainer share the CPU", "note"))
        return
    cluster.device_type = "cuda"
    if mode == "colocate":
        # One device holds the engine and the trainer; they take turns.
        cluster.shared_devices = True
        cluster.explorer_devices = cluster.trainer_devices = 1
        cluster.auxiliary_devices = 0
        return
    cluster.shared_devices = False
    cluster.explorer_devices, cluster.auxiliary_devices = explorer, auxiliary
    cluster.trainer_devices = total - explorer - auxiliary if mode in TRAINING_MODES else 0


def _fill_compute_device(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.compute_device == "auto":
        cluster.compute_device = cluster.device_type
    elif cluster.compute_device == "cpu" and cluster.device_type == "cuda":
        notes.append(Suggestion(
            "cluster.compute_device",
            "cpu: the GPUs are reserved and assigned as on a GPU cluster, but every component computes on "
            "the CPU and syncs over gloo (a placement rehearsal)",
            "note",
        ))


def _fill_placement_keys(config: TriviumConfig) -> None:
    """Trinity-RFT's names for the device split; values the config gives are checked in validate."""
    for derived in derived_placement_keys(config):
        if getattr(derived.owner, derived.attribute) in (None, ""):
            setattr(derived.owner, derived.attribute, derived.value)


# ---------------------------------------------------------------- engines


def _fill_engine_types(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """``engine_type: auto``: vLLM where the engines get GPUs and vLLM is installed, hf otherwise."""
    engines = [("explorer.rollout_model", config.explorer.rollout_model)]
    engines += [(f"explorer.auxiliary_models[{i}]", aux) for i, aux in enumerate(config.explorer.auxiliary_models)]
    for key, engine in engines:
        if engine.engine_type != "auto":
            continue
        engine.engine_type, why = auto_engine_type(config.cluster.device_type, config.cluster.compute_device)
        if config.mode in EXPLORING_MODES:
            notes.append(Suggestion(f"{key}.engine_type", f"auto: {engine.engine_type}, {why}", "note"))


def auto_engine_type(device_type: str, compute_device: str) -> tuple[str, str]:
    """The engine ``auto`` picks for the cluster's devices and what they compute on, and why."""
    if device_type != "cuda":
        return "hf", "since the run has no GPU"
    if compute_device != "cuda":
        return "hf", "since the run computes on the CPU (cluster.compute_device: cpu)"
    if importlib.util.find_spec("vllm") is None:
        return "hf", "since vLLM is not installed (pip install vllm; it serves far faster on GPUs)"
    return "vllm", "since the run has GPUs and vLLM is installed"


# ---------------------------------------------------------------- placement


def _fill_placement(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.ray_address is None and os.environ.get("RAY_ADDRESS"):
        cluster.ray_address = os.environ["RAY_ADDRESS"]
    if config.mode == "colocate":
        # Explorer and trainer take turns on one device: nothing to place apart.
        if cluster.placement == "ray":
            notes.append(Suggestion(
                "cluster.placement",
                "colocate runs explorer and trainer in turns in one process; 'ray' applies to both, train, "
                "explore and bench",
                "note",
            ))
        cluster.uses_ray = False
        return
    if cluster.placement == "auto":
        devices = (cluster.explorer_devices or 0) + (cluster.auxiliary_devices or 0) + (cluster.trainer_devices or 0)
        cluster.uses_ray = bool(cluster.ray_address) or cluster.node_num > 1 or devices > 1
    else:
        cluster.uses_ray = cluster.placement == "ray"


# ---------------------------------------------------------------- synchronization


def _fill_sync(config: TriviumConfig, notes: list[Suggestion]) -> None:
    synchronizer = config.synchronizer
    mode, cluster = config.mode, config.cluster
    separate_processes = mode in ("train", "explore", "bench")
    on_gpus = cluster.device_type == "cuda" and not cluster.shared_devices
    if cluster.uses_ray and not separate_processes:
        # Explorer and trainer live in different processes: tensors cannot be handed over in memory.
        if synchronizer.sync_method in (None, "memory"):
            if synchronizer.sync_method == "memory":
                notes.append(Suggestion(
                    "synchronizer.sync_method",
                    "memory works within one process; on Ray the weights are broadcast with nccl "
                    "(gloo on CPU) instead",
                    "note",
                ))
            synchronizer.sync_method = "nccl"
        return
    if separate_processes and synchronizer.sync_method in ("nccl", "memory"):
        # A run of one side only has no peer to broadcast to: weights travel as checkpoints.
        notes.append(Suggestion(
            "synchronizer.sync_method",
            f"'{synchronizer.sync_method}' needs trainer and explorer in one run; mode '{mode}' runs only one "
            "of them, so it uses checkpoint instead",
            "note",
        ))
        synchronizer.sync_method = "checkpoint"
    if synchronizer.sync_method is None:
        if separate_processes:
            synchronizer.sync_method = "checkpoint"
        elif mode == "both" and on_gpus and cluster.explorer_devices:
            synchronizer.sync_method = "nccl"
        else:
            synchronizer.sync_method = "memory"
        return
    if synchronizer.sync_method == "nccl" and not separate_processes and not on_gpus:
        synchronizer.sync_method = "memory"
        notes.append(Suggestion(
            "synchronizer.sync_method",
            f"nccl needs separate GPUs for explorer and trainer; mode '{mode}' on "
            f"{'CPU' if cluster.device_type == 'cpu' else 'one shared GPU'} uses memory instead",
            "note",
        ))


def _fill_eval_interval(config: TriviumConfig, notes: list[Suggestion]) -> None:
    explorer, sync_interval = config.explorer, config.synchronizer.sync_interval
    if sync_interval <= 0 or explorer.eval_interval <= 0 or explorer.eval_interval % sync_interval == 0:
        return
    # Evaluation uses freshly synchronized weights, so it can only happen on a sync step.
    rounded = max(sync_interval, round(explorer.eval_interval / sync_interval) * sync_interval)
    notes.append(Suggestion(
        "explorer.eval_interval",
        f"{explorer.eval_interval} is not a multiple of synchronizer.sync_interval ({sync_interval}); "
        f"using {rounded}. Set it to a multiple of sync_interval to choose yourself.",
    ))
    explorer.eval_interval = rounded


# ---------------------------------------------------------------- trainer and steps


# veRL-style trainer_config paths and the trainer keys they stand for.
TRAINER_CONFIG_ALIASES = {
    ("old_logprobs_source",): "old_logprobs_source",
    ("share_prompt_forward",): "share_prompt_forward",
    ("critic", "optim", "lr"): "critic_lr",
    ("critic", "cliprange_value"): "cliprange_value",
    ("actor_rollout_ref", "model", "enable_gradient_checkpointing"): "enable_gradient_checkpointing",
    ("actor_rollout_ref", "model", "use_remove_padding"): "use_remove_padding",
    ("actor_rollout_ref", "actor", "fsdp_config", "param_offload"): "param_offload",
    ("actor_rollout_ref", "actor", "fsdp_config", "optimizer_offload"): "optimizer_offload",
}


def _fill_trainer(config: TriviumConfig, notes: list[Suggestion]) -> None:
    trainer = config.trainer
    _copy_trainer_config_aliases(config, notes)
    _copy_optimizer_clip(config, notes)
    if trainer.trainer_type == "verl":
        trainer.trainer_type = "default"
        notes.append(Suggestion(
            "trainer.trainer_type",
            "'verl' is read as 'default' (the built-in PyTorch trainer); veRL-style keys in "
            "trainer.trainer_config are passed to it unchanged",
            "note",
        ))
    if trainer.max_token_len_per_gpu is None and config.model.max_model_len:
        # Large enough that a batch of short sequences is one micro-batch (many tiny
        # micro-batches are several times slower), and always room for two full sequences.
        trainer.max_token_len_per_gpu = max(DEFAULT_MICRO_BATCH_TOKENS, 2 * config.model.max_model_len)
    if trainer.total_steps is None:
        trainer.total_steps = trainer_total_steps(config)
    if trainer.data_parallel_size is None:
        # One rank per trainer GPU; a CPU-only machine states its rank count explicitly.
        on_gpu = config.cluster.device_type == "cuda"
        trainer.data_parallel_size = max(1, int(config.cluster.trainer_devices or 0)) if on_gpu else 1


def _copy_trainer_config_aliases(config: TriviumConfig, notes: list[Suggestion]) -> None:
    trainer = config.trainer
    extra = trainer.trainer_config
    if not isinstance(extra, dict) and not hasattr(extra, "items"):
        return
    for path, key in TRAINER_CONFIG_ALIASES.items():
        value = _nested_get(extra, path)
        if value is None:
            continue
        choices = field_choices(TrainerConfig, key)
        source = "trainer.trainer_config." + ".".join(path)
        if choices and value not in choices:
            raise ConfigError(Problem(source, f"invalid value {value!r}; choose one of: {', '.join(choices)}"))
        setattr(trainer, key, type(getattr(trainer, key))(value))
        notes.append(Suggestion(source, f"read as trainer.{key} = {value!r}", "note"))


def _copy_optimizer_clip(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """algorithm.optimizer.clip_grad (the reference's spelling) and trainer.grad_clip are one setting."""
    clip, trainer = config.algorithm.optimizer.clip_grad, config.trainer
    if clip == field_default(OptimizerConfig, "clip_grad") or clip == trainer.grad_clip:
        return
    if trainer.grad_clip != field_default(TrainerConfig, "grad_clip"):
        raise ConfigError(Problem(
            "algorithm.optimizer.clip_grad",
            f"{clip} disagrees with trainer.grad_clip {trainer.grad_clip}: they are one setting; set one of them",
        ))
    trainer.grad_clip = clip
    notes.append(Suggestion("algorithm.optimizer.clip_grad", f"read as trainer.grad_clip = {clip}", "note"))


def _nested_get(mapping, path: tuple[str, ...]):
    current = mapping
    for key in path:
        if current is None or not hasattr(current, "get"):
            return None
        current = current.get(key)
    return current


def explorer_total_steps(config: TriviumConfig) -> int | None:
    """Explorer steps of the whole run: buffer.total_steps, else epochs over the tasksets."""
    buffer = config.buffer
    if buffer.total_steps is not None:
        return buffer.total_steps
    sizes = [count_rows(taskset) for taskset in buffer.explorer_input.tasksets]
    if not sizes or any(size is None for size in sizes) or buffer.batch_size <= 0:
        return None
    return buffer.total_epochs * sum(sizes) // buffer.batch_size


def explorer_steps_to_train(config: TriviumConfig) -> int | None:
    """Explorer steps of a run that trains what it explores (colocate, both): those of its
    tasksets (``explorer_total_steps``: buffer.total_steps, else whole batches over
    total_epochs), and no more than its trainer's steps use, so it never explores a step its
    trainer would not train. None when neither count is known."""
    by_tasksets = explorer_total_steps(config)
    trainer_steps = config.trainer.total_steps
    if not trainer_steps:
        return by_tasksets
    per_step = max(1, config.buffer.batch_size * config.algorithm.repeat_times)
    used = math.ceil(trainer_steps * config.buffer.train_batch_size / per_step)
    return used if by_tasksets is None else min(by_tasksets, used)


def trainer_total_steps(config: TriviumConfig) -> int | None:
    buffer = config.buffer
    if not buffer.train_batch_size or buffer.train_batch_size <= 0:
        return None
    if config.mode == "train":
        # Training from a dataset: the experience buffer is the data, read total_epochs times.
        if buffer.total_steps is not None:
            return buffer.total_steps
        rows = count_rows(buffer.trainer_input.experience_buffer)
        return None if rows is None else buffer.total_epochs * rows // buffer.train_batch_size
    if config.mode not in TRAINING_MODES:
        return None
    steps = explorer_total_steps(config)
    if steps is None:
        return None
    experiences = steps * buffer.batch_size * config.algorithm.repeat_times
    return experiences // buffer.train_batch_size


# ---------------------------------------------------------------- names


def _fill_names(config: TriviumConfig) -> None:
    if config.checkpoint_job_dir is None:
        config.name = choose_run_name(config)
        config.checkpoint_job_dir = os.fspath(Path(config.checkpoint_root_dir) / config.project / config.name)
    if config.ray_namespace is None:
        config.ray_namespace = f"{config.project}/{config.name}"



"""The run plan: the resolved config turned into typed settings, one per component.

``build_run_settings(config)`` is called once per run (or stage). The session, the loops and
the workers read these settings, never the raw config; every value derived from several keys
was already computed by ``trivium.config.resolve``. Buffers and tasksets keep their schema
sections (``StorageConfig``): they are already typed, and the buffer package consumes them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trivium.algorithm.advantages import ADVANTAGE_FNS, computed_by_explorer, requires_critic
from trivium.algorithm.presets import PRESETS
from trivium.config.modes import ModeTraits, traits_of
from trivium.config.schema import PipelineConfig, StorageConfig
from trivium.config.unused_keys import engine_options
from trivium.errors import UserError
from trivium.explorer.over_rollout import OverRollout
from trivium.models.engine import takes_lora_adapters
from trivium.registry import loaded_plugin_dirs
from trivium.runtime.cpu_share import split_cores
from trivium.trainer.settings import LoRASettings, LossSettings, TrainerSettings


@dataclass(frozen=True)
class EngineSettings:
    """One model's inference engines (``count`` of them)."""

    engine_type: str
    model_path: str | None
    dtype: str
    seed: int
    max_model_len: int | None
    count: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    device: str = "cpu"  # cpu | cuda
    # In one process on GPUs: engine i runs on cuda:<first_device + i>; None shares "cuda" (colocate, or a Ray actor's own GPU).
    first_device: int | None = None
    # colocate on one GPU: a vLLM engine sleeps (weights offloaded) while the trainer runs.
    enable_sleep_mode: bool = False
    # torch threads of the engine's compute (None: the process default); see runtime/cpu_share.py.
    compute_threads: int | None = None
    # OpenAI-compatible API (engine_type external)
    base_url: str | None = None
    api_key: str | None = None
    model_name: str | None = None
    name: str | None = None
    # Engine options set in the config (enable_prefix_caching, ...): the engine uses or refuses each.
    options: dict[str, Any] = field(default_factory=dict)
    # model.rope_scaling / rope_theta: the rollout model loads with them, as the trainer's does (models/rope.py)
    rope_scaling: dict[str, Any] | None = None
    rope_theta: float | None = None

    def factory_kwargs(self, index: int) -> dict[str, Any]:
        """Keyword arguments of ``create_engine`` for engine number ``index``."""
        kwargs: dict[str, Any] = {
            "model_path": self.model_path,
            "dtype": self.dtype,
            "seed": self.seed + index,
            "max_model_len": self.max_model_len,
            **self.options,
        }
        # Passed only when set: plugin engines need not take them otherwise.
        if self.rope_scaling:
            kwargs["rope_scaling"] = self.rope_scaling
        if self.rope_theta is not None:
            kwargs["rope_theta"] = self.rope_theta
        if self.engine_type == "external":
            kwargs.update(base_url=self.base_url, api_key=self.api_key, model_name=self.model_name)
        if self.engine_type == "hf":
            if self.tensor_parallel_size != 1:
                raise UserError("explorer.rollout_model.tensor_parallel_size: the hf engine runs on one device; set it to 1")
            kwargs.update(device=self.device_of(index), compute_threads=self.compute_threads)
        if self.engine_type == "vllm":
            kwargs.update(
                tensor_parallel_size=self.tensor_parallel_size,
                gpu_memory_utilization=self.gpu_memory_utilization,
                enforce_eager=self.enforce_eager,
                enable_sleep_mode=self.enable_sleep_mode,
            )
        return kwargs

    def device_of(self, index: int) -> str:
        if self.device == "cpu" or self.first_device is None:
            return self.device
        return f"cuda:{self.first_device + index}"


@dataclass(frozen=True)
class WrapperSettings:
    """How workflows' requests become engine calls (``ModelWrapper``)."""

    chat_template: str | None
    chat_template_path: str | None
    max_prompt_tokens: int | None
    max_response_tokens: int | None
    min_response_tokens: int
    max_model_len: int | None
    enable_prompt_truncation: bool
    default_rollout_args: dict[str, Any]
    enable_history: bool
    enable_thinking: bool | None
    enable_openai_api: bool  # serve it over HTTP to the workflows (trivium.explorer.workflow_api)
    enable_auto_tool_choice: bool  # replies are parsed into tool calls (validation pairs it with the parser)
    tool_call_parser: str | None
    reasoning_parser: str | None


@dataclass(frozen=True)
class RunnerSettings:
    """The workflow runners (``RunnerPool``)."""

    runner_per_model: int
    concurrent_mode: str
    max_timeout: float
    max_retry_times: int
    env_vars: dict[str, str]
    max_repeat_times_per_runner: int | None
    max_failed_steps: int | None  # explore steps in a row with no usable experience before the run stops
    dynamic_timeout_ratio: float | None  # attempt timeout = mean successful attempt seconds * this; None: off


@dataclass(frozen=True)
class ServeSettings:
    """Where trivium's OpenAI-compatible APIs listen (serve mode's; the workflows' endpoints) and their key."""

    listen_address: str
    port: int
    api_key_env: str | None = None  # the environment variable the key was read from
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ExplorerSettings:
    batch_size: int
    total_steps: int | None  # explorer steps of the run, when known (for progress bars)
    buffer_total_steps: int | None  # the taskset readers stop after this many steps
    tasksets: tuple[StorageConfig, ...]
    eval_tasksets: tuple[StorageConfig, ...]
    experience_buffer: StorageConfig  # where explored experiences are written
    task_pipeline: PipelineConfig | None
    experience_pipeline: PipelineConfig | None
    # Group-based advantages are computed by the explorer (a step holds whole groups).
    group_advantage_fn: str | None
    advantage_fn_args: dict[str, Any]
    greedy_baseline: bool  # one greedy rollout per task, its reward the baseline (remax)
    uses_teacher: bool  # the first auxiliary model scores every rollout (distillation)
    runners: RunnerSettings
    over_rollout: OverRollout  # a step goes on without its slowest tasks (ratio 0: waits for all)
    eval_interval: int
    eval_on_startup: bool
    runner_state_report_interval: float
    bench_on_latest_checkpoint: bool
    rollout: EngineSettings
    auxiliary: tuple[EngineSettings, ...]
    wrapper: WrapperSettings
    auxiliary_wrappers: tuple[WrapperSettings, ...]
    serve: ServeSettings


@dataclass(frozen=True)
class CheckpointSettings:
    save_interval: int
    save_hf_checkpoint: str  # last | always | never
    max_checkpoints_to_keep: int | None


@dataclass(frozen=True)
class SyncSettings:
    method: str
    style: str
    interval: int
    offset: int
    timeout: float
    self_check_interval: int
    train_steps_per_explore_step: float


@dataclass(frozen=True)
class PlacementSettings:
    """Where components run: this process, or Ray actors."""

    uses_ray: bool
    ray_address: str | None
    namespace: str
    device_type: str  # cpu | cuda
    trainer_devices: int
    explorer_devices: int


@dataclass(frozen=True)
class MonitorSettings:
    project: str
    name: str
    monitor_type: str
    monitor_args: dict[str, Any]
    enable_ray_timeline: bool
    group: str = ""  # the config's top-level group of related runs


@dataclass(frozen=True)
class LogSettings:
    level: str
    group_by_node: bool
    explorer_name: str
    trainer_name: str


@dataclass(frozen=True)
class TrainerInputSettings:
    """What the trainer reads: the experience buffer (or a dataset), and expert data for ``mix``."""

    experience_buffer: StorageConfig
    auxiliary_buffers: tuple[tuple[str, StorageConfig], ...]
    mixes_expert_data: bool
    expert_data_ratio: float


@dataclass(frozen=True)
class RunSettings:
    mode: str
    traits: ModeTraits
    run_dir: Path
    seed: int
    resume: bool  # continue_from_checkpoint
    train_batch_size: int
    explorer: ExplorerSettings | None
    trainer: TrainerSettings | None
    checkpoints: CheckpointSettings
    sync: SyncSettings
    placement: PlacementSettings
    monitor: MonitorSettings
    log: LogSettings
    trainer_input: TrainerInputSettings | None = None
    plugin_dirs: tuple[str, ...] = ()  # --plugin-dir directories, imported by every process of the run
    # train mode reads a dataset (an SFT/DPO file, or a train-only algorithm) rather than experiences
    reads_dataset: bool = False
    total_epochs: int = 1


def build_run_settings(config: Any) -> RunSettings:
    """Typed settings of every component, from a resolved config."""
    traits = traits_of(config.mode)
    concurrent_cpu = traits.concurrent and config.cluster.device_type != "cuda" and not config.cluster.uses_ray
    trainer_threads, engine_threads = split_cores() if concurrent_cpu else (None, None)
    algorithm = config.algorithm
    storage = config.buffer.trainer_input.experience_buffer
    return RunSettings(
        mode=config.mode,
        traits=traits,
        run_dir=Path(config.checkpoint_job_dir),
        seed=int(config.seed),
        resume=bool(config.continue_from_checkpoint),
        train_batch_size=int(config.buffer.train_batch_size),
        explorer=explorer_settings(config, engine_threads) if traits.explores else None,
        trainer=trainer_settings(config, cpu_threads=trainer_threads) if traits.trains else None,
        checkpoints=CheckpointSettings(
            save_interval=int(config.trainer.save_interval),
            save_hf_checkpoint=config.trainer.save_hf_checkpoint,
            max_checkpoints_to_keep=config.trainer.max_checkpoints_to_keep,
        ),
        sync=sync_settings(config),
        placement=PlacementSettings(
            uses_ray=bool(config.cluster.uses_ray),
            ray_address=config.cluster.ray_address,
            namespace=config.ray_namespace,
            device_type=config.cluster.device_type or "cpu",
            trainer_devices=int(config.cluster.trainer_devices or 0),
            explorer_devices=int(config.cluster.explorer_devices or 0),
        ),
        monitor=MonitorSettings(
            project=config.project,
            name=config.name,
            monitor_type=config.monitor.monitor_type,
            monitor_args=dict(config.monitor.monitor_args or {}),
            group=config.group or "",
            enable_ray_timeline=bool(config.monitor.enable_ray_timeline),
        ),
        log=LogSettings(
            level=config.log.level,
            group_by_node=bool(config.log.group_by_node),
            explorer_name=config.explorer.name or "explorer",
            trainer_name=config.trainer.name or "trainer",
        ),
        trainer_input=TrainerInputSettings(
            experience_buffer=storage,
            auxiliary_buffers=tuple(config.buffer.trainer_input.auxiliary_buffers.items()),
            mixes_expert_data=algorithm.sample_strategy == "mix",
            expert_data_ratio=float((algorithm.sample_strategy_args or {}).get("expert_data_ratio", 0.25)),
        ) if traits.trains else None,
        reads_dataset=config.mode == "train" and (storage.storage_type == "file" or _preset_trains_on_datasets(algorithm)),
        total_epochs=int(config.buffer.total_epochs),
        plugin_dirs=loaded_plugin_dirs(),
    )


def _preset_trains_on_datasets(algorithm: Any) -> bool:
    preset = PRESETS.get(algorithm.algorithm_type)
    return bool(preset and preset.train_only)


# ---------------------------------------------------------------- trainer


# trainer.trainer_strategy -> TrainerSettings.strategy ("fsdp" is veRL's name for the same FSDP2 code).
TRAINER_STRATEGY_NAMES = {"fsdp": "fsdp2", "fsdp2": "fsdp2", "ddp": "ddp", "none": "none"}


def check_supported(config: Any) -> None:
    """Config keys the schema accepts but the built-in trainer does not implement yet."""
    model, trainer = config.model, config.trainer
    if model.tinker.enable:
        raise NotImplementedError("the Tinker training service (model.tinker.enable) is not implemented")
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
    return LossSettings(
        policy_loss_fn=algorithm.policy_loss_fn,
        policy_loss_fn_args=dict(algorithm.policy_loss_fn_args or {}),
        advantage_fn=algorithm.advantage_fn or "none",
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        kl_penalty_fn=algorithm.kl_penalty_fn or "none",
        kl_penalty_coef=float((algorithm.kl_penalty_fn_args or {}).get("kl_coef", 0.0)),
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
        share_prompt_forward=bool(trainer.share_prompt_forward),
        pack_sequences=bool(trainer.use_remove_padding),
        gradient_checkpointing=bool(trainer.enable_gradient_checkpointing),
        staleness_limit=staleness_limit,
        staleness_mode=str(strategy_args.get("mode", "drop")),
        truncation=trainer.truncation,
        learns_from_rollouts=PRESETS[algorithm.algorithm_type].learns_from_rollouts,
        loss=loss,
        lora=lora_settings(config),
        dtype=config.model.dtype,
        device="cuda" if config.cluster.device_type == "cuda" else "cpu",
        rope_scaling=dict(config.model.rope_scaling) if config.model.rope_scaling else None,
        rope_theta=None if config.model.rope_theta is None else float(config.model.rope_theta),
        cpu_threads=cpu_threads,
        data_parallel_size=int(trainer.data_parallel_size or 1),
        strategy=TRAINER_STRATEGY_NAMES[trainer.trainer_strategy],
        param_offload=bool(trainer.param_offload),
    )


# ---------------------------------------------------------------- explorer and engines


def rollout_engine_settings(config: Any, compute_threads: int | None = None) -> EngineSettings:
    rollout, cluster = config.explorer.rollout_model, config.cluster
    external = config.model.external_model
    is_external = rollout.engine_type == "external"
    on_gpu = cluster.device_type == "cuda"
    # Separate GPUs in one process: the engines take the devices after the trainer's.
    first_device = cluster.trainer_devices if on_gpu and not cluster.shared_devices and not cluster.uses_ray else None
    return EngineSettings(
        engine_type=rollout.engine_type,
        model_path=rollout.model_path,
        dtype=rollout.dtype,
        seed=int(rollout.seed),
        max_model_len=rollout.max_model_len,
        count=max(1, int(rollout.engine_num)),
        tensor_parallel_size=int(rollout.tensor_parallel_size),
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        enforce_eager=bool(rollout.enforce_eager),
        device="cuda" if on_gpu else "cpu",
        first_device=first_device,
        enable_sleep_mode=config.mode == "colocate" and on_gpu,
        compute_threads=compute_threads,
        base_url=os.environ.get(external.base_url_env) if is_external else None,
        api_key=os.environ.get(external.api_key_env) if is_external else None,
        model_name=external.model_name if is_external else None,
        name=rollout.name,
        options=engine_options(rollout),
        rope_scaling=dict(config.model.rope_scaling) if config.model.rope_scaling else None,
        rope_theta=None if config.model.rope_theta is None else float(config.model.rope_theta),
    )


def auxiliary_engine_settings(config: Any) -> tuple[EngineSettings, ...]:
    for index, aux in enumerate(config.explorer.auxiliary_models):
        if aux.engine_num != 1:
            raise UserError(
                f"explorer.auxiliary_models[{index}].engine_num is {aux.engine_num}: an auxiliary model runs "
                "one engine; set it to 1"
            )
    return tuple(
        EngineSettings(
            engine_type=aux.engine_type,
            model_path=aux.model_path,
            dtype=aux.dtype,
            seed=int(aux.seed),
            max_model_len=aux.max_model_len,
            count=1,
            tensor_parallel_size=int(aux.tensor_parallel_size),
            gpu_memory_utilization=float(aux.gpu_memory_utilization),
            enforce_eager=bool(aux.enforce_eager),
            name=aux.name,
            options=engine_options(aux),
        )
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
        chat_template=model.custom_chat_template,
        chat_template_path=model.chat_template_path,
        max_prompt_tokens=rollout.max_prompt_tokens,
        max_response_tokens=rollout.max_response_tokens,
        min_response_tokens=int(model.min_response_tokens),
        max_model_len=rollout.max_model_len,
        enable_prompt_truncation=bool(model.enable_prompt_truncation),
        default_rollout_args={
            "temperature": model.temperature,
            "top_p": model.top_p,
            "top_k": model.top_k,
            "repetition_penalty": model.repetition_penalty,
        },
        enable_history=bool(rollout.enable_history),
        enable_thinking=rollout.enable_thinking,
        enable_openai_api=bool(rollout.enable_openai_api),
        enable_auto_tool_choice=bool(rollout.enable_auto_tool_choice),
        tool_call_parser=rollout.tool_call_parser,
        reasoning_parser=rollout.reasoning_parser,
    )


def auxiliary_wrapper_settings(config: Any) -> tuple[WrapperSettings, ...]:
    return tuple(
        WrapperSettings(
            chat_template=None,
            chat_template_path=None,
            max_prompt_tokens=aux.max_prompt_tokens,
            max_response_tokens=aux.max_response_tokens or 512,
            min_response_tokens=1,
            max_model_len=aux.max_model_len,
            enable_prompt_truncation=True,
            default_rollout_args={},
            enable_history=bool(aux.enable_history),
            enable_thinking=aux.enable_thinking,
            enable_openai_api=bool(aux.enable_openai_api),
            enable_auto_tool_choice=bool(aux.enable_auto_tool_choice),
            tool_call_parser=aux.tool_call_parser,
            reasoning_parser=aux.reasoning_parser,
        )
        for aux in config.explorer.auxiliary_models
    )


def expected_explore_steps(config: Any) -> int | None:
    """Explorer steps the run will take: buffer.total_steps, else enough for the trainer's steps,
    else the epochs over the tasksets (explore mode)."""
    from trivium.config.resolve import explorer_total_steps

    if config.buffer.total_steps:
        return int(config.buffer.total_steps)
    if config.trainer.total_steps:
        per_step = config.buffer.batch_size * config.algorithm.repeat_times
        return math.ceil(config.trainer.total_steps * config.buffer.train_batch_size / max(1, per_step))
    return explorer_total_steps(config)


def explorer_settings(config: Any, engine_threads: int | None = None) -> ExplorerSettings:
    explorer, buffer, algorithm = config.explorer, config.buffer, config.algorithm
    reads_tasksets = traits_of(config.mode).reads_training_tasksets
    advantage_fn = algorithm.advantage_fn
    group_based = advantage_fn not in (None, "none") and computed_by_explorer(ADVANTAGE_FNS.get(advantage_fn))
    preset = PRESETS[algorithm.algorithm_type]
    if preset.needs_teacher_logprobs and not explorer.auxiliary_models:
        raise UserError(
            f"algorithm {algorithm.algorithm_type} scores rollouts with a teacher: set explorer.auxiliary_models "
            "(the first one is the teacher)"
        )
    return ExplorerSettings(
        batch_size=int(buffer.batch_size),
        total_steps=expected_explore_steps(config) if reads_tasksets else None,
        buffer_total_steps=buffer.total_steps,
        tasksets=tuple(buffer.explorer_input.tasksets) if reads_tasksets else (),
        eval_tasksets=tuple(buffer.explorer_input.eval_tasksets),
        experience_buffer=buffer.trainer_input.experience_buffer,
        task_pipeline=config.data_processor.task_pipeline,
        experience_pipeline=config.data_processor.experience_pipeline,
        group_advantage_fn=advantage_fn if group_based else None,
        advantage_fn_args=dict(algorithm.advantage_fn_args or {}),
        greedy_baseline=preset.needs_greedy_baseline,
        uses_teacher=preset.needs_teacher_logprobs,
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
        ),
    )


# ---------------------------------------------------------------- synchronization


def sync_settings(config: Any) -> SyncSettings:
    synchronizer = config.synchronizer
    experiences_per_step = config.buffer.batch_size * config.algorithm.repeat_times
    return SyncSettings(
        method=synchronizer.sync_method,
        style=synchronizer.sync_style,
        interval=int(synchronizer.sync_interval),
        offset=int(synchronizer.sync_offset),
        timeout=float(synchronizer.sync_timeout),
        self_check_interval=int(synchronizer.self_check_interval),
        train_steps_per_explore_step=experiences_per_step / max(1, config.buffer.train_batch_size),
    )

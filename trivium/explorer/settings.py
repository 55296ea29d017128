"""Everything the explorer side reads from the resolved config: its engines, the wrappers
that turn workflows' requests into engine calls, the workflow runners and serve mode.

Built once by ``trivium.runtime.explorer_settings`` (the twin of ``trivium/trainer/settings.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trivium.config.schema import PipelineConfig, StorageConfig
from trivium.errors import UserError
from trivium.explorer.over_rollout import OverRollout


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
    # OpenAI-compatible API (engine_type external); the service's base model name (engine_type tinker)
    base_url: str | None = None
    api_key: str | None = None
    model_name: str | None = None
    # How long one call to a remote service may take (engine_type tinker: synchronizer.sync_timeout)
    request_timeout: float | None = None
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
        if self.engine_type == "tinker":
            kwargs.update(base_model=self.model_name, request_timeout=self.request_timeout)
        if self.engine_type == "hf":
            if self.tensor_parallel_size != 1:  # chosen by `auto` on GPUs without vLLM (config/engine_rules.py)
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
    # serve mode's engines: seconds between health checks, engines that keep serving during loads
    status_check_interval: float = 60.0
    min_running_engines: int = 1


@dataclass(frozen=True)
class ExplorerSettings:
    batch_size: int
    total_steps: int | None  # explorer steps of the run, when known (for progress bars)
    # The explorer stops after this many steps: in modes that train what they explore, the
    # steps its trainer uses (None: until the tasksets run out).
    step_limit: int | None
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

"""The run plan: the resolved config turned into typed settings, one per component.

``build_run_settings(config)`` is called once per run (or stage). The session, the loops and
the workers read these settings, never the raw config. Nothing here refuses a config: every
refusal is validation's, which ``trivium plan`` runs too. Values derived from several keys come
from ``trivium.config.resolve``; computed here are only the machine's core split and arithmetic
of resolved keys that no config key holds (trainer steps per explorer step, whether train mode
reads a dataset). Buffers and tasksets keep their schema sections (``StorageConfig``): they are
already typed, and the buffer package consumes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trivium.algorithm.presets import PRESETS
from trivium.algorithm.sample_strategies import sample_strategy
from trivium.config.gpu_layout import GpuLayout, config_layout
from trivium.config.modes import ModeTraits, traits_of
from trivium.config.schema import PLACEMENTS, StorageConfig
from trivium.core.storage_kinds import storage_kind
from trivium.explorer.settings import ExplorerSettings
from trivium.registry import loaded_plugin_dirs
from trivium.runtime.cpu_share import split_cores
from trivium.runtime.explorer_settings import explorer_settings
from trivium.runtime.trainer_settings import trainer_settings
from trivium.trainer.settings import TrainerSettings


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

    name: str  # the registered placement (trivium.runtime.placement) or a plugin's dotted path
    uses_ray: bool
    ray_address: str | None
    namespace: str
    device_type: str  # cpu | cuda: what the placement reserves
    compute_device: str  # cpu | cuda: what the components compute on (cpu on GPUs: a rehearsal)
    trainer_devices: int
    explorer_devices: int
    layout: GpuLayout | None  # which GPU of which machine each component gets (config/gpu_layout.py)
    engines_in_explorer: bool = True  # on Ray: the rollout engines run inside the explorer's actor


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
    reuses_experiences: bool = False  # replay: an experience may be trained more than once


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
    concurrent_cpu = traits.concurrent and config.cluster.compute_device != "cuda" and not config.cluster.uses_ray
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
        placement=placement_settings(config),
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
            explorer_name=config.explorer.name,
            trainer_name=config.trainer.name,
        ),
        trainer_input=trainer_input_settings(config) if traits.trains else None,
        reads_dataset=traits.trains_only and (
            not storage_kind(storage.storage_type).trainer_reads_experiences or _preset_trains_on_datasets(algorithm)
        ),
        total_epochs=int(config.buffer.total_epochs),
        plugin_dirs=loaded_plugin_dirs(),
    )


def placement_settings(config: Any) -> PlacementSettings:
    cluster = config.cluster
    return PlacementSettings(
        name=placement_name(cluster),
        uses_ray=bool(cluster.uses_ray),
        ray_address=cluster.ray_address,
        namespace=config.ray_namespace,
        device_type=cluster.device_type,
        compute_device=cluster.compute_device,
        trainer_devices=int(cluster.trainer_devices),
        explorer_devices=int(cluster.explorer_devices),
        layout=config_layout(config),
        engines_in_explorer=bool(cluster.engines_in_explorer),
    )


def trainer_input_settings(config: Any) -> TrainerInputSettings:
    algorithm, storage = config.algorithm, config.buffer.trainer_input.experience_buffer
    mixes = sample_strategy(algorithm.sample_strategy).mixes_expert_data
    return TrainerInputSettings(
        experience_buffer=storage,
        auxiliary_buffers=tuple(config.buffer.trainer_input.auxiliary_buffers.items()),
        mixes_expert_data=mixes,
        expert_data_ratio=float(algorithm.sample_strategy_args["expert_data_ratio"]) if mixes else 0.0,
        reuses_experiences=bool(storage.replay_buffer.enable),
    )


def placement_name(cluster: Any) -> str:
    """The placement that runs the components: Ray when resolve() chose it, a plugin's dotted path
    as given, this process otherwise (auto without Ray, or colocate, which never uses Ray)."""
    if cluster.uses_ray:
        return "ray"
    return "process" if cluster.placement in PLACEMENTS else cluster.placement


def _preset_trains_on_datasets(algorithm: Any) -> bool:
    preset = PRESETS.get(algorithm.algorithm_type)
    return bool(preset and preset.train_only)


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

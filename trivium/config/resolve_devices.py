"""The resolve() rules for where things run and how weights travel between them.

Fills the device split (GPUs detected when ``cluster.gpu_per_node`` is unset, the explorer's,
auxiliary models' and trainer's shares), the compute device, Trinity-RFT's placement keys, the
engine type ``auto`` picks, whether the run is placed on Ray (and there, whether the engines
run inside the explorer's actor), the sync method, and an evaluation interval that falls on
sync steps. Called in this order by ``trivium.config.resolve.resolve_with_notes``; each rule
only reads values filled before it.
"""

from __future__ import annotations

import importlib.util
import os

from trivium.config.errors import Suggestion
from trivium.config.gpu_layout import derived_placement_keys
from trivium.config.modes import EXPLORING_MODES, TRAINING_MODES, traits_of
from trivium.config.schema import InferenceModelConfig, TriviumConfig


def engine_devices(engine: InferenceModelConfig) -> int:
    """Devices one model's engines occupy; an external API occupies none."""
    if engine.engine_type in ("external", "tinker"):
        return 0
    return engine.engine_num * engine.tensor_parallel_size


def detect_gpu_count() -> int:
    import torch  # imported here: resolving a config with explicit devices must stay cheap

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def fill_devices(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.gpu_per_node is None:
        cluster.gpu_per_node = detect_gpu_count()
        notes.append(Suggestion("cluster.gpu_per_node", f"detected {cluster.gpu_per_node} GPU(s)", "note"))
    total = cluster.node_num * cluster.gpu_per_node
    mode = config.mode
    explorer = engine_devices(config.explorer.rollout_model) if mode in EXPLORING_MODES else 0
    auxiliary = (
        sum(engine_devices(aux) for aux in config.explorer.auxiliary_models) if mode in EXPLORING_MODES else 0
    )
    if total == 0:
        cluster.device_type, cluster.shared_devices = "cpu", True
        cluster.explorer_devices = cluster.auxiliary_devices = cluster.trainer_devices = 0
        if mode in EXPLORING_MODES and mode in TRAINING_MODES:
            notes.append(
                Suggestion("cluster", "no GPU: explorer, auxiliary models and trainer share the CPU", "note")
            )
        return
    cluster.device_type = "cuda"
    if traits_of(mode).takes_turns:
        # One device holds the engine and the trainer; they take turns.
        cluster.shared_devices = True
        cluster.explorer_devices = cluster.trainer_devices = 1
        cluster.auxiliary_devices = 0
        return
    cluster.shared_devices = False
    cluster.explorer_devices, cluster.auxiliary_devices = explorer, auxiliary
    cluster.trainer_devices = total - explorer - auxiliary if mode in TRAINING_MODES else 0


def fill_compute_device(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.compute_device == "auto":
        cluster.compute_device = cluster.device_type
    elif cluster.compute_device == "cpu" and cluster.device_type == "cuda":
        notes.append(
            Suggestion(
                "cluster.compute_device",
                "cpu: the GPUs are reserved and assigned as on a GPU cluster, but every component computes on "
                "the CPU and syncs over gloo (a placement rehearsal)",
                "note",
            )
        )


def fill_placement_keys(config: TriviumConfig) -> None:
    """Trinity-RFT's names for the device split; values the config gives are checked in validate."""
    for derived in derived_placement_keys(config):
        if getattr(derived.owner, derived.attribute) in (None, ""):
            setattr(derived.owner, derived.attribute, derived.value)


# ---------------------------------------------------------------- engines


def fill_engine_types(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """``engine_type: auto``: vLLM where the engines get GPUs and vLLM is installed, hf otherwise."""
    engines = [("explorer.rollout_model", config.explorer.rollout_model)]
    engines += [
        (f"explorer.auxiliary_models[{i}]", aux) for i, aux in enumerate(config.explorer.auxiliary_models)
    ]
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


def fill_placement(config: TriviumConfig, notes: list[Suggestion]) -> None:
    cluster = config.cluster
    if cluster.ray_address is None and os.environ.get("RAY_ADDRESS"):
        cluster.ray_address = os.environ["RAY_ADDRESS"]
    if traits_of(config.mode).takes_turns:
        # Explorer and trainer take turns on one device: nothing to place apart.
        if cluster.placement == "ray":
            notes.append(
                Suggestion(
                    "cluster.placement",
                    "colocate runs explorer and trainer in turns in one process; 'ray' applies to both, train, "
                    "explore and bench",
                    "note",
                )
            )
        cluster.uses_ray = False
        return
    if cluster.placement == "auto":
        devices = (
            (cluster.explorer_devices or 0)
            + (cluster.auxiliary_devices or 0)
            + (cluster.trainer_devices or 0)
        )
        cluster.uses_ray = bool(cluster.ray_address) or cluster.node_num > 1 or devices > 1
    else:
        cluster.uses_ray = cluster.placement == "ray"


def fill_engines_in_explorer(config: TriviumConfig, notes: list[Suggestion]) -> None:
    """On Ray, whether the rollout engines run inside the explorer's actor: ``null`` picks it when
    the run computes on the CPU of one machine and the engine type can share a process (the
    processes would only add start-up); the placement checks refuse an explicit choice that
    cannot hold (``placement_rules.py``). In one process the engines are the explorer's anyway."""
    cluster = config.cluster
    if not cluster.uses_ray or config.mode not in EXPLORING_MODES:
        if cluster.engines_in_explorer is False:
            notes.append(Suggestion(
                "cluster.engines_in_explorer",
                "false applies to Ray runs that explore; this run keeps its engines in its own process",
                "note",
            ))
        cluster.engines_in_explorer = True
        return
    if cluster.engines_in_explorer is None:
        from trivium.models.engine import shares_explorer_process

        cluster.engines_in_explorer = (
            cluster.device_type == "cpu"
            and cluster.node_num == 1
            and shares_explorer_process(config.explorer.rollout_model.engine_type)
        )


# ---------------------------------------------------------------- synchronization


def fill_sync(config: TriviumConfig, notes: list[Suggestion]) -> None:
    synchronizer = config.synchronizer
    mode, cluster = config.mode, config.cluster
    traits = traits_of(mode)
    one_side = traits.one_side
    on_gpus = cluster.device_type == "cuda" and not cluster.shared_devices
    if cluster.uses_ray and not one_side:
        # Explorer and trainer live in different processes: tensors cannot be handed over in memory.
        if synchronizer.sync_method in (None, "memory"):
            if synchronizer.sync_method == "memory":
                notes.append(
                    Suggestion(
                        "synchronizer.sync_method",
                        "memory works within one process; on Ray the weights are broadcast with nccl "
                        "(gloo on CPU) instead",
                        "note",
                    )
                )
            synchronizer.sync_method = "nccl"
        return
    if one_side and synchronizer.sync_method in ("nccl", "memory"):
        # A run of one side only has no peer to broadcast to: weights travel as checkpoints.
        notes.append(
            Suggestion(
                "synchronizer.sync_method",
                f"'{synchronizer.sync_method}' needs trainer and explorer in one run; mode '{mode}' runs only one "
                "of them, so it uses checkpoint instead",
                "note",
            )
        )
        synchronizer.sync_method = "checkpoint"
    if synchronizer.sync_method is None:
        if one_side:
            synchronizer.sync_method = "checkpoint"
        elif traits.trains_what_it_explores and on_gpus and cluster.explorer_devices:
            synchronizer.sync_method = "nccl"
        else:
            synchronizer.sync_method = "memory"
        return
    if synchronizer.sync_method == "nccl" and not one_side and not on_gpus:
        synchronizer.sync_method = "memory"
        notes.append(
            Suggestion(
                "synchronizer.sync_method",
                f"nccl needs separate GPUs for explorer and trainer; mode '{mode}' on "
                f"{'CPU' if cluster.device_type == 'cpu' else 'one shared GPU'} uses memory instead",
                "note",
            )
        )


def fill_eval_interval(config: TriviumConfig, notes: list[Suggestion]) -> None:
    explorer, sync_interval = config.explorer, config.synchronizer.sync_interval
    if sync_interval <= 0 or explorer.eval_interval <= 0 or explorer.eval_interval % sync_interval == 0:
        return
    # Evaluation uses freshly synchronized weights, so it can only happen on a sync step.
    rounded = max(sync_interval, round(explorer.eval_interval / sync_interval) * sync_interval)
    notes.append(
        Suggestion(
            "explorer.eval_interval",
            f"{explorer.eval_interval} is not a multiple of synchronizer.sync_interval ({sync_interval}); "
            f"using {rounded}. Set it to a multiple of sync_interval to choose yourself.",
        )
    )
    explorer.eval_interval = rounded

"""The arithmetic of a resolved config: who gets which devices, and explorer supply vs trainer demand.

``explain(config)`` is pure: it reads a resolved TriviumConfig and returns a ``Plan``;
``Plan.render()`` turns it into the text ``trivium plan`` prints. The explorer *supplies*
batch_size tasks x repeat_times experiences per step; the trainer *demands*
train_batch_size experiences per step. When the two differ, experiences pile up in the
buffer or the trainer waits, and the plan says which key to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trivium.config.gpu_layout import config_layout
from trivium.config.modes import EXPLORING_MODES, TRAINING_MODES, traits_of
from trivium.config.resolve import engine_devices, explorer_total_steps
from trivium.config.schema import TriviumConfig


@dataclass
class Plan:
    title: str
    mode: str
    device_lines: list[str]
    sync_line: str
    batch_size: int
    repeat_times: int
    train_batch_size: int
    sync_interval: int
    explores: bool
    trains: bool
    explorer_steps: int | None
    trainer_steps: int | None
    warnings: list[str] = field(default_factory=list)

    @property
    def supply_per_step(self) -> int:
        return self.batch_size * self.repeat_times

    @property
    def total_supply(self) -> int | None:
        return None if self.explorer_steps is None else self.explorer_steps * self.supply_per_step

    @property
    def total_demand(self) -> int | None:
        return None if self.trainer_steps is None else self.trainer_steps * self.train_batch_size

    def render(self) -> str:
        lines = [self.title, f"mode: {self.mode}", "devices:"]
        lines += [f"  {line}" for line in self.device_lines]
        lines.append(f"sync: {self.sync_line}")
        lines.append("per step:")
        if self.explores:
            lines.append(
                f"  explorer: {self.batch_size:,} tasks × {self.repeat_times:,} repeats = "
                f"{self.supply_per_step:,} experiences per step"
            )
        if self.trains:
            lines.append(f"  trainer: {self.train_batch_size:,} experiences per step")
        if self.explores and self.trains:
            n = self.sync_interval
            lines.append(
                f"per sync interval ({n:,} step{'s' if n != 1 else ''}): explorer {n:,} × {self.supply_per_step:,} = "
                f"{n * self.supply_per_step:,} experiences; trainer {n:,} × {self.train_batch_size:,} = "
                f"{n * self.train_batch_size:,} experiences"
            )
        lines.append(f"whole run: {self._whole_run()}")
        if self.warnings:
            lines.append("warnings:")
            lines += [f"  ! {warning}" for warning in self.warnings]
        return "\n".join(lines)

    def _whole_run(self) -> str:
        parts = []
        if self.explores:
            parts.append(self._explorer_total())
        if self.trains:
            parts.append(self._trainer_total())
        return "; ".join(parts)

    def _explorer_total(self) -> str:
        if self.explorer_steps is None:
            return "explorer steps unknown (the taskset size cannot be read locally; set buffer.total_steps)"
        return (
            f"explorer {self.explorer_steps:,} steps × {self.batch_size:,} tasks × {self.repeat_times:,} "
            f"repeats = {self.total_supply:,} samples"
        )

    def _trainer_total(self) -> str:
        if self.trainer_steps is None:
            return "trainer steps unknown (set buffer.total_steps or trainer.total_steps)"
        return f"trainer {self.trainer_steps:,} steps × {self.train_batch_size:,} = {self.total_demand:,} samples"


def explain(config: TriviumConfig) -> Plan:
    """The plan of a resolved config."""
    buffer, mode = config.buffer, config.mode
    serves = traits_of(mode).serves_api
    # Serve mode's experiences come from outside applications' sessions, not from tasks.
    explores = mode in EXPLORING_MODES and not serves
    trains = mode in TRAINING_MODES
    address = f"http://{config.explorer.listen_address}:{config.explorer.proxy_port}/v1"
    serve_line = f"serves the policy at {address} (OpenAI-compatible); committed sessions feed the trainer"
    serve_lines = [serve_line] if serves else []
    plan = Plan(
        title=f"run {config.project}/{config.name} -> {config.checkpoint_job_dir}",
        mode=mode,
        device_lines=[
            *_device_lines(config), _placement_line(config), *([_trainer_ranks_line(config)] if trains else []),
            *serve_lines,
        ],
        sync_line=(
            f"{config.synchronizer.sync_method} every {config.synchronizer.sync_interval} step(s), "
            f"style {config.synchronizer.sync_style}, offset {config.synchronizer.sync_offset}"
        ),
        batch_size=buffer.batch_size,
        repeat_times=config.algorithm.repeat_times,
        train_batch_size=buffer.train_batch_size,
        sync_interval=config.synchronizer.sync_interval,
        explores=explores,
        trains=trains,
        explorer_steps=explorer_total_steps(config) if explores else None,
        trainer_steps=config.trainer.total_steps if trains else None,
    )
    if explores and trains and plan.explorer_steps is None and plan.trainer_steps is not None:
        # Only the trainer's length is known: the explorer runs until it has fed the trainer.
        plan.explorer_steps = math.ceil(plan.trainer_steps * plan.train_batch_size / plan.supply_per_step)
    if explores and trains:
        plan.warnings = balance_warnings(plan)
    return plan


def balance_warnings(plan: Plan) -> list[str]:
    warnings = []
    supply, demand = plan.supply_per_step, plan.train_batch_size
    if supply != demand:
        consequence = (
            f"{supply - demand:,} experiences per step pile up in the buffer (they are trained on later, by then stale)"
            if supply > demand else
            f"the trainer needs {demand / supply:.2f} explorer steps per trainer step, so it waits on the explorer"
        )
        warnings.append(
            f"explorer supplies {supply:,} experiences per step, trainer takes {demand:,}: {consequence}. "
            f"Set buffer.train_batch_size: {supply} (= batch_size × repeat_times), or leave it unset."
        )
    total_supply, total_demand = plan.total_supply, plan.total_demand
    if total_supply is not None and total_demand is not None and total_supply != total_demand:
        if total_supply > total_demand:
            extra = total_supply - total_demand
            # The explorer of a run that trains stops after the steps its trainer uses.
            used_steps = math.ceil(total_demand / plan.supply_per_step)
            trainable = total_supply // plan.train_batch_size
            more = f"; raise trainer.total_steps to {trainable:,} to train more of them" if trainable > plan.trainer_steps else ""
            warnings.append(
                f"over the whole run the tasksets give {extra:,} more samples than the trainer uses: the explorer "
                f"stops after {used_steps:,} steps, the last whose samples the trainer's {plan.trainer_steps:,} "
                f"steps use{more}"
            )
        else:
            missing = total_demand - total_supply
            warnings.append(
                f"over the whole run the trainer asks for {missing:,} more samples than the explorer makes; its "
                f"last steps would wait for data: lower trainer.total_steps to {total_supply // plan.train_batch_size:,}"
            )
    return warnings


def _device_lines(config: TriviumConfig) -> list[str]:
    cluster, mode = config.cluster, config.mode
    rollout = config.explorer.rollout_model
    if cluster.device_type == "cpu":
        users = [name for name, used in (("explorer", mode in EXPLORING_MODES),
                 ("auxiliary models", bool(config.explorer.auxiliary_models) and mode in EXPLORING_MODES),
                 ("trainer", mode in TRAINING_MODES)) if used]
        verb = "share the CPU" if len(users) > 1 else "runs on the CPU"
        return [f"CPU only ({cluster.node_num} node(s), no GPU): {' and '.join(users)} {verb}"]
    total = cluster.node_num * cluster.gpu_per_node
    lines = [f"{total} GPU(s) = {cluster.node_num} node(s) × {cluster.gpu_per_node}"]
    if traits_of(mode).takes_turns:
        return lines + [f"explorer and trainer share GPU 0 ({mode}), taking turns"]
    if mode in EXPLORING_MODES:
        lines.append(
            f"explorer: {cluster.explorer_devices} = {rollout.engine_num} engine(s) × "
            f"{rollout.tensor_parallel_size} tensor-parallel ({rollout.engine_type})"
        )
        for index, aux in enumerate(config.explorer.auxiliary_models):
            lines.append(
                f"auxiliary model {index} ({aux.name or aux.model_path}): {engine_devices(aux)} = "
                f"{aux.engine_num} engine(s) × {aux.tensor_parallel_size} tensor-parallel ({aux.engine_type})"
            )
    if mode in TRAINING_MODES:
        lines.append(f"trainer: {cluster.trainer_devices} (the rest)")
    unused = total - (cluster.explorer_devices or 0) - (cluster.auxiliary_devices or 0) - (cluster.trainer_devices or 0)
    if unused > 0:
        lines.append(f"unused: {unused}")
    layout = config_layout(config)
    if layout is not None and cluster.uses_ray:
        lines += [f"machine {machine}: {'; '.join(members)}" for machine, members in layout.nodes()]
    if cluster.compute_device == "cpu":
        lines.append("computing on the CPU (cluster.compute_device: cpu): GPUs reserved and assigned, not used")
    return lines


def _placement_line(config: TriviumConfig) -> str:
    cluster, mode, traits = config.cluster, config.mode, traits_of(config.mode)
    if not cluster.uses_ray:
        threads = traits.concurrent and traits.trains_what_it_explores
        return "placement: this process" + (" (explorer and trainer in two threads)" if threads else "")
    actors = []
    if mode in EXPLORING_MODES:
        engines = f"{config.explorer.rollout_model.engine_num} rollout engine(s)"
        actors += [f"explorer hosting {engines}"] if cluster.engines_in_explorer else ["explorer", engines]
    if mode in TRAINING_MODES:
        actors.append("trainer")
    where = f"joins the Ray cluster at {cluster.ray_address}" if cluster.ray_address else "starts a local Ray"
    return f"placement: Ray actors ({', '.join(actors)}); {where}, namespace {config.ray_namespace}"


# How each trainer strategy lays the models over several ranks (docs/fsdp.md).
RANK_LAYOUTS = {
    "fsdp": "FSDP2, the models sharded over the ranks",
    "fsdp2": "FSDP2, the models sharded over the ranks",
    "ddp": "the whole models on every rank, gradients all-reduced",
}


def _trainer_ranks_line(config: TriviumConfig) -> str:
    ranks = int(config.trainer.data_parallel_size or 1)
    if ranks == 1:
        return "trainer ranks: 1 (no data parallelism)"
    backend = "nccl" if config.cluster.compute_device == "cuda" else "gloo"
    if config.cluster.uses_ray:
        others = "rank 1 as a Ray actor" if ranks == 2 else f"ranks 1-{ranks - 1} as Ray actors"
        where = f"rank 0 in the trainer actor, {others} beside it"
    else:
        others = "rank 1 in a process" if ranks == 2 else f"ranks 1-{ranks - 1} in processes"
        where = f"rank 0 in this process, {others} it starts"
    layout = RANK_LAYOUTS[config.trainer.trainer_strategy]
    return f"trainer ranks: {ranks} over {backend} ({layout}); {where}"

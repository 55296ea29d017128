"""Which GPU of which machine each component of a run gets: pure arithmetic, no Ray.

The cluster's GPUs are numbered machine by machine: GPU ``g`` is local device
``g % gpu_per_node`` of machine ``g // gpu_per_node``. The rollout engines take the first
GPUs in engine order (each engine ``tensor_parallel_size`` consecutive ones), the auxiliary
models the next, the trainer every GPU left, one rank per GPU. So the engines fill the first
machines and the trainer the last ones.

Two rules keep that layout placeable: an engine's GPUs lie on one machine (tensor
parallelism does not cross machines), and a trainer that needs more than one machine uses
whole machines. ``layout_problems`` states what breaks them, with the arithmetic.

The Ray placement (``runtime/ray_placement.py``) reserves one group of bundles per machine
of this layout, and ``trivium plan`` prints it, so both show the same placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trivium.config.modes import EXPLORING_MODES, TRAINING_MODES, traits_of


@dataclass(frozen=True)
class EngineSlot:
    model: str  # "rollout" or "auxiliary <i>"
    index: int  # engine index within its model
    gpus: tuple[int, ...]  # global GPU numbers, one per tensor-parallel rank

    @property
    def name(self) -> str:
        return f"rollout_engine_{self.index}" if self.model == "rollout" else f"{self.model.replace(' ', '_')}_engine_{self.index}"


@dataclass(frozen=True)
class GpuLayout:
    node_num: int
    gpu_per_node: int
    engines: tuple[EngineSlot, ...]
    trainer_gpus: tuple[int, ...]  # rank r computes on trainer_gpus[r]

    def node_of(self, gpu: int) -> int:
        return gpu // self.gpu_per_node

    def local_device(self, gpu: int) -> int:
        return gpu % self.gpu_per_node

    @property
    def total_gpus(self) -> int:
        return self.node_num * self.gpu_per_node

    def model_gpus(self, model: str) -> int:
        return sum(len(slot.gpus) for slot in self.engines if slot.model == model)

    @property
    def explorer_gpus(self) -> int:
        return sum(len(slot.gpus) for slot in self.engines)

    @property
    def trainer_nodes(self) -> tuple[int, ...]:
        return tuple(sorted({self.node_of(gpu) for gpu in self.trainer_gpus}))

    def trainer_gpus_per_node(self) -> int:
        nodes = self.trainer_nodes
        return len(self.trainer_gpus) // len(nodes) if nodes else 0

    def engine_nodes(self, slot: EngineSlot) -> tuple[int, ...]:
        return tuple(sorted({self.node_of(gpu) for gpu in slot.gpus}))

    def bundle_indices(self, model: str) -> str:
        """The model's GPUs: engines separated by ';', tensor-parallel ranks by ','."""
        return ";".join(",".join(str(g) for g in slot.gpus) for slot in self.engines if slot.model == model)

    def nodes(self) -> list[tuple[int, list[str]]]:
        """(machine, what runs there) for every machine the layout uses, in order."""
        used: dict[int, list[str]] = {}
        for slot in self.engines:
            for node in self.engine_nodes(slot):
                used.setdefault(node, []).append(f"{slot.name} (GPU {self._local_list(slot.gpus, node)})")
        for rank, gpu in enumerate(self.trainer_gpus):
            used.setdefault(self.node_of(gpu), []).append(f"trainer rank {rank} (GPU {self.local_device(gpu)})")
        return sorted(used.items())

    def _local_list(self, gpus: tuple[int, ...], node: int) -> str:
        return ",".join(str(self.local_device(g)) for g in gpus if self.node_of(g) == node)


def build_layout(
    *,
    node_num: int,
    gpu_per_node: int,
    rollout: tuple[int, int],
    auxiliary: list[tuple[int, int]],
    trainer_gpus: int,
) -> GpuLayout:
    """``rollout`` and each ``auxiliary`` entry are (engine_num, tensor_parallel_size)."""
    slots: list[EngineSlot] = []
    next_gpu = 0
    for model, (engines, tp) in [("rollout", rollout), *((f"auxiliary {i}", aux) for i, aux in enumerate(auxiliary))]:
        for index in range(engines):
            slots.append(EngineSlot(model, index, tuple(range(next_gpu, next_gpu + tp))))
            next_gpu += tp
    return GpuLayout(
        node_num=node_num,
        gpu_per_node=gpu_per_node,
        engines=tuple(slots),
        trainer_gpus=tuple(range(next_gpu, next_gpu + trainer_gpus)),
    )


def layout_problems(layout: GpuLayout) -> list[str]:
    problems = []
    for slot in layout.engines:
        nodes = layout.engine_nodes(slot)
        if len(nodes) > 1:
            problems.append(
                f"{slot.name} would span machines {' and '.join(map(str, nodes))}: its GPUs "
                f"{slot.gpus[0]}-{slot.gpus[-1]} cross a machine boundary (every {layout.gpu_per_node} GPUs); "
                "an engine's tensor-parallel ranks must share a machine: choose engine_num * "
                "tensor_parallel_size so that no engine straddles gpu_per_node"
            )
    trainer = len(layout.trainer_gpus)
    # The trainer takes the last GPUs: beyond one machine, whole machines iff a multiple of one.
    if trainer > layout.gpu_per_node and trainer % layout.gpu_per_node:
        problems.append(
            f"the trainer gets GPUs {layout.trainer_gpus[0]}-{layout.trainer_gpus[-1]} ({trainer} = "
            f"{layout.total_gpus} in all - {layout.explorer_gpus} of the engines), more than one machine's "
            f"{layout.gpu_per_node}, so it must use whole machines; change engine_num or tensor_parallel_size "
            "so that the engines fill whole machines"
        )
    return problems


def config_layout(config: Any) -> GpuLayout | None:
    """The layout of a resolved config whose components get GPUs of their own; None on CPUs
    and in colocate (one device, taken in turns)."""
    cluster, mode = config.cluster, config.mode
    if cluster.device_type != "cuda" or traits_of(mode).takes_turns:
        return None
    explores = mode in EXPLORING_MODES

    def engines(model: Any) -> tuple[int, int]:
        if not explores or model.engine_type in ("external", "tinker"):
            return 0, 0
        return int(model.engine_num), int(model.tensor_parallel_size)

    return build_layout(
        node_num=int(cluster.node_num),
        gpu_per_node=int(cluster.gpu_per_node),
        rollout=engines(config.explorer.rollout_model),
        auxiliary=[engines(aux) for aux in config.explorer.auxiliary_models],
        trainer_gpus=int(cluster.trainer_devices or 0) if mode in TRAINING_MODES else 0,
    )


@dataclass(frozen=True)
class DerivedKey:
    key: str  # the dotted config key, for messages
    owner: Any  # the config section holding it
    attribute: str
    value: Any


def derived_placement_keys(config: Any) -> list[DerivedKey]:
    """The placement keys Trinity-RFT configs carry, as this config's layout fixes them."""
    cluster, layout = config.cluster, config_layout(config)
    total = int(cluster.node_num) * int(cluster.gpu_per_node)
    if layout is None:
        shared = 1 if cluster.device_type == "cuda" else 0  # colocate: one GPU, both sides
        values = {
            "total_gpu_num": total, "rollout_gpu_num": shared, "auxiliary_model_gpu_num": 0,
            "explorer_gpu_num": shared, "trainer_gpu_num": shared,
            "trainer_node_num": 1 if config.mode in TRAINING_MODES else 0, "trainer_gpu_num_per_node": shared,
        }
        bundles = {"rollout": "0" if shared else ""}
    else:
        values = {
            "total_gpu_num": total,
            "rollout_gpu_num": layout.model_gpus("rollout"),
            "auxiliary_model_gpu_num": layout.explorer_gpus - layout.model_gpus("rollout"),
            "explorer_gpu_num": layout.explorer_gpus,
            "trainer_gpu_num": len(layout.trainer_gpus),
            "trainer_node_num": len(layout.trainer_nodes),
            "trainer_gpu_num_per_node": layout.trainer_gpus_per_node(),
        }
        bundles = {"rollout": layout.bundle_indices("rollout")}
        bundles |= {f"auxiliary {i}": layout.bundle_indices(f"auxiliary {i}") for i in range(len(config.explorer.auxiliary_models))}
    keys = [DerivedKey(f"cluster.{name}", cluster, name, value) for name, value in values.items()]
    keys.append(DerivedKey("explorer.rollout_model.bundle_indices", config.explorer.rollout_model, "bundle_indices", bundles["rollout"]))
    for index, aux in enumerate(config.explorer.auxiliary_models):
        keys.append(DerivedKey(
            f"explorer.auxiliary_models[{index}].bundle_indices", aux, "bundle_indices", bundles.get(f"auxiliary {index}", "")
        ))
    return keys

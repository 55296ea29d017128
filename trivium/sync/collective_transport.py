"""The collective weight transport (``nccl``): a broadcast from the trainer to every engine.

The placement joins the trainer (rank 0) and every engine in a process group of their own
(``trivium.sync.collective``: gloo on CPU, nccl on GPUs) before the first version. Staging
keeps a snapshot on the trainer's side (a sharded trainer: each rank keeps its shards) and
hands over only the tensor layout; delivering asks the placement to run the broadcast on
both sides at once. It needs separate processes: in one process its versions go in memory.
"""

from __future__ import annotations

import threading

import torch

from trivium.sync.collective import WeightBroadcastGroup, tensor_spec
from trivium.sync.transport import TRANSPORTS, WeightProvider, WeightSender, WeightTransport
from trivium.sync.weight_update import WeightUpdate

# Stands in the staged versions for one whose shards the trainer's ranks keep (``Trainer.stage_shards``).
SHARDS: dict[str, torch.Tensor] = {}


class CollectiveSender(WeightSender):
    """The trainer's end of the broadcast group, with the versions staged for it.

    Snapshots are kept by version until broadcast: a broadcast may run in another thread
    while the trainer goes on training and staging newer versions.
    """

    def __init__(self) -> None:
        self.group: WeightBroadcastGroup | None = None
        self._staged: dict[int, dict[str, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def join(self, address: str, port: int, world_size: int, backend: str, timeout: float) -> None:
        self.group = WeightBroadcastGroup(
            address=address, port=port, rank=0, world_size=world_size, backend=backend, timeout=timeout
        )

    def stage_weights(self, version: int, weights: dict[str, torch.Tensor], *, copy: bool) -> WeightUpdate:
        """A snapshot kept for ``send`` (always a copy: the trainer runs on while it is broadcast)."""
        self._joined()
        snapshot = {name: tensor.detach().clone() for name, tensor in weights.items()}
        self._keep(version, snapshot)
        return WeightUpdate(version=version, spec=tensor_spec(snapshot))

    def stage(self, trainer: WeightProvider, version: int, *, copy: bool) -> WeightUpdate:
        # Whole weights of a sharded trainer: staged as shards, gathered while broadcasting.
        # (A LoRA adapter is small: it is gathered whole when staged.)
        if not (trainer.parallel.sharded and trainer.settings.lora is None):
            return super().stage(trainer, version, copy=copy)
        self._joined()
        spec = trainer.stage_shards(version)
        self._keep(version, SHARDS)
        return WeightUpdate(version=version, spec=spec)

    def send(self, trainer: WeightProvider, version: int) -> int:
        """Broadcast staged ``version`` to every engine of the group; returns the bytes sent.

        Older snapshots are dropped: the explorer never asks for a version older than one it loaded.
        """
        with self._lock:
            snapshot = self._staged.get(version)
            for old in [staged for staged in self._staged if staged < version]:
                del self._staged[old]
        group = self._joined()
        if snapshot is None:
            raise RuntimeError(f"weight version {version} was not staged for a broadcast")
        if snapshot is SHARDS:
            return trainer.send_staged_shards(
                version, bucket_bytes=group.bucket_bytes, send=group.send_bucket
            )
        return group.send(snapshot)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()

    def _keep(self, version: int, staged: dict[str, torch.Tensor]) -> None:
        with self._lock:
            self._staged[version] = staged

    def _joined(self) -> WeightBroadcastGroup:
        if self.group is None:
            raise RuntimeError(
                "the trainer has not joined the weight broadcast group (the placement connects it)"
            )
        return self.group


@TRANSPORTS.register("nccl")
class CollectiveTransport(WeightTransport):
    name = "nccl"
    needs_separate_processes = True
    delivers_by_broadcast = True

    def sender(self) -> WeightSender:
        return CollectiveSender()

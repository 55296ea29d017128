"""The interface of a weight transport: how one weight version travels from trainer to engines.

A transport has two halves. Its ``WeightSender`` lives on the trainer's side (in the
trainer's process) and stages a version: a snapshot in memory, files under the run
directory, or tensors kept for a broadcast. The transport itself lives with the synchronizer
and ``deliver``s a staged update on the explorer's side. ``synchronizer.sync_method`` names
one in ``TRANSPORTS``: ``memory`` (``memory_transport.py``), ``checkpoint``
(``checkpoint_transport.py``) and ``nccl``, the collective (``collective_transport.py``:
gloo on CPU, nccl on GPUs). A transport that needs separate processes declares it; in one
process its versions are handed over in memory.

A transport never sees the config or the placement's workers: the explorer's side is a
``WeightReceiver``, a placement that can broadcast is a ``WeightBroadcaster``, and the
trainer is a ``WeightProvider``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Protocol

import torch

from trivium.core.background_call import BackgroundCall
from trivium.core.durations import seconds_text
from trivium.errors import SyncTimeout
from trivium.registry import Registry
from trivium.sync.collective import TensorSpec
from trivium.sync.weight_update import WeightUpdate


class ShardLayout(Protocol):
    sharded: bool  # the weights are spread over several ranks


class LoraChoice(Protocol):
    lora: object | None  # the adapter's settings; None trains the whole model


class WeightProvider(Protocol):
    """The trainer, as a sender stages its weights."""

    parallel: ShardLayout
    settings: LoraChoice

    def weights_for_sync(self) -> dict[str, torch.Tensor]: ...

    def write_sync_weights(self, directory: str) -> dict[str, float]: ...

    def stage_shards(self, version: int) -> list[TensorSpec]: ...

    def send_staged_shards(
        self, version: int, *, bucket_bytes: int, send: Callable[[list[torch.Tensor]], int] | None = None
    ) -> int: ...


class WeightReceiver(Protocol):
    """The explorer's side, as a transport hands it an update."""

    def load_weights(self, update: WeightUpdate) -> dict[str, float]: ...

    def step(self) -> int: ...


class WeightBroadcaster(Protocol):
    """A placement that joins the trainer and the engines in a process group of their own."""

    def connect_weight_broadcast(self) -> None: ...

    def broadcast_weights(self, update: WeightUpdate, *, timeout: float) -> dict[str, float]: ...


class WeightSender(ABC):
    """The trainer's half of a transport: stages a version where the explorer's side can take it."""

    @abstractmethod
    def stage_weights(self, version: int, weights: dict[str, torch.Tensor], *, copy: bool) -> WeightUpdate:
        """Stage ``weights`` (the trainer keeps updating its own tensors in place unless ``copy`` is off)."""

    def stage(self, trainer: WeightProvider, version: int, *, copy: bool) -> WeightUpdate:
        """Stage the trainer's current weights (a sender that gathers a sharded trainer overrides this)."""
        return self.stage_weights(version, trainer.weights_for_sync(), copy=copy)

    def close(self) -> None:
        """Release what the sender holds (a process group)."""


class WeightTransport(ABC):
    """The synchronizer's half of a transport; picklable, so a trainer in another process builds its sender."""

    name: ClassVar[str]
    # Whether versions can cross processes only by this transport's own means (a process group).
    needs_separate_processes: ClassVar[bool] = False
    # Whether versions reach the engines by the placement's broadcast (its ``WeightBroadcaster``)
    # instead of the explorer's receiver loading what the sender staged.
    delivers_by_broadcast: ClassVar[bool] = False
    # Whether the sender can hand over the trainer's own tensors (no copy): sides in one process.
    hands_over_own_tensors: ClassVar[bool] = False

    def __init__(self, *, run_dir: str | Path | None = None):
        self.run_dir = Path(run_dir) if run_dir else None

    @abstractmethod
    def sender(self) -> WeightSender:
        """A new trainer-side half, built in the trainer's process."""

    def connect(self, broadcaster: WeightBroadcaster | None) -> None:
        """Join trainer and engines before the first version: the placement's process group when
        this transport delivers by broadcast; nothing otherwise."""
        if self.delivers_by_broadcast:
            self._broadcaster(broadcaster).connect_weight_broadcast()

    def deliver(
        self,
        update: WeightUpdate,
        *,
        receiver: WeightReceiver,
        broadcaster: WeightBroadcaster | None,
        timeout: float,
    ) -> dict[str, float]:
        """Explorer side: the placement broadcasts the update (``delivers_by_broadcast``), or the
        receiver loads the staged update, or SyncTimeout naming the version and step.

        A stalled engine call cannot be interrupted; the run stops instead of hanging on it.
        """
        if self.delivers_by_broadcast:
            return self._broadcaster(broadcaster).broadcast_weights(update, timeout=timeout)
        call = BackgroundCall(lambda: receiver.load_weights(update), name=f"load-weights-v{update.version}")
        if not call.wait(timeout):
            raise SyncTimeout(
                f"loading weight version {update.version} into the rollout engines (explorer at step "
                f"{receiver.step()}) did not finish within {seconds_text(timeout)} (synchronizer.sync_timeout); "
                "an engine is stalled: see log/explorer.log"
            )
        return call.result()

    def retire(self, update: WeightUpdate, *, newer: WeightUpdate) -> None:
        """``update`` was superseded by ``newer``: free what it holds; nothing by default."""

    def _broadcaster(self, broadcaster: WeightBroadcaster | None) -> WeightBroadcaster:
        if broadcaster is None:
            raise RuntimeError(
                f"the {self.name} weight transport needs a placement that broadcasts between processes"
            )
        return broadcaster


TRANSPORTS: Registry[type[WeightTransport]] = Registry(
    "weight transport",
    builtin_modules=(
        "trivium.sync.memory_transport",
        "trivium.sync.checkpoint_transport",
        "trivium.sync.collective_transport",
    ),
)


def weight_transport(
    name: str, *, across_processes: bool, run_dir: str | Path | None = None
) -> WeightTransport:
    """The transport ``synchronizer.sync_method`` names, for explorer and trainer in one process or not."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown sync_method {name!r}; known: {', '.join(TRANSPORTS.names())}")
    transport_class = TRANSPORTS.get(name)
    if transport_class.needs_separate_processes and not across_processes:
        # In one process a broadcast is a hand-over in memory.
        transport_class = TRANSPORTS.get("memory")
    return transport_class(run_dir=run_dir)

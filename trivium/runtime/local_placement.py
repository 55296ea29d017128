"""The ``process`` placement: explorer, rollout engines and trainer as plain objects in this process.

They share memory, so weights move without a copy across processes; nothing is started
before the sides are built, and nothing is left to stop after they are closed.
"""

from __future__ import annotations

from trivium.runtime.builders import build_engines
from trivium.runtime.placement import PLACEMENT_TYPES, Placement
from trivium.runtime.workers import ExplorerWorker, TrainerWorker
from trivium.sync.transport import WeightTransport


@PLACEMENT_TYPES.register("process")
class LocalPlacement(Placement):
    separate_processes = False

    def trainer(self, resume_step: int | None, transport: WeightTransport) -> TrainerWorker:
        return TrainerWorker(self.settings, transport=transport, resume_step=resume_step)

    def explorer(self) -> ExplorerWorker:
        return ExplorerWorker(self.settings, engines=build_engines(self.settings.explorer.rollout))

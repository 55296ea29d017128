"""Counts of what a run explored, trained, lost and why, kept as its steps go.

The loops report each explorer step's and trainer step's metrics here (both threads of a
``both`` run do, hence the lock); at the end of a run that trains on its own exploration the
launcher turns the counts into a ``trivium.monitor.shortfall.Shortfall``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from trivium.core.metric_names import CRITIC_UPDATE_SKIPPED, UPDATE_SKIPPED
from trivium.monitor.shortfall import Shortfall


@dataclass
class RunTally:
    written: int = 0  # experiences the explorer wrote (a resumed run: plus those its checkpoint put back)
    trained: int = 0  # experiences of applied updates
    failed_tasks: int = 0
    refused_experiences: int = 0
    late_tasks: int = 0
    filtered_experiences: int = 0
    stale_dropped: int = 0
    partial_steps: int = 0
    skipped_updates: int = 0
    discarded_at_sync: int = 0
    explorer_blocked: str | None = None  # why the explorer stopped before its last step
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def explored(self, metrics: dict[str, float]) -> None:
        with self._lock:
            self.written += int(metrics.get("rollout/num_experiences", 0))
            self.failed_tasks += int(metrics.get("rollout/failed_tasks", 0))
            self.refused_experiences += int(metrics.get("rollout/dropped_experiences", 0))
            self.late_tasks += int(metrics.get("rollout/late_tasks_dropped", 0))
            self.filtered_experiences += int(metrics.get("rollout/filtered_experiences", 0))

    def trained_step(self, metrics: dict[str, float], consumed: int, batch_size: int) -> None:
        """A trainer step that read ``consumed`` explored experiences (``batch_size`` make a batch)."""
        dropped = int(metrics.get("staleness/dropped", 0))
        with self._lock:
            self.stale_dropped += dropped
            if metrics.get(UPDATE_SKIPPED) or metrics.get(CRITIC_UPDATE_SKIPPED):
                self.skipped_updates += 1
            else:
                self.trained += consumed - dropped
            if 0 < consumed < batch_size:
                self.partial_steps += 1

    def discarded(self, count: int) -> None:
        with self._lock:
            self.discarded_at_sync += count

    def explorer_stopped(self, reason: str) -> None:
        with self._lock:
            self.explorer_blocked = reason

    def shortfall(self, *, planned_steps: int, trained_steps: int) -> Shortfall:
        with self._lock:
            return Shortfall(
                planned_steps=planned_steps,
                trained_steps=trained_steps,
                untrained_experiences=max(0, self.written - self.trained),
                partial_steps=self.partial_steps,
                skipped_updates=self.skipped_updates,
                failed_tasks=self.failed_tasks,
                refused_experiences=self.refused_experiences,
                discarded_at_sync=self.discarded_at_sync,
                explorer_blocked=int(self.explorer_blocked is not None),
                late_tasks=self.late_tasks,
                filtered_experiences=self.filtered_experiences,
                stale_dropped=self.stale_dropped,
            )

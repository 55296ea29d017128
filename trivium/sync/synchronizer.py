"""Weight synchronization between the trainer and the explorer, with versions.

The trainer ``publish``es a weight version; the explorer ``wait_for``s the version it needs
(or ``poll``s for a newer one), loads it into its engines, and ``confirm``s what the engines
report. When the explorer should sync and which version it needs follow ``sync_style``:

- ``fixed``: before explorer step ``1 + m * sync_interval`` it needs trainer version
  ``m * sync_interval * train_steps_per_explore_step - sync_offset`` (the explorer may run
  ``sync_offset`` steps ahead of the trainer).
- ``explorer_driven``: every ``sync_interval`` explorer steps it asks for the trainer's newest
  weights, whatever the trainer's step, and waits for the trainer to hand them over.
- ``trainer_driven``: the trainer publishes every ``sync_interval`` of its steps; the explorer
  picks up the newest at its next step boundary without waiting.
- ``fully_async``: as ``trainer_driven``, plus a bound on the explorer's lead: it starts a step
  only while at most ``sync_offset`` training batches are written and not yet trained (the
  batch in training counts), so what it samples is trained at most ``sync_offset`` versions
  after the newest published one. It never waits for a particular version; it waits only
  when the trainer is that far behind. Counted in experiences, so partial steps (over-rollout)
  cannot make it wait for a version the trainer has no data to reach.

The synchronizer owns the run's weight transport (``trivium.sync.transport``: ``memory``,
``checkpoint`` or the ``nccl`` collective), named by ``sync_method``: the trainer's side
stages each version with the transport's sender, the explorer's side has the transport
deliver it, and a superseded version is retired by it.

Every wait of the explorer ends, one way or another:

- with what it waited for;
- at once, returning, when a stop was requested (``should_stop``) or the trainer finished:
  the loop then stops exploring;
- at once, with ``VersionUnreachable``, when the version it needs cannot come: the trainer
  has fewer untrained experiences than the batches it must train to reach it, and the
  explorer writes nothing more until it gets it (tasks failed, experiences were dropped);
- after ``sync_timeout`` with ``SyncTimeout``: a clear error, never a hang.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from trivium.core.durations import seconds_text
from trivium.errors import SyncTimeout
from trivium.sync.checkpoint_transport import sync_weights_dir
from trivium.sync.transport import WeightBroadcaster, WeightReceiver, WeightTransport, weight_transport
from trivium.sync.weight_update import WeightUpdate

__all__ = ["SyncTimeout", "Synchronizer", "VersionUnreachable", "WeightUpdate", "sync_weights_dir"]

# A waiting side looks at ``should_stop`` at least this often (seconds).
STOP_POLL_SECONDS = 0.2


class VersionUnreachable(Exception):
    """The explorer needs a weight version the trainer cannot reach with the experiences
    written so far; the message gives the numbers. Not an error in itself: the explorer stops
    and the run reports what was not trained."""


class Synchronizer:
    def __init__(
        self,
        *,
        sync_method: str = "memory",
        sync_style: str = "fixed",
        sync_interval: int = 1,
        sync_offset: int = 0,
        sync_timeout: float = 1200,
        train_steps_per_explore_step: float = 1.0,
        train_batch_size: int = 1,
        run_dir: str | Path | None = None,
        logger: logging.Logger | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        counts_experiences: bool = False,
        across_processes: bool = False,
    ):
        """``should_stop``: a stop was requested (every wait returns soon after it holds).
        ``counts_experiences``: the loop reports every experience written and trained, and the
        trainer trains each once (no replay), so a version it cannot reach is known at once.
        ``across_processes``: explorer and trainer live in separate processes."""
        self.transport: WeightTransport = weight_transport(sync_method, across_processes=across_processes, run_dir=run_dir)
        self.sync_style = sync_style
        self.sync_interval = max(1, int(sync_interval))
        self.sync_offset = max(0, int(sync_offset))
        self.sync_timeout = sync_timeout
        self.ratio = train_steps_per_explore_step
        self.train_batch_size = max(1, int(train_batch_size))
        self.logger = logger or logging.getLogger("trivium.sync")
        self.should_stop = should_stop
        self.counts_experiences = counts_experiences
        self._latest: WeightUpdate | None = None
        self._cond = threading.Condition()
        self._sync_requested = False
        self._trainer_finished = False
        self.confirmed_version = 0
        self.trainer_version = 0  # the trainer's weight version after its last reported step
        # Experiences written by the explorer and not yet trained on (the lead of fully_async,
        # and what bounds the versions the trainer can still reach).
        self._untrained = 0

    # ------------------------------------------------------------------ explorer side
    def explorer_should_sync(self, next_explore_step: int) -> bool:
        """Whether the explorer syncs before running step ``next_explore_step`` (1-based)."""
        return next_explore_step > 1 and (next_explore_step - 1) % self.sync_interval == 0

    def required_version(self, next_explore_step: int) -> int:
        done = next_explore_step - 1
        return max(0, int(done * self.ratio) - self.sync_offset)

    def wait_for(self, min_version: int, timeout: float | None = None) -> WeightUpdate | None:
        """Block until a version >= ``min_version`` is published (None if it is already loaded).

        Returns early when the trainer finished (its newest version, if not loaded yet) or a stop
        was requested (None); raises ``VersionUnreachable`` when the version cannot come.
        """
        if min_version <= self.confirmed_version:
            return None
        wait = self.sync_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        with self._cond:
            while self._latest is None or self._latest.version < min_version:
                if self._trainer_finished:
                    return self._latest if self._latest and self._latest.version > self.confirmed_version else None
                if self.should_stop():
                    return None
                unreachable = self._unreachable(min_version)
                if unreachable:
                    raise VersionUnreachable(unreachable)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    have = self._latest.version if self._latest else 0
                    raise SyncTimeout(
                        f"the explorer waited {seconds_text(wait)} (synchronizer.sync_timeout) for weight "
                        f"version {min_version}, but the trainer has published only version {have}. "
                        "The trainer may be stuck or too slow; raise sync_timeout or check log/trainer.log."
                    )
                self._cond.wait(min(remaining, STOP_POLL_SECONDS))
            return self._latest

    def _unreachable(self, version: int) -> str | None:
        """Why the trainer cannot reach ``version`` without more experiences, or None (call under the lock)."""
        if not self.counts_experiences:
            return None
        steps = version - self.trainer_version
        needed = steps * self.train_batch_size
        if steps <= 0 or self._untrained >= needed:
            return None
        return (
            f"the explorer needs weight version {version}, but the trainer is at version {self.trainer_version} "
            f"with {max(self._untrained, 0)} untrained experiences, fewer than the {needed} its next {steps} "
            f"step(s) need ({self.train_batch_size} each), and the explorer writes no more until it gets it"
        )

    def request_sync(self, timeout: float | None = None) -> WeightUpdate | None:
        """explorer_driven: ask for the trainer's newest weights and wait for them
        (they come after its next step)."""
        with self._cond:
            have = self._latest.version if self._latest else 0
            self._sync_requested = True
            self._cond.notify_all()
            wanted = max(have + 1, self.confirmed_version + 1)
            unreachable = self._unreachable(max(wanted, self.trainer_version + 1))
        if unreachable:
            raise VersionUnreachable(unreachable)
        return self.wait_for(wanted, timeout)

    def poll(self) -> WeightUpdate | None:
        """trainer_driven: the newest published weights if newer than what is loaded."""
        with self._cond:
            if self._latest is not None and self._latest.version > self.confirmed_version:
                return self._latest
        return None

    def confirm(self, version: int) -> None:
        """The engines now serve ``version``."""
        with self._cond:
            self.confirmed_version = version
            self._cond.notify_all()
        self.logger.info("explorer now serves weight version %d", version)

    # ------------------------------------------------------------------ trainer side
    def trainer_should_publish(self, trainer_version: int) -> bool:
        if self.sync_style == "explorer_driven":
            with self._cond:
                return self._sync_requested
        if self.sync_style in ("trainer_driven", "fully_async"):
            return trainer_version % self.sync_interval == 0
        # fixed: exactly the versions the explorer will ask for
        block = max(1, round(self.sync_interval * self.ratio))
        return (trainer_version + self.sync_offset) % block == 0

    def publish(
        self,
        version: int,
        weights: dict[str, torch.Tensor],
        *,
        copy: bool = True,
        probes: list | None = None,
        probe_scores: list[torch.Tensor] | None = None,
    ) -> None:
        """Stage ``weights`` with this synchronizer's transport (the trainer in this process), then publish them."""
        update = self.transport.sender().stage_weights(version, weights, copy=copy)
        update.probes, update.probe_scores = probes, probe_scores
        self.publish_update(update)

    def publish_update(self, update: WeightUpdate) -> None:
        """Make a staged update the newest version the explorer can load."""
        with self._cond:
            previous = self._latest
            self._latest = update
            self._sync_requested = False
            self._cond.notify_all()
        if previous is not None:
            self.transport.retire(previous, newer=update)
        self.logger.info("trainer published weight version %d (%s)", update.version, self.transport.name)

    # ------------------------------------------------------------------ the transport between the sides
    def connect(self, broadcaster: WeightBroadcaster | None) -> None:
        """Before the first version: let the transport join the two sides (a broadcast group)."""
        self.transport.connect(broadcaster)

    def deliver(
        self, update: WeightUpdate, *, receiver: WeightReceiver, broadcaster: WeightBroadcaster | None
    ) -> dict[str, float]:
        """Explorer side: the transport puts ``update`` into every engine within ``sync_timeout``."""
        return self.transport.deliver(update, receiver=receiver, broadcaster=broadcaster, timeout=self.sync_timeout)

    # ------------------------------------------------------------------ policy of the concurrent loop
    def explorer_update(self, next_explore_step: int) -> WeightUpdate | None:
        """Before explorer step ``next_explore_step`` of a concurrent run: the update to load, if any.

        Blocks when the style makes the explorer wait (fixed: for the version it needs;
        explorer_driven: for the trainer to hand over its newest weights; fully_async: only
        while the explorer is more than ``sync_offset`` batches ahead of the trainer).
        """
        if self.sync_style == "trainer_driven":
            return self.poll()
        if self.sync_style == "fully_async":
            self.wait_within_lead()
            return self.poll()
        if not self.explorer_should_sync(next_explore_step):
            return None
        if self.sync_style == "explorer_driven":
            return self.request_sync()
        return self.wait_for(self.required_version(next_explore_step))

    # ------------------------------------------------------------------ fully_async: the explorer's lead
    @property
    def lead_limit(self) -> int:
        """Untrained experiences above which the explorer waits: ``sync_offset`` training batches."""
        return self.sync_offset * self.train_batch_size

    def experiences_written(self, count: int) -> None:
        with self._cond:
            self._untrained += count

    def experiences_trained(self, count: int, *, trainer_version: int | None = None) -> None:
        """The trainer consumed ``count`` experiences in a step and now holds ``trainer_version``."""
        # The trainer may finish a batch before the explorer has counted the step it came from:
        # the count dips below zero for a moment and stays exact.
        with self._cond:
            self._untrained -= count
            if trainer_version is not None:
                self.trainer_version = trainer_version
            self._cond.notify_all()

    def wait_within_lead(self, timeout: float | None = None) -> None:
        """Block while more than ``lead_limit`` written experiences are untrained (not after the
        trainer ends, nor after a stop request)."""
        wait = self.sync_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        with self._cond:
            while self._untrained > self.lead_limit and not self._trainer_finished and not self.should_stop():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SyncTimeout(
                        f"the explorer waited {seconds_text(wait)} (synchronizer.sync_timeout) for the trainer to "
                        f"train on its samples ({self._untrained} untrained, at most {self.lead_limit} allowed by "
                        "synchronizer.sync_offset); the trainer may be stuck: check log/trainer.log"
                    )
                self._cond.wait(min(remaining, STOP_POLL_SECONDS))

    def trainer_finished(self) -> None:
        with self._cond:
            self._trainer_finished = True
            self._cond.notify_all()

    @property
    def trainer_has_finished(self) -> bool:
        with self._cond:
            return self._trainer_finished

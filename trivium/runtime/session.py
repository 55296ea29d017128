"""One run (or one stage): its settings, its workers wherever they are placed, and the weights between them.

The session reads the resolved config once (``build_run_settings``), asks the run's placement
(``trivium.runtime.placement``) for the explorer side and the trainer side, and owns what
spans both: resuming from the run directory, the synchronizer and the weight transfers,
checkpoints with the explorer's position, monitors, the tally of what was explored, trained
and lost (``trivium.runtime.run_tally``), and tear-down. The mode loops in
``trivium.runtime.loops`` only call its methods and the workers'; the same loop code runs
whatever the placement.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from trivium.config.load import config_to_dict
from trivium.core.durations import seconds_text
from trivium.errors import SyncTimeout
from trivium.runtime.placement import Placement, create_placement
from trivium.runtime.run_tally import RunTally
from trivium.runtime.settings import RunSettings, build_run_settings
from trivium.runtime.stopping import stop_requested
from trivium.runtime.worker_sides import ExplorerSide, TrainerSide
from trivium.sync.synchronizer import Synchronizer, WeightUpdate
from trivium.trainer import checkpoint as ckpt

logger = logging.getLogger("trivium.runtime")


class RunSession:
    def __init__(self, config: Any, *, console: Any = None):
        self.settings: RunSettings = build_run_settings(config)
        settings = self.settings
        self.config_dict = config_to_dict(config)  # what monitors record as the run's config
        self.run_dir = settings.run_dir
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console = console
        torch.manual_seed(settings.seed)
        self.resume = settings.resume and settings.traits.resumes
        if self.resume:
            # A save killed between its two renames is completed (or rolled back) first.
            ckpt.recover_interrupted_save(self.run_dir)
        self.resume_step = ckpt.latest_checkpoint(self.run_dir) if self.resume else None
        self.trainer: TrainerSide | None = None
        self.explorer: ExplorerSide | None = None
        self.placement: Placement | None = None
        self.trainer_monitor = self.explorer_monitor = None
        self.eval_history: list[tuple[int, dict[str, float]]] = []
        self.restored_unread = 0  # experiences a resumed trainer finds in its buffer again
        try:
            self.placement = create_placement(settings)
            self.synchronizer = self._build_synchronizer(self.placement)
            self._place_workers(self.placement)
            if settings.traits.trains:
                self.trainer_monitor = self._monitor("trainer")
            if settings.traits.explores:
                self.explorer_monitor = self._monitor("explorer")
            # Asked at every explorer step; on Ray each question is a call to the explorer actor.
            self.has_eval_sets = self.explorer is not None and self.explorer.has_eval_sets()
            if self.trainer is not None:
                self._resume_trainer_input()
            if self.explorer is not None:
                self._resume_explorer()
            if self._engines_may_hold_trainer_weights():
                self._hold_trainer_weights()
        except BaseException:
            self.close()
            raise
        # What the run explores, trains and loses, for the shortfall check at its end.
        self.tally = RunTally(written=self.restored_unread)

    # ------------------------------------------------------------------ building
    def _place_workers(self, placement: Placement) -> None:
        traits = self.settings.traits
        if traits.trains:
            self.trainer = placement.trainer(self.resume_step, self.synchronizer.transport)
        if traits.explores:
            self.explorer = placement.explorer()
        placement.placed()
        if self.trainer is not None and self.explorer is not None:
            self.synchronizer.connect(placement.weight_broadcaster())

    def _monitor(self, role: str) -> Any:
        from trivium.monitor.factory import create_monitor

        monitor = self.settings.monitor
        return create_monitor(
            run_dir=self.run_dir,
            project=monitor.project,
            name=monitor.name,
            role=role,
            monitor_type=monitor.monitor_type,
            monitor_args=dict(monitor.monitor_args),
            config_dict=self.config_dict,
            group=monitor.group,
            enable_ray_timeline=monitor.enable_ray_timeline,
            console=self.console,
        )

    def _build_synchronizer(self, placement: Placement) -> Synchronizer:
        sync, inputs = self.settings.sync, self.settings.trainer_input
        synchronizer = Synchronizer(
            sync_method=sync.method,
            sync_style=sync.style,
            sync_interval=sync.interval,
            sync_offset=sync.offset,
            sync_timeout=sync.timeout,
            train_steps_per_explore_step=sync.train_steps_per_explore_step,
            train_batch_size=self.settings.train_batch_size,
            run_dir=self.run_dir,
            logger=logger,
            should_stop=stop_requested,
            # With replay the trainer may reach any version from the experiences it reuses.
            counts_experiences=inputs is not None and not inputs.reuses_experiences,
            across_processes=placement.separate_processes,
        )
        if self.resume_step is not None:
            synchronizer.confirmed_version = synchronizer.trainer_version = self.resume_step
        return synchronizer

    def _resume_explorer(self) -> None:
        if self.resume_step is None:
            if self.resume and self.trainer is None:
                self.explorer.restore_position()
            elif self.resume and self.explorer.position_saved():
                # Without a checkpoint the trainer starts again from its first step; the explorer
                # must too, or the steps it had explored would never be trained.
                dropped = self.trainer.discard_unread()
                logger.warning(
                    "no checkpoint to resume from in %s: explorer and trainer start again from step 0 "
                    "(the explorer's earlier steps had not been trained and saved; %d buffered "
                    "experiences of theirs are dropped)", self.run_dir, dropped,
                )
            return
        step = self.resume_step
        reached = self.explorer.saved_position_step()
        self.explorer.restore_checkpoint(step)
        if self.trainer is not None and not self.placement.separate_processes:
            # In one process the trainer already holds these weights: no need to read them again.
            self.explorer.load_weights(self.trainer.current_weights())
        else:
            self.explorer.load_checkpoint_weights(step)
        position = self.explorer.step()
        logger.info("resumed the explorer at step %d with weight version %d", position, step)
        if reached is not None and reached > position:
            logger.warning(
                "the explorer had reached step %d; steps %d-%d were explored after checkpoint %d and are "
                "explored again from it (their experiences came from weights this run no longer has)",
                reached, position + 1, reached, step,
            )

    def _resume_trainer_input(self) -> None:
        """The trainer reads on from where its checkpoint left the buffer (or the dataset)."""
        if self.resume_step is None:
            return
        restored = self.trainer.restore_input(self.resume_step)
        if restored is None:
            return
        self.restored_unread, dropped = restored
        logger.info(
            "the trainer's buffer holds the %d experiences checkpoint %d had not trained on; "
            "%d buffered ones sampled after it are dropped (their steps are explored again)",
            self.restored_unread, self.resume_step, dropped,
        )

    def _engines_may_hold_trainer_weights(self) -> bool:
        """Explorer and trainer take turns in this process, and every trained step is synced
        before the next rollout: the engines may compute with the trainer's own tensors instead
        of a copy, and the process holds one copy of the weights instead of two."""
        settings = self.settings
        trainer = settings.trainer
        return (
            self.trainer is not None and self.explorer is not None
            and settings.traits.takes_turns and not self.placement.separate_processes
            and self.synchronizer.transport.hands_over_own_tensors
            and settings.sync.interval == 1 and settings.sync.offset == 0
            and trainer.lora is None and trainer.data_parallel_size == 1
        )

    def _hold_trainer_weights(self) -> None:
        update = self.trainer.current_weights()
        if update.weights is None:  # the weights live on a training service
            return
        self.explorer.hold_weights(update)

    # ------------------------------------------------------------------ logging
    def log_explorer(self, metrics: dict[str, float] | None, step: int) -> None:
        if self.explorer_monitor is not None and metrics:
            self.explorer_monitor.log(metrics, step)

    def log_trainer(self, metrics: dict[str, float] | None, step: int) -> None:
        if self.trainer_monitor is not None and metrics:
            self.trainer_monitor.log(metrics, step)

    # ------------------------------------------------------------------ weights
    def publish_weights(self, *, copy: bool) -> None:
        """Trainer side: stage the current weights with the sender of the synchronizer's transport."""
        self.synchronizer.publish_update(self.trainer.stage_weights(copy=copy))

    def load_weights(self, update: WeightUpdate) -> dict[str, float]:
        """Explorer side: the transport delivers ``update`` to every engine; confirm, and run the self-check."""
        start = time.perf_counter()
        metrics = self.synchronizer.deliver(update, receiver=self.explorer, broadcaster=self.placement.weight_broadcaster())
        served = self.explorer.served_version()
        if served != update.version:
            raise RuntimeError(f"the engines serve version {served} after loading version {update.version}")
        self.synchronizer.confirm(update.version)
        metrics["time/sync"] = time.perf_counter() - start
        metrics.update(self.explorer.self_check(update))
        return metrics

    def sync_now(self, *, copy: bool) -> dict[str, float]:
        """Hand the trainer's current weights to the engines at once (colocate, end of a run)."""
        self.publish_weights(copy=copy)
        return self.load_weights(self.synchronizer.poll())

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, *, final: bool) -> Path | None:
        if self.trainer is None:
            return None
        explorer_state = self._explorer_state_covering_reads() if self.explorer is not None else None
        return Path(self.trainer.save_checkpoint(final=final, explorer_state=explorer_state))

    def _explorer_state_covering_reads(self) -> dict:
        """The explorer's position, at least as far as every experience the trainer has read.

        A step's experiences are written just before its position is recorded, so the trainer
        may already have read some of a step the position does not count yet; wait for it.
        """
        needed = self.trainer.newest_explore_step_read()
        deadline = time.monotonic() + self.settings.sync.timeout
        while True:
            state = self.explorer.state_dict()
            if int(state["step"]) >= needed:
                return state
            if time.monotonic() > deadline:
                raise SyncTimeout(
                    f"checkpoint at trainer step {self.trainer.global_step()}: the explorer has not recorded "
                    f"step {needed} within {seconds_text(self.settings.sync.timeout)} though the trainer read its experiences"
                )
            time.sleep(0.02)

    def save_if_due(self) -> None:
        if self.trainer.checkpoint_due():
            self.save_checkpoint(final=False)

    # ------------------------------------------------------------------ tear-down
    def close(self) -> None:
        for monitor in (self.trainer_monitor, self.explorer_monitor):
            if monitor is not None:
                monitor.close()
        for worker in (self.explorer, self.trainer):
            if worker is not None:
                try:
                    worker.close()
                except Exception as error:  # a dead actor has nothing left to close
                    logger.debug("closing a worker: %s", error)
        if self.placement is not None:
            self.placement.shutdown()
        from trivium.buffer.queue_storage import forget_queues

        # A queue lives as long as its run: a later run (or stage) in this process starts empty.
        forget_queues()

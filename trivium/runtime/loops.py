"""The loop of each mode. Each reads top to bottom: explore, train, synchronize, evaluate.

- ``colocate``: explorer and trainer take turns in one thread.
- ``both``: explorer and trainer run concurrently, each driven by a thread of this process;
  the synchronizer decides when the explorer waits for new weights.
- ``train``: the trainer alone, from the experience buffer or a dataset (sft, dpo).
- ``explore``: the explorer alone; it picks up newer checkpoints from the run directory.
- ``serve``: in ``trivium.serve.loop``: the policy served over HTTP to outside applications
  while the trainer learns from their rewarded sessions.

Idle time: each explorer step logs ``time/idle_explorer`` (seconds it waited on the trainer
before the step: in ``both`` for a weight version or, ``fully_async``, for the trainer to
catch up; in ``colocate`` the trainer's turn), each trainer step ``time/idle_trainer`` (seconds
it waited for experiences: in ``colocate`` the explorer's turn before it). The first step of
the process also logs ``time/startup`` (``trivium.runtime.startup``).

The loops call the session and its two workers only. The workers are local objects or Ray
actors (``trivium.runtime.ray_placement``); the loop code is the same.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any

from trivium.errors import ComponentDied, SyncTimeout, UserError
from trivium.monitor.metric_names import IDLE_EXPLORER, IDLE_TRAINER
from trivium.runtime.session import RunSession
from trivium.runtime.startup import startup_metric
from trivium.runtime.stopping import stop_requested
from trivium.trainer import checkpoint as ckpt

logger = logging.getLogger("trivium.runtime")


# ---------------------------------------------------------------- steps shared by every mode


def evaluate(session: RunSession, step: int) -> dict[str, float]:
    metrics = session.explorer.evaluate()
    session.log_explorer(metrics, step)
    session.eval_history.append((step, metrics))
    return metrics


def startup_eval(session: RunSession) -> None:
    """Evaluate the initial model at step 0; not on a restart."""
    if session.settings.explorer.eval_on_startup and session.has_eval_sets and session.explorer.step() == 0:
        evaluate(session, 0)


def eval_if_due(session: RunSession) -> None:
    interval = session.settings.explorer.eval_interval
    if interval <= 0 or not session.has_eval_sets:
        return
    step = session.explorer.step()
    if step % interval == 0:
        evaluate(session, step)


def explore_once(session: RunSession, progress: Any, *, idle_seconds: float = 0.0) -> dict[str, float] | None:
    """One explorer step, logged with the seconds it waited before it; None when the tasksets are exhausted."""
    began = time.time()
    metrics = session.explorer.explore_once()
    if metrics is not None:
        metrics.update(startup_metric(began))
        metrics[IDLE_EXPLORER] = idle_seconds
        step = int(metrics["explorer/step"])
        session.log_explorer(metrics, step)
        if progress:
            progress.update_explore(step)
    return metrics


def train_once(
    session: RunSession, progress: Any, timeout: float | None = None, *, idle_seconds: float = 0.0
) -> tuple[dict[str, float], int] | None:
    """One trainer step, logged and checkpointed when due: (metrics, rollouts used); None when the buffer is exhausted.

    ``idle_seconds``: the trainer's wait before the step outside its own read (colocate: the explorer's turn).
    """
    began = time.time()
    result = session.trainer.train_once(timeout)
    if result is None:
        return None
    metrics, consumed = result
    if metrics:
        metrics.update(startup_metric(began))
        metrics[IDLE_TRAINER] = metrics.get(IDLE_TRAINER, 0.0) + idle_seconds
        step = session.trainer.global_step()
        session.log_trainer(metrics, step)
        if progress:
            progress.update_train(step)
        session.save_if_due()
    return metrics, consumed


def training_done(session: RunSession) -> bool:
    return stop_requested() or session.trainer.reached_total_steps()


# ---------------------------------------------------------------- the modes


def run_colocate(session: RunSession, progress: Any = None) -> None:
    sync = session.synchronizer
    batch_size = session.settings.train_batch_size
    startup_eval(session)
    pending = session.restored_unread  # rollouts written and not yet trained on
    explorer_idle = 0.0  # the trainer's turn since the last explorer step
    while not training_done(session):
        explore_start = time.perf_counter()
        metrics = explore_once(session, progress, idle_seconds=explorer_idle)
        if metrics is None:
            break
        trainer_idle, explorer_idle = time.perf_counter() - explore_start, 0.0
        pending += int(metrics.get("rollout/num_experiences", 0))
        step = int(metrics["explorer/step"])
        if step % sync.sync_interval == 0:
            turn_start = time.perf_counter()
            trained = False
            while pending >= batch_size and not training_done(session):
                result = train_once(session, progress, timeout=5.0, idle_seconds=trainer_idle)
                if result is None:
                    break
                trainer_idle = 0.0
                pending -= result[1]
                trained = trained or bool(result[0])
            if trained:
                # One thread: the engine copies the tensors, so no snapshot is needed.
                session.log_explorer(session.sync_now(copy=False), step)
            explorer_idle = time.perf_counter() - turn_start
        eval_if_due(session)
    if pending:
        logger.info("%d experiences left over (less than one training batch)", pending)


def run_both(session: RunSession, progress: Any = None) -> None:
    sync = session.synchronizer
    errors: list[BaseException] = []
    stop = threading.Event()

    # A resumed trainer's buffer holds experiences already written (fully_async counts them).
    sync.experiences_written(session.restored_unread)

    def explorer_loop() -> None:
        try:
            startup_eval(session)
            while not stop.is_set() and not stop_requested():
                wait_start = time.perf_counter()
                update = sync.explorer_update(session.explorer.step() + 1)
                idle = time.perf_counter() - wait_start
                if update is not None:
                    session.log_explorer(session.load_weights(update), session.explorer.step())
                metrics = explore_once(session, progress, idle_seconds=idle)
                if metrics is None:
                    break
                sync.experiences_written(int(metrics.get("rollout/num_experiences", 0)))
                eval_if_due(session)
        except BaseException as error:
            errors.append(error)
            logger.error("explorer failed: %s", _described(error))
            stop.set()
        finally:
            _quietly(session.explorer.finish_writing, "finishing the explorer's writes")

    def trainer_loop() -> None:
        try:
            while not stop.is_set() and not training_done(session):
                result = train_once(session, progress)
                if result is None:
                    break
                if result[0] and sync.trainer_should_publish(session.trainer.model_version()):
                    session.publish_weights(copy=True)
                sync.experiences_trained(result[1])
        except BaseException as error:
            errors.append(error)
            logger.error("trainer failed: %s", _described(error))
            stop.set()
        finally:
            if not errors:
                _quietly(lambda: session.publish_weights(copy=True), "publishing the last weights")
            sync.trainer_finished()
            stop.set()  # nothing will consume further rollouts
            _quietly(session.trainer.close_reader, "closing the trainer's reader")

    threads = [
        threading.Thread(target=explorer_loop, name="explorer", daemon=True),
        threading.Thread(target=trainer_loop, name="trainer", daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def run_train(session: RunSession, progress: Any = None) -> None:
    epochs = session.settings.total_epochs
    has_total = bool(session.settings.trainer.total_steps)
    while not training_done(session):
        # Dataset readers cycle; without total_steps, total_epochs ends the stage.
        if not has_total and session.trainer.dataset_epoch() >= epochs:
            break
        result = train_once(session, progress)
        if result is None or not result[0]:
            break


def run_explore(session: RunSession, progress: Any = None) -> None:
    """Explore alone; between steps, load a newer checkpoint if a trainer wrote one."""
    explorer = session.explorer
    startup_eval(session)
    try:
        while not stop_requested():
            latest = ckpt.latest_checkpoint(session.run_dir)
            if latest is not None and latest > explorer.served_version():
                session.log_explorer(explorer.load_checkpoint_weights(latest), explorer.step())
            if explore_once(session, progress) is None:
                break
            eval_if_due(session)
    finally:
        explorer.finish_writing()


def _described(error: BaseException) -> str:
    """A known failure in one line (the CLI repeats it as the run's error); anything else with its traceback."""
    if isinstance(error, (ComponentDied, SyncTimeout, UserError)):
        return str(error)
    return traceback.format_exc()


def _quietly(action, what: str) -> None:
    """Tear-down steps after a failure must not hide the failure itself."""
    try:
        action()
    except Exception as error:
        logger.warning("%s failed: %s", what, error)

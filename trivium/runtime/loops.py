"""The loop of each mode. Each reads top to bottom: explore, train, synchronize, evaluate.

- ``colocate``: explorer and trainer take turns in one thread.
- ``both``: explorer and trainer run concurrently, each driven by a thread of this process;
  the synchronizer decides when the explorer waits for new weights.
- ``train``: the trainer alone, from the experience buffer or a dataset (sft, dpo).
- ``explore``: the explorer alone; it picks up newer checkpoints from the run directory.
- ``serve``: in ``trivium.serve.loop``: the policy served over HTTP to outside applications
  while the trainer learns from their rewarded sessions.

Each registers itself in ``trivium.runtime.mode_loops`` under its mode's name.

Idle time: each explorer step logs ``time/idle_explorer`` (seconds it waited on the trainer
before the step: in ``both`` for a weight version or, ``fully_async``, for the trainer to
catch up; in ``colocate`` the trainer's turn), each trainer step ``time/idle_trainer`` (seconds
it waited for experiences: in ``colocate`` the explorer's turn before it). The first step of
the process also logs ``time/startup`` (``trivium.runtime.startup``).

Ending: every wait between explorer and trainer ends on a stop request, and when the other
side has finished or failed (``trivium.sync.synchronizer``; a trainer waiting for experiences
stops waiting once the explorer finishes writing). In ``both``, once a stop was requested or a
side failed, the other gets ``sync_timeout`` plus its longest step so far to end; a loop still
running then is reported stuck and the run ends with an error, never a hang. A lost trainer
rank ends the run at once instead, whatever either side waits for (``stopping.fail_run``). The loops count
what was explored, trained and lost in ``session.tally`` for the shortfall check at the end.

The loops call the session and its two workers only. The workers are local objects or Ray
actors (``trivium.runtime.ray_placement``); the loop code is the same.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from trivium.core.durations import seconds_text
from trivium.core.metric_names import IDLE_EXPLORER, IDLE_TRAINER
from trivium.errors import ComponentDied, SyncTimeout, UserError
from trivium.runtime.mode_loops import MODE_LOOPS
from trivium.runtime.session import RunSession
from trivium.runtime.startup import startup_metric
from trivium.runtime.stopping import raise_if_failed, run_failure, stop_requested
from trivium.runtime.workers import skipped_update
from trivium.sync.synchronizer import VersionUnreachable
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
        session.tally.explored(metrics)
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
        session.tally.trained_step(metrics, consumed, session.settings.train_batch_size)
        report_skipped_update(session, metrics, step)
        session.log_trainer(metrics, step)
        if progress:
            progress.update_train(step)
        session.save_if_due()
    return metrics, consumed


def report_skipped_update(session: RunSession, metrics: dict[str, float], step: int) -> None:
    """A step that trained nothing (non-finite gradients) is an error on the console, naming its samples."""
    why = skipped_update(metrics)
    if why is None:
        return
    samples = session.trainer.samples_of_last_step()
    shown = ", ".join(samples[:8]) + (f" and {len(samples) - 8} more" if len(samples) > 8 else "")
    logger.error(
        "trainer step %d: the update was skipped: %s. Its %d samples were not trained (%s); "
        "log/trained_samples.jsonl marks the step skipped, log/trainer.log has the details",
        step, why, len(samples), shown,
    )


def training_done(session: RunSession) -> bool:
    raise_if_failed()  # a lost trainer rank: where no signal reached the waiting thread, it ends here
    return stop_requested() or session.trainer.reached_total_steps()


# ---------------------------------------------------------------- the modes


@MODE_LOOPS.register("colocate")
def run_colocate(session: RunSession, progress: Any = None) -> None:
    sync = session.synchronizer
    batch_size = session.settings.train_batch_size
    discards_leftovers = leftovers_go_stale(session)
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
            if trained and pending > 0 and discards_leftovers and not training_done(session):
                pending -= discard_leftovers(session, pending)
            if trained:
                # One thread: the engine copies the tensors, so no snapshot is needed.
                session.log_explorer(session.sync_now(copy=False), step)
            explorer_idle = time.perf_counter() - turn_start
        eval_if_due(session)
    if pending:
        logger.info("%d experiences left over (less than one training batch)", pending)


def leftovers_go_stale(session: RunSession) -> bool:
    """Whether colocate discards what is left untrained at a weight sync.

    When a sync interval's experiences make a whole number of batches, each interval's
    experiences are trained within it, by the weights that sampled them (on-policy). A
    remainder smaller than a batch (tasks failed, experiences dropped) would be trained after
    the sync, staler than the schedule ever trains a sample, so it is discarded and counted.
    A schedule that does not divide evenly, or replay, trains older samples by design.
    """
    sync = session.settings.sync
    batches_per_interval = sync.interval * sync.train_steps_per_explore_step
    replay = session.settings.trainer_input.reuses_experiences
    return not replay and abs(batches_per_interval - round(batches_per_interval)) < 1e-9


def discard_leftovers(session: RunSession, count: int) -> int:
    dropped = session.trainer.drop_untrained(count)
    session.tally.discarded(dropped)
    logger.warning(
        "%d experiences, fewer than a training batch of %d, are discarded at this weight sync: training them "
        "after it would train stale samples (the explorer's step came back short)",
        dropped, session.settings.train_batch_size,
    )
    return dropped


@MODE_LOOPS.register("both")
def run_both(session: RunSession, progress: Any = None) -> None:
    sync = session.synchronizer
    errors: list[BaseException] = []
    stop = threading.Event()
    longest_step = [0.0]  # seconds of the longest explorer or trainer step so far

    def timed(step, *args, **kwargs):
        began = time.perf_counter()
        try:
            return step(*args, **kwargs)
        finally:
            longest_step[0] = max(longest_step[0], time.perf_counter() - began)

    # A resumed trainer's buffer holds experiences already written (fully_async counts them).
    sync.experiences_written(session.restored_unread)

    def side(name: str, run: Callable[[], None], finish: Callable[[], None]) -> None:
        """Run one side; its failure is recorded and stops the other side; ``finish`` always runs."""
        try:
            run()
        except BaseException as error:
            errors.append(error)
            if run_failure() not in (None, error):  # the run failed already: this side was cut off by it
                logger.debug("%s ended by the run's failure: %r", name, error)
            else:
                logger.error("%s failed: %s", name, _described(error))
            stop.set()
        finally:
            finish()

    def explorer_loop() -> None:
        side(
            "explorer",
            lambda: _explore_until_stopped(session, progress, stop=stop, timed=timed),
            lambda: _quietly(session.explorer.finish_writing, "finishing the explorer's writes"),
        )

    def finish_training() -> None:
        if not errors:
            _quietly(lambda: session.publish_weights(copy=True), "publishing the last weights")
        sync.trainer_finished()
        stop.set()  # nothing will consume further rollouts
        _quietly(session.trainer.close_reader, "closing the trainer's reader")

    def trainer_loop() -> None:
        side("trainer", lambda: _train_until_done(session, progress, stop=stop, timed=timed), finish_training)

    threads = [
        threading.Thread(target=explorer_loop, name="explorer", daemon=True),
        threading.Thread(target=trainer_loop, name="trainer", daemon=True),
    ]
    for thread in threads:
        thread.start()
    grace = session.settings.sync.timeout
    _join_or_name_stuck(threads, errors, grace=lambda: grace + longest_step[0])
    if errors:
        # A dead component is the cause of what the other side then saw (a sync timeout, say).
        raise next((error for error in errors if isinstance(error, ComponentDied)), errors[0])


def _explore_until_stopped(session: RunSession, progress: Any, *, stop: threading.Event, timed) -> None:
    """The explorer's side of ``both``: before each step, wait for the weights it may use; explore;
    evaluate when due. Ends on a stop, when the trainer is done, or when the explorer runs out."""
    sync = session.synchronizer
    startup_eval(session)
    while not stop.is_set() and not stop_requested():
        wait_start = time.perf_counter()
        next_step = session.explorer.step() + 1
        try:
            update = sync.explorer_update(next_step)
        except VersionUnreachable as blocked:
            session.tally.explorer_stopped(str(blocked))
            logger.error("the explorer stops before its step %d: %s", next_step, blocked)
            return
        if stop.is_set() or stop_requested() or sync.trainer_has_finished:
            return  # the wait ended because the trainer is done or a stop was asked
        idle = time.perf_counter() - wait_start
        if update is not None:
            session.log_explorer(session.load_weights(update), session.explorer.step())
        metrics = timed(explore_once, session, progress, idle_seconds=idle)
        if metrics is None:
            return
        sync.experiences_written(int(metrics.get("rollout/num_experiences", 0)))
        eval_if_due(session)


def _train_until_done(session: RunSession, progress: Any, *, stop: threading.Event, timed) -> None:
    """The trainer's side of ``both``: train, publish the weights when the synchronizer wants
    them, and tell it what was trained."""
    sync = session.synchronizer
    while not stop.is_set() and not training_done(session):
        result = timed(train_once, session, progress)
        if result is None:
            return
        version = session.trainer.model_version()
        if result[0] and sync.trainer_should_publish(version):
            session.publish_weights(copy=True)
        sync.experiences_trained(result[1], trainer_version=version)


def _join_or_name_stuck(threads: list[threading.Thread], errors: list[BaseException], *, grace) -> None:
    """Wait for both loops; once one failed or a stop was requested, a loop still running after
    ``grace()`` more seconds is stuck, and a ``SyncTimeout`` naming it joins ``errors``."""
    stuck = join_loops(threads, ending=lambda: bool(errors) or stop_requested(), grace=grace)
    if stuck:
        why = "a stop was requested" if stop_requested() and not errors else "the other loop failed"
        stuck_error = SyncTimeout(
            f"after {why}, the {' and '.join(stuck)} loop did not end within "
            f"{seconds_text(grace())} (synchronizer.sync_timeout plus its longest step); it is "
            f"stuck: see log/{stuck[0]}.log. The run ends without its final checkpoint"
        )
        logger.error("%s", stuck_error)
        errors.append(stuck_error)


def join_loops(threads: list[threading.Thread], *, ending, grace) -> list[str]:
    """Wait for every loop. Once ``ending()`` holds (a stop request, a failed loop), the loops
    still running get ``grace()`` more seconds; returns the names of those still running then."""
    deadline = None
    while True:
        alive = [thread for thread in threads if thread.is_alive()]
        if not alive:
            return []
        if deadline is None and ending():
            deadline = time.monotonic() + grace()
        if deadline is not None and time.monotonic() >= deadline:
            return [thread.name for thread in alive]
        alive[0].join(0.2)


@MODE_LOOPS.register("train")
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


@MODE_LOOPS.register("explore")
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

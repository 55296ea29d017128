"""The loop of ``mode: serve``: serve the policy to outside applications while training on their sessions.

    serve   the rollout engine behind the OpenAI-compatible server (explorer.listen_address:
            explorer.proxy_port), chat sessions recorded, /feedback and /commit taken;
            every commit writes experiences to the run's buffer and counts as an explorer step
    train   a thread reads the buffer as in ``both`` and trains; every synchronizer.sync_interval
            trainer steps the new weights are loaded into the served engine at once

The run ends when the trainer reaches its total steps, or at the first SIGINT/SIGTERM
(``trivium.runtime.stopping``). Everything runs in this process: the engine, the trainer and
the HTTP server share memory, so weights move without copies.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trivium.buffer.factory import create_writer
from trivium.errors import UserError
from trivium.models.served_sessions import CommitResult, SessionRecorder
from trivium.models.server import check_port_free, serve_in_thread
from trivium.models.server_guard import is_loopback
from trivium.runtime.loops import eval_if_due, startup_eval, train_once, training_done
from trivium.runtime.mode_loops import MODE_LOOPS
from trivium.runtime.session import RunSession
from trivium.runtime.stopping import stop_requested

logger = logging.getLogger("trivium.serve")

# The id clients send as ``model``.
SERVED_MODEL_NAME = "policy"


@MODE_LOOPS.register("serve")
def run_serve(session: RunSession, progress: Any = None) -> None:
    check_servable(session)
    settings, worker = session.settings, session.explorer
    address = settings.explorer.serve
    check_port_free(address.listen_address, address.port, key="explorer.proxy_port")
    log_lock = threading.Lock()  # commits (HTTP threads) and syncs (trainer thread) both log

    def committed(result: CommitResult) -> None:
        with log_lock:
            worker.explorer.state.step += 1  # a commit is serve mode's explorer step
            step = worker.step()
            session.log_explorer({**result.metrics, "explorer/step": float(step),
                                  "explorer/model_version": float(worker.served_version())}, step)

    writer = create_writer(settings.explorer.experience_buffer)
    recorder = SessionRecorder(
        wrappers=worker.wrappers, write=writer.write, prepare=worker.explorer.prepare_for_training,
        on_commit=committed, version=worker.served_version,
    )
    errors: list[BaseException] = []
    trainer = threading.Thread(target=_train, args=(session, progress, errors, log_lock), name="trainer", daemon=True)
    try:
        with serve_in_thread(worker.engines[0], host=address.listen_address, port=address.port,
                             model_name=SERVED_MODEL_NAME, sessions=recorder, api_key=address.api_key) as url:
            _announce(session, url, address.listen_address)
            startup_eval(session)
            trainer.start()
            _watch(session, trainer, stop=lambda: _stop_taking_experiences(recorder, writer))
    finally:
        left = _stop_taking_experiences(recorder, writer)
        if trainer.is_alive():
            trainer.join()
    if left["open"] or left["rewarded"]:
        logger.warning("the run ended with %d open sessions and %d rewarded but not committed; "
                       "they were not trained on", left["open"], left["rewarded"])
    if errors:
        raise errors[0]


def check_servable(session: RunSession) -> None:
    if session.placement.separate_processes:
        raise UserError(
            "cluster.placement: serve mode runs the engine, the trainer and the API in one process; "
            "set cluster.placement: process"
        )


def _train(session: RunSession, progress: Any, errors: list[BaseException], log_lock: threading.Lock) -> None:
    """The trainer thread: train on committed experiences, hand every sync_interval-th version to the engine."""
    interval = session.settings.sync.interval
    try:
        while not training_done(session):
            result = train_once(session, progress)
            if result is None:  # the buffer is closed and empty: the run is stopping
                break
            if result[0] and session.trainer.model_version() % interval == 0:
                _load_trainer_weights(session, log_lock)
    except BaseException as error:
        errors.append(error)
        logger.error("trainer failed: %s", error, exc_info=not isinstance(error, UserError))
    finally:
        if not errors and session.explorer.served_version() != session.trainer.model_version():
            try:
                _load_trainer_weights(session, log_lock)
            except Exception as error:  # the failure to report is the first one
                logger.warning("loading the last weights failed: %s", error)
        try:
            session.trainer.close_reader()
        except Exception as error:
            logger.warning("closing the trainer's reader failed: %s", error)


def _load_trainer_weights(session: RunSession, log_lock: threading.Lock) -> None:
    # The trainer waits for the load, so the engine may copy straight from its tensors.
    session.publish_weights(copy=False)
    metrics = session.load_weights(session.synchronizer.poll())
    with log_lock:
        session.log_explorer(metrics, session.explorer.step())


def _stop_taking_experiences(recorder: SessionRecorder, writer: Any) -> dict[str, int]:
    """No more commits; the buffer's writer finishes, so a trainer waiting for a batch stops waiting."""
    left = recorder.close()
    writer.finish()
    return left


def _watch(session: RunSession, trainer: threading.Thread, *, stop: Callable[[], Any]) -> None:
    """Until the trainer is done: evaluate when due; on a stop request, stop taking experiences."""
    evaluated_at = session.explorer.step()
    while trainer.is_alive():
        trainer.join(timeout=0.2)
        if stop_requested():
            stop()
        step = session.explorer.step()
        if step != evaluated_at:
            evaluated_at = step
            eval_if_due(session)


def _announce(session: RunSession, url: str, host: str) -> None:
    line = (f"serving the policy at {url} (model '{SERVED_MODEL_NAME}'); record sessions with the header "
            "X-Session-Id, then POST /feedback and /commit")
    logger.info(line)
    if session.console is not None:
        session.console.print(line, highlight=False)
    else:
        print(line, flush=True)
    if not is_loopback(host):
        logger.warning(
            "explorer.listen_address is %s: the API is reachable beyond this machine, and anyone who reaches it "
            "can sample the policy and post rewards that train it", host,
        )

"""The loop of ``mode: serve``: serve the policy to outside applications while training on their sessions.

    serve   the rollout engines (explorer.rollout_model.engine_num) as one pool behind the
            OpenAI-compatible server (explorer.listen_address:explorer.proxy_port): each call
            goes to an engine in rotation (``trivium.serve.engine_pool``); chat sessions
            recorded, /feedback and /commit taken, GET /engines shows each engine's state;
            every commit writes experiences to the run's buffer and counts as an explorer step
    check   every explorer.service_status_check_interval seconds each serving engine samples a
            token (``trivium.serve.engine_health``); one that fails leaves the rotation
    train   a thread reads the buffer as in ``both`` and trains; every synchronizer.sync_interval
            trainer steps the new weights are loaded into the engines in turns
            (``trivium.serve.weight_roll``), explorer.min_running_model_num of them serving meanwhile

The run ends when the trainer reaches its total steps, at the first SIGINT/SIGTERM
(``trivium.runtime.stopping``), or with an error when fewer than min_running_model_num engines
are left. Everything runs in this process: the engines, the trainer and the HTTP server share
memory, so weights move without copies.
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
from trivium.runtime import builders
from trivium.runtime.loops import eval_if_due, startup_eval, train_once, training_done
from trivium.runtime.mode_loops import MODE_LOOPS
from trivium.runtime.session import RunSession
from trivium.runtime.stopping import stop_requested
from trivium.serve.engine_health import HealthChecker
from trivium.serve.engine_pool import EnginePool
from trivium.serve.weight_roll import EngineRollout, load_in_turns

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
    pool = EnginePool(worker.engines, min_running=address.min_running_engines)
    worker.sample_through([pool.routed() for _ in worker.engines])  # evaluations too go to engines in rotation
    rollout = EngineRollout(pool, worker)
    writer = create_writer(settings.explorer.experience_buffer)
    recorder, wrappers = _recorder(session, pool, writer, log_lock)
    health = HealthChecker(pool, interval=address.status_check_interval)
    errors: list[BaseException] = []
    trainer = threading.Thread(
        target=_train, args=(session, progress, errors, log_lock, rollout), name="trainer", daemon=True
    )
    try:
        with serve_in_thread(
            pool.routed(),
            host=address.listen_address,
            port=address.port,
            model_name=SERVED_MODEL_NAME,
            sessions=recorder,
            api_key=address.api_key,
            engine_status=pool.report,
        ) as url:
            _announce(session, url, address.listen_address)
            health.start()
            startup_eval(session)
            trainer.start()
            _watch(session, trainer, pool, stop=lambda: _stop_taking_experiences(recorder, writer))
    finally:
        health.stop()
        left = _stop_taking_experiences(recorder, writer)
        if trainer.is_alive():
            trainer.join()
        for wrapper in wrappers:
            wrapper.close()
    if left["open"] or left["rewarded"]:
        logger.warning(
            "the run ended with %d open sessions and %d rewarded but not committed; they were not trained on",
            left["open"],
            left["rewarded"],
        )
    if pool.failure is not None:  # the trainer's own error, if any, follows from it
        raise pool.failure
    if errors:
        raise errors[0]


def _recorder(
    session: RunSession, pool: EnginePool, writer: Any, log_lock: threading.Lock
) -> tuple[SessionRecorder, list[Any]]:
    """The session recorder, over one wrapper per engine (the home of the sessions it opens)."""
    worker = session.explorer

    def committed(result: CommitResult) -> None:
        with log_lock:
            worker.explorer.state.step += 1  # a commit is serve mode's explorer step
            step = worker.step()
            metrics = {"explorer/step": float(step), "explorer/model_version": float(pool.version())}
            session.log_explorer({**result.metrics, **metrics}, step)

    # Each wrapper's calls go through the pool, to its home engine while that one serves.
    wrappers = builders.build_wrappers(
        session.settings.explorer.wrapper, [pool.routed(home) for home in range(len(pool.engines))]
    )
    recorder = SessionRecorder(
        wrappers=wrappers,
        write=writer.write,
        prepare=worker.explorer.prepare_for_training,
        on_commit=committed,
        version=pool.version,
    )
    return recorder, wrappers


def check_servable(session: RunSession) -> None:
    if session.placement.separate_processes:
        raise UserError(
            "cluster.placement: serve mode runs the engines, the trainer and the API in one process; "
            "set cluster.placement: process"
        )


def _train(
    session: RunSession,
    progress: Any,
    errors: list[BaseException],
    log_lock: threading.Lock,
    rollout: EngineRollout,
) -> None:
    """The trainer thread: train on committed experiences, roll every sync_interval-th version into the engines."""
    interval = session.settings.sync.interval
    pool = rollout.pool
    try:
        while not training_done(session):
            result = train_once(session, progress)
            if result is None:  # the buffer is closed and empty: the run is stopping
                break
            if result[0] and session.trainer.model_version() % interval == 0:
                _load_trainer_weights(session, log_lock, rollout)
    except BaseException as error:
        errors.append(error)
        logger.error("trainer failed: %s", error, exc_info=not isinstance(error, UserError))
    finally:
        if not errors and pool.failure is None and pool.version() != session.trainer.model_version():
            try:
                _load_trainer_weights(session, log_lock, rollout)
            except Exception as error:  # the failure to report is the first one
                logger.warning("loading the last weights failed: %s", error)
        try:
            session.trainer.close_reader()
        except Exception as error:
            logger.warning("closing the trainer's reader failed: %s", error)


def _load_trainer_weights(session: RunSession, log_lock: threading.Lock, rollout: EngineRollout) -> None:
    metrics = load_in_turns(session, rollout)
    with log_lock:
        session.log_explorer(metrics, session.explorer.step())


def _stop_taking_experiences(recorder: SessionRecorder, writer: Any) -> dict[str, int]:
    """No more commits; the buffer's writer finishes, so a trainer waiting for a batch stops waiting."""
    left = recorder.close()
    writer.finish()
    return left


def _watch(
    session: RunSession, trainer: threading.Thread, pool: EnginePool, *, stop: Callable[[], Any]
) -> None:
    """Until the trainer is done: evaluate when due; on a stop request or too few engines, stop taking experiences."""
    evaluated_at = session.explorer.step()
    while trainer.is_alive():
        trainer.join(timeout=0.2)
        if stop_requested() or pool.failure is not None:
            stop()
        step = session.explorer.step()
        if step != evaluated_at:
            evaluated_at = step
            eval_if_due(session)


def _announce(session: RunSession, url: str, host: str) -> None:
    line = (
        f"serving the policy at {url} (model '{SERVED_MODEL_NAME}'); record sessions with the header "
        "X-Session-Id, then POST /feedback and /commit"
    )
    logger.info(line)
    if session.console is not None:
        session.console.print(line, highlight=False)
    else:
        print(line, flush=True)
    if not is_loopback(host):
        logger.warning(
            "explorer.listen_address is %s: the API is reachable beyond this machine, and anyone who reaches it "
            "can sample the policy and post rewards that train it",
            host,
        )

"""Stopping a run between steps, and ending it at once when a part it needs is lost.

The first Ctrl-C (SIGINT) or SIGTERM, or a call to ``request_stop`` from a plugin (a monitor
that sees a target reached, say), lets the current step finish; the run then evaluates,
saves its final checkpoint and prints its summary as usual. A second Ctrl-C interrupts at
once.

``fail_run`` ends the run at once with an error: a trainer rank was lost (its watch reports
it, ``trivium.trainer.rank_watch``), so no step can finish. Whatever the run's main thread
waits for (a batch of experiences, a weight version, the loops of ``both``, an explorer
step), the error is raised there, as a second Ctrl-C raises ``KeyboardInterrupt``; every
wait that polls ``stop_requested`` ends too, and ``raise_if_failed`` raises it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger("trivium.runtime")

# The shell's convention for "ended by Ctrl-C"; `trivium run` runs no later stage after it.
INTERRUPTED_EXIT_CODE = 130
# Sent by this process to its own main thread to raise ``fail_run``'s error there.
FAILURE_SIGNAL = signal.SIGUSR1

_requested = threading.Event()
_state: dict = {
    "reason": "",
    "by_signal": False,
    "failure": None,
    "failure_raised": False,
    "main_listens": False,
}


def request_stop(reason: str = "stop requested") -> None:
    """Ask the running loop to stop after its current step. Safe from any thread."""
    if not _requested.is_set():
        _state["reason"] = reason
        _requested.set()
        logger.warning("stopping after the current step: %s", reason)


def stop_requested() -> bool:
    return _requested.is_set()


def fail_run(error: BaseException) -> None:
    """End the run at once with ``error``; the first failure counts. Safe from any thread."""
    if _state["failure"] is not None:
        return
    _state["failure"] = error
    _state["reason"] = _state["reason"] or str(error)
    _requested.set()
    if _state["main_listens"] and threading.current_thread() is not threading.main_thread():
        signal.pthread_kill(threading.main_thread().ident, FAILURE_SIGNAL)


def run_failure() -> BaseException | None:
    return _state["failure"]


def raise_if_failed() -> None:
    if _state["failure"] is not None:
        raise _state["failure"]


def stop_reason() -> str:
    return str(_state["reason"])


def exit_code() -> int:
    """0 for a normal end or a programmatic stop; 130 when a signal stopped the run."""
    return INTERRUPTED_EXIT_CODE if _state["by_signal"] else 0


def reset() -> None:
    _requested.clear()
    _state.update(reason="", by_signal=False, failure=None, failure_raised=False)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first SIGINT/SIGTERM requests a stop and the second interrupts;
    a lost trainer rank fails the run (``fail_run``)."""
    from trivium.trainer.rank_watch import rank_failures_reported_to

    reset()
    with rank_failures_reported_to(fail_run):
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers can only be installed from the main thread
        else:
            with _signals_handled():
                yield


@contextmanager
def _signals_handled() -> Iterator[None]:
    """The main thread's handlers: stop requests by SIGINT/SIGTERM, and ``fail_run``'s error."""

    def handle(signum: int, frame: object) -> None:
        if _requested.is_set() and _state["by_signal"]:
            raise KeyboardInterrupt
        _state["by_signal"] = True
        request_stop(f"received {signal.Signals(signum).name}; press Ctrl-C again to interrupt at once")

    def raise_failure(signum: int, frame: object) -> None:
        if _state["failure"] is not None and not _state["failure_raised"]:
            _state["failure_raised"] = True  # once: the run's tear-down is not interrupted again
            raise _state["failure"]

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous[FAILURE_SIGNAL] = signal.signal(FAILURE_SIGNAL, raise_failure)
    _state["main_listens"] = True
    try:
        yield
    finally:
        _state["main_listens"] = False
        for sig, handler in previous.items():
            signal.signal(sig, handler)

"""Stopping a run between steps.

The first Ctrl-C (SIGINT) or SIGTERM, or a call to ``request_stop`` from a plugin (a monitor
that sees a target reached, say), lets the current step finish; the run then evaluates,
saves its final checkpoint and prints its summary as usual. A second Ctrl-C interrupts at
once.
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

_requested = threading.Event()
_state = {"reason": "", "by_signal": False}


def request_stop(reason: str = "stop requested") -> None:
    """Ask the running loop to stop after its current step. Safe from any thread."""
    if not _requested.is_set():
        _state["reason"] = reason
        _requested.set()
        logger.warning("stopping after the current step: %s", reason)


def stop_requested() -> bool:
    return _requested.is_set()


def stop_reason() -> str:
    return str(_state["reason"])


def exit_code() -> int:
    """0 for a normal end or a programmatic stop; 130 when a signal stopped the run."""
    return INTERRUPTED_EXIT_CODE if _state["by_signal"] else 0


def reset() -> None:
    _requested.clear()
    _state.update(reason="", by_signal=False)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first SIGINT/SIGTERM requests a stop and the second interrupts."""
    reset()
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return

    def handle(signum: int, frame: object) -> None:
        if _requested.is_set() and _state["by_signal"]:
            raise KeyboardInterrupt
        _state["by_signal"] = True
        request_stop(f"received {signal.Signals(signum).name}; press Ctrl-C again to interrupt at once")

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

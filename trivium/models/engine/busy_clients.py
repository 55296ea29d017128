"""How many callers of the engines are still working toward their next request.

The runner pool says how many workflows are running; the model wrapper counts those that
are waiting on a model. The rest are busy: preparing a prompt, computing a reward, calling a
tool. The request batcher holds an idle engine back, briefly, while any caller is busy, so
the sixteen requests of one explorer step become one engine call instead of a call for the
first request and another for the rest (a call of 8 rows costs over half of one of 128).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class BusyClients:
    """Running workflows minus those waiting on a model, with a wait for it to reach zero."""

    def __init__(self) -> None:
        self._running = 0
        self._waiting = 0
        self._changed = threading.Condition()

    @property
    def count(self) -> int:
        # A workflow abandoned after a timeout may still be waiting on a model while no
        # longer counted as running; that only makes the count briefly too low.
        return max(0, self._running - self._waiting)

    def set_running(self, running: int) -> None:
        """How many workflows are running now (set by the runner pool)."""
        with self._changed:
            self._running = running
            self._changed.notify_all()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Count the calling workflow as waiting on a model for the duration."""
        with self._changed:
            self._waiting += 1
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._waiting -= 1

    def wait_until_idle(self, timeout: float) -> bool:
        """Block until no caller is busy or ``timeout`` seconds pass; True if none is busy."""
        with self._changed:
            return self._changed.wait_for(lambda: self.count == 0, timeout)

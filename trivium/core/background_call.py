"""A call run in a daemon thread that the caller can wait on for a bounded time.

Owns the thread and the hand-over of the call's result or exception. Callers decide what a
timeout means (a workflow attempt is stopped and retried, a weight load ends the run).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class BackgroundCall:
    def __init__(self, fn: Callable[[], Any], *, name: str, ignore: tuple[type[BaseException], ...] = ()):
        """Start ``fn()`` in a daemon thread; exceptions of the ``ignore`` types end it silently."""
        self._box: dict[str, Any] = {}
        self._done = threading.Event()

        def target() -> None:
            try:
                self._box["value"] = fn()
            except ignore:
                pass
            except BaseException as error:  # handed to the caller by result()
                self._box["error"] = error
            finally:
                self._done.set()

        self.thread = threading.Thread(target=target, name=name, daemon=True)
        self.thread.start()

    def wait(self, timeout: float | None) -> bool:
        """True once the call has ended, False if it is still running after ``timeout`` seconds."""
        return self._done.wait(timeout)

    def result(self) -> Any:
        """The call's return value, or its exception raised here (call after ``wait`` returned True)."""
        if "error" in self._box:
            raise self._box["error"]
        return self._box.get("value")

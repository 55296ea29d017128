"""Dynamic timeout: each workflow attempt's time limit follows how long successful ones take.

timeout = mean seconds of the successful attempts so far * ratio, never above
``explorer.max_timeout``; before the first success, ``max_timeout`` itself. Thread-safe: the
runners record their successes concurrently.
"""

from __future__ import annotations

import threading


class DynamicTimeout:
    def __init__(self, *, ratio: float, max_timeout: float | None):
        if ratio <= 0:
            raise ValueError(f"explorer.dynamic_timeout.ratio must be greater than 0, got {ratio}")
        self.ratio = ratio
        self.max_timeout = max_timeout
        self._total = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def record_success(self, seconds: float) -> None:
        with self._lock:
            self._total += seconds
            self._count += 1

    def current(self) -> float | None:
        """The limit for the next attempt, in seconds (None: no limit)."""
        with self._lock:
            if not self._count:
                return self.max_timeout
            # timeout = mean(successful seconds) * ratio, capped by max_timeout
            dynamic = self._total / self._count * self.ratio
        return min(dynamic, self.max_timeout) if self.max_timeout else dynamic

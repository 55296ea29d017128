"""How long a run takes to get going: seconds from the process's start to its first step.

The first explorer or trainer step of a process (whichever begins first) logs
``time/startup``: interpreter start-up, imports, config checks, model loading and the
engine's start, everything a user waits for before the first rollout. Logged once per
process, so a resumed run reports its own start-up and later stages of the same process
report none.
"""

from __future__ import annotations

import os
import threading
import time

from trivium.core.metric_names import STARTUP

_IMPORTED_AT = time.time()
_reported = False
_lock = threading.Lock()  # in `both` the explorer's and the trainer's threads both ask


def process_started_at() -> float:
    """Wall-clock time this process started (Linux: from /proc; elsewhere: when this module was imported)."""
    try:
        with open("/proc/self/stat") as handle:
            after_name = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
        start_ticks = int(after_name[19])  # field 22, starttime, in clock ticks since boot
        return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED_AT


def startup_metric(step_began: float) -> dict[str, float]:
    """``{time/startup: seconds}`` for the first step of this process (began at ``step_began``,
    a ``time.time()``); empty for every later step."""
    global _reported
    with _lock:
        if _reported:
            return {}
        _reported = True
    return {STARTUP: max(0.0, step_began - process_started_at())}

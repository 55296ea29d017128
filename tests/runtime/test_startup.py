"""time/startup: seconds from the process's start to its first step, logged once."""

import subprocess
import sys
import time

from trivium.core.metric_names import STARTUP
from trivium.runtime import startup


def test_the_process_start_is_when_the_process_was_spawned():
    before = time.time()
    output = subprocess.run(
        [sys.executable, "-c", "import time; from trivium.runtime.startup import process_started_at; "
         "print(process_started_at(), time.time())"],
        capture_output=True, text=True, check=True,
    ).stdout
    started, child_now = map(float, output.split())
    # /proc's start time counts clock ticks (10 ms); the imports come after it.
    assert before - 0.02 <= started < child_now


def test_only_the_first_step_of_a_process_reports_start_up(monkeypatch):
    monkeypatch.setattr(startup, "_reported", False)
    monkeypatch.setattr(startup, "process_started_at", lambda: 100.0)
    assert startup.startup_metric(103.5) == {STARTUP: 3.5}
    assert startup.startup_metric(110.0) == {}

"""RunProgress (ETA, plain lines for CI logs, live bars on a terminal) and runner status lines."""

from __future__ import annotations

import io

from rich.console import Console

from trivium.monitor.progress import RunProgress, format_duration, format_runner_states


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=False, width=200)


def test_eta_is_remaining_steps_times_observed_seconds_per_step():
    clock = FakeClock()
    progress = RunProgress(
        total_explore_steps=100, total_train_steps=50, console=plain_console(), clock=clock
    )
    clock.now += 40.0
    progress.update_explore(10)  # 4 s per step, 90 left
    progress.update_train(8)  # 5 s per step, 42 left
    assert progress.eta_seconds("explore") == 360.0
    assert progress.eta_seconds("train") == 210.0
    assert progress.plain_line() == "progress | explore 10/100 (10%) eta 6:00 | train 8/50 (16%) eta 3:30"


def test_resumed_run_counts_only_the_steps_done_since_the_resume():
    clock = FakeClock()
    progress = RunProgress(
        total_explore_steps=100, explore_start_step=60, console=plain_console(), clock=clock
    )
    assert progress.eta_seconds("explore") is None
    clock.now += 20.0
    progress.update_explore(70)  # 10 new steps in 20 s -> 2 s per step, 30 left
    assert progress.eta_seconds("explore") == 60.0


def test_without_a_terminal_lines_are_printed_at_most_every_interval_and_at_the_end():
    clock = FakeClock()
    console = plain_console()
    progress = RunProgress(total_explore_steps=4, console=console, plain_interval_seconds=30.0, clock=clock)
    with progress:
        for step in range(1, 5):
            clock.now += 10.0
            progress.update_explore(step)
    lines = console.file.getvalue().splitlines()
    # step 1 (first line), step 4 (30 s later and finished), then the closing line
    assert lines == [
        "progress | explore 1/4 (25%) eta 0:30",
        "progress | explore 4/4 (100%) done",
        "progress | explore 4/4 (100%) done",
    ]


def test_eval_track_appears_while_evaluating():
    clock = FakeClock()
    console = plain_console()
    progress = RunProgress(total_explore_steps=10, console=console, plain_interval_seconds=1e9, clock=clock)
    progress.start_eval(total_tasks=3)
    progress.advance_eval()
    assert "eval 1/3 (33%)" in progress.plain_line()
    progress.advance_eval(2)  # finished: printed even though the interval has not passed
    assert console.file.getvalue().splitlines()[-1].endswith("eval 3/3 (100%) done")
    progress.finish_eval()
    assert "eval" not in progress.plain_line()


def test_live_bars_on_a_terminal():
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with RunProgress(total_explore_steps=5, total_train_steps=5, console=console) as progress:
        progress.update_explore(2)
        progress.start_eval(4)
        progress.advance_eval(4)
        progress.finish_eval()
        progress.update_train(5)
    rendered = console.file.getvalue()
    assert "explore" in rendered and "5/5" in rendered and "2/5" in rendered


def test_format_duration():
    assert [format_duration(value) for value in (None, 59.6, 3600 + 62)] == ["?", "1:00", "1:01:02"]


def test_runner_states_line_counts_statuses_and_describes_each_runner():
    line = format_runner_states(
        {
            1: {"status": "idle"},
            0: {"status": "running", "task_id": 12, "elapsed_seconds": 3.25, "retries": 1},
            2: {"status": "failed", "message": "timeout after 60s"},
            3: "running",
        }
    )
    assert line == (
        "runners | 4: 1 failed, 1 idle, 2 running | #0 running task 12 3.2s retries=1 | #1 idle"
        " | #2 failed - timeout after 60s | #3 running"
    )
    assert format_runner_states({}) == "runners | none reporting"

"""Run progress on the console: explore steps, train steps and evaluation, with an ETA.

On a terminal this is a live ``rich`` progress display. When the output is a file or a CI
log, live redrawing would only add noise, so a plain line is printed at most every
``plain_interval_seconds`` (and whenever a task finishes). Share one ``rich`` console
between this display and the ``ConsoleMonitor`` so step lines print above the bars.

Also here: the status lines of workflow runners (``explorer.runner_state_report_interval``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

EXPLORE, TRAIN, EVAL = "explore", "train", "eval"


@dataclass
class _Track:
    total: int | None
    completed: int = 0
    started_from: int = 0  # a resumed run starts mid-way; its ETA counts only new steps
    started_at: float = 0.0
    visible: bool = True

    def eta_seconds(self, now: float) -> float | None:
        done_here = self.completed - self.started_from
        if self.total is None or done_here <= 0:
            return None
        seconds_per_step = (now - self.started_at) / done_here
        return max(self.total - self.completed, 0) * seconds_per_step

    @property
    def finished(self) -> bool:
        return self.total is not None and self.completed >= self.total


class RunProgress:
    def __init__(
        self,
        *,
        total_explore_steps: int | None = None,
        total_train_steps: int | None = None,
        explore_start_step: int = 0,
        train_start_step: int = 0,
        console: Any = None,
        plain_interval_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        from rich.console import Console

        self.console = console if console is not None else Console(highlight=False)
        self.live = self.console.is_terminal
        self.plain_interval_seconds = plain_interval_seconds
        self._clock = clock
        self._last_plain_line = float("-inf")
        self._tracks: dict[str, _Track] = {}
        self._rich_progress = None
        self._rich_tasks: dict[str, Any] = {}
        if total_explore_steps is not None or total_train_steps is None:
            self._add(EXPLORE, total_explore_steps, explore_start_step)
        if total_train_steps is not None:
            self._add(TRAIN, total_train_steps, train_start_step)

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> RunProgress:
        if self.live and self._rich_progress is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._rich_progress = Progress(
                TextColumn("{task.description:<8}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
            )
            for name, track in self._tracks.items():
                self._rich_tasks[name] = self._rich_progress.add_task(
                    name, total=track.total, completed=track.completed, visible=track.visible
                )
            self._rich_progress.start()
        return self

    def close(self) -> None:
        if self._rich_progress is not None:
            self._rich_progress.stop()
            self._rich_progress = None
        elif self._tracks:
            self._print_plain_line()

    def __enter__(self) -> RunProgress:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- updates ----------------------------------------------------------------------------

    def update_explore(self, step: int) -> None:
        """The explorer finished ``step`` (absolute step number, so resumes and skips are fine)."""
        self._set(EXPLORE, step)

    def update_train(self, step: int) -> None:
        self._set(TRAIN, step)

    def start_eval(self, total_tasks: int | None) -> None:
        self._add(EVAL, total_tasks)
        if self._rich_progress is not None and EVAL in self._rich_tasks:
            self._rich_progress.reset(self._rich_tasks[EVAL], total=total_tasks, visible=True)
        self._sync_rich(EVAL)

    def advance_eval(self, tasks: int = 1) -> None:
        self._set(EVAL, self._tracks[EVAL].completed + tasks)

    def finish_eval(self) -> None:
        track = self._tracks.get(EVAL)
        if track is not None:
            track.visible = False
            self._sync_rich(EVAL)
            if not self.live:
                self._print_plain_line()

    def eta_seconds(self, name: str) -> float | None:
        return self._tracks[name].eta_seconds(self._clock())

    def _add(self, name: str, total: int | None, start_step: int = 0) -> None:
        self._tracks[name] = _Track(
            total=total, completed=start_step, started_from=start_step, started_at=self._clock()
        )

    def _set(self, name: str, completed: int) -> None:
        if name not in self._tracks:
            self._add(name, None)
        track = self._tracks[name]
        track.completed = completed
        if self.live:
            self._sync_rich(name)
        elif track.finished or self._clock() - self._last_plain_line >= self.plain_interval_seconds:
            self._print_plain_line()

    def _sync_rich(self, name: str) -> None:
        if self._rich_progress is None:
            return
        track = self._tracks[name]
        if name not in self._rich_tasks:
            self._rich_tasks[name] = self._rich_progress.add_task(name, total=track.total)
        self._rich_progress.update(
            self._rich_tasks[name], total=track.total, completed=track.completed, visible=track.visible
        )

    # ---- plain output -----------------------------------------------------------------------

    def plain_line(self) -> str:
        now = self._clock()
        parts = []
        for name, track in self._tracks.items():
            if not track.visible and name == EVAL:
                continue
            if track.total is None:
                parts.append(f"{name} {track.completed}")
                continue
            percent = 100.0 * track.completed / track.total if track.total else 100.0
            eta = track.eta_seconds(now)
            eta_text = (
                "done" if track.finished else f"eta {format_duration(eta)}" if eta is not None else "eta ?"
            )
            parts.append(f"{name} {track.completed}/{track.total} ({percent:.0f}%) {eta_text}")
        return "progress | " + " | ".join(parts)

    def _print_plain_line(self) -> None:
        self._last_plain_line = self._clock()
        self.console.print(self.plain_line(), highlight=False, soft_wrap=True)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


# ---- workflow runner status ---------------------------------------------------------------

RUNNER_STATE_FIELDS = ("status", "task_id", "elapsed_seconds", "message")


def format_runner_states(states: Mapping[Any, Any]) -> str:
    """One line per report: counts by status, then each runner.

    ``states`` maps a runner id to its status string or to a dict with any of ``status``,
    ``task_id``, ``elapsed_seconds``, ``message`` (other keys are shown as ``key=value``).
    """
    if not states:
        return "runners | none reporting"
    normalized = {runner: _normalize_state(state) for runner, state in states.items()}
    counts: dict[str, int] = {}
    for state in normalized.values():
        counts[state["status"]] = counts.get(state["status"], 0) + 1
    header = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    runners = [
        f"#{runner} {_describe_state(state)}"
        for runner, state in sorted(normalized.items(), key=_runner_order)
    ]
    return f"runners | {len(normalized)}: {header} | " + " | ".join(runners)


def print_runner_states(states: Mapping[Any, Any], console: Any = None) -> None:
    from rich.console import Console

    (console or Console(highlight=False)).print(format_runner_states(states), highlight=False, soft_wrap=True)


def _normalize_state(state: Any) -> dict[str, Any]:
    if isinstance(state, Mapping):
        normalized = dict(state)
        normalized.setdefault("status", "unknown")
        return normalized
    return {"status": str(state)}


def _describe_state(state: dict[str, Any]) -> str:
    words = [str(state["status"])]
    if state.get("task_id") is not None:
        words.append(f"task {state['task_id']}")
    if state.get("elapsed_seconds") is not None:
        words.append(f"{float(state['elapsed_seconds']):.1f}s")
    extras = [f"{key}={value}" for key, value in state.items() if key not in RUNNER_STATE_FIELDS]
    words.extend(extras)
    if state.get("message"):
        words.append(f"- {state['message']}")
    return " ".join(words)


def _runner_order(item: tuple[Any, dict]) -> tuple[int, Any]:
    runner = item[0]
    return (0, runner) if isinstance(runner, int) else (1, str(runner))

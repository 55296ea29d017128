"""Over-rollout: an explorer step goes on without waiting for its slowest tasks.

Owns when a step stops waiting and which finished results it keeps. It does not run
workflows (the ``RunnerPool`` does) and does not decide what happens to the late ones beyond
naming them: the pool abandons them.

A step submits every job (a task, or a slice of its repeats under
``max_repeat_times_per_runner``) and waits until ``ceil((1 - ratio) * tasks)`` tasks have all
their jobs done; then it waits at most ``wait_after_min`` more seconds for the rest (it goes
on at once when everything is done). A task still running then is late: with
``return_partial_tasks`` its finished jobs are kept (a smaller group of samples), otherwise
the whole task is dropped. Late jobs never reach the buffer.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OverRollout:
    ratio: float = 0.0  # fraction of a step's tasks it may leave behind
    wait_after_min: float = 30.0  # seconds to wait for the rest once the minimum is done
    return_partial_tasks: bool = False

    @property
    def enabled(self) -> bool:
        return self.ratio > 0

    def min_tasks(self, num_tasks: int) -> int:
        """Tasks that must be done before the step may go on: ceil((1 - ratio) * num_tasks), at least 1."""
        return max(1, min(num_tasks, math.ceil((1.0 - self.ratio) * num_tasks - 1e-9)))


@dataclass
class Gathered:
    """What one step kept: the results of finished jobs, and what it left behind."""

    results: list[Any] = field(default_factory=list)
    late_futures: list[Future] = field(default_factory=list)  # jobs still queued or running
    late_tasks: int = 0  # tasks not done when the step went on
    dropped_tasks: int = 0  # late tasks of which nothing is kept
    partial_tasks: int = 0  # late tasks whose finished jobs are kept (return_partial_tasks)


def gather(
    futures: list[Future], task_keys: list[Any], policy: OverRollout, *, clock=time.monotonic
) -> Gathered:
    """Wait for the futures of one step as ``policy`` says; ``task_keys[i]`` names the task of ``futures[i]``."""
    by_task: dict[Any, list[int]] = {}
    for index, key in enumerate(task_keys):
        by_task.setdefault(key, []).append(index)
    needed = policy.min_tasks(len(by_task))
    pending = set(futures)

    def tasks_done() -> int:
        return sum(all(futures[i] not in pending for i in indices) for indices in by_task.values())

    while pending and tasks_done() < needed:
        _, pending = wait(pending, return_when=FIRST_COMPLETED)
    deadline = clock() + policy.wait_after_min
    while pending and clock() < deadline:
        _, pending = wait(pending, timeout=max(0.0, deadline - clock()), return_when=FIRST_COMPLETED)
    gathered = Gathered()
    for indices in by_task.values():
        finished = [i for i in indices if futures[i] not in pending]
        if len(finished) == len(indices):
            gathered.results.extend(futures[i].result() for i in indices)
            continue
        gathered.late_tasks += 1
        gathered.late_futures.extend(futures[i] for i in indices if futures[i] in pending)
        if policy.return_partial_tasks and finished:
            gathered.partial_tasks += 1
            gathered.results.extend(futures[i].result() for i in finished)
        else:
            gathered.dropped_tasks += 1
    return gathered

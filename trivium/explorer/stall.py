"""Noticing a run that cannot make progress: every task failing, step after step.

Owns ``ExplorationStalled`` (the error that ends such a run, saying why) and ``StallWatch``,
which the explorer tells about each step's results. A step fails when no task produced a
usable experience (workflows raised, timed out, returned nothing, or only experiences
dropped at the door, such as NaN rewards). After ``max_failed_steps`` failed steps in a
row the watch raises; a step with any usable experience resets the count.
"""

from __future__ import annotations

from trivium.errors import UserError
from trivium.explorer.runner import UnitResult


class ExplorationStalled(UserError):
    """No task of the last ``max_failed_steps`` explore steps gave a usable experience."""


class StallWatch:
    def __init__(self, *, max_failed_steps: int | None):
        if max_failed_steps is not None and max_failed_steps < 1:
            raise ValueError(f"max_failed_steps must be at least 1 or None, got {max_failed_steps}")
        self.max_failed_steps = max_failed_steps
        self.failed_in_a_row = 0

    def observe(self, step: int, results: list[UnitResult]) -> None:
        """Count ``step`` as failed or not; raise ExplorationStalled at the limit."""
        if not results or any(result.ok and result.experiences for result in results):
            self.failed_in_a_row = 0
            return
        self.failed_in_a_row += 1
        if self.max_failed_steps is None or self.failed_in_a_row < self.max_failed_steps:
            return
        last = next(result for result in reversed(results) if result.error)
        first_step = step - self.failed_in_a_row + 1
        raise ExplorationStalled(
            f"exploration is making no progress: every task of the last {self.failed_in_a_row} explore "
            f"steps (steps {first_step}-{step}, {len(results)} tasks in the last) failed or gave no usable "
            f"experience. The last error (task {last.unit.task.task_id}): {last.error}. "
            "See log/explorer.log; fix the workflow or reward function, or raise "
            "explorer.max_failed_steps to tolerate more failed steps."
        )

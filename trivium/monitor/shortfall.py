"""What a run that trains on its own exploration (colocate, both) did not train, and why.

``trivium.runtime.run_tally`` counts as the run goes; at its end the launcher builds a
``Shortfall``. A run falls short when its trainer trained fewer steps than
``trainer.total_steps``, trained a step on a partial batch, or skipped a step's update. It is
an error (the run exits non-zero) unless every cause is one the config asked for: over-rollout
leaving late tasks behind, the experience pipeline or ``staleness_control`` dropping
experiences; those make it a warning. The same numbers are logged as ``shortfall/*`` trainer
metrics, from which the run summary (and ``trivium report``) says the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

PREFIX = "shortfall/"


@dataclass
class Shortfall:
    planned_steps: int
    trained_steps: int  # the trainer's step at the end (steps whose update was skipped included)
    untrained_experiences: int  # written by the explorer, never trained
    partial_steps: int = 0  # steps trained on fewer experiences than a batch
    skipped_updates: int = 0  # steps whose update was left out: non-finite gradients
    # Causes nobody asked for:
    failed_tasks: int = 0
    refused_experiences: int = 0  # refused at the door (rollout/dropped_experiences)
    # Consequences, reported with their causes:
    discarded_at_sync: int = 0  # colocate: fewer than a batch left at a weight sync, stale after it
    explorer_blocked: int = 0  # 1: the explorer needed a version the trainer could not reach
    # Causes the config asked for:
    late_tasks: int = 0  # left behind by over-rollout
    filtered_experiences: int = 0  # removed by the experience pipeline
    stale_dropped: int = 0  # dropped by staleness_control

    @property
    def untrained_steps(self) -> int:
        return max(0, self.planned_steps - self.trained_steps)

    @property
    def falls_short(self) -> bool:
        return bool(self.untrained_steps or self.partial_steps or self.skipped_updates)

    @property
    def is_error(self) -> bool:
        """Short for a reason the config did not ask for (or for no reason it knows)."""
        if not self.falls_short:
            return False
        unasked = self.failed_tasks or self.refused_experiences or self.skipped_updates
        asked = self.late_tasks or self.filtered_experiences or self.stale_dropped
        return bool(unasked or not asked)

    def lines(self) -> list[str]:
        """What was not trained, then why."""
        done = [f"the trainer trained {self.trained_steps} of {self.planned_steps} steps"] + _counted(
            (self.untrained_steps, "{} not trained"),
            (self.partial_steps, "{} on a partial batch"),
            (self.skipped_updates, "{} with the update skipped"),
            (self.untrained_experiences, "{} experiences written were never trained"),
        )
        return ["; ".join(done), "why: " + "; ".join(self.causes())]

    def causes(self) -> list[str]:
        causes = _counted(
            (self.failed_tasks, "{} task(s) failed after their retries (see log/explorer_runner_*.log)"),
            (
                self.refused_experiences,
                "{} experience(s) were refused at the door (rollout/dropped_experiences; see "
                + "log/explorer_runner_*.log)",
            ),
            (
                self.skipped_updates,
                "{} step(s) had non-finite gradients and skipped their update "
                + "(log/trained_samples.jsonl marks them skipped)",
            ),
            (self.late_tasks, "over-rollout left {} late task(s) behind (explorer.over_rollout)"),
            (self.filtered_experiences, "the experience pipeline removed {} experience(s)"),
            (self.stale_dropped, "staleness_control dropped {} stale experience(s)"),
        )
        if not causes:
            causes.append(
                "the explorer's steps made fewer experiences than trainer.total_steps × buffer.train_batch_size "
                "(see `trivium plan`)"
            )
        if self.explorer_blocked:
            causes.append("so the explorer stopped early: it needed a weight version the trainer could not reach")
        return causes + _counted(
            (
                self.discarded_at_sync,
                "{} experience(s), fewer than a batch, were discarded at a weight sync "
                + "(training them after it would have trained stale samples)",
            ),
        )

    def to_metrics(self) -> dict[str, float]:
        return {PREFIX + name: float(value) for name, value in asdict(self).items()}

    @classmethod
    def from_metrics(cls, record: dict[str, Any]) -> Shortfall | None:
        """The shortfall a metrics record holds, or None when it holds none."""
        if PREFIX + "planned_steps" not in record:
            return None
        return cls(**{f.name: int(record.get(PREFIX + f.name, 0)) for f in fields(cls)})


def _counted(*counted: tuple[int, str]) -> list[str]:
    """Each text whose count is not zero, the count put in its ``{}``."""
    return [text.format(count) for count, text in counted if count]

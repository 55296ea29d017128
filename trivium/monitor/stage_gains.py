"""How much each stage of a multi-stage run added to held-out accuracy, read from the stages'
``metrics.jsonl``: one line per stage and eval set, accuracy at the stage's start and end.

A stage starts from the previous stage's final weights, so a stage that does not evaluate
(a ``train`` stage, for one) ends where the next stage's evaluation at step 0 starts, and a
stage that does not evaluate at step 0 starts where the previous stage ended. Printed by
``trivium run`` after the last stage; each stage's own summary is ``trivium.monitor.summary``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trivium.core import metric_names as names
from trivium.monitor.metrics_file import metric_keys, read_metrics, series


@dataclass
class StageAccuracy:
    """Held-out accuracy of the weights a stage started from and ended with (None: not measured)."""

    stage: str
    start: float | None
    end: float | None

    @property
    def gain(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start


def stage_accuracies(stage_runs: list[tuple[str, Path]]) -> dict[str, list[StageAccuracy]]:
    """Eval set -> one ``StageAccuracy`` per stage, in stage order, from each stage's run directory."""
    # Per stage, per eval set: (accuracy at step 0 or None, accuracy of the last evaluation).
    measured: list[dict[str, tuple[float | None, float]]] = []
    for _, run_dir in stage_runs:
        records = read_metrics(run_dir)
        own: dict[str, tuple[float | None, float]] = {}
        for key in metric_keys(records):
            taskset = names.eval_taskset_of(key)
            steps, values = series(records, key) if taskset is not None else ([], [])
            if values:
                own[taskset] = (values[0] if steps[0] == 0 else None, values[-1])
        measured.append(own)
    tasksets = sorted({taskset for own in measured for taskset in own})
    result: dict[str, list[StageAccuracy]] = {}
    for taskset in tasksets:
        rows: list[StageAccuracy] = []
        for index, (stage, _) in enumerate(stage_runs):
            start, end = measured[index].get(taskset, (None, None))
            if start is None and rows:
                start = rows[-1].end
            if end is None and index + 1 < len(stage_runs):
                end = measured[index + 1].get(taskset, (None, None))[0]
            rows.append(StageAccuracy(stage, start, end))
        result[taskset] = rows
    return result


def stage_gain_lines(stage_runs: list[tuple[str, Path]]) -> list[str]:
    """``held-out accuracy by stage`` lines: per eval set, each stage's start -> end and its gain."""
    lines = []
    for taskset, rows in stage_accuracies(stage_runs).items():
        lines.append(f"held-out accuracy by stage on {taskset}:")
        for row in rows:
            start = "not evaluated" if row.start is None else f"{row.start:.1%}"
            end = "not evaluated" if row.end is None else f"{row.end:.1%}"
            gain = "" if row.gain is None else f" ({100 * row.gain:+.1f} points)"
            lines.append(f"  {row.stage}: {start} -> {end}{gain}")
    return lines

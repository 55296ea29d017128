"""The audit trail of what each trainer step trained on: ``log/trained_samples.jsonl``.

One JSON line per trainer step: ``{"step": k, "samples": [[task_id, run_id, explore_step,
model_version], ...], "expert": n}`` (expert rows mixed into the batch are only counted).
A step whose update was skipped (non-finite gradients) also has ``"skipped": "<why>"``: its
samples were read but not trained, and ``trained_lineage`` gives it no samples.
A run resumed from a checkpoint trains the steps after it again and appends their lines;
``trained_lineage`` keeps the last line of each step, which is the run's actual history.
This is how a resumed run is checked to have trained every sample once (see the chaos suite).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

FILE_NAME = "trained_samples.jsonl"


def trail_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "log" / FILE_NAME


def record_step(run_dir: str | Path, step: int, experiences: list[Any], *, skipped: str | None = None) -> None:
    """Append trainer step ``step``'s batch (flushed: it survives the process being killed);
    ``skipped`` says why its update was left out."""
    record: dict[str, Any] = {
        "step": step,
        "samples": [[e.task_id, e.run_id, e.explore_step, e.model_version] for e in experiences if not e.is_expert],
        "expert": sum(bool(e.is_expert) for e in experiences),
    }
    if skipped:
        record["skipped"] = skipped
    path = trail_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


def trained_lineage(run_dir: str | Path) -> dict[int, list[list[Any]]]:
    """Samples of each trainer step as the run finally trained it (the last line of each step;
    a skipped step trained none)."""
    return {step: [] if "skipped" in record else record["samples"] for step, record in _last_records(run_dir).items()}


def skipped_steps(run_dir: str | Path) -> dict[int, str]:
    """Trainer steps whose update was skipped, as the run finally left them, with the reason."""
    return {step: record["skipped"] for step, record in _last_records(run_dir).items() if "skipped" in record}


def _last_records(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    records: dict[int, dict[str, Any]] = {}
    path = trail_path(run_dir)
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short when the process was killed
        records[int(record["step"])] = record
    return dict(sorted(records.items()))


def duplicated_samples(lineage: dict[int, list[list[Any]]]) -> list[tuple[str, int]]:
    """(task_id, run_id) pairs trained more than once in ``lineage``."""
    counts = Counter((task_id, run_id) for samples in lineage.values() for task_id, run_id, *_ in samples)
    return sorted(key for key, count in counts.items() if count > 1)

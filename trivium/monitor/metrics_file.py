"""``<run_dir>/metrics.jsonl``: every logged step, one JSON object per line, and its reader.

Each line is ``{"role": ..., "step": ..., "time": <unix seconds>, <metric>: <value>, ...}``.
NaN and infinite values are written as ``null`` so the file stays strict JSON. The explorer
and the trainer may append from different processes: each line goes out in one ``write``
on a file opened for appending, so lines never interleave.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trivium.monitor.base import Monitor

logger = logging.getLogger(__name__)

METRICS_FILE_NAME = "metrics.jsonl"
RESERVED_FIELDS = ("role", "step", "time")


def metrics_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / METRICS_FILE_NAME


class MetricsFileMonitor(Monitor):
    def __init__(self, run_dir: str | Path, role: str):
        self.path = metrics_path(run_dir)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.role = role
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def log(self, metrics: dict[str, float], step: int) -> None:
        clashing = [key for key in metrics if key in RESERVED_FIELDS]
        if clashing:
            raise ValueError(f"metric names {clashing} are reserved in {METRICS_FILE_NAME}; rename them")
        record: dict[str, Any] = {"role": self.role, "step": step, "time": round(time.time(), 3)}
        record.update({key: _json_number(value) for key, value in metrics.items()})
        line = json.dumps(record, allow_nan=False) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """All records of a run, in file order. A torn last line (a crash mid-write) is skipped."""
    path = metrics_path(run_dir)
    if not path.exists():
        return []
    return list(parse_metrics_lines(path.read_text(encoding="utf-8").splitlines(), source=str(path)))


def parse_metrics_lines(lines: Iterable[str], *, source: str = METRICS_FILE_NAME) -> Iterable[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            logger.warning("%s line %d is not valid JSON; skipped", source, number)
            continue
        if isinstance(record, dict) and "step" in record:
            yield record


def series(
    records: Iterable[dict[str, Any]], key: str, *, role: str | None = None
) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, in logged order; ``null`` values are left out."""
    steps: list[int] = []
    values: list[float] = []
    for record in records:
        if role is not None and record.get("role") != role:
            continue
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            steps.append(int(record["step"]))
            values.append(float(value))
    return steps, values


def metric_keys(records: Iterable[dict[str, Any]], *, role: str | None = None) -> list[str]:
    """Every metric name that appears, sorted (the reserved fields are not metrics)."""
    keys: set[str] = set()
    for record in records:
        if role is None or record.get("role") == role:
            keys.update(key for key in record if key not in RESERVED_FIELDS)
    return sorted(keys)

"""A Data-Juicer task operator that also keeps the stats it computed on each row it kept.

Owns ``StatsKeepingTaskOperator``: the same filtering and rewriting as
``DataJuicerTaskOperator`` (``data_juicer_ops.py``), plus ``stats_by_row`` (row number ->
the numeric stats, e.g. ``alnum_ratio``), which the task pipeline turns into task priorities
(``task_priority.py``).
"""

from __future__ import annotations

from typing import Any

from trivium.buffer.data_juicer_ops import DataJuicerTaskOperator
from trivium.buffer.task_priority import STATS_FIELD


class StatsKeepingTaskOperator(DataJuicerTaskOperator):
    """``DataJuicerTaskOperator`` that records each kept row's stats in ``stats_by_row``."""

    def __init__(self, name: str, args: dict[str, Any], fields: list[str]):
        super().__init__(name, args, fields)
        self.stats_by_row: dict[int, dict[str, float]] = {}

    def kept_sample(self, number: int, sample: dict[str, Any]) -> None:
        stats = sample.get(STATS_FIELD) or {}
        self.stats_by_row[number] = {
            k: float(v) for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }

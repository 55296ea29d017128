"""A Data-Juicer task operator that also keeps the stats it computed on each row it kept.

Owns ``StatsKeepingTaskOperator``: the same filtering and rewriting as
``DataJuicerTaskOperator`` (``data_juicer_ops.py``), plus ``stats_by_row`` (row number ->
the numeric stats, e.g. ``alnum_ratio``), which the task pipeline turns into task priorities
(``task_priority.py``).
"""

from __future__ import annotations

from typing import Any

from trivium.buffer.data_juicer_ops import _POSITION, DataJuicerTaskOperator, _as_text, run_operators
from trivium.buffer.task_priority import STATS_FIELD


class StatsKeepingTaskOperator(DataJuicerTaskOperator):
    """``DataJuicerTaskOperator`` that records each kept row's stats in ``stats_by_row``."""

    def __init__(self, name: str, args: dict[str, Any], fields: list[str]):
        super().__init__(name, args, fields)
        self.stats_by_row: dict[int, dict[str, float]] = {}

    def process_rows(self, rows: dict[int, dict[str, Any]]) -> tuple[list[int], dict[int, dict[str, Any]]]:
        """(row numbers kept, rewritten rows by row number) for ``rows`` (row number -> row)."""
        numbers = list(rows)
        samples = [
            {**{f: _as_text(rows[n].get(f)) for f in self.fields}, _POSITION: i}
            for i, n in enumerate(numbers)
        ]
        kept, rewritten = [], {}
        for sample in run_operators(self.operators, samples):
            number = numbers[sample[_POSITION]]
            kept.append(number)
            stats = sample.get(STATS_FIELD) or {}
            self.stats_by_row[number] = {
                k: float(v)
                for k, v in stats.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            changes = {f: sample[f] for f in self.fields if sample[f] != _as_text(rows[number].get(f))}
            if changes:
                rewritten[number] = {**rows[number], **changes}
        return kept, rewritten

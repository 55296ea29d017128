"""The curves of a run, from ``metrics.jsonl``, as JSON the run page and the comparison page draw.

The charts are the run plots of ``trivium.monitor.plots`` (reward, eval accuracy, loss, KL,
entropy, response length, staleness, throughput) plus two the Studio adds: the accuracy of
the rollouts and the time each phase took. Reading a file that keeps growing is cheap: the
records are cached per file and re-read only when its size or modification time changes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from trivium.core import metric_names as names
from trivium.monitor.metrics_file import metrics_path, read_metrics
from trivium.monitor.plots import PLOTS, PlotSpec, plot_lines
from trivium.monitor.summary import compute_summary, summary_lines

STUDIO_PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec("rollout_accuracy", "Rollout accuracy", "accuracy", ("rollout/accuracy",), (names.EXPLORER,)),
    PlotSpec(
        "timing", "Time per step", "seconds",
        ("time/explore_step", "time/train_step", "time/sync", "time/eval*", "time/save*"),
    ),
)
CHARTS: tuple[PlotSpec, ...] = PLOTS + STUDIO_PLOTS

_cache: dict[Path, tuple[tuple[float, int], list[dict[str, Any]]]] = {}
_cache_lock = threading.Lock()


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of ``metrics.jsonl`` (cached until the file changes); [] before the first step."""
    path = metrics_path(run_dir)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return []
    stamp = (stat.st_mtime, stat.st_size)
    with _cache_lock:
        cached = _cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    records = read_metrics(run_dir)
    with _cache_lock:
        _cache[path] = (stamp, records)
    return records


def chart_data(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per chart with data: ``{name, title, y_label, lines: [{label, steps, values}]}``."""
    charts = []
    for spec in CHARTS:
        lines = plot_lines(spec, records)
        if lines:
            charts.append({
                "name": spec.name,
                "title": spec.title,
                "y_label": spec.y_label,
                "lines": [{"label": line.label, "steps": line.steps, "values": line.values} for line in lines],
            })
    return charts


def summary_data(run_dir: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The end-of-run summary (``trivium report``'s lines) and its evaluation results."""
    summary = compute_summary(run_dir, records)
    return {
        "lines": summary_lines(summary),
        "evals": [
            {"taskset": result.taskset, "best": result.best, "best_step": result.best_step,
             "last": result.last, "last_step": result.last_step}
            for result in summary.evals
        ],
    }
